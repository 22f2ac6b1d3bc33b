#include "trainer.hpp"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "allreduce.hpp"
#include "checkpoint.hpp"
#include "device_factory.hpp"
#include "errors.hpp"
#include "gpu.hpp"
#include "lenet.hpp"
#include "parallel.hpp"
#include "params_file.hpp"
#include "rng.hpp"
#include "signals.hpp"

namespace dpt {

namespace {

// Independent random streams drawn from one seed.
constexpr uint64_t stream_init = 0, stream_order = 1;

// --breakdown: device 0's timeline (the step's critical path: it waits for
// every peer, sums, and sends the sum back), plus every device's compute time.
void take_breakdown(std::span<Device* const> devices, EpochReport& r) {
    for (size_t i = 0; i < devices.size(); ++i) {
        const PhaseTimes t = devices[i]->take_phase_times();
        if (i == 0) r.phases = t;
        const double compute = t[size_t(Phase::compute)];
        r.compute_mean_s += compute / double(devices.size());
        if (compute > r.compute_slowest_s) r.compute_slowest_s = compute, r.slowest_device = int(i);
    }
}

void print_breakdown(const EpochReport& r, std::span<Device* const> devices) {
    const double epoch_s = r.train_time_s;
    const auto part = [&](Phase p) { return r.phases[size_t(p)]; };
    const auto share = [&](Phase p) { return 100.0 * part(p) / epoch_s; };
    std::printf("  phases on %s: split_and_load %.2f s (%.0f%%), forward+backward %.2f s (%.0f%%", devices[0]->name().c_str(),
                part(Phase::load), share(Phase::load), part(Phase::compute), share(Phase::compute));
    if (devices.size() > 1)
        std::printf("; mean of the devices %.2f s, slowest %s %.2f s", r.compute_mean_s,
                    devices[size_t(r.slowest_device)]->name().c_str(), r.compute_slowest_s);
    std::printf("), waiting for peers %.2f s (%.0f%%), allreduce %.2f s (%.0f%%), sgd update %.2f s (%.0f%%); "
                "sum %.2f s of the epoch's %.2f s\n",
                part(Phase::wait), share(Phase::wait), part(Phase::allreduce), share(Phase::allreduce),
                part(Phase::update), share(Phase::update),
                part(Phase::load) + part(Phase::compute) + part(Phase::wait) + part(Phase::allreduce) +
                    part(Phase::update),
                epoch_s);
}

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
    std::vector<float> first(lenet::model().param_count()), other(lenet::model().param_count());
    devices[0]->read_params(first);
    for (size_t i = 1; i < devices.size(); ++i) {
        devices[i]->read_params(other);
        if (std::memcmp(first.data(), other.data(), first.size() * sizeof(float)) != 0)
            throw std::runtime_error("replicas diverged: " + devices[i]->name() + " differs from " +
                                     devices[0]->name() + " (a bug in dptrain; please report it)");
    }
}

// --save and --checkpoint write a temporary file beside FILE and rename it:
// the directory must exist and be writable.
void check_can_create(const std::string& option, const std::string& path) {
    const std::filesystem::path dir = std::filesystem::path(path).parent_path();
    const std::string where = dir.empty() ? "." : dir.string();
    if (!std::filesystem::is_directory(where))
        throw InputError(option + " " + path + ": directory " + where + " does not exist");
    if (access(where.c_str(), W_OK) != 0)
        throw InputError(option + " " + path + ": cannot write in " + where + " (" + std::strerror(errno) + ")");
}

// A one-line progress bar for the epoch under way, on a terminal only: logs
// and pipes get the epoch lines alone. Redrawn at most 5 times a second;
// clear() makes room for the epoch's line.
class ProgressBar {
   public:
    explicit ProgressBar(bool enabled) : enabled_(enabled) {}

    void start(int epoch, size_t total_steps, size_t first_step) {
        epoch_ = epoch, total_ = total_steps, first_ = first_step;
        start_ = last_draw_ = std::chrono::steady_clock::now();
    }
    // `done` steps of the epoch are finished, `samples` samples of them since start().
    void update(size_t done, size_t samples) {
        if (!enabled_) return;
        const auto now = std::chrono::steady_clock::now();
        if (now - last_draw_ < std::chrono::milliseconds(200)) return;
        last_draw_ = now;
        const double elapsed = std::chrono::duration<double>(now - start_).count();
        const double rate = double(samples) / elapsed;
        const double eta = done > first_ ? elapsed * double(total_ - done) / double(done - first_) : 0.0;
        constexpr int width = 30;
        const int filled = int(width * done / std::max<size_t>(total_, 1));
        std::printf("\repoch %d [%s%s] %zu/%zu batches  %s samples/s  ETA %.0f s\033[K", epoch_,
                    std::string(size_t(filled), '#').c_str(), std::string(size_t(width - filled), '.').c_str(), done,
                    total_, with_commas(rate).c_str(), eta);
        std::fflush(stdout);
        drawn_ = true;
    }
    void clear() {
        if (drawn_) std::printf("\r\033[K");
        drawn_ = false;
    }

