// CPU devices: a replica in ordinary memory and a worker thread that runs its
// stream with the kernels of kernels/cpu/. Each worker computes with one core,
// so N CPU devices compare with one the way N GPUs compare with one.
//
// A device runs its part through forward and backward in chunks of at most
// `chunk_samples`: backward accumulates into the gradients, so the result is
// the same sum (in another order), while the activations of a chunk (conv1's
// output alone is 54 KiB a sample) stay in cache instead of streaming through
// memory. Measured on a 2-core EPYC, per 256 samples: 109 ms in one pass,
// 97 ms in chunks of 32 (chunks of 8 were slower again).
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cassert>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "cpu/kernels.hpp"
#include "cpu_stream.hpp"
#include "device.hpp"
#include "lenet.hpp"

namespace dpt {

const char* to_string(DeviceKind kind) { return kind == DeviceKind::cpu ? "cpu" : "cuda"; }

namespace {

constexpr int chunk_samples = 32;

class CpuDevice;

// The devices of one run. A device's worker reads its peers' marks and
// gradients, so no device may go while a peer still has work queued.
struct CpuGroup {
    std::vector<CpuDevice*> members;
};

class CpuDevice final : public Device {
   public:
    CpuDevice(int index, const ReplicaSetup& setup, std::shared_ptr<CpuGroup> group)
        : index_(index),
          setup_(setup),
          group_(std::move(group)),
          params_(lenet::param_count),
          grads_(lenet::param_count),
          staging_(index == 0 ? size_t(setup.devices - 1) * lenet::param_count : 0),
          chunk_(std::min(setup.capacity, chunk_samples)),
          input_(size_t(setup.capacity) * setup.train->pixels()),
          input_labels_(size_t(setup.capacity)),
          outputs_(size_t(setup.capacity) * lenet::classes),
          activation_memory_(lenet::activation_floats(chunk_, scratch_floats(chunk_))),
          act_(lenet::carve(activation_memory_.data(), chunk_, scratch_floats(chunk_))),
          eval_index_(setup.capacity),
          stream_([this](const Task& t) { run(t); }) {
        group_->members.push_back(this);
    }

    ~CpuDevice() override {
        // Drain every stream of the group, this one included, before this
        // device's memory goes: a peer's worker may be about to read it.
        for (CpuDevice* d : group_->members) d->stream_.synchronize();
        std::erase(group_->members, this);
    }

    DeviceKind kind() const override { return DeviceKind::cpu; }
    std::string name() const override { return "cpu:" + std::to_string(index_); }

    void synchronize() override {
        stream_.synchronize();
        if (error_) std::rethrow_exception(error_);
    }
    void write_params(std::span<const float> host) override { write(params_, host); }
    void read_params(std::span<float> host) override { read(host, params_); }
    void write_grads(std::span<const float> host) override { write(grads_, host); }
    void read_grads(std::span<float> host) override { read(host, grads_); }
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
        assert(logits.size() >= size_t(loaded_) * lenet::classes);
        std::copy_n(outputs_.begin(), size_t(loaded_) * lenet::classes, logits.begin());
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
        return std::exchange(phase_times_, PhaseTimes{});
    }
    void throttle(int steps) override {
        for (uint64_t done = updates_done_.load(); updates_queued_ - done > uint64_t(steps);
             done = updates_done_.load())
            updates_done_.wait(done);
    }

    void set_order(const uint32_t* order, size_t) override { enqueue({.op = Op::set_order, .ptr = order}); }
    void load_train(size_t first, int count) override {
        assert(count >= 0 && count <= setup_.capacity);
        enqueue({.op = Op::load_train, .first = first, .count = count});
    }
    void forward_backward() override { enqueue({.op = Op::forward_backward}); }
    void sgd_update(float scale) override {
        ++updates_queued_;
        enqueue({.op = Op::sgd_update, .scale = scale});
    }
    void check_gradients(int32_t step) override { enqueue({.op = Op::check_gradients, .count = step}); }
    void begin_phase(Phase phase) override { enqueue({.op = Op::begin_phase, .count = int(phase)}); }
    void evaluate_test(size_t first, int count) override {
        assert(count >= 0 && count <= setup_.capacity && first + count <= setup_.test->count);
        enqueue({.op = Op::evaluate_test, .first = first, .count = count});
    }

