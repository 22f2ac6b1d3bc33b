#include "commands/compare.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "parallel/allreduce.hpp"
#include "run/cli.hpp"
#include "devices/kinds.hpp"
#include "parallel/device_factory.hpp"
#include "base/errors.hpp"
#include "base/options.hpp"
#include "base/files.hpp"
#include "base/json.hpp"
#include "base/numbers.hpp"
#include "run/trainer.hpp"

namespace dpt {
namespace {

enum class ScaleLr { linear, sqrt, none };

struct CompareOptions {
    DeviceKind kind = DeviceKind::cpu;
    std::vector<int> counts;
    ScaleLr scale = ScaleLr::linear;
    bool global_batch = false;
    std::string out_dir;
    std::vector<std::string> splits;  // --split even,auto: each count with each split; empty: the one split given
};

// "even", "auto", or one weight per device (3,1): compare passes the last to
// every run; a list of even and auto becomes a row each.
bool is_split_list(const std::string& text) {
    const std::vector<std::string> items = comma_list(text);
    return items.size() > 1 && std::all_of(items.begin(), items.end(), [](const std::string& item) {
               return item == "even" || item == "auto";
           });
}

// One configuration's figures: epoch time is the median of the epochs after
// the first (which includes warm-up), phases the mean over the same epochs.
struct Row {
    TrainConfig config;
    double epoch_s = 0, samples_per_s = 0, speedup = 1, efficiency = 1, test_acc = 0;
    PhaseTimes phases{};
    double compute_mean_s = 0, compute_slowest_s = 0;
    double least_core_share = -1;  // CPU devices: the least share of a core any device got, any epoch
    int least_core_device = -1;
    std::vector<EpochReport> epochs;
};

// "1,2,4": each count checked by the parser every command uses (device_factory.hpp).
std::vector<int> parse_counts(const std::string& option, const std::string& text) {
    std::vector<int> counts;
    for (const std::string& item : comma_list(text)) {
        try {
            counts.push_back(parse_device_count(option, item));
        } catch (const InputError&) {
            throw InputError("--" + option + " must be a list of device counts from 1 to " +
                             std::to_string(max_devices) + " such as 1,2,4 (got '" + text + "')");
        }
    }
    return counts;
}

// Splits compare's own options off; the rest are training options, checked
// by the same parser as a plain run.
std::vector<std::string> take_compare_options(int argc, const char* const* argv, CompareOptions& o) {
    std::vector<std::string> rest = {"dptrain"};
    bool kind_given = false;
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i], value;
        const size_t eq = arg.find('=');
        const std::string name = arg.substr(0, eq);
        const auto take_value = [&] {
            if (eq == std::string::npos && i + 1 >= argc)
                throw InputError(name + " needs a value (see dptrain compare --help)");
            std::string v = eq != std::string::npos ? arg.substr(eq + 1) : std::string(argv[++i]);
            if (v.empty()) throw InputError(name + ": an empty value (see dptrain compare --help)");
            return v;
        };
        const auto kind = std::find_if(device_kinds().begin(), device_kinds().end(),
                                       [&](const DeviceKindInfo& row) { return name == std::string("--") + row.option; });
        if (kind != device_kinds().end()) {
            if (kind_given)
                throw InputError(std::string("compare takes one kind of device, not both --") + kind_info(o.kind).option + " and " + name);
            kind_given = true;
            o.kind = kind->kind;
            o.counts = parse_counts(kind->option, take_value());
        } else if (name == "--scale-lr") {
            value = take_value();
            if (value != "linear" && value != "sqrt" && value != "none")
                throw InputError("--scale-lr must be linear, sqrt or none (got '" + value + "')");
            o.scale = value == "linear" ? ScaleLr::linear : value == "sqrt" ? ScaleLr::sqrt : ScaleLr::none;
        } else if (name == "--global-batch") {
            o.global_batch = true;
        } else if (name == "--out") {
            o.out_dir = take_value();
        } else if (name == "--split" && is_split_list(value = take_value())) {
            o.splits = comma_list(value);
        } else if (name == "--split") {
            rest.insert(rest.end(), {"--split", value});
        } else if (name == "--devices") {
            throw InputError("compare varies the device count: give " + count_options("LIST", " or ") + ", not --devices");
        } else if (name == "--resume" || name == "--checkpoint" || name == "--checkpoint-every" ||
                   name == "--metrics" || name == "--save") {
            throw InputError(name + " is for a single run, not for compare (compare writes its results with --out DIR)");
        } else {
            rest.push_back(arg);
        }
    }
    if (!kind_given) throw InputError("compare needs the device counts: " + count_options("LIST", " or ") + " (--cpus 1,2)");
    return rest;
}

