// CPU devices: a replica in ordinary memory and a worker thread that runs its
// stream with the kernels of kernels/cpu/. Each worker computes with one core,
// so N CPU devices compare with one the way N GPUs compare with one.
//
// A device runs its part through forward and backward in chunks of at most
// `cpu_chunk_samples`: backward accumulates into the gradients, so the result is
// the same sum (in another order), while the activations of a chunk (conv1's
// output alone is 55.3 KB a sample) stay in cache instead of streaming through
// memory. Measured on a 2-core EPYC, per 256 samples: 109 ms in one pass,
// 97 ms in chunks of 32 (chunks of 8 were slower again).
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cassert>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cpu/kernels.hpp"
#include "devices/cpu_stream.hpp"
#include "devices/device.hpp"
#include "devices/pages.hpp"

namespace dpt {

namespace {

class CpuDevice;

// Samples per forward/backward pass. Batch norm's statistics are the whole
// part's: one pass.
int chunk_samples(const ReplicaSetup& setup) {
    return setup.model->batch_norms() > 0 ? setup.capacity : std::min(setup.capacity, cpu_chunk_samples);
}

// The devices of one run. A device's worker reads its peers' marks and
// gradients, so no device may go while a peer still has work queued.
struct CpuGroup {
    std::vector<CpuDevice*> members;
};

class CpuDevice final : public Device {
    struct Timeline;  // a stream's phases (below)

   public:
    CpuDevice(int index, const ReplicaSetup& setup, size_t staging_floats, std::shared_ptr<CpuGroup> group,
              std::shared_ptr<SharedHostMemory> shared)
        : index_(index),
          setup_(setup),
          group_(std::move(group)),
          shared_(std::move(shared)),
          model_(*setup.model),
          sync_ranges_(model_.sync_ranges(setup.bn)),
          params_(model_.param_count()),
          own_grads_(shared_ ? 0 : setup.grad_floats()),
          grads_(shared_ ? static_cast<float*>(shared_->allocate(setup.grad_floats() * sizeof(float)))
                         : own_grads_.data(),
                 setup.grad_floats()),
          staging_(staging_floats),
          chunk_(chunk_samples(setup)),
          input_(size_t(setup.capacity) * setup.train->pixels()),
          input_labels_(size_t(setup.capacity)),
          outputs_(size_t(setup.capacity) * model_.classes()),
          activation_memory_(model_.activation_floats(chunk_, scratch_floats(chunk_))),
          act_(model_.carve(activation_memory_.data(), chunk_, scratch_floats(chunk_))),
          eval_index_(setup.capacity),
          marks_done_(shared_ ? new (shared_->allocate(sizeof(std::atomic<uint64_t>))) std::atomic<uint64_t>(0)
                              : &own_marks_done_),
          stream_([this](const CpuTask& task) { run(task); }) {
        if (!setup_.buckets.empty())
            allreduce_stream_ = std::make_unique<CpuStream<CpuTask>>([this](const CpuTask& task) { run(task); });
        group_->members.push_back(this);
    }

    ~CpuDevice() override {
        // Drain every stream of the group, this one included, before this
        // device's memory goes: a peer's worker may be about to read it.
        for (CpuDevice* d : group_->members) d->drain();
        std::erase(group_->members, this);
    }

    DeviceKind kind() const override { return DeviceKind::cpu; }
    Capabilities capabilities() const override { return {.records_graphs = false, .host_paced = true}; }
    std::string name() const override { return "cpu:" + std::to_string(index_); }
    size_t param_floats() const override { return params_.size(); }