    void mark() override { enqueue({.op = Op::mark, .target = ++marks_queued_}); }
    void wait_for(Device& other) override {
        CpuDevice& peer = cpu_peer(other);
        enqueue({.op = Op::wait_for, .peer = &peer, .target = peer.marks_queued_});
    }
    void copy_grads_from(Device& peer, int slot) override {
        assert(slot >= 0 && size_t(slot + 1) * lenet::param_count <= staging_.size());
        enqueue({.op = Op::copy_grads_from, .count = slot, .peer = &cpu_peer(peer)});
    }
    void sum_staged_grads(int slots) override { enqueue({.op = Op::sum_staged_grads, .count = slots}); }
    void copy_grads_to(Device& peer) override { enqueue({.op = Op::copy_grads_to, .peer = &cpu_peer(peer)}); }

   private:
    enum class Op : uint8_t {
        set_order, load_train, forward_backward, sgd_update, check_gradients, evaluate_test, begin_phase,
        mark, wait_for, copy_grads_from, sum_staged_grads, copy_grads_to,
    };
    struct Task {
        Op op{};
        size_t first = 0;
        int count = 0;
        float scale = 0.0f;
        const uint32_t* ptr = nullptr;
        CpuDevice* peer = nullptr;
        uint64_t target = 0;
    };

    // The activations, pointed at samples [first, first + chunk_) of the
    // input, and the chunk's logits at their place among the part's.
    lenet::Activations chunk_of(int first) {
        lenet::Activations a = act_;
        a.x = input_.data() + size_t(first) * setup_.train->pixels();
        a.labels = input_labels_.data() + first;
        a.logits = outputs_.data() + size_t(first) * lenet::classes;
        return a;
    }

    static size_t scratch_floats(int capacity) { return lenet::scratch_floats<cpu::KernelSet>(capacity); }

    static CpuDevice& cpu_peer(Device& d) {
        assert(d.kind() == DeviceKind::cpu);
        return static_cast<CpuDevice&>(d);
    }

    void enqueue(const Task& t) { stream_.enqueue(t); }

    void write(std::vector<float>& dst, std::span<const float> host) {
        synchronize();
        assert(host.size() == dst.size());
        std::copy(host.begin(), host.end(), dst.begin());
    }
    void read(std::span<float> host, const std::vector<float>& src) {
        synchronize();
        assert(host.size() == src.size());
        std::copy(src.begin(), src.end(), host.begin());
    }

    // Runs on the worker thread.
    void run(const Task& t) {
        if (error_) return;  // a failed device only passes its marks on (below)
        try {
            execute(t);
        } catch (...) {
            error_ = std::current_exception();
            // Release every device that waits, or will wait, on this one.
            marks_done_.store(std::numeric_limits<uint64_t>::max());
            marks_done_.notify_all();
            updates_done_.store(std::numeric_limits<uint64_t>::max() / 2);  // and the host in throttle()
            updates_done_.notify_all();
        }
    }

    void execute(const Task& t) {
        const lenet::Params p = lenet::views(params_.data());
        switch (t.op) {
            case Op::set_order:
                order_ = t.ptr;
                break;
            case Op::load_train:
                cpu::gather_samples(input_.data(), input_labels_.data(), setup_.train->images.data(),
                                    setup_.train->labels.data(), order_ + t.first, t.count, setup_.train->pixels());
                loaded_ = t.count;
                break;
            case Op::forward_backward: {
                std::fill(grads_.begin(), grads_.end(), 0.0f);
                const lenet::Params g = lenet::views(grads_.data());
                for (int first = 0; first < loaded_; first += chunk_) {
                    const int n = std::min(chunk_, loaded_ - first);
                    lenet::Activations a = chunk_of(first);
                    lenet::forward(kernels_, a, p, setup_.pool, n);
                    loss_sum_ += cpu::softmax_cross_entropy(a.d_logits, a.logits, a.labels, n, lenet::classes);
                    lenet::backward(kernels_, a, p, g, setup_.pool, n);
                }
                break;
            }
            case Op::sgd_update:
                cpu::sgd_update(params_.data(), grads_.data(), t.scale, params_.size());
                updates_done_.fetch_add(1);
                updates_done_.notify_all();
                break;
            case Op::begin_phase: {
                const auto now = std::chrono::steady_clock::now();
                if (phase_ != Phase::idle)
                    phase_times_[size_t(phase_)] += std::chrono::duration<double>(now - phase_start_).count();
                phase_ = Phase(t.count);
                phase_start_ = now;
                break;
            }
            case Op::check_gradients:
                cpu::note_nonfinite(&first_bad_, grads_.data(), grads_.size(), t.count);
                break;
            case Op::evaluate_test: {
                for (int i = 0; i < t.count; ++i) eval_index_[i] = uint32_t(t.first + i);
                cpu::gather_samples(input_.data(), input_labels_.data(), setup_.test->images.data(),
                                    setup_.test->labels.data(), eval_index_.data(), t.count, setup_.test->pixels());
                for (int first = 0; first < t.count; first += chunk_) {
                    const int n = std::min(chunk_, t.count - first);
                    lenet::Activations a = chunk_of(first);
                    lenet::forward(kernels_, a, p, setup_.pool, n);
                    correct_ += cpu::count_correct(a.logits, a.labels, n, lenet::classes);
                }
                loaded_ = 0;  // the input buffer now holds test samples
                break;
            }
            case Op::mark:
                marks_done_.store(t.target);
                marks_done_.notify_all();
                break;
            case Op::wait_for:
                for (uint64_t seen = t.peer->marks_done_.load(); seen < t.target; seen = t.peer->marks_done_.load())
                    t.peer->marks_done_.wait(seen);
                break;
            case Op::copy_grads_from:
                std::copy(t.peer->grads_.begin(), t.peer->grads_.end(),
                          staging_.begin() + size_t(t.count) * lenet::param_count);
                break;
            case Op::sum_staged_grads:
                cpu::sum_into(grads_.data(), staging_.data(), t.count, grads_.size());
                break;
            case Op::copy_grads_to:
                std::copy(grads_.begin(), grads_.end(), t.peer->grads_.begin());
                break;
        }
    }