void print_help() {
    std::printf(
        "Usage: dptrain compare %s [--scale-lr linear|sqrt|none] [--global-batch]\n"
        "                       [--split even,auto] [--out DIR] [training options]\n\n"
        "Trains once per device count (e.g. --cpus 1,2 or --gpus 1,2,4) and prints one table: global\n"
        "batch, lr, epoch time (median of the epochs after the first), samples/s, speedup, scaling\n"
        "efficiency, final test accuracy and where each epoch's time went, then a verdict.\n\n"
        "%s"
        "  --batch B         the per-device batch: N devices train with batch N*B (as the tutorial\n"
        "                    goes from 256 on 1 GPU to 512 on 2); with --global-batch, the batch\n"
        "                    that every configuration splits\n"
        "  --scale-lr RULE   per-device batch: lr grows with N as linear (lr*N, the tutorial's\n"
        "                    0.3 -> 0.6), sqrt (lr*sqrt(N)) or none; default linear\n"
        "  --global-batch    keep the global batch and lr, split over more devices\n"
        "  --out DIR         also write DIR/compare.csv and DIR/compare.json (scripts/plot.py draws them)\n"
        "  --trace FILE      a timeline of each run, beside FILE with its devices in the name\n"
        "                    (t.json: t-cpu1.json, t-cpu2.json; scripts/plot.py draws each)\n"
        "  --split even,auto each device count with each split: the waiting for the slowest device\n"
        "                    before and after (try it with --slowdown cpu:1=3 on --cpus 2); a single\n"
        "                    split (even, auto or weights such as 3,1) applies to every run\n"
        "  --epochs E        default 3 here; every other training option applies to every run\n"
        "%s",
        count_options("LIST").c_str(),
        help_examples({{"dptrain compare --cpus 1,2", "1 and 2 CPU devices: batch 256 and 512, lr 0.3 and 0.6"},
                       {"dptrain compare --gpus 1,2 --epochs 5", "the tutorial's two runs, side by side"},
                       {"dptrain compare --cpus 2 --slowdown cpu:1=3 --split even,auto", "a slow device's waiting, then --split auto's"}})
            .c_str(),
        help_end("a run failed: a device's error, a loss that diverged, an output not written", true).c_str());
}

Row summarise(const TrainConfig& config, const std::vector<EpochReport>& epochs) {
    Row row;
    row.config = config;
    row.epochs = epochs;
    const size_t first = epochs.size() > 1 ? 1 : 0;  // skip the warm-up epoch when there is another
    std::vector<double> times;
    for (size_t i = first; i < epochs.size(); ++i) {
        times.push_back(epochs[i].train_time_s);
        const double share = 1.0 / double(epochs.size() - first);
        for (int p = 0; p < phase_count; ++p) row.phases[size_t(p)] += epochs[i].phases[size_t(p)] * share;
        row.compute_mean_s += epochs[i].compute_mean_s * share;
        row.compute_slowest_s += epochs[i].compute_slowest_s * share;
    }
    for (const EpochReport& e : epochs)
        if (e.least_core_device >= 0 && (row.least_core_device < 0 || e.least_core_share < row.least_core_share))
            row.least_core_share = e.least_core_share, row.least_core_device = e.least_core_device;
    std::sort(times.begin(), times.end());
    const size_t m = times.size();
    row.epoch_s = m % 2 ? times[m / 2] : 0.5 * (times[m / 2 - 1] + times[m / 2]);
    row.test_acc = epochs.back().test_acc;
    return row;
}

double phase(const Row& r, Phase p) { return r.phases[size_t(p)]; }

// "cpu x2", and with a list of splits "cpu x2 auto".
std::string label(const Row& r, bool splits) {
    std::string text = std::string(to_string(r.config.devices.kind())) + " x" + std::to_string(r.config.devices.count());
    if (splits) text += r.config.split.mode == SplitMode::automatic ? " auto" : " even";
    return text;
}