    void synchronize() override {
        drain();
        if (failed_) std::rethrow_exception(error_);
    }
    void write_params(std::span<const float> host) override { write(params_, host); }
    void read_params(std::span<float> host) override { read(host, params_); }
    void write_grads(std::span<const float> host) override { write(grads_, host); }
    void read_grads(std::span<float> host) override { read(host, grads_); }
    float* host_grads() override { return grads_.data(); }
    HostMarks host_marks() override { return {marks_done_, marks_queued_}; }
    int read_input(std::span<float> images, std::span<int32_t> labels) override {
        synchronize();
        const size_t pixels = setup_.train->pixels();
        assert(images.size() >= loaded_ * pixels && labels.size() >= size_t(loaded_));
        std::copy_n(input_.begin(), loaded_ * pixels, images.begin());
        std::copy_n(input_labels_.begin(), loaded_, labels.begin());
        return loaded_;
    }
    int read_outputs(std::span<float> logits) override {
        synchronize();
        assert(logits.size() >= size_t(loaded_) * model_.classes());
        std::copy_n(outputs_.begin(), size_t(loaded_) * model_.classes(), logits.begin());
        return loaded_;
    }
    double take_loss_sum() override {
        synchronize();
        return std::exchange(loss_sum_, 0.0);
    }
    int64_t take_correct() override {
        synchronize();
        return std::exchange(correct_, 0);
    }
    int32_t take_first_bad_step() override {
        synchronize();
        const int32_t step = std::exchange(first_bad_, no_bad_step);
        return step == no_bad_step ? -1 : step;
    }
    PhaseTimes take_phase_times() override {
        synchronize();
        PhaseTimes sum{};
        for (Timeline& t : timelines_)
            for (int p = 0; p < phase_count; ++p) sum[size_t(p)] += std::exchange(t.times[size_t(p)], 0.0);
        return sum;
    }
    double take_core_share() override {
        synchronize();
        const double cpu = std::exchange(compute_cpu_s_, 0.0), wall = std::exchange(compute_wall_s_, 0.0);
        return wall > 0 ? cpu / wall : -1.0;
    }
    bool slow_down(int factor) override {
        synchronize();
        slowdown_ = factor;
        return true;
    }
    void throttle(int steps) override {
        // (done + steps, not queued - done: a failed device's count jumps past
        // the queued one, to release this wait.)
        for (uint64_t done = updates_done_.load(); done + uint64_t(steps) < updates_queued_;
             done = updates_done_.load())
            updates_done_.wait(done);
    }

    // --- Queued: each primitive is the closure its worker runs. ---