    const int index_;
    const ReplicaSetup setup_;
    std::shared_ptr<CpuGroup> group_;
    std::vector<float> params_, grads_;  // the replica: one flat buffer each
    std::vector<float> staging_;         // device 0: the peers' gradients during the allreduce
    const int chunk_;                    // samples per forward/backward pass
    std::vector<float> input_;           // the loaded part (capacity, 784), in [0, 1]
    std::vector<int32_t> input_labels_;  // (capacity)
    std::vector<float> outputs_;         // (capacity, 10): the logits of the last forward
    std::vector<float> activation_memory_;
    lenet::Activations act_;             // for chunk_ samples; x and labels set per chunk
    cpu::KernelSet kernels_;
    std::vector<uint32_t> eval_index_;  // 0, 1, 2, ... for gathering test samples in order

    // Touched only by the worker thread; the host reads them after synchronize().
    const uint32_t* order_ = nullptr;
    int loaded_ = 0;
    double loss_sum_ = 0.0;
    int64_t correct_ = 0;
    static constexpr int32_t no_bad_step = std::numeric_limits<int32_t>::max();
    int32_t first_bad_ = no_bad_step;
    Phase phase_ = Phase::idle;  // --breakdown: the phase since phase_start_
    std::chrono::steady_clock::time_point phase_start_;
    PhaseTimes phase_times_{};
    std::exception_ptr error_;

    uint64_t marks_queued_ = 0;             // host side
    std::atomic<uint64_t> marks_done_{0};   // worker side, read by peers' workers
    uint64_t updates_queued_ = 0;            // host side, for throttle()
    std::atomic<uint64_t> updates_done_{0};  // worker side, read by the host in throttle()

    CpuStream<Task> stream_;  // last: the worker starts after the members above exist
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
std::vector<std::unique_ptr<Device>> make_cpu_devices(int count, const ReplicaSetup& setup) {
    std::vector<std::unique_ptr<Device>> devices;
    const auto group = std::make_shared<CpuGroup>();
    try {
        for (int i = 0; i < count; ++i) devices.push_back(std::make_unique<CpuDevice>(i, setup, group));
    } catch (const std::bad_alloc&) {
        const int chunk = std::min(setup.capacity, chunk_samples);
        const double mb = 1e6 / sizeof(float);
        const double input = double(setup.capacity) * (setup.train->pixels() + 1) / mb;
        const double replica = 2.0 * lenet::param_count / mb;
        const double activations =
            double(lenet::activation_floats(chunk, lenet::scratch_floats<cpu::KernelSet>(chunk))) / mb;
        char message[400];
        std::snprintf(message, sizeof message,
                      "out of memory creating CPU device %zu of %d: each needs %.1f MB (input for %d samples "
                      "%.1f MB, parameters and gradients %.1f MB, activations %.1f MB) and device 0 %.1f MB more "
                      "for the allreduce; lower --batch or --cpus",
                      devices.size(), count, input + replica + activations, setup.capacity, input, replica,
                      activations, (count - 1) * replica / 2);
        throw std::runtime_error(message);
    }
    return devices;
}

}  // namespace dpt