void print_table(const std::vector<Row>& rows, bool splits) {
    const int width = splits ? 14 : 9;
    std::printf("\n%-*s %6s %8s %9s %10s %8s %10s %8s  %s\n", width, "devices", "batch", "lr", "epoch s", "samples/s",
                "speedup", "efficiency", "test_acc", "share of the epoch: load compute wait allreduce update");
    for (const Row& r : rows) {
        const auto pct = [&](Phase p) { return format("%.0f%%", 100.0 * phase(r, p) / r.epoch_s); };
        const std::string devices = label(r, splits);
        // Scaling efficiency compares device counts: none for another split of the first row's count.
        const bool same_count = &r != &rows.front() && r.config.devices.count() == rows.front().config.devices.count();
        const std::string efficiency = same_count ? "-" : format("%.0f%%", 100.0 * r.efficiency);
        std::printf("%-*s %6d %8g %9.2f %10.0f %7.2fx %10s %8.4f  %4s %7s %4s %9s %6s\n", width, devices.c_str(),
                    r.config.batch, double(r.config.lr), r.epoch_s, r.samples_per_s, r.speedup, efficiency.c_str(),
                    r.test_acc, pct(Phase::load).c_str(), pct(Phase::compute).c_str(), pct(Phase::wait).c_str(),
                    pct(Phase::allreduce).c_str(), pct(Phase::update).c_str());
    }
}

// What the figures say: for each configuration after the first, the speedup
// against the ideal, and where the time lost against a perfect split of the
// first configuration's epoch went.
void print_verdict(const std::vector<Row>& rows, bool global_batch, const AllreduceInfo& allreduce) {
    const Row& base = rows.front();
    std::printf("\nverdict:\n");
    // Before any blame: a device that did not get its core measures the machine's load, not the algorithm.
    for (const Row& r : rows)
        if (r.least_core_device >= 0 && r.least_core_share < busy_core_share)
            std::printf("- careful: in the %d-device run, cpu:%d got only %.0f%% of a core for its forward+backward: "
                        "another program is using this machine, so the speed-up below is not the algorithm's "
                        "(run compare on an idle machine).\n",
                        r.config.devices.count(), r.least_core_device, 100.0 * r.least_core_share);
    for (size_t i = 1; i < rows.size(); ++i) {
        const Row& r = rows[i];
        if (r.config.devices.count() == base.config.devices.count()) {  // another split of the same devices
            const Row& even = base;
            std::printf("- %s: %.2fx the speed of %s; device 0 waited %.2f s an epoch for its peers instead of %.2f s "
                        "(%+.0f%%); forward+backward per device: mean %.2f s, slowest %.2f s (%.0f%% apart, even "
                        "split: %.0f%%).\n",
                        label(r, true).c_str(), r.speedup, label(even, true).c_str(), phase(r, Phase::wait),
                        phase(even, Phase::wait), 100.0 * (phase(r, Phase::wait) / std::max(phase(even, Phase::wait), 1e-9) - 1.0),
                        r.compute_mean_s, r.compute_slowest_s,
                        100.0 * (r.compute_slowest_s - r.compute_mean_s) / std::max(r.compute_mean_s, 1e-9),
                        100.0 * (even.compute_slowest_s - even.compute_mean_s) / std::max(even.compute_mean_s, 1e-9));
            continue;
        }
        const double ratio = double(r.config.devices.count()) / double(base.config.devices.count());
        const double ideal = base.epoch_s / ratio;
        std::printf("- %d devices: %.2fx the speed of %d (ideal %.2gx), %.0f%% scaling efficiency. ", r.config.devices.count(),
                    r.speedup, base.config.devices.count(), ratio, 100.0 * r.efficiency);
        // The lost time, by phase: compute that did not shrink by the ratio,
        // waiting for the slowest device, and the allreduce and update (which
        // do not shrink at all: every device moves and updates all parameters).
        struct Cost {
            const char* what;
            double seconds;
        };
        const std::string waiting(allreduce.wait_cost);
        Cost costs[] = {
            {waiting.c_str(), phase(r, Phase::wait) - phase(base, Phase::wait) / ratio},
            {"the allreduce", phase(r, Phase::allreduce) - phase(base, Phase::allreduce) / ratio},
            {"forward+backward not shrinking in proportion", phase(r, Phase::compute) - phase(base, Phase::compute) / ratio},
            {"split_and_load and the update", phase(r, Phase::load) + phase(r, Phase::update) -
                                                  (phase(base, Phase::load) + phase(base, Phase::update)) / ratio},
        };
        const double lost = r.epoch_s - ideal;
        if (lost <= 0.0) {
            std::printf("Faster than a perfect split of the %d-device epoch (%.2f s) by %.2f s",
                        base.config.devices.count(), ideal, -lost);
            std::printf(global_batch ? ".\n" : " (a larger batch makes each step's work more efficient).\n");
        } else {
            std::sort(std::begin(costs), std::end(costs), [](const Cost& a, const Cost& b) { return a.seconds > b.seconds; });
            std::printf("Against a perfect split of the %d-device epoch (%.2f s) it lost %.2f s: ", base.config.devices.count(),
                        ideal, lost);
            for (size_t c = 0; c < std::size(costs); ++c)
                std::printf("%s%s %.2f s", c ? ", " : "", costs[c].what, costs[c].seconds);
            std::printf(". The largest cost: %s (%.0f%% of the ideal epoch).\n", costs[0].what,
                        100.0 * costs[0].seconds / ideal);
        }
        if (r.config.devices.count() > 1 && r.compute_slowest_s > 0)
            std::printf("  forward+backward per device: mean %.2f s, slowest %.2f s per epoch (%.0f%% apart).\n",
                        r.compute_mean_s, r.compute_slowest_s,
                        100.0 * (r.compute_slowest_s - r.compute_mean_s) / std::max(r.compute_mean_s, 1e-9));
        if (!global_batch && std::abs(r.test_acc - base.test_acc) >= 0.005)
            std::printf("  test accuracy %.4f against %.4f: batch %d makes %.1fx fewer updates per epoch than batch %d.\n",
                        r.test_acc, base.test_acc, r.config.batch, double(r.config.batch) / base.config.batch,
                        base.config.batch);
    }
}

