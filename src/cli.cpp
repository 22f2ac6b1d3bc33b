#include "cli.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cxxopts.hpp>
#include <limits>

#include "errors.hpp"
#include "gpu.hpp"

namespace dpt {
namespace {

template <class T>
T parse_number(const std::string& option, const std::string& text, T min, T max, const char* what) {
    T value{};
    const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), value);
    const bool ok = err == std::errc() && end == text.data() + text.size() && !(value < min) && !(value > max);
    if (!ok || (std::is_floating_point_v<T> && !std::isfinite(double(value))))
        throw InputError("--" + option + " must be " + what + " (got '" + text + "')");
    return value;
}

int positive_int(const cxxopts::ParseResult& r, const std::string& option, int fallback) {
    if (!r.count(option)) return fallback;
    return parse_number<int>(option, r[option].as<std::string>(), 1, std::numeric_limits<int>::max(),
                             "a whole number of at least 1");
}

}  // namespace

std::optional<TrainConfig> parse_command_line(int argc, const char* const* argv) {
    cxxopts::Options options("dptrain",
                             "Trains LeNet on Fashion-MNIST with data parallelism over N devices:\n"
                             "each batch is split across the devices, their gradients are summed\n"
                             "(allreduce) and every replica applies the same SGD update.\n");
    options.custom_help("[--cpus N | --gpus N] [--batch B] [--lr LR] [--epochs E] [options]");
    // Numbers are taken as text and checked here, so a message can name the option.
    options.add_options("Devices")
        ("cpus", "train on N CPU devices, one worker thread (one core) each", cxxopts::value<std::string>(), "N")
        ("gpus", "train on N GPU replicas (more than the GPUs present share them round-robin)", cxxopts::value<std::string>(), "N")
        ("no-graphs", "GPU: queue every kernel of every step instead of replaying a recorded CUDA graph (to compare)");
    options.add_options("Training")
        ("batch", "global batch size B, split across the devices", cxxopts::value<std::string>()->default_value("256"), "B")
        ("lr", "learning rate; each step applies lr * (sum of gradients) / B", cxxopts::value<std::string>()->default_value("0.3"), "LR")
        ("epochs", "passes over the training set (0: only evaluate)", cxxopts::value<std::string>()->default_value("5"), "E")
        ("seed", "seed for the initial weights and the data order", cxxopts::value<std::string>()->default_value("0"), "S")
        ("pool", "pooling: avg (the tutorial's) or max (the gluon version's)", cxxopts::value<std::string>()->default_value("avg"), "avg|max")
        ("init", "weights: xavier (uniform) or normal (std 0.01, the tutorial's)", cxxopts::value<std::string>()->default_value("xavier"), "xavier|normal");
    options.add_options("Data and files")
        ("data", "directory of the Fashion-MNIST IDX files (default: data/fashion-mnist/, then /usr/share/datasets/fashion-mnist/)", cxxopts::value<std::string>(), "DIR")
        ("limit-train", "use only the first N training samples", cxxopts::value<std::string>(), "N")
        ("limit-test", "use only the first N test samples", cxxopts::value<std::string>(), "N")
        ("metrics", "also write each epoch's figures to FILE as JSON Lines", cxxopts::value<std::string>(), "FILE")
        ("save", "write the trained parameters to FILE", cxxopts::value<std::string>(), "FILE")
        ("load", "start from the parameters in FILE instead of --init", cxxopts::value<std::string>(), "FILE")
        ("h,help", "show this help");

    cxxopts::ParseResult r;
    try {
        r = options.parse(argc, argv);
    } catch (const cxxopts::exceptions::exception& e) {
        throw InputError(std::string(e.what()) + " (see dptrain --help)");
    }
    if (r.count("help")) {
        std::fputs(options.help({"Devices", "Training", "Data and files"}).c_str(), stdout);
        return std::nullopt;
    }
    if (!r.unmatched().empty())
        throw InputError("unexpected argument '" + r.unmatched().front() + "' (see dptrain --help)");

    TrainConfig c;
    if (r.count("cpus") && r.count("gpus")) throw InputError("--cpus and --gpus cannot be combined: pick one kind");
    if (r.count("gpus")) {
        c.devices = positive_int(r, "gpus", 1);
        const GpuInventory gpus = probe_gpus();
        if (gpus.count() == 0)
            throw InputError("--gpus " + r["gpus"].as<std::string>() + ": " + gpus.why_none +
                             "; train on CPU devices with --cpus N");
        c.kind = DeviceKind::cuda;
    } else if (r.count("cpus")) {
        c.kind = DeviceKind::cpu;
        c.devices = positive_int(r, "cpus", 1);
    } else {
        const GpuInventory gpus = probe_gpus();
        if (gpus.count() > 0) {
            c.kind = DeviceKind::cuda;
            c.devices = gpus.count();
            c.devices_note = "all visible GPUs (choose with --gpus N or --cpus N)";
        } else {
            c.kind = DeviceKind::cpu;
            c.devices = 1;
            c.devices_note = gpus.why_none + ", so 1 CPU device (choose with --cpus N)";
        }
    }
    c.graphs = !r.count("no-graphs");

    c.batch = positive_int(r, "batch", c.batch);
    c.lr = parse_number<float>("lr", r["lr"].as<std::string>(), std::numeric_limits<float>::min(),
                               std::numeric_limits<float>::max(), "a positive number");
    c.epochs = parse_number<int>("epochs", r["epochs"].as<std::string>(), 0, 1000000, "a whole number from 0");
    c.seed = parse_number<uint64_t>("seed", r["seed"].as<std::string>(), 0, std::numeric_limits<uint64_t>::max(),
                                    "a whole number from 0");
    const std::string pool = r["pool"].as<std::string>(), init = r["init"].as<std::string>();
    if (pool != "avg" && pool != "max") throw InputError("--pool must be avg or max (got '" + pool + "')");
    if (init != "xavier" && init != "normal") throw InputError("--init must be xavier or normal (got '" + init + "')");
    c.pool = pool == "avg" ? PoolKind::avg : PoolKind::max;
    c.init = init == "xavier" ? InitKind::xavier : InitKind::normal;

    if (r.count("data")) c.data_dir = r["data"].as<std::string>();
    c.limit_train = size_t(positive_int(r, "limit-train", 0));
    c.limit_test = size_t(positive_int(r, "limit-test", 0));
    if (r.count("metrics")) c.metrics_path = r["metrics"].as<std::string>();
    if (r.count("save")) c.save_path = r["save"].as<std::string>();
    if (r.count("load")) c.load_path = r["load"].as<std::string>();

    if (c.batch < c.devices)
        throw InputError("--batch " + std::to_string(c.batch) + " is smaller than the number of devices (" +
                         std::to_string(c.devices) + "): every device needs at least one sample");
    return c;
}

}  // namespace dpt