   private:
    const bool enabled_;
    bool drawn_ = false;
    int epoch_ = 0;
    size_t total_ = 0, first_ = 0;
    std::chrono::steady_clock::time_point start_, last_draw_;
};

// resumed_at > 0: the epoch was resumed after that many steps, so its time
// and samples/s cover only the steps run since.
void print_epoch(const EpochReport& s, size_t resumed_at) {
    std::printf("epoch %d  time %.2f s  %s samples/s  loss %.4f  test_acc %.4f", s.epoch, s.train_time_s,
                with_commas(s.samples_per_s).c_str(), s.train_loss, s.test_acc);
    if (resumed_at > 0) std::printf("  (resumed after step %zu: time and samples/s cover the rest)", resumed_at);
    std::printf("\n");
    std::fflush(stdout);
}

// Step `bad_step` (0-based, -1: unknown) of `epoch` produced a NaN or an
// infinity. The advice names the learning rate the tutorial's linear scaling
// rule gives for this batch: 0.3 at 256, in proportion.
std::string divergence_message(const TrainConfig& c, int epoch, int32_t bad_step, size_t steps) {
    char text[512];
    const std::string where = bad_step >= 0 ? " at step " + std::to_string(bad_step + 1) + " of " +
                                                  std::to_string(steps) : "";
    const double rule = 0.3 * double(c.batch) / 256.0;
    std::snprintf(text, sizeof text,
                  "training diverged in epoch %d%s: the loss or the gradients are no longer finite (NaN or "
                  "infinity) with --lr %g. Try a smaller --lr; for --batch %d the linear scaling rule (lr 0.3 "
                  "at batch 256, growing with the batch%s) suggests --lr %g.%s",
                  epoch, where.c_str(), double(c.lr), c.batch,
                  c.devices > 1 ? ", as when going from 1 device to N" : "", rule,
                  c.checkpoint_path.empty() ? "" : " No checkpoint was written for this epoch.");
    return text;
}

void write_metrics(std::ofstream& out, const EpochReport& s, const TrainConfig& c) {
    char line[1024];
    int n = std::snprintf(line, sizeof line,
                          "{\"epoch\": %d, \"train_time_s\": %.6f, \"samples_per_s\": %.1f, \"train_loss\": %.6f, "
                          "\"test_acc\": %.4f, \"devices\": %d, \"device_kind\": \"%s\", \"batch\": %d, \"lr\": %g",
                          s.epoch, s.train_time_s, s.samples_per_s, s.train_loss, s.test_acc, c.devices,
                          to_string(c.kind), c.batch, double(c.lr));
    if (c.breakdown)
        n += std::snprintf(line + n, sizeof line - size_t(n),
                           ", \"load_s\": %.6f, \"compute_s\": %.6f, \"compute_mean_s\": %.6f, "
                           "\"compute_slowest_s\": %.6f, \"wait_s\": %.6f, \"allreduce_s\": %.6f, \"update_s\": %.6f",
                           s.phases[size_t(Phase::load)], s.phases[size_t(Phase::compute)], s.compute_mean_s,
                           s.compute_slowest_s, s.phases[size_t(Phase::wait)], s.phases[size_t(Phase::allreduce)],
                           s.phases[size_t(Phase::update)]);
    out << line << "}\n" << std::flush;
}

}  // namespace

