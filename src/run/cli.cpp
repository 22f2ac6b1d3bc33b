#include "run/cli.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

#include "parallel/allreduce.hpp"
#include "run/checkpoint.hpp"
#include "parallel/device_factory.hpp"
#include "parallel/device_options.hpp"
#include "base/errors.hpp"
#include "model/models.hpp"
#include "base/options.hpp"
#include "run/version.hpp"

namespace dpt {
namespace {

int positive_int(const cxxopts::ParseResult& r, const std::string& option, int fallback) {
    if (!r.count(option)) return fallback;
    return parse_number<int>(option, r[option].as<std::string>(), 1, std::numeric_limits<int>::max(),
                             "a whole number of at least 1");
}

bool devices_given(const cxxopts::ParseResult& r) { return !kinds_given(counts_in(r)).empty() || r.count("devices"); }

// A resumed run divides its batches as the checkpoint's did (its measured
// parts too, for --split auto), unless --split says otherwise.
void resume_split(const cxxopts::ParseResult& r, TrainConfig& c, RunStart& start, const TrainConfig& saved) {
    c.split = saved.split;
    const auto said = [](const SplitChoice& s) {
        return s.mode == SplitMode::even ? std::string("even") : s.mode == SplitMode::automatic ? "auto" : "by weights";
    };
    if (r.count("split")) {
        const SplitChoice asked = parse_split(given(r, "split"), c.devices.count(), c.batch);
        if (asked.mode == saved.split.mode && asked.mode != SplitMode::weights) return;  // auto keeps its measured parts
        if (asked.mode != saved.split.mode || asked.counts != saved.split.counts)
            start.note("the checkpoint's run split its batches " + said(saved.split) + " (" +
                       describe_split(saved.split, saved.batch) +
                       "), so this run matches it up to float summation order, not bit for bit");
        c.split = asked;
    } else if (!c.split.counts.empty() && int(c.split.counts.size()) != c.devices.count()) {
        if (c.split.mode == SplitMode::weights)
            throw InputError("--resume " + start.resume_path + ": its run split batches " +
                             describe_split(saved.split, saved.batch) + " over " +
                             std::to_string(saved.split.counts.size()) + " devices; with " + std::to_string(c.devices.count()) +
                             " give --split (even, auto or one weight per device)");
        c.split.counts.clear();  // auto: measured again on these devices
        start.note("--split auto measures again on these devices");
    }
}

// --slowdown NAME=K[,NAME=K...]: which devices compute their parts K times over.
std::vector<TrainConfig::Slowdown> parse_slowdowns(const std::string& text) {
    std::vector<TrainConfig::Slowdown> out;
    for (const std::string& item : comma_list(text)) {
        const size_t equals = item.find('=');
        if (equals == std::string::npos || equals == 0)
            throw InputError("--slowdown " + text + ": expected DEVICE=K, e.g. cpu:1=3 (got '" + item + "')");
        out.push_back({item.substr(0, equals),
                       parse_number<int>("slowdown", item.substr(equals + 1), 2, 1000, "a whole factor from 2 to 1000 after DEVICE=")});
    }
    return out;
}

// --resume FILE: the run goes on with the checkpoint's settings. Options that
// would change its trajectory are refused unless they repeat the saved value;
// --epochs may raise the total; the devices may change (then the result
// matches the uninterrupted run up to float summation order, not bit for bit).
void resume_from(const cxxopts::ParseResult& r, TrainConfig& c, RunStart& start) {
    start.resume_path = r["resume"].as<std::string>();
    if (!c.load_path.empty())
        throw InputError("--resume and --load cannot be combined: a checkpoint holds its own parameters");
    Checkpoint k = load_checkpoint(start.resume_path);
    const TrainConfig& saved = k.settings;
    for (const RunSetting& setting : run_settings()) {
        const std::string option(setting.option());
        if (setting.on_resume == OnResume::decided || (setting.on_resume == OnResume::given && r.count(option)))
            continue;
        const std::string saved_text = setting.text(saved);
        if (setting.on_resume == OnResume::kept && r.count(option) && setting.text(c) != saved_text)
            throw InputError("--" + option + (setting.flag.empty() ? " " + given(r, option) : "") +
                             " differs from the checkpoint's " + (setting.flag.empty() ? "" : std::string(setting.key) + " ") +
                             saved_text + ": a resumed run keeps the settings it started with (start a new run, perhaps "
                             "with --load, to change them)");
        setting.read(saved_text, c);
    }
    if (!r.count("checkpoint")) c.checkpoint_path = start.resume_path;

    // "2 CPU devices", or under mpirun "2 processes of 1 CPU device each".
    const auto run_devices = [](const DeviceChoice& d, int processes) {
        return processes == 1 ? describe(d) : std::to_string(processes) + " processes of " + describe(d) + " each";
    };
    const std::string saved_devices = run_devices(saved.devices, saved.processes);
    // Another allreduce sums in another order: allowed, like other devices.
    const bool other_allreduce = r.count("allreduce") && c.allreduce != saved.allreduce;
    if (!r.count("allreduce")) c.allreduce = saved.allreduce;
    if (!devices_given(r)) {
        // The checkpoint's devices, as many in all when the process count
        // differs (one kind of device, shared equally among the processes).
        const int64_t in_all = int64_t(saved.devices.count()) * saved.processes;
        if (c.processes == saved.processes) {
            c.devices = saved.devices;
            start.devices_note = "as in the checkpoint";
        } else if (!saved.devices.mixed() && in_all % c.processes == 0 && in_all / c.processes <= max_devices) {
            c.devices = DeviceChoice::of(saved.devices.kind(), int(in_all / c.processes));
            start.devices_note = "the checkpoint's " + std::to_string(in_all) + " devices (" + saved_devices + "), as " +
                                 run_devices(c.devices, c.processes) +
                                 ": the same parts of each batch, summed in another order (not bit for bit)";
        } else {
            throw InputError("--resume " + start.resume_path + ": its run had " + saved_devices + ", which " +
                             std::to_string(c.processes) + " process" + (c.processes == 1 ? "" : "es") +
                             (in_all % c.processes == 0 ? " cannot hold (at most " + std::to_string(max_devices) +
                                                              " devices a process)"
                                                        : std::string(" cannot share equally")) +
                             ": give " + count_options("G", " or "));
        }
        for (const DeviceKindInfo& row : device_kinds())
            if (c.devices.count(row.kind) > 0) require_present(row.kind, "--resume " + start.resume_path + " (trained on " + saved_devices + ")");
    } else if (!c.devices.same_counts(saved.devices) || c.processes != saved.processes) {
        start.devices_note = "the checkpoint's run had " + saved_devices +
                             ", so this run matches it up to float summation order, not bit for bit";
    }
    if (other_allreduce)
        start.note("the checkpoint's run used --allreduce " + saved.allreduce +
                   ", so this run matches it up to float summation order, not bit for bit");
    resume_split(r, c, start, saved);
    start.position = k.position;
    start.params = std::move(k.params);
}

}  // namespace

PoolKind parse_pool(const std::string& text) {
    if (text != "avg" && text != "max") throw InputError("--pool must be avg or max (got '" + text + "')");
    return text == "avg" ? PoolKind::avg : PoolKind::max;
}

InitKind parse_init(const std::string& text) {
    if (text != "xavier" && text != "normal") throw InputError("--init must be xavier or normal (got '" + text + "')");
    return text == "xavier" ? InitKind::xavier : InitKind::normal;
}

std::optional<TrainRequest> parse_command_line(int argc, const char* const* argv, int processes) {
    cxxopts::Options options("dptrain");
    // Numbers are taken as text and checked here, so a message can name the option.
    // The options a first run needs come first in the help; the rest by group.
    const std::string first = "First run";
    add_count_options(options, first, "N", "train on ");
    options.add_options(first)
        ("batch", "global batch size B, split across the devices", cxxopts::value<std::string>()->default_value("256"), "B")
        ("lr", "learning rate; each step applies lr * (sum of gradients) / B", cxxopts::value<std::string>()->default_value("0.3"), "LR")
        ("epochs", "passes over the training set (0: only evaluate)", cxxopts::value<std::string>()->default_value("5"), "E")
        ("model", "the network: lenet (the tutorial's from scratch) or resnet18 (the gluon tutorials' ResNet-18 for 28x28 images, with batch norm)", cxxopts::value<std::string>()->default_value("lenet"), "NAME")
        ("h,help", "show this help");
    options.add_options("Devices")
        ("devices", "the devices one by one, e.g. gpu:0,cpu:0,cpu:1 (gpu:I is CUDA device I, also written cuda:I; cpu:0, cpu:1, ... are CPU devices); the GPUs go first, as they do when --gpus and --cpus are given together (a mixed run)", cxxopts::value<std::string>(), "LIST")
        ("no-graphs", "GPU: queue every kernel of every step instead of replaying a recorded CUDA graph (to compare)")
        ("allreduce", "how the devices sum their gradients: " + allreduce_names() + " (default naive, as the tutorial)", cxxopts::value<std::string>(), "NAME")
        ("overlap", "allreduce each layer's gradients as soon as backward has them (the last layers first, in buckets), on a second stream per device, so that the sums travel while backward goes on; the same result bit for bit")
        ("bucket-kb", "with --overlap: layers are grouped into buckets of at least KB kilobytes of gradients, each allreduced as a whole (0: one per layer; default " + std::to_string(default_bucket_kb) + ")", cxxopts::value<std::string>(), "KB")
        ("split", "how each batch is divided: even (the tutorial's), weights such as 3,1 (one per device), or auto (time the first steps, then give each device a part in proportion to its speed); the update is the same", cxxopts::value<std::string>()->default_value("even"), "HOW")
        ("slowdown", "make CPU device NAME compute each part K times over (same result, K times the time), to try --split on identical devices; e.g. cpu:1=3", cxxopts::value<std::string>(), "NAME=K");
    options.add_options("Several processes (mpirun -np P dptrain ...: each process has the devices above)")
        ("across", "how the processes sum their gradients, after each process has summed its devices': mpi (MPI_Allreduce, the MPI library's algorithm, through host memory), ring (dptrain's ring over MPI send and receive), nccl (one NCCL communicator of the processes' GPUs) or auto (the default: nccl for GPU replicas where every process has NCCL and a GPU of its own, else mpi)", cxxopts::value<std::string>(), "auto|mpi|ring|nccl")
        ("collective-timeout", "a rank that waits this long for the others (one died, hangs, or is far behind) ends the whole job with a message naming itself and the step (default " + std::to_string(int(default_collective_timeout)) + ")", cxxopts::value<std::string>(), "SECONDS");
    options.add_options("Training")
        ("bn", "resnet18's batch norm on N devices: local (each device normalises over its own part, as gluon and the tutorial) or sync (over the whole batch: per-channel sums allreduced in forward and backward, so N devices follow 1 device)", cxxopts::value<std::string>()->default_value("local"), "local|sync")
        ("tf32", "the convolutions' and dense layers' products with TF32 operands (10 bits of fraction, rounded to nearest) and FP32 sums: on a GPU's tensor cores (compute capability 8.0 or later), as PyTorch's allow_tf32; CPU devices round the same operands and compute in FP32, so every device does the same arithmetic (default: FP32 throughout)")
        ("warmup", "raise the rate linearly from lr/W to lr over the first E epochs (W steps; fractions allowed), as the linear scaling rule's gradual warm-up; default 0: constant", cxxopts::value<std::string>()->default_value("0"), "E")
        ("seed", "seed for the initial weights and the data order", cxxopts::value<std::string>()->default_value("0"), "S")
        ("pool", "LeNet's pooling: avg (the tutorial's) or max (the gluon version's)", cxxopts::value<std::string>()->default_value("avg"), "avg|max")
        ("init", "weights: xavier (uniform) or normal (std 0.01, the tutorial's)", cxxopts::value<std::string>()->default_value("xavier"), "xavier|normal")
        ("breakdown", "after each epoch, where the time went: split_and_load, forward+backward (mean and slowest device), waiting for peers, allreduce, SGD update");
    options.add_options("Data and files")
        ("data", "directory of the Fashion-MNIST IDX files (default: data/fashion-mnist/, then /usr/share/datasets/fashion-mnist/)", cxxopts::value<std::string>(), "DIR")
        ("limit-train", "use only the first N training samples", cxxopts::value<std::string>(), "N")
        ("limit-test", "use only the first N test samples", cxxopts::value<std::string>(), "N")
        ("metrics", "also write each epoch's figures to FILE as JSON Lines", cxxopts::value<std::string>(), "FILE")
        ("trace", "write a timeline of every step to FILE: a Chrome trace (JSON) that Perfetto (ui.perfetto.dev) and chrome://tracing open, a row per device and stream, a bar per phase (split_and_load, forward+backward, waits, allreduce, update); as with --breakdown, GPUs then queue kernel by kernel (no CUDA graph); under mpirun each process writes FILE.rankR", cxxopts::value<std::string>(), "FILE")
        ("trace-steps", "with --trace: only steps A to B, counted from 1 over the whole run (e.g. 1-50), so that a long run's file stays small", cxxopts::value<std::string>(), "A-B")
        ("save", "write the trained parameters to FILE", cxxopts::value<std::string>(), "FILE")
        ("load", "start from the parameters in FILE instead of --init", cxxopts::value<std::string>(), "FILE")
        ("version", "print the version and what this build has (CUDA, MPI, the CPU kernels' target), then exit");
    options.add_options("Checkpoints")
        ("checkpoint", "write a checkpoint to FILE every K epochs, at the end, and when stopped by Ctrl-C (SIGINT) or SIGTERM", cxxopts::value<std::string>(), "FILE")
        ("checkpoint-every", "epochs between checkpoints (default 1)", cxxopts::value<std::string>(), "K")
        ("resume", "go on from the checkpoint in FILE with its settings and data order, as if never stopped; --epochs may raise the total; checkpoints keep going to FILE unless --checkpoint says otherwise", cxxopts::value<std::string>(), "FILE");

    const std::string help =
        "dptrain: data-parallel training of LeNet or ResNet-18 on Fashion-MNIST. Each batch is\n"
        "split across the devices, their gradients are summed (allreduce), and every replica\n"
        "applies the same SGD update.\n\n"
        "Usage:\n"
        "  dptrain [" + count_options("N", "] [") + "] [--batch B] [--lr LR] [--epochs E] [options]\n"
        "  dptrain COMMAND [options]   COMMAND: compare, inspect, demo, drift, devices,\n"
        "                              bench-allreduce or simulate (each takes --help)\n\n" +
        help_examples({{"dptrain --gpus 1 --batch 256 --lr 0.3", "the tutorial's run on one GPU"},
                       {"dptrain --gpus 2 --batch 512 --lr 0.6", "on two: twice the batch, twice the rate"},
                       {"dptrain --cpus 2 --epochs 1", "two CPU devices, no GPU needed"},
                       {"dptrain compare --cpus 1,2", "1 and 2 devices side by side"}}) +
        help_options(options, {first, "Devices", "Training", "Data and files", "Checkpoints",
                               "Several processes (mpirun -np P dptrain ...: each process has the devices above)"}) +
        help_end("the run failed: a device's error, a loss that diverged, an output not written", true);
    const std::optional<cxxopts::ParseResult> parsed = parse_options(options, argc, argv, "dptrain", help);
    if (!parsed) return std::nullopt;
    const cxxopts::ParseResult& r = *parsed;
    if (r.count("version")) {
        std::fputs(version_text().c_str(), stdout);
        return std::nullopt;
    }

    TrainConfig c;
    RunStart start;
    // With none of --cpus, --gpus, --devices: the checkpoint's devices when
    // resuming (set in resume_from()), else every GPU or 1 CPU device.
    if (r.count("devices")) {
        if (const std::vector<KindGiven> counts = kinds_given(counts_in(r)); !counts.empty())
            throw InputError("--devices lists every device: give it without --" + counts.front().option);
        c.devices = parse_device_list(given(r, "devices"));
    } else {
        DeviceChoice fallback;
        if (!devices_given(r) && !r.count("resume")) fallback = default_devices(start.devices_note);
        c.devices = choose_devices(counts_in(r), fallback, true);
    }
    if (r.count("allreduce")) c.allreduce = std::string(allreduce_named(given(r, "allreduce")).info().name);
    c.graphs = !r.count("no-graphs");
    c.overlap = r.count("overlap") > 0;
    if (r.count("bucket-kb") && !c.overlap) throw InputError("--bucket-kb needs --overlap");
    if (r.count("bucket-kb"))
        c.bucket_kb = parse_number<int>("bucket-kb", given(r, "bucket-kb"), 0, 1 << 20, "a whole number of KB from 0");
    c.breakdown = r.count("breakdown") > 0;

    c.batch = positive_int(r, "batch", c.batch);
    c.lr = parse_number<float>("lr", r["lr"].as<std::string>(), std::numeric_limits<float>::min(),
                               std::numeric_limits<float>::max(), "a positive number of at most 3.4e38 (a float)");
    c.warmup = parse_number<double>("warmup", r["warmup"].as<std::string>(), 0.0, 1000.0, "a number of epochs from 0 to 1000");
    c.epochs = parse_number<int>("epochs", r["epochs"].as<std::string>(), 0, 1000000, "a whole number from 0 to 1000000");
    c.seed = parse_number<uint64_t>("seed", r["seed"].as<std::string>(), 0, std::numeric_limits<uint64_t>::max(),
                                    "a whole number from 0");
    c.model = parse_model(r["model"].as<std::string>());
    c.bn = parse_batch_norm(r["bn"].as<std::string>());
    c.math = r.count("tf32") ? Math::tf32 : Math::fp32;
    c.pool = parse_pool(r["pool"].as<std::string>());
    c.init = parse_init(r["init"].as<std::string>());

    if (r.count("data")) c.data_dir = r["data"].as<std::string>();
    c.limit_train = size_t(positive_int(r, "limit-train", 0));
    c.limit_test = size_t(positive_int(r, "limit-test", 0));
    if (r.count("metrics")) c.metrics_path = r["metrics"].as<std::string>();
    if (r.count("trace")) c.trace_path = r["trace"].as<std::string>();
    if (r.count("trace-steps") && !r.count("trace")) throw InputError("--trace-steps needs --trace FILE");
    if (r.count("trace-steps")) c.trace_steps = parse_step_range(given(r, "trace-steps"));
    if (r.count("save")) c.save_path = r["save"].as<std::string>();
    if (r.count("load")) c.load_path = r["load"].as<std::string>();
    if (r.count("checkpoint")) c.checkpoint_path = r["checkpoint"].as<std::string>();
    if (r.count("checkpoint-every") && !r.count("checkpoint") && !r.count("resume"))
        throw InputError("--checkpoint-every needs --checkpoint FILE");
    c.checkpoint_every = positive_int(r, "checkpoint-every", 1);
    // Under mpirun each process would measure or slow its own devices alone.
    if (processes > 1 && r.count("split") && given(r, "split") != "even")
        throw InputError("--split " + given(r, "split") +
                         " is for a run in one process; under mpirun the batch is split evenly over every device");
    if (processes > 1 && r.count("slowdown")) throw InputError("--slowdown is for a run in one process, not under mpirun");
    c.processes = processes;
    if (r.count("resume")) resume_from(r, c, start);
    else c.split = parse_split(r["split"].as<std::string>(), c.devices.count(), c.batch);
    if (r.count("slowdown")) c.slowdowns = parse_slowdowns(given(r, "slowdown"));
    // (After --resume, which may bring the model.)
    if (r.count("bn") && model_of(c.model).batch_norms() == 0)
        throw InputError("--bn is for a model with batch norm (--model resnet18); " +
                         std::string(to_string(c.model)) + " has none");
    if (r.count("pool") && c.model != ModelKind::lenet)
        throw InputError("--pool is LeNet's; " + std::string(to_string(c.model)) +
                         "'s pooling layers are fixed (max 3x3 stride 2 after the first conv, avg 3x3 before the dense layer)");
    if (c.bn == BatchNormMode::sync && model_of(c.model).batch_norms() > 0) {
        // A slowed device would repeat stages whose sums its peers wait for.
        if (!c.slowdowns.empty()) throw InputError("--slowdown cannot be combined with --bn sync: use --bn local");
    }

    if (processes == 1 && (r.count("across") || r.count("collective-timeout")))
        throw InputError(std::string("--") + (r.count("across") ? "across" : "collective-timeout") +
                         " is for a run of several processes (mpirun -np P dptrain ...); this is one");
    if (r.count("across")) c.across = parse_across(given(r, "across"));
    if (c.across == AcrossKind::nccl && c.devices.count(DeviceKind::gpu) == 0)
        throw InputError("--across nccl joins the processes' GPUs: give --gpus G (CPU devices sum across the "
                         "processes with mpi or ring)");
    if (r.count("collective-timeout"))
        c.collective_timeout = parse_number<double>("collective-timeout", given(r, "collective-timeout"), 1.0, 1e6,
                                                    "a number of seconds from 1");
    // (A checkpoint of a run in one process may bring another split.)
    if (processes > 1 && c.split.mode != SplitMode::even)
        throw InputError("--resume " + start.resume_path + ": its run split batches " + describe_split(c.split, c.batch) +
                         ", which is for a run in one process; under mpirun give --split even");

    if (c.batch < c.devices_in_all())
        throw InputError("--batch " + std::to_string(c.batch) + " is smaller than the number of devices (" +
                         std::to_string(c.devices_in_all()) + "): every device needs at least one sample");
    return TrainRequest{std::move(c), std::move(start)};
}

}  // namespace dpt
