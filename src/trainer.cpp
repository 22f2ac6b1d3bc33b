// The training run (trainer.hpp): set-up, devices, the CUDA graph of an
// epoch on GPUs, and the epoch loop. What it prints is report.cpp; its
// checkpoints, run_checkpoints.cpp.
#include "trainer.hpp"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "allreduce.hpp"
#include "device_factory.hpp"
#include "errors.hpp"
#include "gpu.hpp"
#include "lenet.hpp"
#include "parallel.hpp"
#include "params_file.hpp"
#include "rng.hpp"
#include "run_checkpoints.hpp"
#include "signals.hpp"

namespace dpt {

namespace {

// Independent random streams drawn from one seed.
constexpr uint64_t stream_init = 0, stream_order = 1;

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

}  // namespace

double test_accuracy(Device& device, size_t test_count, int capacity) {
    for (size_t first = 0; first < test_count; first += size_t(capacity))
        device.evaluate_test(first, int(std::min<size_t>(capacity, test_count - first)));
    return double(device.take_correct()) / double(test_count);
}

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

void queue_step(const TrainConfig& c, std::span<Device* const> devices, const Allreduce& allreduce, size_t count,
                int epoch, size_t step) {
    const size_t first = step * size_t(c.batch);
    const size_t steps = (count + size_t(c.batch) - 1) / size_t(c.batch);
    train_step(devices, allreduce, first, int(std::min<size_t>(c.batch, count - first)), lr_at(c, steps, epoch, step),
               int32_t(step), c.breakdown);
}

std::vector<uint32_t> epoch_order(size_t count, uint64_t seed, int epoch) {
    std::vector<uint32_t> order(count);
    std::iota(order.begin(), order.end(), 0u);
    Rng rng(seed, stream_order + 1000003ULL * uint64_t(epoch));
    rng.shuffle(std::span<uint32_t>(order));
    return order;
}

namespace {

// On GPUs the epoch is recorded once as a CUDA graph, before its clock
// starts: every epoch is then one launch instead of thousands. The graph
// holds each step's rate, so it is recorded for the first epoch at the full
// rate (`epoch`), after any warm-up. Null (and said why) where there is none.
std::unique_ptr<Recording> record_epoch(const TrainConfig& c, std::span<Device* const> devices,
                                        const Allreduce& allreduce, size_t count, size_t steps, int epoch) {
    if (c.kind != DeviceKind::gpu || !c.graphs || c.epochs < epoch) return nullptr;
    if (c.breakdown) {
        std::printf("note: --breakdown times each phase with events, so steps are queued kernel by kernel "
                    "(no CUDA graph)\n");
        return nullptr;
    }
    const auto start = std::chrono::steady_clock::now();
    std::string why;
    std::unique_ptr<Recording> graph = record_graph(
        devices, [&] { for (size_t s = 0; s < steps; ++s) queue_step(c, devices, allreduce, count, epoch, s); }, why);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (graph)
        std::printf("CUDA graph: the epoch's %zu steps recorded in %.0f ms, replayed each epoch "
                    "(--no-graphs queues them kernel by kernel)\n", steps, ms);
    else
        std::printf("note: CUDA graphs unavailable (%s), so each step is queued kernel by kernel\n", why.c_str());
    return graph;
}

}  // namespace

TrainResult train(const TrainConfig& c) {
    // Everything a user can get wrong fails here, before any training.
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
    MetricsFile metrics(c);
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
    print_banner(c, dir, data, devices, allreduce.info(), steps);
    // Warm-up epochs queue their steps one by one (each has its own rate);
    // the graph, on GPUs, is recorded before the first epoch at the full rate.
    const int graph_from = std::max(c.start.epoch, first_full_rate_epoch(c, steps));
    std::unique_ptr<Recording> graph;

    TrainResult result;
    // After a stop request: the checkpoint (unless just written), and where the run stopped.
    const auto stopped = [&](int signal, const Position& at, bool checkpoint_written) {
        if (!c.checkpoint_path.empty() && !checkpoint_written) write_run_checkpoint(c, at, *devices[0]);
        say_stopped(c, signal, at, steps);
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
        if (epoch == graph_from) graph = record_epoch(c, devices, allreduce, count, steps, epoch);
        const auto start = std::chrono::steady_clock::now();
        for (Device* d : devices) d->set_order(order.data(), order.size());
        size_t done = first_step;  // steps of this epoch queued
        progress.start(epoch, steps, first_step);
        if (graph && first_step == 0) {
            graph->replay();  // a stop request waits for the end of the epoch (one launch)
            done = steps;
        } else {
            for (; done < steps && stop.signal() == 0; ++done) {
                queue_step(c, devices, allreduce, count, epoch, done);
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
        take_core_shares(devices, stats);
        result.epochs.push_back(stats);
        check_replicas_identical(devices);
        print_epoch(stats, resumed ? first_step : 0, devices, c.breakdown);
        warn_if_core_was_busy(stats, devices);
        warn_if_at_chance(c, stats, lenet::model().classes());
        metrics.write(stats);
        const bool checkpoint_due =
            !c.checkpoint_path.empty() && (epoch % c.checkpoint_every == 0 || epoch == c.epochs);
        if (checkpoint_due) write_run_checkpoint(c, Position{epoch + 1, 0, 0.0}, *devices[0]);
        if (stop.signal() != 0 && epoch < c.epochs)
            return stopped(stop.signal(), Position{epoch + 1, 0, 0.0}, checkpoint_due);
    }
    if (c.start.epoch > c.epochs && resuming)
        std::printf("nothing to train: the checkpoint is at the end of epoch %d and --epochs is %d "
                    "(give a larger --epochs to go on)\n", c.start.epoch - 1, c.epochs);
    if (c.epochs == 0 || c.start.epoch > c.epochs)
        std::printf("test_acc %.4f\n", test_accuracy(*devices[0], data.test.count, capacity));

    if (!c.save_path.empty()) {
        std::vector<float> params(devices[0]->param_floats());
        devices[0]->read_params(params);
        save_params(c.save_path, params);
        std::printf("saved parameters to %s\n", c.save_path.c_str());
    }
    return result;
}

}  // namespace dpt