    void set_order(const uint32_t* order, size_t) override {
        stream_.enqueue([this, order] { order_ = order; });
    }
    void load_train(size_t first, int count) override {
        assert(count >= 0 && count <= setup_.capacity);
        stream_.enqueue([this, first, count] {
            cpu::gather_samples(input_.data(), input_labels_.data(), setup_.train->images.data(),
                                setup_.train->labels.data(), order_ + first, count, setup_.train->pixels());
            loaded_ = count;
        });
    }
    // With buckets, a bucket is handed over during the last chunk's
    // backward, when its gradients have their final sums. A staged pass
    // (--bn sync) clears the gradients in its first stage; --slowdown
    // repeats only passes of one stage (the CLI refuses it with --bn sync).
    void forward_backward(int stage, int batch) override {
        stream_.enqueue([this, stage, batch] {
            const double cpu_start = thread_cpu_seconds();
            const auto wall_start = std::chrono::steady_clock::now();
            const TrainPass pass{setup_.pool, setup_.bn, batch};
            const bool last_stage = size_t(stage) == sync_ranges_.size();
            size_t handed = 0;  // buckets handed over this step
            const auto hand_over = [&](size_t complete_from) {  // grads_[complete_from:] are final
                const std::vector<Range>& buckets = setup_.buckets;
                for (; handed < buckets.size() && buckets[handed].first >= complete_from; ++handed) {
                    buckets_handed_.fetch_add(1);
                    buckets_handed_.notify_all();
                }
            };
            // Traced, each chunk's forward (to the loss) and backward are spans of their own.
            Timeline& timeline = timelines_[0];
            const auto enter = [&](Phase phase) {
                if (timeline.traced && timeline.phase != phase) switch_phase(timeline, phase, trace_origin_, false);
            };
            if (stage == 0) past_loss_ = false;  // a stage after the one that reached the loss (--bn sync) is backward's
            const int repeats = sync_ranges_.empty() ? slowdown_ : 1;
            for (int repeat = 1; repeat <= repeats; ++repeat) {  // --slowdown: the same sums again
                double discarded = 0;
                double& loss = repeat == repeats ? loss_sum_ : discarded;  // the loss counts once
                if (stage == 0) std::fill(grads_.begin(), grads_.end(), 0.0f);
                for (int first = 0; first < loaded_; first += chunk_) {
                    const int n = std::min(chunk_, loaded_ - first);
                    const Chunk c = chunk_of(first);
                    const bool last = repeat == repeats && last_stage && first + n == loaded_;
                    enter(stage > 0 && past_loss_ ? Phase::backward : Phase::compute);
                    model_.train(
                        kernels_, act_, params_.data(), grads_.data(), pass, n, c.x, c.logits, stage,
                        [&](const LastDense*) {
                            loss += cpu::softmax_cross_entropy(act_.d_logits(), c.logits, c.labels, n, model_.classes());
                            past_loss_ = true;
                            enter(Phase::backward);
                        },
                        [&](size_t from) { if (last) hand_over(from); });
                }
            }
            if (last_stage) hand_over(0);  // whatever is left (all of it, for an empty part)
            compute_cpu_s_ += thread_cpu_seconds() - cpu_start;
            compute_wall_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
        });
    }
    void sgd_update(float scale, int batch) override {
        ++updates_queued_;
        stream_.enqueue([this, scale, batch] {
            cpu::sgd_update(params_.data(), grads_.data(), scale, model_.trained_count());
            model_.update_running(kernels_, params_.data(), grads_.data(), batch);
            updates_done_.fetch_add(1);
            updates_done_.notify_all();
        });
    }
    void check_gradients(int32_t step) override {
        stream_.enqueue([this, step] { cpu::note_nonfinite(&first_bad_, grads_.data(), grads_.size(), step); });
    }
    void evaluate_test(size_t first, int count) override {
        assert(count >= 0 && count <= setup_.capacity && first + count <= setup_.test->count);
        stream_.enqueue([this, first, count] {
            for (int i = 0; i < count; ++i) eval_index_[i] = uint32_t(first + i);
            cpu::gather_samples(input_.data(), input_labels_.data(), setup_.test->images.data(),
                                setup_.test->labels.data(), eval_index_.data(), count, setup_.test->pixels());
            for (int at = 0; at < count; at += chunk_) {
                const int n = std::min(chunk_, count - at);
                const Chunk c = chunk_of(at);
                model_.evaluate(kernels_, act_, params_.data(), setup_.pool, n, c.x, c.logits);
                correct_ += cpu::count_correct(c.logits, c.labels, n, model_.classes());
            }
            loaded_ = 0;  // the input buffer now holds test samples
        });
    }
    // Each stream keeps its own timeline.
    // With --trace each stream's timeline also keeps its spans. The idle
    // mark (an epoch's end) ends both streams' phases.
    void begin_phase(Phase phase) override {
        if (phase == Phase::idle && allreduce_stream_) phase_mark(phase, true);
        phase_mark(phase, allreduce_stream_ && on_allreduce_stream(phase));
    }
    void phase_mark(Phase phase, bool second) {
        Timeline* timeline = &timelines_[second ? 1 : 0];
        (second ? *allreduce_stream_ : stream_).enqueue([timeline, phase, origin = trace_origin_, second] {
            switch_phase(*timeline, phase, origin, second);
        });
    }
    // On the timeline's own stream: its phase ends now and `phase` begins.
    static void switch_phase(Timeline& timeline, Phase phase, std::chrono::steady_clock::time_point origin,
                             bool second) {
        const auto now = std::chrono::steady_clock::now();
        if (timeline.phase != Phase::idle) {
            timeline.times[size_t(timed_as(timeline.phase))] += std::chrono::duration<double>(now - timeline.start).count();
            if (timeline.traced)
                timeline.spans.push_back({timeline.phase, uint8_t(second ? 1 : 0),
                                          std::chrono::duration<double>(timeline.start - origin).count(),
                                          std::chrono::duration<double>(now - origin).count()});
        }
        timeline.phase = phase;
        timeline.start = now;
    }
    void trace_phases(std::chrono::steady_clock::time_point origin) override {
        synchronize();
        trace_origin_ = origin;
        for (Timeline& t : timelines_) t.traced = true;
    }
    std::vector<PhaseSpan> take_phase_spans() override {
        synchronize();
        std::vector<PhaseSpan> spans;
        for (Timeline& t : timelines_) {
            spans.insert(spans.end(), t.spans.begin(), t.spans.end());
            t.spans.clear();  // (keeps its capacity: the next epoch's spans fit without allocating)
        }
        return spans;
    }