// --trace FILE: each run's trace beside FILE, its devices in its name
// (trace.json: trace-cpu1.json, trace-cpu2.json, trace-cpu2-auto.json).
std::string trace_path_of(const std::string& file, DeviceKind kind, int n, const std::string& split) {
    const size_t slash = file.find_last_of('/'), dot = file.find_last_of('.');
    const bool has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1);
    const std::string stem = has_ext ? file.substr(0, dot) : file, ext = has_ext ? file.substr(dot) : ".json";
    return stem + "-" + kind_info(kind).spellings.front() + std::to_string(n) +
           (split.empty() ? "" : "-" + split) + ext;
}

// What --out DIR holds (checked before the runs, prepare_out_dir).
constexpr const char* out_files[] = {"compare.csv", "compare.json"};

void write_results(const std::string& dir, const std::vector<Row>& rows, const CompareOptions& o) {
    const std::string csv_path = dir + "/compare.csv", json_path = dir + "/compare.json";
    std::string csv;
    csv += "device_kind,devices,split,batch,lr,epoch_time_s,samples_per_s,speedup,efficiency,test_acc,"
           "load_s,compute_s,wait_s,allreduce_s,update_s,compute_mean_s,compute_slowest_s\n";
    const char* scale = o.scale == ScaleLr::linear ? "linear" : o.scale == ScaleLr::sqrt ? "sqrt" : "none";
    Json results = {{"batch_mode", o.global_batch ? "global" : "per-device"},
                    {"scale_lr", o.global_batch ? "none" : scale},
                    {"configs", Json::array()}};
    char line[1024];
    for (const Row& r : rows) {
        const TrainConfig& c = r.config;
        const std::string split = describe_split(c.split, c.batch);
        std::snprintf(line, sizeof line, "%s,%d,%s,%d,%g,%.6f,%.1f,%.4f,%.4f,%.4f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f\n",
                      to_string(c.devices.kind()), c.devices.count(), split.c_str(), c.batch, double(c.lr), r.epoch_s, r.samples_per_s, r.speedup,
                      r.efficiency, r.test_acc, phase(r, Phase::load), phase(r, Phase::compute), phase(r, Phase::wait),
                      phase(r, Phase::allreduce), phase(r, Phase::update), r.compute_mean_s, r.compute_slowest_s);
        csv += line;
        Json epochs = Json::array();
        for (const EpochReport& x : r.epochs)
            epochs.push_back({{"epoch", x.epoch},
                              {"train_time_s", decimals(x.train_time_s, 6)},
                              {"train_loss", decimals(x.train_loss, 6)},
                              {"test_acc", decimals(x.test_acc, 4)}});
        results["configs"].push_back({{"device_kind", to_string(c.devices.kind())},
                                      {"devices", c.devices.count()},
                                      {"split", split},
                                      {"batch", c.batch},
                                      {"lr", significant(c.lr)},
                                      {"epoch_time_s", decimals(r.epoch_s, 6)},
                                      {"samples_per_s", decimals(r.samples_per_s, 1)},
                                      {"speedup", decimals(r.speedup, 4)},
                                      {"efficiency", decimals(r.efficiency, 4)},
                                      {"test_acc", decimals(r.test_acc, 4)},
                                      {"phases_s", {{"load", decimals(phase(r, Phase::load), 6)},
                                                    {"compute", decimals(phase(r, Phase::compute), 6)},
                                                    {"wait", decimals(phase(r, Phase::wait), 6)},
                                                    {"allreduce", decimals(phase(r, Phase::allreduce), 6)},
                                                    {"update", decimals(phase(r, Phase::update), 6)}}},
                                      {"epochs", epochs}});
    }
    write_text_file(csv_path, csv, "--out");
    write_text_file(json_path, results.dump(2) + "\n", "--out");
    std::printf("\nwrote %s and %s\n", csv_path.c_str(), json_path.c_str());
}

}  // namespace

