// The training run (trainer.hpp): set-up, devices, the CUDA graph of an
// epoch on GPUs, and the epoch loop. What it prints is report.cpp; its
// checkpoints, run_checkpoints.cpp.
#include "run/trainer.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <numeric>

#include "parallel/allreduce.hpp"
#include "parallel/device_factory.hpp"
#include "base/errors.hpp"
#include "base/files.hpp"
#include "model/models.hpp"
#include "base/numbers.hpp"
#include "parallel/parallel.hpp"
#include "model/params_file.hpp"
#include "base/rng.hpp"
#include "run/run_checkpoints.hpp"
#include "run/trace.hpp"
#include "base/signals.hpp"

namespace dpt {

namespace {

// Independent random streams drawn from one seed.
constexpr uint64_t stream_init = 0, stream_order = 1;

// Every step ends with the same update on every replica; a difference means
// a bug. In a multi-process run, every rank's against rank 0's too.
void check_replicas_identical(std::span<Device* const> devices, Cluster& cluster) {
    std::vector<float> first(devices[0]->param_floats()), other(devices[0]->param_floats());
    devices[0]->read_params(first);
    for (size_t i = 1; i < devices.size(); ++i) {
        devices[i]->read_params(other);
        if (std::memcmp(first.data(), other.data(), first.size() * sizeof(float)) != 0)
            throw std::runtime_error("replicas diverged: " + devices[i]->name() + " differs from " +
                                     devices[0]->name() + " (a bug in dptrain; please report it)");
    }
    if (cluster.size() == 1) return;
    other = first;
    cluster.broadcast(other, "the replica check");
    const bool same = std::memcmp(first.data(), other.data(), first.size() * sizeof(float)) == 0;
    const Cluster::Failure failure = cluster.agree(same ? "" : "differs", "the replica check");
    if (failure.rank >= 0)
        throw EveryRankError("replicas diverged: rank " + std::to_string(failure.rank) + "'s differ from rank 0's "
                             "(a bug in dptrain, or an MPI library whose sums differ between ranks; please report it)");
}

}  // namespace

double test_accuracy(Device& device, size_t test_count, int capacity) {
    for (size_t first = 0; first < test_count; first += size_t(capacity))
        device.evaluate_test(first, int(std::min<size_t>(capacity, test_count - first)));
    return double(device.take_correct()) / double(test_count);
}

std::vector<float> init_params(InitKind init, uint64_t seed, const Model& model) {
    Rng rng(seed, stream_init);
    std::vector<float> params(model.param_count(), 0.0f);
    for (const ParamTensor& t : model.tensors()) {
        float* w = params.data() + t.offset;
        if (t.role == InitRole::gamma || t.role == InitRole::running_var) std::fill_n(w, t.size, 1.0f);
        if (t.role != InitRole::weight) continue;  // biases, beta and the running mean start at zero
        // Fans as PyTorch counts them (model.hpp): channels times the kernel area.
        const double bound = std::sqrt(6.0 / (t.fan_in + t.fan_out));
        for (size_t i = 0; i < t.size; ++i)
            w[i] = init == InitKind::normal ? float(0.01 * rng.normal()) : float(bound * (2.0 * rng.uniform() - 1.0));
    }
    return params;
}

std::span<const Part> queue_step(const TrainConfig& c, std::span<Device* const> devices, const Allreduce& allreduce,
                                 const StepPlan& plan, const BatchParts& parts, size_t count, int epoch, size_t step, bool timed, int rank) {
    const size_t first = step * size_t(c.batch);
    const size_t steps = (count + size_t(c.batch) - 1) / size_t(c.batch);
    const int size = int(std::min<size_t>(c.batch, count - first));
    const std::span<const Part> mine = parts.of(size).subspan(size_t(rank) * devices.size(), devices.size());
    train_step(devices, allreduce, plan, first, mine, lr_at(c, steps, epoch, step), int32_t(step), timed, size);
    return mine;
}

namespace {
// The run's last word on its --trace file, once it is whole.
void say_traced(TraceFile& trace) {
    trace.finish();
    std::printf("trace: %zu spans in %s (open it in ui.perfetto.dev or chrome://tracing)\n", trace.events(),
                trace.path().c_str());
}

// What a device that failed during an epoch (a GPU's illegal address) is
// reported as: named, with the epoch, where it was found and CUDA's words.
std::runtime_error failed_during(const Device& d, int epoch, const char* found, const std::exception& e) {
    return std::runtime_error(d.name() + " failed during epoch " + std::to_string(epoch) + " (" + found +
                              "): " + e.what());
}

// A GPU that fails while its work runs says so at its next CUDA call:
// mostly at the epoch's end, as the host waits for it, but sometimes as the
// host queues another step. This names it for the second case as the
// epoch's end does for the first. failure() does not wait, so no healthy
// device (or other process) is waited for here; an error no device owns is
// rethrown as it is.
[[noreturn]] void rethrow_naming_device(std::span<Device* const> devices, int epoch) {
    for (Device* d : devices) {
        if (d->failure().empty()) continue;
        try {
            throw;
        } catch (const std::exception& e) {
            throw failed_during(*d, epoch, "found while the host queued its steps", e);
        }
    }
    throw;
}
}  // namespace

namespace {
// Standard output was closed under the run (a pipe whose reader quit): it
// ends, exit 1, saying so where the user can still see it.
[[noreturn]] void throw_stdout_lost(const TrainConfig& c, int epoch) {
    throw std::runtime_error("standard output was closed (" + std::string(std::strerror(EPIPE)) +
                             "): stopped after epoch " + std::to_string(epoch) +
                             (c.checkpoint_path.empty() ? std::string(", with no checkpoint (give --checkpoint FILE to keep one)")
                                                        : ", checkpoint " + c.checkpoint_path +
                                                              " written (go on with --resume " + c.checkpoint_path + ")"));
}

// Every file the run reads and writes, before it reads or writes any
// (base/files.hpp): inputs regular files, outputs regular files or absent
// in writable folders, none an input or another output. An output that is
// /dev/null is dropped: nothing is written there.
void check_files(TrainConfig& c, const RunStart& start, const std::string& data_dir, int rank) {
    std::vector<InputFile> inputs;
    for (const std::string& file : data_files(data_dir)) inputs.push_back({"--data", file});
    if (start.resuming()) inputs.push_back({"--resume", start.resume_path});
    if (!c.load_path.empty()) {
        check_input_file("--load", c.load_path);
        inputs.push_back({"--load", c.load_path});
    }
    const std::string trace_file = c.processes > 1 && !c.trace_path.empty()
                                       ? c.trace_path + ".rank" + std::to_string(rank) : c.trace_path;
    const OutputFile outputs[] = {{"--save", c.save_path},
                                  {"--checkpoint", c.checkpoint_path, "--resume"},
                                  {"--metrics", c.metrics_path},
                                  {"--trace", trace_file}};
    check_outputs(outputs, inputs);
    for (std::string* path : {&c.save_path, &c.checkpoint_path, &c.metrics_path})
        if (is_discard(*path)) path->clear();
    if (is_discard(trace_file)) c.trace_path.clear();
}
}  // namespace

std::vector<uint32_t> epoch_order(size_t count, uint64_t seed, int epoch) {
    std::vector<uint32_t> order(count);
    std::iota(order.begin(), order.end(), 0u);
    Rng rng(seed, stream_order + 1000003ULL * uint64_t(epoch));
    rng.shuffle(std::span<uint32_t>(order));
    return order;
}

namespace {

// What every process of a multi-process run must be given alike: one
// "--option value" a line, the settings a checkpoint records (settings.cpp)
// and how the run sums.
std::string trajectory_options(const TrainConfig& c, bool resuming) {
    std::string text;
    for (const RunSetting& s : run_settings()) {
        const std::string value = s.text(c);
        if (s.flag.empty()) text += "--" + std::string(s.key) + " " + value + "\n";
        else text += (value == s.flag ? "--" : "no --") + std::string(s.flag) + "\n";
    }
    char more[256];
    std::snprintf(more, sizeof more, "--overlap %d\n--bucket-kb %d\n--across %s\n--collective-timeout %g\n--resume %s\n",
                  int(c.overlap), c.bucket_kb, to_string(c.across), c.collective_timeout,
                  resuming ? "yes" : "no");
    return text + more;
}

// Under mpirun: an InputError on every rank when some rank's options differ
// from rank 0's (a typo in one part of an MPMD command line, say).
void check_same_options(const TrainConfig& c, bool resuming, Cluster& cluster) {
    if (cluster.size() == 1) return;
    const std::string mine = trajectory_options(c, resuming), leaders = cluster.leader_text(mine, "comparing the options");
    cluster.all_or_none([&] {
        if (mine == leaders) return;
        const std::vector<std::string> a = items_of(mine, '\n'), b = items_of(leaders, '\n');
        for (size_t i = 0; i < a.size() && i < b.size(); ++i)
            if (a[i] != b[i])
                throw InputError("its " + a[i] + " differs from rank 0's " + b[i] +
                                 ": every process of a run is given the same options (--data may differ)");
    }, "comparing the options");
}

// --slowdown: each named device computes its parts K times over; an
// InputError for a name the run lacks or a device that cannot.
void apply_slowdowns(const TrainConfig& c, std::span<Device* const> devices) {
    for (const TrainConfig::Slowdown& s : c.slowdowns) {
        std::string names;
        Device* found = nullptr;
        for (Device* d : devices) {
            names += (names.empty() ? "" : ", ") + d->name();
            if (d->name() == s.device) found = d;
        }
        if (!found)
            throw InputError("--slowdown " + s.device + "=" + std::to_string(s.factor) + ": this run has no device " +
                             s.device + " (it has " + names + ")");
        if (!found->slow_down(s.factor))
            throw InputError("--slowdown " + s.device + ": only CPU devices can be slowed down");
    }
}

// On GPUs the epoch is recorded once as a CUDA graph, before its clock
// starts: every epoch is then one launch instead of thousands. The graph
// holds each step's rate, so it is recorded for the first epoch at the full
// rate (`epoch`), after any warm-up. Null (and said why) where there is none.
std::unique_ptr<Recording> record_epoch(const TrainConfig& c, std::span<Device* const> devices,
                                        const Allreduce& allreduce, const StepPlan& plan, const BatchParts& parts, size_t count,
                                        size_t steps, int epoch, int rank) {
    const auto records = [](const Device* d) { return d->capabilities().records_graphs; };
    // In a mixed run the CPU devices take part in every step: queued step by step (the banner says).
    if (!std::ranges::all_of(devices, records) || !c.graphs || c.epochs < epoch) return nullptr;
    // --breakdown's and --trace's phase marks are recorded with the steps, and replayed with them.
    const bool marked = c.breakdown || !c.trace_path.empty();
    const auto start = std::chrono::steady_clock::now();
    std::string why;
    std::unique_ptr<Recording> graph = record_work(
        devices, [&] { for (size_t s = 0; s < steps; ++s) queue_step(c, devices, allreduce, plan, parts, count, epoch, s, marked, rank); },
        why);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (graph)
        std::printf("CUDA graph: the epoch's %zu steps recorded in %.0f ms, replayed each epoch "
                    "(--no-graphs queues them kernel by kernel)\n", steps, ms);
    else
        std::printf("note: CUDA graphs unavailable (%s), so each step is queued kernel by kernel\n", why.c_str());
    return graph;
}

// --split auto: times the steps of auto_split_window at the even split,
// and gives the parts their speeds say.
class SplitProbe {
   public:
    SplitProbe(const SplitChoice& split, size_t first_step, size_t steps)
        : active_(!split.measured()), window_(auto_split_window(first_step, steps)) {}