    void await_bucket() override {
        assert(allreduce_stream_);
        allreduce_stream_->enqueue([handed = &buckets_handed_, target = ++buckets_awaited_] { wait_until(*handed, target); });
    }
    void await_allreduce() override {
        assert(allreduce_stream_);
        join(*allreduce_stream_, stream_, allreduce_done_, allreduce_joins_);
    }
    void await_main() override {
        assert(allreduce_stream_);
        join(stream_, *allreduce_stream_, main_done_, main_joins_);
    }

    void mark() override {
        allreduce_stream().enqueue([passed = marks_done_, target = ++marks_queued_] {
            passed->store(target);
            passed->notify_all();
        });
    }
    // As reach() says (device.hpp): a CPU peer counts its marks as this
    // device does; a peer of another kind counts them in shared host memory
    // (a GPU replica from a host function on its stream), and is watched
    // for its failure while this device waits.
    void wait_for(Device& other) override {
        const Reach how = reach(*this, other, false);
        if (how == Reach::none) throw std::logic_error(name() + " cannot wait for " + other.name() + " outside a mixed run");
        const HostMarks marks = other.host_marks();
        if (how == Reach::own_kind) {
            allreduce_stream().enqueue([passed = marks.passed, target = marks.queued] { wait_until(*passed, target); });
            return;
        }
        allreduce_stream().enqueue([passed = marks.passed, target = marks.queued, peer = &other, self = this] {
            wait_watching(*passed, target, *peer, *self);
        });
    }
    void copy_from_peer(Device& other, size_t first, size_t count, size_t staged) override {
        assert(first + count <= grads_.size() && staged + count <= staging_.size());
        const float* from = peer_grads(other);
        allreduce_stream().enqueue([this, from, first, count, staged] {
            std::copy_n(from + first, count, staging_.begin() + ptrdiff_t(staged));
        });
    }
    void reduce_staged(size_t first, size_t count, size_t staged, int slots) override {
        assert(first + count <= grads_.size() && staged + size_t(slots) * count <= staging_.size());
        allreduce_stream().enqueue([this, first, count, staged, slots] {
            cpu::sum_into(grads_.data() + first, staging_.data() + staged, slots, count);
        });
    }
    void copy_to_peer(Device& other, size_t first, size_t count) override {
        assert(first + count <= grads_.size());
        float* to = peer_grads(other);
        allreduce_stream().enqueue([this, to, first, count] {
            std::copy_n(grads_.begin() + ptrdiff_t(first), count, to + first);
        });
    }

    void sum_across(ProcessSum& sum, Range range) override {
        assert(range.end() <= grads_.size());
        allreduce_stream().enqueue([to = &sum, grads = grads_.data(), range] { to->sum(grads + range.first, range.count); });
    }

   private:
    // Samples [first, first + chunk_) of the loaded input, and the chunk's
    // logits at their place among the part's.
    struct Chunk {
        const float* x;
        const int32_t* labels;
        float* logits;
    };
    Chunk chunk_of(int first) {
        return {input_.data() + size_t(first) * setup_.train->pixels(), input_labels_.data() + first,
                outputs_.data() + size_t(first) * model_.classes()};
    }

    size_t scratch_floats(int capacity) const { return model_.scratch_floats<cpu::KernelSet>(capacity, setup_.math); }

