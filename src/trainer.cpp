#include "trainer.hpp"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "errors.hpp"
#include "gpu.hpp"
#include "lenet.hpp"
#include "parallel.hpp"
#include "params_file.hpp"
#include "rng.hpp"

namespace dpt {

namespace {

// Independent random streams drawn from one seed.
constexpr uint64_t stream_init = 0, stream_order = 1;

struct EpochStats {
    int epoch;
    double train_time_s, samples_per_s, train_loss, test_acc;
};

std::string with_commas(double value) {
    const std::string digits = std::to_string(std::llabs(std::llround(value)));
    std::string out = value < 0 ? "-" : "";
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return out;
}

// Test accuracy of device 0's replica, evaluated in chunks that fit its buffers.
double test_accuracy(Device& device, size_t test_count, int capacity) {
    for (size_t first = 0; first < test_count; first += size_t(capacity))
        device.evaluate_test(first, int(std::min<size_t>(capacity, test_count - first)));
    return double(device.take_correct()) / double(test_count);
}

// Every step ends with the same update on every replica; a difference means a bug.
void check_replicas_identical(std::span<Device* const> devices) {
    std::vector<float> first(lenet::param_count), other(lenet::param_count);
    devices[0]->read_params(first);
    for (size_t i = 1; i < devices.size(); ++i) {
        devices[i]->read_params(other);
        if (std::memcmp(first.data(), other.data(), first.size() * sizeof(float)) != 0)
            throw std::runtime_error("replicas diverged: " + devices[i]->name() + " differs from " +
                                     devices[0]->name() + " (a bug in dptrain; please report it)");
    }
}

// --save writes a temporary file beside FILE and renames it: the directory
// must exist and be writable.
void check_can_create(const std::string& path) {
    const std::filesystem::path dir = std::filesystem::path(path).parent_path();
    const std::string where = dir.empty() ? "." : dir.string();
    if (!std::filesystem::is_directory(where))
        throw InputError("--save " + path + ": directory " + where + " does not exist");
    if (access(where.c_str(), W_OK) != 0)
        throw InputError("--save " + path + ": cannot write in " + where + " (" + std::strerror(errno) + ")");
}

void print_epoch(const EpochStats& s) {
    std::printf("epoch %d  time %.2f s  %s samples/s  loss %.4f  test_acc %.4f\n", s.epoch, s.train_time_s,
                with_commas(s.samples_per_s).c_str(), s.train_loss, s.test_acc);
    std::fflush(stdout);
}

void write_metrics(std::ofstream& out, const EpochStats& s, const TrainConfig& c) {
    char line[512];
    std::snprintf(line, sizeof line,
                  "{\"epoch\": %d, \"train_time_s\": %.6f, \"samples_per_s\": %.1f, \"train_loss\": %.6f, "
                  "\"test_acc\": %.4f, \"devices\": %d, \"device_kind\": \"%s\", \"batch\": %d, \"lr\": %g}\n",
                  s.epoch, s.train_time_s, s.samples_per_s, s.train_loss, s.test_acc, c.devices,
                  to_string(c.kind), c.batch, double(c.lr));
    out << line << std::flush;
}

}  // namespace

std::vector<float> init_params(InitKind init, uint64_t seed) {
    Rng rng(seed, stream_init);
    std::vector<float> params(lenet::param_count, 0.0f);
    for (const TensorInfo& t : lenet::tensors) {
        if (t.rank == 1) continue;  // biases start at zero
        // Fans as PyTorch counts them: (in, out) channels times the kernel area.
        const size_t receptive = t.rank == 4 ? size_t(t.shape[2]) * t.shape[3] : 1;
        const double fan_in = double(t.shape[1] * receptive), fan_out = double(t.shape[0] * receptive);
        const double bound = std::sqrt(6.0 / (fan_in + fan_out));
        float* w = params.data() + t.offset;
        for (size_t i = 0; i < t.size(); ++i)
            w[i] = init == InitKind::normal ? float(0.01 * rng.normal()) : float(bound * (2.0 * rng.uniform() - 1.0));
    }
    return params;
}

std::vector<uint32_t> epoch_order(size_t count, uint64_t seed, int epoch) {
    std::vector<uint32_t> order(count);
    std::iota(order.begin(), order.end(), 0u);
    Rng rng(seed, stream_order + 1000003ULL * uint64_t(epoch));
    rng.shuffle(std::span<uint32_t>(order));
    return order;
}

void train(const TrainConfig& c) {
    const std::string dir = find_data_dir(c.data_dir);
    const FashionMnist data = load_fashion_mnist(dir, c.limit_train, c.limit_test);
    if (size_t(c.batch) > data.train.count)
        throw InputError("--batch " + std::to_string(c.batch) + " is larger than the training set (" +
                         std::to_string(data.train.count) + " samples)");
    std::ofstream metrics;
    if (!c.metrics_path.empty()) {
        metrics.open(c.metrics_path, std::ios::trunc);
        if (!metrics) throw InputError("--metrics " + c.metrics_path + ": cannot write (" + std::strerror(errno) + ")");
    }
    if (!c.save_path.empty()) check_can_create(c.save_path);  // fail now, not after the training
    const std::vector<float> initial = c.load_path.empty() ? init_params(c.init, c.seed) : load_params(c.load_path);

    const int n = c.devices;
    const int capacity = (c.batch + n - 1) / n;
    const ReplicaSetup setup{&data.train, &data.test, capacity, c.pool, n};
    std::vector<std::unique_ptr<Device>> owned =
        c.kind == DeviceKind::cuda ? make_gpu_devices(n, setup) : make_cpu_devices(n, setup);
    std::vector<Device*> devices;
    for (auto& d : owned) devices.push_back(d.get());
    for (Device* d : devices) d->write_params(initial);  // every replica starts equal (tutorial: get_params)

    const std::string origin = !c.load_path.empty()          ? "parameters from " + c.load_path
                               : c.init == InitKind::xavier ? "xavier init"
                                                            : "normal init";
    std::printf("dptrain: LeNet (%s pool, %s) on Fashion-MNIST from %s: %zu train, %zu test samples\n",
                c.pool == PoolKind::avg ? "avg" : "max", origin.c_str(), dir.c_str(), data.train.count,
                data.test.count);
    if (c.kind == DeviceKind::cuda) {
        std::printf("devices: %s; each replica has its own stream and memory%s%s\n", describe_gpu_replicas(n).c_str(),
                    c.devices_note.empty() ? "" : "; ", c.devices_note.c_str());
    } else {
        const int cores = usable_cores();
        std::printf("devices: %d CPU device%s, one worker thread per device, %d usable core%s%s%s\n", n,
                    n == 1 ? "" : "s", cores, cores == 1 ? "" : "s", c.devices_note.empty() ? "" : "; ",
                    c.devices_note.c_str());
        if (n > cores) std::printf("note: %d devices share %d cores, so they cannot all compute at once\n", n, cores);
    }
    char per_device[32];  // "256", or "170-171" when the parts differ by one
    std::snprintf(per_device, sizeof per_device, c.batch % n ? "%d-%d" : "%d", c.batch / n, capacity);
    std::printf("batch %d (%s per device), lr %g, %d epoch%s, seed %llu\n", c.batch, per_device,
                double(c.lr), c.epochs, c.epochs == 1 ? "" : "s", (unsigned long long)c.seed);
    std::fflush(stdout);

    const size_t count = data.train.count;
    const size_t steps = (count + size_t(c.batch) - 1) / size_t(c.batch);
    // An epoch's steps, queued on the devices' streams; the host does not wait.
    const auto queue_epoch = [&] {
        for (size_t first = 0; first < count; first += size_t(c.batch))
            train_step(devices, first, int(std::min<size_t>(c.batch, count - first)), c.lr);
    };
    // On GPUs the epoch is recorded once as a CUDA graph, before any clock
    // starts: every epoch is then one launch instead of thousands.
    std::unique_ptr<Recording> graph;
    if (c.kind == DeviceKind::cuda && c.graphs && c.epochs > 0) {
        const auto start = std::chrono::steady_clock::now();
        std::string why;
        graph = record_graph(devices, queue_epoch, why);
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        if (graph)
            std::printf("CUDA graph: the epoch's %zu steps recorded in %.0f ms, replayed each epoch "
                        "(--no-graphs queues them kernel by kernel)\n", steps, ms);
        else
            std::printf("note: CUDA graphs unavailable (%s), so each step is queued kernel by kernel\n", why.c_str());
    }

    for (int epoch = 1; epoch <= c.epochs; ++epoch) {
        const std::vector<uint32_t> order = epoch_order(count, c.seed, epoch);
        const auto start = std::chrono::steady_clock::now();
        for (Device* d : devices) d->set_order(order.data(), order.size());
        if (graph) graph->replay();
        else queue_epoch();
        for (Device* d : devices) d->synchronize();  // the tutorial's waitall: the epoch's time ends here
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

        double loss_sum = 0.0;
        for (Device* d : devices) loss_sum += d->take_loss_sum();
        const EpochStats stats{epoch, seconds, double(count) / seconds, loss_sum / double(count),
                               test_accuracy(*devices[0], data.test.count, capacity)};
        if (!std::isfinite(stats.train_loss))
            throw std::runtime_error("training diverged in epoch " + std::to_string(epoch) +
                                     " (the loss is not finite): try a smaller --lr");
        check_replicas_identical(devices);
        print_epoch(stats);
        if (metrics.is_open()) write_metrics(metrics, stats, c);
    }
    if (c.epochs == 0)
        std::printf("test_acc %.4f\n", test_accuracy(*devices[0], data.test.count, capacity));

    if (!c.save_path.empty()) {
        std::vector<float> params(lenet::param_count);
        devices[0]->read_params(params);
        save_params(c.save_path, params);
        std::printf("saved parameters to %s\n", c.save_path.c_str());
    }
}

}  // namespace dpt