    bool active() const { return active_; }
    bool timed(size_t step) const { return active_ && step >= window_.from && step < window_.end; }
    // Whether the parts are measured after `step` is queued.
    bool ends_at(size_t step) const { return active_ && step + 1 == window_.end; }

    // Called after each timed step is queued: waits for it and notes each
    // device's seconds per sample (load and forward+backward). The phase
    // times taken go into `carried` (--breakdown adds them to the epoch's).
    void record(std::span<Device* const> devices, std::span<const Part> parts, std::vector<PhaseTimes>& carried) {
        per_sample_.resize(devices.size());
        for (size_t i = 0; i < devices.size(); ++i) {
            devices[i]->begin_phase(Phase::idle);  // closes the step's update
            const PhaseTimes t = devices[i]->take_phase_times();
            for (int p = 0; p < phase_count; ++p) carried[i][size_t(p)] += t[size_t(p)];
            if (parts[i].count > 0)
                per_sample_[i].push_back((t[size_t(Phase::load)] + t[size_t(Phase::compute)]) / parts[i].count);
            if (i == 0) waits_.push_back(t[size_t(Phase::wait)]);
        }
    }

    // Says and returns the parts in proportion to each device's samples/s,
    // from the median step (one step disturbed by another program does not count).
    SplitChoice measure(std::span<Device* const> devices, int batch) {
        active_ = false;
        std::vector<double> speeds;
        std::string said;
        for (size_t i = 0; i < devices.size(); ++i) {
            const double seconds = median(per_sample_[i]);
            speeds.push_back(seconds > 0 ? 1.0 / seconds : 1.0);
            said += (i ? ", " : "") + devices[i]->name() + " " + with_commas(speeds.back());
        }
        SplitChoice split{SplitMode::automatic, counts_for_speeds(batch, speeds)};
        std::printf("split auto: steps %zu-%zu timed at the even split: %s samples/s; %s waited %.1f ms a step "
                    "for its peers. From step %zu on the parts are %s\n",
                    window_.from + 1, window_.end, said.c_str(), devices[0]->name().c_str(), 1e3 * median(waits_),
                    window_.end + 1,
                    describe_split(split, batch).c_str());
        std::fflush(stdout);
        return split;
    }