    CpuStream<CpuTask>& allreduce_stream() { return allreduce_stream_ ? *allreduce_stream_ : stream_; }
    // Waits for every task queued on either stream.
    void drain() {
        stream_.synchronize();
        if (allreduce_stream_) allreduce_stream_->synchronize();
    }
    // `waiter` waits for everything queued so far on `signaller`: the joins
    // counted (host side) in `joins`, passed (worker side) in `done`.
    static void join(CpuStream<CpuTask>& signaller, CpuStream<CpuTask>& waiter, std::atomic<uint64_t>& done,
                     uint64_t& joins) {
        const uint64_t target = ++joins;
        signaller.enqueue([&done, target] {
            done.store(target);
            done.notify_all();
        });
        waiter.enqueue([&done, target] { wait_until(done, target); });
    }
    // Blocks the calling worker until `count` reaches `target`.
    static void wait_until(const std::atomic<uint64_t>& count, uint64_t target) {
        for (uint64_t seen = count.load(); seen < target; seen = count.load()) count.wait(seen);
    }
    // Blocks the calling worker until a GPU's mark count reaches `target`, or
    // fails (this device with it, which releases whoever waits on this one)
    // when the GPU has. A GPU's failure is a state to ask for, not an event
    // to wait on: after a short spin, the worker asks every 200 us. (A mixed
    // run's CPU device spends milliseconds a step; this adds at most 0.2.)
    static void wait_watching(const std::atomic<uint64_t>& count, uint64_t target, Device& peer, const Device& self) {
        for (int polls = 0; count.load() < target; ++polls) {
            if (polls < 64) {
                std::this_thread::yield();
                continue;
            }
            if (std::string why = peer.failure(); !why.empty())
                throw std::runtime_error(self.name() + " stopped: " + peer.name() + ", whose gradients it waited for, failed: " + why);
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
    }
    // CPU time of the calling thread (the worker, when called from a task).
    static double thread_cpu_seconds() {
        timespec t{};
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
        return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
    }

    // A peer's gradients, as reach() says (device.hpp): a CPU peer's are in
    // memory like this device's; another kind's only where they are in host
    // memory. A GPU's are not: in a mixed run the GPUs come first and make
    // every copy between kinds.
    float* peer_grads(Device& peer) {
        if (reach(*this, peer, true) == Reach::none)
            throw std::logic_error(name() + " cannot copy " + peer.name() +
                                   "'s gradients: they are not in host memory, so the copy is " + peer.name() +
                                   "'s to make (an allreduce algorithm that asks otherwise does not support mixed runs)");
        return peer.host_grads();
    }

    void write(std::span<float> dst, std::span<const float> host) {
        synchronize();
        assert(host.size() == dst.size());
        std::copy(host.begin(), host.end(), dst.begin());
    }
    void read(std::span<float> host, std::span<const float> src) {
        synchronize();
        assert(host.size() == src.size());
        std::copy(src.begin(), src.end(), host.begin());
    }

    // Runs on a worker thread (either stream's).
    void run(const CpuTask& task) {
        if (failed_) return;  // a failed device only passes its marks on (below)
        try {
            task();
        } catch (...) {
            std::lock_guard lock(error_mutex_);
            if (failed_) return;
            error_ = std::current_exception();
            failed_ = true;
            // Release every device and stream that waits, or will wait, on this one.
            for (std::atomic<uint64_t>* count : {marks_done_, &buckets_handed_, &allreduce_done_, &main_done_}) {
                count->store(std::numeric_limits<uint64_t>::max());
                count->notify_all();
            }
            updates_done_.store(std::numeric_limits<uint64_t>::max() / 2);  // and the host in throttle()
            updates_done_.notify_all();
        }
    }

    const int index_;
    const ReplicaSetup setup_;
    std::shared_ptr<CpuGroup> group_;
    std::shared_ptr<SharedHostMemory> shared_;  // a mixed run's: holds grads_ and *marks_done_
    const Model& model_;
    const std::vector<Range> sync_ranges_;  // --bn sync: between the stages of forward_backward()
    std::vector<float> params_;          // the replica: one flat buffer each, parameters
    std::vector<float> own_grads_;       // and gradients, here or in shared_
    std::span<float> grads_;
    std::vector<float> staging_;         // what the allreduce algorithm asked this device to keep
    const int chunk_;                    // samples per forward/backward pass
    std::vector<float> input_;           // the loaded part (capacity, 784), in [0, 1]
    std::vector<int32_t> input_labels_;  // (capacity)
    std::vector<float> outputs_;         // (capacity, 10): the logits of the last forward
    PageFloats activation_memory_;       // activations and the kernels' scratch (pages.hpp)
    Activations act_;                    // for chunk_ samples; input, labels and logits are per chunk (chunk_of)
    cpu::KernelSet kernels_{setup_.math};
    std::vector<uint32_t> eval_index_;  // 0, 1, 2, ... for gathering test samples in order

    // Touched only by the worker thread; the host reads them after synchronize().
    const uint32_t* order_ = nullptr;
    int loaded_ = 0;
    double loss_sum_ = 0.0;
    int64_t correct_ = 0;
    static constexpr int32_t no_bad_step = std::numeric_limits<int32_t>::max();
    int32_t first_bad_ = no_bad_step;
    struct Timeline {  // --breakdown: a stream's phase since `start`, and the times so far
        Phase phase = Phase::idle;
        std::chrono::steady_clock::time_point start;
        PhaseTimes times{};
        bool traced = false;            // --trace: also keep each span
        std::vector<PhaseSpan> spans;   // since the last take
    };
    std::array<Timeline, 2> timelines_;  // the main stream's; the allreduce stream's (with buckets)
    bool past_loss_ = false;  // on the stream: this step's forward has reached the loss
    std::chrono::steady_clock::time_point trace_origin_;
    int slowdown_ = 1;  // --slowdown: forward+backward runs this many times
    double compute_cpu_s_ = 0, compute_wall_s_ = 0;  // forward+backward: the worker's CPU time, and wall time
    std::mutex error_mutex_;
    std::exception_ptr error_;     // the first task that failed, on either stream
    std::atomic<bool> failed_{false};

    uint64_t marks_queued_ = 0;             // host side
    std::atomic<uint64_t> own_marks_done_{0};
    std::atomic<uint64_t>* marks_done_;     // worker side, read by peers (own_marks_done_ or in shared_)
    uint64_t updates_queued_ = 0;            // host side, for throttle()
    std::atomic<uint64_t> updates_done_{0};  // worker side, read by the host in throttle()
    // With buckets (--overlap): counted by the main worker / the allreduce worker.
    uint64_t buckets_awaited_ = 0, allreduce_joins_ = 0, main_joins_ = 0;  // host side
    std::atomic<uint64_t> buckets_handed_{0}, allreduce_done_{0}, main_done_{0};

    CpuStream<CpuTask> stream_;  // last: the workers start after the members above exist
    std::unique_ptr<CpuStream<CpuTask>> allreduce_stream_;  // with buckets; joined first
};

}  // namespace

int usable_cores() {
    cpu_set_t set;
    CPU_ZERO(&set);
    return sched_getaffinity(0, sizeof set, &set) == 0 ? std::max(1, CPU_COUNT(&set)) : 1;
}

// Workers are not pinned to cores: two dptrain runs side by side (as in a
// class comparing 1 and 2 devices) would then pin onto the same cores.
// A failed allocation is reported with the sizes asked for.
std::vector<std::unique_ptr<Device>> make_cpu_devices(const ReplicaSetup& setup,
                                                      std::span<const size_t> staging_floats,
                                                      std::shared_ptr<SharedHostMemory> shared) {
    std::vector<std::unique_ptr<Device>> devices;
    const auto group = std::make_shared<CpuGroup>();
    const int count = int(staging_floats.size());
    try {
        for (int i = 0; i < count; ++i)
            devices.push_back(std::make_unique<CpuDevice>(i, setup, staging_floats[size_t(i)], group, shared));
    } catch (const std::bad_alloc&) {
        const Model& model = *setup.model;
        const int chunk = chunk_samples(setup);
        const double mb = 1e6 / sizeof(float);
        const double input = double(setup.capacity) * (setup.train->pixels() + 1) / mb;
        const double replica = 2.0 * double(model.param_count()) / mb;
        const double activations =
            double(model.activation_floats(chunk, model.scratch_floats<cpu::KernelSet>(chunk, setup.math))) / mb;
        char message[400];
        std::snprintf(message, sizeof message,
                      "out of memory creating CPU device %zu of %d: each needs %.1f MB (input for %d samples "
                      "%.1f MB, parameters and gradients %.1f MB, activations %.1f MB) and device 0 %.1f MB more "
                      "for the allreduce; lower --batch or --cpus",
                      devices.size(), count, input + replica + activations, setup.capacity, input, replica,
                      activations, double(staging_floats[0]) / mb);
        throw std::runtime_error(message);
    }
    return devices;
}

}  // namespace dpt