std::vector<float> init_params(InitKind init, uint64_t seed) {
    Rng rng(seed, stream_init);
    std::vector<float> params(lenet::model().param_count(), 0.0f);
    for (const ParamTensor& t : lenet::model().tensors()) {
        if (t.role == InitRole::bias) continue;  // biases start at zero
        // Fans as PyTorch counts them (model.hpp): channels times the kernel area.
        const double bound = std::sqrt(6.0 / (t.fan_in + t.fan_out));
        float* w = params.data() + t.offset;
        for (size_t i = 0; i < t.size; ++i)
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

TrainResult train(const TrainConfig& c) {
    const std::string dir = find_data_dir(c.data_dir);
    const FashionMnist data = load_fashion_mnist(dir, c.limit_train, c.limit_test);
    if (size_t(c.batch) > data.train.count)
        throw InputError("--batch " + std::to_string(c.batch) + " is larger than the training set (" +
                         std::to_string(data.train.count) + " samples)");
    const size_t count = data.train.count;
    const size_t steps = (count + size_t(c.batch) - 1) / size_t(c.batch);
    const bool resuming = !c.resume_path.empty();
    if (resuming && c.start.step >= steps)
        throw InputError("--resume " + c.resume_path + ": it stopped at step " + std::to_string(c.start.step) +
                         " of an epoch, but an epoch here has " + std::to_string(steps) +
                         " steps (is this the data set it was trained on?)");
    std::ofstream metrics;
    if (!c.metrics_path.empty()) {
        // A resumed run goes on with the metrics of the run it continues.
        metrics.open(c.metrics_path, resuming ? std::ios::app : std::ios::trunc);
        if (!metrics) throw InputError("--metrics " + c.metrics_path + ": cannot write (" + std::strerror(errno) + ")");
    }
    // Fail now, not after the training.
    if (!c.save_path.empty()) check_can_create("--save", c.save_path);
    if (!c.checkpoint_path.empty()) check_can_create("--checkpoint", c.checkpoint_path);
    const std::vector<float> initial = resuming                ? c.resume_params
                                       : !c.load_path.empty() ? load_params(c.load_path)
                                                              : init_params(c.init, c.seed);

    const int n = c.devices;
    const int capacity = (c.batch + n - 1) / n;
    const Allreduce& allreduce = allreduce_named(c.allreduce);
    const std::vector<std::unique_ptr<Device>> owned =
        make_devices({c.kind, n}, {&data.train, &data.test, capacity, c.pool}, allreduce);
    const std::vector<Device*> devices = pointers(owned);
    for (Device* d : devices) d->write_params(initial);  // every replica starts equal (tutorial: get_params)

    const std::string origin = resuming                     ? "parameters from the checkpoint " + c.resume_path
                               : !c.load_path.empty()       ? "parameters from " + c.load_path
                               : c.init == InitKind::xavier ? "xavier init"
                                                            : "normal init";
    std::printf("dptrain: LeNet (%s pool, %s) on Fashion-MNIST from %s: %zu train, %zu test samples\n",
                c.pool == PoolKind::avg ? "avg" : "max", origin.c_str(), dir.c_str(), data.train.count,
                data.test.count);
    if (c.kind == DeviceKind::gpu) {
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
    if (n > 1) std::printf("allreduce: %s (%s)\n", c.allreduce.c_str(), std::string(allreduce.info().summary).c_str());
    if (resuming)
        std::printf("resuming at epoch %d, step %zu of %zu\n", c.start.epoch, c.start.step, steps);
    if (!c.checkpoint_path.empty())
        std::printf("checkpoint: %s, every %d epoch%s and when stopped by SIGINT or SIGTERM\n",
                    c.checkpoint_path.c_str(), c.checkpoint_every, c.checkpoint_every == 1 ? "" : "s");
    std::fflush(stdout);

    // Step `step` of the epoch, queued on the devices' streams; the host does not wait.
    const auto queue_step = [&](size_t step) {
        const size_t first = step * size_t(c.batch);
        train_step(devices, allreduce, first, int(std::min<size_t>(c.batch, count - first)), c.lr, int32_t(step),
                   c.breakdown);
    };
    // On GPUs the epoch is recorded once as a CUDA graph, before any clock
    // starts: every epoch is then one launch instead of thousands.
    std::unique_ptr<Recording> graph;
    if (c.kind == DeviceKind::gpu && c.graphs && c.breakdown)
        std::printf("note: --breakdown times each phase with events, so steps are queued kernel by kernel "
                    "(no CUDA graph)\n");
    if (c.kind == DeviceKind::gpu && c.graphs && !c.breakdown && c.epochs >= c.start.epoch) {
        const auto start = std::chrono::steady_clock::now();
        std::string why;
        graph = record_graph(devices, [&] { for (size_t s = 0; s < steps; ++s) queue_step(s); }, why);
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        if (graph)
            std::printf("CUDA graph: the epoch's %zu steps recorded in %.0f ms, replayed each epoch "
                        "(--no-graphs queues them kernel by kernel)\n", steps, ms);
        else
            std::printf("note: CUDA graphs unavailable (%s), so each step is queued kernel by kernel\n", why.c_str());
    }

    const auto write_checkpoint = [&](const Position& at) {
        Checkpoint k{c, at, std::vector<float>(lenet::model().param_count())};
        devices[0]->read_params(k.params);
        save_checkpoint(c.checkpoint_path, k);
    };
    TrainResult result;
    // After a stop request: say where the run stopped and how to go on.
    const auto stopped = [&](int signal, const Position& at, bool checkpoint_written) {
        if (!c.checkpoint_path.empty() && !checkpoint_written) write_checkpoint(at);
        const std::string where = at.step == 0 ? "after epoch " + std::to_string(at.epoch - 1)
                                               : "in epoch " + std::to_string(at.epoch) + " after step " +
                                                     std::to_string(at.step) + " of " + std::to_string(steps);
        if (c.checkpoint_path.empty())
            std::fprintf(stderr,
                         "dptrain: stopped by %s %s; no checkpoint was written (run with --checkpoint FILE to be "
                         "able to resume)\n", signal_name(signal), where.c_str());
        else
            std::fprintf(stderr, "dptrain: stopped by %s %s; checkpoint in %s (continue with: dptrain --resume %s)\n",
                         signal_name(signal), where.c_str(), c.checkpoint_path.c_str(), c.checkpoint_path.c_str());
        result.exit_status = 128 + signal;
        return result;
    };

    // CPU devices only: there the host is at most two steps ahead, so the bar
    // shows work done, not work queued (a GPU epoch takes a blink anyway).
    ProgressBar progress(c.kind == DeviceKind::cpu && isatty(STDOUT_FILENO));
    StopRequests stop;  // from here on, SIGINT and SIGTERM stop the run between two steps
    for (int epoch = c.start.epoch; epoch <= c.epochs; ++epoch) {
        const bool resumed = epoch == c.start.epoch && c.start.step > 0;
        const size_t first_step = resumed ? c.start.step : 0;
        const std::vector<uint32_t> order = epoch_order(count, c.seed, epoch);
        const auto start = std::chrono::steady_clock::now();
        for (Device* d : devices) d->set_order(order.data(), order.size());
        size_t done = first_step;  // steps of this epoch queued
        progress.start(epoch, steps, first_step);
        if (graph && first_step == 0) {
            graph->replay();  // a stop request waits for the end of the epoch (one launch)
            done = steps;
        } else {
            for (; done < steps && stop.signal() == 0; ++done) {
                queue_step(done);
                for (Device* d : devices) d->throttle(2);  // keeps a stop request prompt on CPU devices
                const size_t finished = std::max(first_step, done >= 1 ? done - 1 : 0);  // at most 2 queued
                progress.update(finished, (finished - first_step) * size_t(c.batch));
            }
        }
        if (c.breakdown)
            for (Device* d : devices) d->begin_phase(Phase::idle);  // closes the last phase
        for (Device* d : devices) d->synchronize();  // the tutorial's waitall: the epoch's time ends here
        progress.clear();
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

        double loss_sum = epoch == c.start.epoch ? c.start.loss_sum : 0.0;
        for (Device* d : devices) loss_sum += d->take_loss_sum();
        const int32_t bad_step = devices[0]->take_first_bad_step();
        if (bad_step >= 0 || !std::isfinite(loss_sum)) throw std::runtime_error(divergence_message(c, epoch, bad_step, steps));
        if (done < steps) return stopped(stop.signal(), Position{epoch, done, loss_sum}, false);

        const size_t samples = count - std::min(count, first_step * size_t(c.batch));
        EpochReport stats{epoch, seconds, double(samples) / seconds, loss_sum / double(count),
                          test_accuracy(*devices[0], data.test.count, capacity)};
        if (c.breakdown) take_breakdown(devices, stats);
        result.epochs.push_back(stats);
        check_replicas_identical(devices);
        print_epoch(stats, resumed ? first_step : 0);
        if (c.breakdown) print_breakdown(stats, devices);
        if (metrics.is_open()) write_metrics(metrics, stats, c);
        const bool checkpoint_due =
            !c.checkpoint_path.empty() && (epoch % c.checkpoint_every == 0 || epoch == c.epochs);
        if (checkpoint_due) write_checkpoint(Position{epoch + 1, 0, 0.0});
        if (stop.signal() != 0 && epoch < c.epochs)
            return stopped(stop.signal(), Position{epoch + 1, 0, 0.0}, checkpoint_due);
    }
    if (c.start.epoch > c.epochs && resuming)
        std::printf("nothing to train: the checkpoint is at the end of epoch %d and --epochs is %d "
                    "(give a larger --epochs to go on)\n", c.start.epoch - 1, c.epochs);
    if (c.epochs == 0 || c.start.epoch > c.epochs)
        std::printf("test_acc %.4f\n", test_accuracy(*devices[0], data.test.count, capacity));

    if (!c.save_path.empty()) {
        std::vector<float> params(lenet::model().param_count());
        devices[0]->read_params(params);
        save_params(c.save_path, params);
        std::printf("saved parameters to %s\n", c.save_path.c_str());
    }
    return result;
}

}  // namespace dpt