   private:
    bool active_;
    AutoSplitWindow window_;
    std::vector<std::vector<double>> per_sample_;  // per device, per timed step
    std::vector<double> waits_;                    // device 0's, per timed step
};

}  // namespace

TrainResult train(const TrainConfig& config) { return train(config, RunStart{}, *single_process()); }

TrainResult train(const TrainConfig& config, Cluster& cluster) { return train(config, RunStart{}, cluster); }

TrainResult train(const TrainConfig& config, const RunStart& start, Cluster& cluster) {
    // What the run decides for itself goes into its copy of the settings,
    // which its checkpoints record: the processes, and --split auto's
    // parts once measured.
    TrainConfig c = config;
    c.processes = cluster.size();
    const int rank = cluster.rank();
    if (!cluster.leader()) {  // rank 0 alone writes files
        c.metrics_path.clear();
        c.save_path.clear();
        c.checkpoint_path.clear();
    }
    const bool resuming = start.resuming();
    check_same_options(c, resuming, cluster);
    const int n = c.devices_in_all();  // of all processes: rank r's are r·G ... r·G+G-1
    const Allreduce& within = allreduce_named(c.allreduce);
    const StepPlan plan =
        plan_step(model_of(c.model), c.bn,
                  c.overlap ? overlap_buckets(model_of(c.model), c.bucket_kb, c.bn) : std::vector<Range>{});

    // Everything a user can get wrong fails here, before any training: on
    // every rank at once in a multi-process run (bad input on one node
    // exits 2 everywhere instead of leaving the others waiting).
    std::string dir;
    FashionMnist data;
    size_t count = 0, steps = 0;
    std::unique_ptr<MetricsFile> metrics;
    std::unique_ptr<TraceFile> trace;
    std::vector<float> initial;
    std::vector<std::unique_ptr<Device>> owned;
    std::optional<BatchParts> parts;
    int capacity = 0;
    cluster.all_or_none([&] {
        dir = find_data_dir(c.data_dir);
        check_files(c, start, dir, rank);
        data = load_fashion_mnist(dir, c.limit_train, c.limit_test);
        if (size_t(c.batch) > data.train.count)
            throw InputError("--batch " + std::to_string(c.batch) + " is larger than the training set (" +
                             std::to_string(data.train.count) + " samples)");
        count = data.train.count;
        steps = (count + size_t(c.batch) - 1) / size_t(c.batch);
        if (resuming && start.position.step >= steps)
            throw InputError("--resume " + start.resume_path + ": it stopped at step " + std::to_string(start.position.step) +
                             " of an epoch, but an epoch here has " + std::to_string(steps) +
                             " steps (is this the data set it was trained on?)");
        metrics = std::make_unique<MetricsFile>(c, resuming);
        initial = resuming                ? start.params
                  : !c.load_path.empty() ? load_params(c.load_path, c.model)
                                         : init_params(c.init, c.seed, model_of(c.model));
        parts.emplace(c.split, n, c.batch, count);
        // --split auto may give a device up to the whole batch but one sample a peer.
        capacity = c.split.measured() ? parts->largest() : c.batch;
        c.devices = placed_on_this_machine(c.devices, c.processes, cluster.local_rank());
        owned = make_devices(c.devices,
                             {&data.train, &data.test, capacity, c.pool, 0, plan.buckets, &model_of(c.model), c.bn,
                              c.processes > 1, c.math},
                             within);
        apply_slowdowns(c, pointers(owned));
        if (!c.trace_path.empty())
            trace = std::make_unique<TraceFile>(c.trace_path, pointers(owned), !plan.buckets.empty(), c.trace_steps,
                                                steps, plan.floats * sizeof(float), rank, c.processes);
    }, "the run's set-up");
    const std::vector<Device*> devices = pointers(owned);
    const bool marked = c.breakdown || trace;  // phase marks on every step
    std::string across_note;
    const std::unique_ptr<Allreduce> across =
        c.processes > 1 ? sum_across_processes(c.across, cluster, within, *devices[0], across_note) : nullptr;
    const Allreduce& allreduce = across ? *across : within;
    cluster.broadcast(initial, "the initial parameters");  // rank 0's, whatever each rank read or drew
    for (Device* d : devices) d->write_params(initial);  // every replica starts equal (tutorial: get_params)
    // The gradient sums across processes: how many a step makes, and which
    // step the n-th is (for a timeout's message).
    const uint64_t sums_per_step = std::max<size_t>(1, plan.buckets.size()) + plan.syncs.size();
    cluster.configure(c.across, c.collective_timeout, model_of(c.model).gradient_floats(), sums_per_step,
                      [start = start.position, steps](uint64_t step) {
                          const uint64_t at = start.step + step;
                          return "epoch " + std::to_string(start.epoch + int(at / steps)) + ", step " +
                                 std::to_string(at % steps + 1);
                      });
    print_banner(c, start, dir, data, devices, allreduce.info(), plan, steps);
    if (!across_note.empty()) std::printf("%s\n", across_note.c_str());
    if (trace) {
        // (Only rank 0 prints: it names every rank's file.)
        const std::string files = c.processes > 1 ? c.trace_path + ".rank0 to " + c.trace_path + ".rank" +
                                                        std::to_string(c.processes - 1) + ", a file a process"
                                                  : trace->path();
        std::printf("trace: %s, steps %s, an epoch at a time\n", files.c_str(),
                    c.trace_steps.last == size_t(-1) ? (std::to_string(c.trace_steps.first) + " on").c_str()
                                                     : (std::to_string(c.trace_steps.first) + "-" +
                                                        std::to_string(c.trace_steps.last)).c_str());
        trace->start(devices, trace_origin(cluster));
    }
    SplitProbe probe(c.split, start.position.step, steps);
    std::vector<PhaseTimes> carried(devices.size());  // --breakdown: the probe's phase times, taken early
    // Warm-up epochs queue their steps one by one (each has its own rate),
    // and so does an epoch whose parts --split auto changes midway; the
    // graph, on GPUs, is recorded before the first epoch after both.
    const int graph_from =
        std::max({start.position.epoch + (probe.active() ? 1 : 0), first_full_rate_epoch(c, steps)});
    std::unique_ptr<Recording> graph;

    TrainResult result;
    result.split = c.split;
    // A --metrics or --trace write that failed: the run ends on it once
    // the epoch's checkpoint is saved.
    std::exception_ptr write_failed;
    const auto writing = [&](const auto& write) {
        try {
            write();
        } catch (const WriteError&) {
            if (!write_failed) write_failed = std::current_exception();
        }
    };
    // After a stop request: the checkpoint (unless just written), and where the run stopped.
    const auto stopped = [&](int signal, const Position& at, bool checkpoint_written) {
        if (!c.checkpoint_path.empty() && !checkpoint_written) write_run_checkpoint(c, at, *devices[0]);
        if (write_failed) std::rethrow_exception(write_failed);
        if (trace) say_traced(*trace);
        if (cluster.leader()) say_stopped(c, signal, at, steps);
        result.exit_status = 128 + signal;
        return result;
    };
    // With a device the host paces (CPU devices): the host is then at most
    // two steps ahead, so the bar shows work done, not work queued (a GPU
    // epoch takes a blink anyway). Not under mpirun, which gives rank 0 a
    // terminal whatever its own output is.
    const auto paced = [](const Device* d) { return d->capabilities().host_paced; };
    ProgressBar progress(std::ranges::any_of(devices, paced) && c.processes == 1 && isatty(STDOUT_FILENO));
    StopRequests stop(cluster.leader());  // from here on, SIGINT and SIGTERM stop the run between two steps
    // Several processes stop at the same step: the one their gradient sums
    // agreed on (cluster.hpp), which needs the host at most 3 steps ahead of
    // its devices, as host-paced devices keep it; others (GPUs) stop at the
    // epoch's end.
    uint64_t queued = 0;  // steps this process has queued
    const auto stop_now = [&] {
        if (c.processes == 1) return stop.signal();
        return std::ranges::all_of(devices, paced) ? cluster.stop_before(queued) : 0;
    };
    for (int epoch = start.position.epoch; epoch <= c.epochs; ++epoch) {
        const bool resumed = epoch == start.position.epoch && start.position.step > 0;
        const size_t first_step = resumed ? start.position.step : 0;
        const std::vector<uint32_t> order = epoch_order(count, c.seed, epoch);
        if (epoch == graph_from) graph = record_epoch(c, devices, allreduce, plan, *parts, count, steps, epoch, rank);
        const auto epoch_began = std::chrono::steady_clock::now();
        for (Device* d : devices) d->set_order(order.data(), order.size());
        size_t done = first_step;  // steps of this epoch queued
        progress.start(epoch, steps, first_step);
        try {
            if (graph && first_step == 0) {
                graph->replay();  // a stop request waits for the end of the epoch (one launch)
                done = steps;
                queued += steps;
            } else {
                for (; done < steps && stop_now() == 0; ++done, ++queued) {
                    const bool timed = probe.timed(done);
                    const std::span<const Part> cut =
                        queue_step(c, devices, allreduce, plan, *parts, count, epoch, done, marked || timed, rank);
                    if (timed) probe.record(devices, cut, carried);
                    if (probe.ends_at(done)) {  // the one point where the parts change
                        c.split = result.split = probe.measure(devices, c.batch);
                        parts.emplace(c.split, n, c.batch, count);
                    }
                    for (Device* d : devices) d->throttle(2);  // keeps a stop request prompt on CPU devices
                    const size_t finished = std::max(first_step, done >= 1 ? done - 1 : 0);  // at most 2 queued
                    progress.update(finished, (finished - first_step) * size_t(c.batch));
                }
            }
        } catch (const std::exception&) {
            rethrow_naming_device(devices, epoch);
        }
        if (marked)
            for (Device* d : devices) d->begin_phase(Phase::idle);  // closes the last phase
        // The tutorial's waitall: the epoch's time ends here. A device that
        // failed while its work ran (a GPU's illegal address) says so now.
        for (Device* d : devices) {
            try {
                d->synchronize();
            } catch (const std::exception& e) {
                throw failed_during(*d, epoch, "its work is waited for at the end of each epoch", e);
            }
        }
        progress.clear();
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_began).count();
        if (trace) writing([&] { trace->add(epoch, first_step, devices); });  // (a stopped epoch's steps too)

        // Every device's losses, of every process, summed in device order.
        const std::string epoch_end = "the end of epoch " + std::to_string(epoch);
        std::vector<double> losses;
        for (Device* d : devices) losses.push_back(d->take_loss_sum());
        double loss_sum = epoch == start.position.epoch ? start.position.loss_sum : 0.0;
        for (double l : cluster.all_gather(losses, epoch_end)) loss_sum += l;
        const int signal = cluster.max(stop.signal(), epoch_end);
        // Device 0's summed gradients are the same on every rank, and so is this.
        const int32_t bad_step = devices[0]->take_first_bad_step();
        if (bad_step >= 0 || !std::isfinite(loss_sum)) throw EveryRankError(divergence_message(c, epoch, bad_step, steps));
        if (done < steps) return stopped(signal, Position{epoch, done, loss_sum}, false);

        const size_t samples = count - std::min(count, first_step * size_t(c.batch));
        EpochReport stats{epoch, seconds, double(samples) / seconds, loss_sum / double(count),
                          cluster.leader() ? test_accuracy(*devices[0], data.test.count, capacity) : 0.0};
        if (c.breakdown) take_breakdown(devices, stats, std::exchange(carried, std::vector<PhaseTimes>(devices.size())));
        take_core_shares(devices, stats);
        result.epochs.push_back(stats);
        check_replicas_identical(devices, cluster);
        print_epoch(stats, resumed ? first_step : 0, devices, c.breakdown, !plan.buckets.empty());
        warn_if_core_was_busy(stats, devices);
        warn_if_at_chance(c, stats, model_of(c.model).classes());
        writing([&] { metrics->write(stats); });
        // A closed stdout (`dptrain ... | head -1`; SIGPIPE is ignored, main.cpp)
        // ends the run too, after this epoch's checkpoint.
        const bool stdout_lost = std::fflush(stdout) != 0 || std::ferror(stdout);
        const bool checkpoint_due = !c.checkpoint_path.empty() &&
                                    (epoch % c.checkpoint_every == 0 || epoch == c.epochs || stdout_lost || write_failed);
        if (checkpoint_due) write_run_checkpoint(c, Position{epoch + 1, 0, 0.0}, *devices[0]);
        if (write_failed) std::rethrow_exception(write_failed);
        if (stdout_lost && epoch < c.epochs) throw_stdout_lost(c, epoch);  // (the last epoch saves first)
        if (signal != 0 && epoch < c.epochs) return stopped(signal, Position{epoch + 1, 0, 0.0}, checkpoint_due);
    }
    stop.finished();  // a signal from here on is noted, not a silent end
    if (stop.signal() != 0 && cluster.leader())  // it came after the last epoch's last step was queued: nothing was left to stop
        std::fprintf(stderr, "dptrain: %s came after the last step was queued; the run finished\n",
                     signal_name(stop.signal()));
    if (start.position.epoch > c.epochs && resuming)
        std::printf("nothing to train: the checkpoint is at the end of epoch %d and --epochs is %d "
                    "(give a larger --epochs to go on)\n", start.position.epoch - 1, c.epochs);
    if ((c.epochs == 0 || start.position.epoch > c.epochs) && cluster.leader())
        std::printf("test_acc %.4f\n", test_accuracy(*devices[0], data.test.count, capacity));

    // The trace is closed before the parameters are saved, and a failure
    // to close it ends the run only after they are.
    if (trace) writing([&] { trace->finish(); });
    if (!c.save_path.empty()) {
        std::vector<float> params(devices[0]->param_floats());
        devices[0]->read_params(params);
        save_params(c.save_path, params, c.model);
    }
    if (write_failed) std::rethrow_exception(write_failed);
    if (trace) say_traced(*trace);
    if (!c.save_path.empty()) std::printf("saved parameters to %s\n", c.save_path.c_str());
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) throw_stdout_lost(c, c.epochs);
    return result;
}

}  // namespace dpt