int run_compare(int argc, const char* const* argv) {
    for (int i = 1; i < argc; ++i)
        if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
            print_help();
            return 0;
        }
    CompareOptions o;
    std::vector<std::string> rest = take_compare_options(argc, argv, o);
    const bool epochs_given = std::find_if(rest.begin(), rest.end(), [](const std::string& a) {
                                  return a == "--epochs" || a.rfind("--epochs=", 0) == 0;
                              }) != rest.end();
    if (!epochs_given) rest.insert(rest.end(), {"--epochs", "3"});
    // The training options, checked as for a single run with the largest count.
    rest.insert(rest.end(), {std::string("--") + kind_info(o.kind).option,
                             std::to_string(*std::max_element(o.counts.begin(), o.counts.end()))});
    std::vector<const char*> args;
    for (const std::string& a : rest) args.push_back(a.c_str());
    const std::optional<TrainRequest> parsed = parse_command_line(int(args.size()), args.data());
    if (!parsed) return 0;
    const TrainConfig& base = parsed->settings;
    if (!o.out_dir.empty()) prepare_out_dir(o.out_dir, out_files);

    std::vector<Row> rows;
    const std::vector<std::string> splits = o.splits.empty() ? std::vector<std::string>{""} : o.splits;
    for (int n : o.counts)
    for (const std::string& split : splits) {
        TrainConfig c = base;
        c.devices = DeviceChoice::of(o.kind, n);
        if (!split.empty()) c.split = parse_split(split, n, c.batch);
        c.breakdown = true;  // the phase shares come from it
        if (!base.trace_path.empty()) c.trace_path = trace_path_of(base.trace_path, o.kind, n, split);
        if (!o.global_batch) {
            c.batch = base.batch * n;
            c.lr = o.scale == ScaleLr::linear ? base.lr * float(n)
                   : o.scale == ScaleLr::sqrt ? base.lr * std::sqrt(float(n))
                                              : base.lr;
        }
        if (c.batch < n) throw InputError("--batch " + std::to_string(c.batch) + " is smaller than " + std::to_string(n) + " devices");
        const char* kind = n == 1 ? kind_info(o.kind).one : kind_info(o.kind).many;
        std::printf("\n== compare: %d %s, batch %d, lr %g%s%s ==\n", n, kind, c.batch, double(c.lr),
                    split.empty() ? "" : ", split ", split.c_str());
        std::fflush(stdout);
        const TrainResult result = train(c);
        if (result.exit_status != 0) return result.exit_status;  // stopped by a signal
        if (result.epochs.empty()) throw InputError("compare needs at least one epoch (--epochs 1 or more)");
        c.split = result.split;  // auto: as measured
        Row row = summarise(c, result.epochs);
        row.samples_per_s = result.epochs.back().samples_per_s * result.epochs.back().train_time_s / row.epoch_s;
        rows.push_back(row);
    }
    for (Row& r : rows) {
        r.speedup = rows.front().epoch_s / r.epoch_s;
        r.efficiency = r.speedup * double(rows.front().config.devices.count()) / double(r.config.devices.count());
    }
    std::printf("\ncompare: %s, %d epoch%s each; epoch time is the median of the epochs after the first\n",
                o.global_batch ? "the same global batch and lr, split over more devices"
                : o.scale == ScaleLr::linear ? "the same per-device batch, lr scaled linearly with the device count"
                : o.scale == ScaleLr::sqrt   ? "the same per-device batch, lr scaled with the square root of the device count"
                                             : "the same per-device batch, the same lr",
                base.epochs, base.epochs == 1 ? "" : "s");
    if (base.epochs == 1) std::printf("note: with 1 epoch the figures include the warm-up epoch\n");
    print_table(rows, !o.splits.empty());
    print_verdict(rows, o.global_batch, allreduce_named(base.allreduce).info());
    if (!o.out_dir.empty()) write_results(o.out_dir, rows, o);
    return 0;
}

}  // namespace dpt
