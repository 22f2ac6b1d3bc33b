// GPU devices: a replica in the memory of one CUDA GPU, and a CUDA stream on
// which all of its work is queued with the launchers of kernels/cuda/. The
// CPU twin is cpu_device.cpp; both implement device.hpp, so parallel.cpp
// drives either without knowing which. CUDA graphs of their work are in
// gpu_graph.cpp; what `dptrain devices` reports of the GPUs in gpu_info.cpp.
//
// What makes this fast, and what it teaches:
//  - The data set is uploaded once per physical GPU (replicas on the same GPU
//    share it); split_and_load is then a gather kernel that reads the epoch's
//    sample order from device memory. No batch ever crosses PCIe.
//  - Nothing here waits for the GPU except the synchronous calls of Device
//    (read_params, take_loss_sum, ...), which the trainer makes once an epoch.
//  - Devices order their work among themselves with CUDA events; the
//    allreduce's copies are cudaMemcpyPeerAsync, direct over NVLink or PCIe
//    where peer access is enabled, through host memory where it is not.
//  - Several replicas may share one GPU, each with its own memory and stream,
//    so the multi-GPU code path runs (and is tested) on a 1-GPU machine.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <deque>
#include <new>
#include <string>
#include <cassert>
#include <cstdio>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include "cuda/check.hpp"
#include "errors.hpp"
#include "cuda/kernels.hpp"
#include "gpu.hpp"
#include "gpu_internal.hpp"

namespace dpt {

using gpu_internal::enable_peer_access;

namespace {

class GpuDevice;
GpuDevice& as_gpu(Device& d);

// The oldest GPUs this build has machine code for (kernels/cuda/meson.build: sm_75 and up).
constexpr int min_compute_capability = 75;

// Device memory with the sizes in the message when it cannot be had.
template <class T>
T* device_alloc(size_t count, int gpu, const char* what) {
    void* p = nullptr;
    const size_t bytes = count * sizeof(T);
    const cudaError_t status = cudaMalloc(&p, bytes ? bytes : 1);
    if (status != cudaSuccess) {
        size_t free_bytes = 0, total = 0;
        cudaGetLastError();
        cudaMemGetInfo(&free_bytes, &total);
        char message[256];
        std::snprintf(message, sizeof message, "cannot allocate %.1f MB on GPU %d for %s (%.1f MB free of %.1f MB): %s",
                      double(bytes) / 1e6, gpu, what, double(free_bytes) / 1e6, double(total) / 1e6,
                      cudaGetErrorString(status));
        throw cuda::CudaError(status, message);
    }
    return static_cast<T*>(p);
}

void device_free(void* p) {
    if (p) cudaFree(p);  // in destructors: an error here has nowhere to go
}

// Copies and fills that are complete when they return, queued on `stream`
// and waited for. Never cudaMemcpy / cudaMemset: they run on the legacy
// default stream, which does not order against the replicas' non-blocking
// streams, and a host-to-device cudaMemcpy from pageable memory may return
// before its DMA has landed, so a kernel queued next on a replica's stream
// could read a half-written buffer.
void copy_now(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
}
void fill_now(void* dst, int byte, size_t bytes, cudaStream_t stream) {
    CUDA_CHECK(cudaMemsetAsync(dst, byte, bytes, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
}

// The data set on one physical GPU, shared by the replicas there. It is
// uploaded on a stream of its own, and complete before any replica exists.
struct GpuData {
    int gpu;
    uint8_t *train_images = nullptr, *train_labels = nullptr, *test_images = nullptr, *test_labels = nullptr;
    uint32_t* test_index = nullptr;  // 0, 1, 2, ...: test samples are gathered in order
    cudaStream_t upload_stream = nullptr;

    GpuData(int gpu_index, const Dataset& train, const Dataset& test) : gpu(gpu_index) {
        CUDA_CHECK(cudaSetDevice(gpu));
        CUDA_CHECK(cudaStreamCreateWithFlags(&upload_stream, cudaStreamNonBlocking));
        train_images = upload(train.images, "the training images");
        train_labels = upload(train.labels, "the training labels");
        test_images = upload(test.images, "the test images");
        test_labels = upload(test.labels, "the test labels");
        std::vector<uint32_t> index(test.count);
        for (size_t i = 0; i < index.size(); ++i) index[i] = uint32_t(i);
        test_index = upload(index, "the test sample index");
    }
    ~GpuData() {
        cudaSetDevice(gpu);
        for (void* p : {(void*)train_images, (void*)train_labels, (void*)test_images, (void*)test_labels,
                        (void*)test_index})
            device_free(p);
        if (upload_stream) cudaStreamDestroy(upload_stream);
    }
    GpuData(const GpuData&) = delete;
    GpuData& operator=(const GpuData&) = delete;

    template <class T>
    T* upload(const std::vector<T>& host, const char* what) {
        T* p = device_alloc<T>(host.size(), gpu, what);
        copy_now(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice, upload_stream);
        return p;
    }
};

class GpuDevice final : public Device {
   public:
    GpuDevice(std::string name, int gpu, std::shared_ptr<GpuData> data, const ReplicaSetup& setup,
              size_t staging_floats, std::shared_ptr<SharedHostMemory> shared)
        : name_(std::move(name)),
          gpu_(gpu),
          setup_(setup),
          staging_floats_(staging_floats),
          data_(std::move(data)),
          shared_(std::move(shared)) {
        if (shared_) marks_passed_ = new (shared_->allocate(sizeof(std::atomic<uint64_t>))) std::atomic<uint64_t>(0);
        CUDA_CHECK(cudaSetDevice(gpu_));
        CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
        CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
        if (!setup_.buckets.empty()) {  // --overlap: the allreduce's own stream, and the hand-overs to it
            CUDA_CHECK(cudaStreamCreateWithFlags(&allreduce_stream_, cudaStreamNonBlocking));
            CUDA_CHECK(cudaEventCreateWithFlags(&allreduce_done_, cudaEventDisableTiming));
            CUDA_CHECK(cudaEventCreateWithFlags(&main_done_, cudaEventDisableTiming));
            bucket_events_.resize(setup_.buckets.size());
            for (cudaEvent_t& e : bucket_events_) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        }
        timelines_[0].stream = stream_;
        timelines_[1].stream = allreduce_stream();
        kernels_.stream = stream_;
        kernels_.math = setup_.math;
        const size_t p = model_.param_count();
        params_ = device_alloc<float>(p, gpu_, "parameters");
        grads_ = device_alloc<float>(grad_floats_, gpu_, "gradients");
        if (staging_floats_ > 0)
            staging_ = device_alloc<float>(staging_floats_, gpu_, "the allreduce's staging memory");
        const size_t scratch = model_.scratch_floats<cuda::KernelSet>(setup.capacity, setup.math);
        activations_ = device_alloc<float>(model_.activation_floats(setup.capacity, scratch), gpu_,
                                           "activations (lower --batch, or use more devices)");
        act_ = model_.carve(activations_, setup.capacity, scratch);
        order_ = device_alloc<uint32_t>(setup.train->count, gpu_, "the epoch's sample order");
        loss_sum_ = device_alloc<double>(1, gpu_, "the loss sum");
        correct_ = device_alloc<unsigned long long>(1, gpu_, "the accuracy count");
        first_bad_ = device_alloc<int32_t>(1, gpu_, "the divergence watch");
        tickets_ = device_alloc<unsigned>(cuda::workspace_tickets, gpu_, "the split products' tickets");
        kernels_.tickets = tickets_;
        if (setup_.across_processes) {
            CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_grads_), grad_floats_ * sizeof(float)));
        }
        reset_first_bad();
        fill_now(grads_, 0, grad_floats_ * sizeof(float), stream_);
        fill_now(loss_sum_, 0, sizeof(double), stream_);
        fill_now(correct_, 0, sizeof(unsigned long long), stream_);
        fill_now(tickets_, 0, cuda::workspace_tickets * sizeof(unsigned), stream_);
    }

    ~GpuDevice() override {
        // A peer's stream may still copy from or into this replica's memory:
        // let every GPU finish before any of it goes.
        int gpus = 0;
        cudaGetDeviceCount(&gpus);
        for (int g = 0; g < gpus; ++g)
            if (cudaSetDevice(g) == cudaSuccess) cudaDeviceSynchronize();
        cudaSetDevice(gpu_);
        for (void* p : {(void*)params_, (void*)grads_, (void*)staging_, (void*)activations_, (void*)order_,
                        (void*)loss_sum_, (void*)correct_, (void*)first_bad_, (void*)tickets_})
            device_free(p);
        cudaEventDestroy(event_);
        for (Timeline& t : timelines_)
            for (cudaEvent_t e : t.events) cudaEventDestroy(e);
        for (cudaEvent_t e : bucket_events_) cudaEventDestroy(e);
        if (host_grads_) cudaFreeHost(host_grads_);
        if (allreduce_done_) cudaEventDestroy(allreduce_done_);
        if (main_done_) cudaEventDestroy(main_done_);
        if (allreduce_stream_) cudaStreamDestroy(allreduce_stream_);
        cudaStreamDestroy(stream_);
    }

    DeviceKind kind() const override { return DeviceKind::gpu; }
    std::string name() const override { return name_; }
    size_t param_floats() const override { return model_.param_count(); }
    size_t allreduced_floats() const override { return model_.allreduced_floats(setup_.bn); }
    std::span<const Range> sync_ranges() const override { return sync_ranges_; }
    int gpu() const { return gpu_; }
    cudaStream_t stream() const { return stream_; }
    // The stream the allreduce's pieces are queued on (device.hpp).
    cudaStream_t allreduce_stream() const { return allreduce_stream_ ? allreduce_stream_ : stream_; }
    float* grads() const { return grads_; }

    void synchronize() override {
        flush_check();
        use();
        if (allreduce_stream_) CUDA_CHECK(cudaStreamSynchronize(allreduce_stream_));
        CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    void write_params(std::span<const float> host) override { write(params_, host); }
    void read_params(std::span<float> host) override { read(host, params_); }
    void write_grads(std::span<const float> host) override { write(grads_, host); }
    void read_grads(std::span<float> host) override { read(host, grads_); }
    int read_input(std::span<float> images, std::span<int32_t> labels) override {
        synchronize();
        const size_t pixels = setup_.train->pixels();
        assert(images.size() >= size_t(loaded_) * pixels && labels.size() >= size_t(loaded_));
        copy_now(images.data(), act_.x, size_t(loaded_) * pixels * sizeof(float), cudaMemcpyDeviceToHost, stream_);
        copy_now(labels.data(), act_.labels, size_t(loaded_) * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_);
        return loaded_;
    }
    int read_outputs(std::span<float> logits) override {
        synchronize();
        assert(logits.size() >= size_t(loaded_) * model_.classes());
        copy_now(logits.data(), act_.logits(), size_t(loaded_) * model_.classes() * sizeof(float), cudaMemcpyDeviceToHost,
                 stream_);
        return loaded_;
    }
    double take_loss_sum() override {
        synchronize();
        double sum = 0.0;
        copy_now(&sum, loss_sum_, sizeof sum, cudaMemcpyDeviceToHost, stream_);
        fill_now(loss_sum_, 0, sizeof sum, stream_);
        return sum;
    }
    int64_t take_correct() override {
        synchronize();
        unsigned long long correct = 0;
        copy_now(&correct, correct_, sizeof correct, cudaMemcpyDeviceToHost, stream_);
        fill_now(correct_, 0, sizeof correct, stream_);
        return int64_t(correct);
    }

    int32_t take_first_bad_step() override {
        synchronize();
        int32_t step = 0;
        copy_now(&step, first_bad_, sizeof step, cudaMemcpyDeviceToHost, stream_);
        reset_first_bad();
        return step == no_bad_step ? -1 : step;
    }
    void throttle(int) override {}

    // --breakdown: each mark records an event on its stream's timeline; at the
    // take, the time between consecutive events of a timeline goes to the
    // earlier one's phase. Events come from a pool that grows between takes
    // (a timed run is not the fast path).
    void begin_phase(Phase phase) override {
        use();
        Timeline& t = timelines_[allreduce_stream_ && on_allreduce_stream(phase) ? 1 : 0];
        if (t.marks == t.events.size()) {
            cudaEvent_t e;
            CUDA_CHECK(cudaEventCreate(&e));
            t.events.push_back(e);
            t.phase_of.push_back(Phase::idle);
        }
        t.phase_of[t.marks] = phase;
        CUDA_CHECK(cudaEventRecord(t.events[t.marks++], t.stream));
    }
    PhaseTimes take_phase_times() override {
        synchronize();
        PhaseTimes times{};
        for (Timeline& t : timelines_) {
            for (size_t i = 0; i + 1 < t.marks; ++i) {
                float ms = 0.0f;
                CUDA_CHECK(cudaEventElapsedTime(&ms, t.events[i], t.events[i + 1]));
                if (t.phase_of[i] != Phase::idle) times[size_t(t.phase_of[i])] += double(ms) / 1e3;
            }
            t.marks = 0;
        }
        return times;
    }

    void set_order(const uint32_t* order, size_t count) override {
        assert(count <= setup_.train->count);
        use();
        // From pageable memory the copy is staged before this returns, so the
        // caller may reuse `order` at once (the contract asks for less).
        CUDA_CHECK(cudaMemcpyAsync(order_, order, count * sizeof(uint32_t), cudaMemcpyHostToDevice, stream_));
    }
    void load_train(size_t first, int count) override {
        assert(count >= 0 && count <= setup_.capacity);
        use();
        cuda::gather_samples(act_.x, act_.labels, data_->train_images, data_->train_labels, order_ + first, count,
                             setup_.train->pixels(), stream_);
        loaded_ = count;
    }
    // With buckets, an event recorded after the kernel that completes a
    // bucket hands it over (await_bucket waits on it). A staged pass (--bn
    // sync) clears the whole gradient buffer, backward sums included, in its
    // first stage, so that an empty part adds zeros to the sums.
    void forward_backward(int stage, int batch) override {
        use();
        if (stage == 0) CUDA_CHECK(cudaMemsetAsync(grads_, 0, grad_floats_ * sizeof(float), stream_));
        const bool last_stage = size_t(stage) == sync_ranges_.size();
        size_t handed = 0;
        const auto hand_over = [&](size_t complete_from) {  // grads_[complete_from:] are final
            for (; last_stage && handed < bucket_events_.size() && setup_.buckets[handed].first >= complete_from;
                 ++handed)
                CUDA_CHECK(cudaEventRecord(bucket_events_[handed], stream_));
        };
        if (loaded_ > 0) {
            const TrainPass pass{setup_.pool, setup_.bn, batch};
            model_.train(kernels_, act_, params_, grads_, pass, loaded_, act_.x, act_.logits(), stage, [&] {
                cuda::softmax_cross_entropy(act_.d_logits(), loss_sum_, act_.logits(), act_.labels, loaded_,
                                            model_.classes(), stream_);
            }, hand_over);
        }
        hand_over(0);  // whatever is left (all of it, for an empty part)
    }
    // A check asked for just before the update runs in the update's pass
    // (one kernel, one read of the gradients); one asked for alone runs
    // when the device is next waited for.
    void sgd_update(float scale, int batch) override {
        use();
        if (pending_check_ != no_check) {
            cuda::sgd_update_checked(params_, grads_, scale, model_.trained_count(), first_bad_, model_.param_count(),
                                     std::exchange(pending_check_, no_check), stream_);
        } else {
            cuda::sgd_update(params_, grads_, scale, model_.trained_count(), stream_);
        }
        model_.update_running(kernels_, params_, grads_, batch);
    }
    void check_gradients(int32_t step) override {
        flush_check();
        pending_check_ = step;
    }
    void evaluate_test(size_t first, int count) override {
        assert(count >= 0 && count <= setup_.capacity && first + size_t(count) <= setup_.test->count);
        use();
        cuda::gather_samples(act_.x, act_.labels, data_->test_images, data_->test_labels, data_->test_index + first,
                             count, setup_.test->pixels(), stream_);
        if (count > 0) {
            model_.evaluate(kernels_, act_, params_, setup_.pool, count, act_.x, act_.logits());
            cuda::count_correct(correct_, act_.logits(), act_.labels, count, model_.classes(), stream_);
        }
        loaded_ = 0;  // the input buffer now holds test samples
    }

    std::span<const Range> buckets() const override { return setup_.buckets; }
    void await_bucket() override {
        assert(allreduce_stream_);
        use();
        CUDA_CHECK(cudaStreamWaitEvent(allreduce_stream_, bucket_events_[buckets_awaited_++ % bucket_events_.size()], 0));
    }
    void await_allreduce() override {
        assert(allreduce_stream_);
        use();
        CUDA_CHECK(cudaEventRecord(allreduce_done_, allreduce_stream_));
        CUDA_CHECK(cudaStreamWaitEvent(stream_, allreduce_done_, 0));
    }
    void await_main() override {
        assert(allreduce_stream_);
        use();
        CUDA_CHECK(cudaEventRecord(main_done_, stream_));
        CUDA_CHECK(cudaStreamWaitEvent(allreduce_stream_, main_done_, 0));
    }

    // Between GPUs a mark is an event. In a mixed run it is also counted in
    // shared host memory by a host function on the stream (it only counts:
    // a host function must never block), for CPU devices to wait on.
    void mark() override {
        use();
        CUDA_CHECK(cudaEventRecord(event_, allreduce_stream()));
        ++marks_queued_;
        if (marks_passed_) CUDA_CHECK(cudaLaunchHostFunc(allreduce_stream(), &GpuDevice::pass_mark, marks_passed_));
    }
    HostMarks host_marks() override { return {marks_passed_, marks_queued_}; }
    // A stream's sticky error (an illegal address, say) is what every later
    // call returns; cudaStreamQuery asks without waiting.
    std::string failure() override {
        for (cudaStream_t s : {stream_, allreduce_stream()}) {
            const cudaError_t e = cudaStreamQuery(s);
            if (e != cudaSuccess && e != cudaErrorNotReady) return cudaGetErrorString(e);
        }
        return {};
    }
    // A GPU peer: its event. A CPU device: a one-thread kernel that polls the
    // device's mark count in shared host memory until it reaches the mark.
    void wait_for(Device& other) override {
        use();
        if (other.kind() == DeviceKind::gpu) {
            CUDA_CHECK(cudaStreamWaitEvent(allreduce_stream(), as_gpu(other).event_, 0));
            return;
        }
        const HostMarks marks = other.host_marks();
        void* counter = nullptr;
        CUDA_CHECK(cudaHostGetDevicePointer(&counter, const_cast<std::atomic<uint64_t>*>(marks.passed), 0));
        static_assert(sizeof(std::atomic<uint64_t>) == sizeof(unsigned long long));
        cuda::wait_for_host(static_cast<const unsigned long long*>(counter), marks.queued, allreduce_stream());
    }
    void copy_from_peer(Device& peer, size_t first, size_t count, size_t staged) override {
        assert(first + count <= grad_floats_ && staged + count <= staging_floats_);
        use();
        if (float* host = peer.host_grads()) {  // a CPU device's, in pinned memory: an asynchronous copy
            CUDA_CHECK(cudaMemcpyAsync(staging_ + staged, host + first, count * sizeof(float), cudaMemcpyHostToDevice,
                                       allreduce_stream()));
            return;
        }
        GpuDevice& from = as_gpu(peer);
        copy(staging_ + staged, gpu_, from.grads_ + first, from.gpu_, count);
    }
    void reduce_staged(size_t first, size_t count, size_t staged, int slots) override {
        assert(first + count <= grad_floats_ && staged + size_t(slots) * count <= staging_floats_);
        use();
        cuda::sum_into(grads_ + first, staging_ + staged, slots, count, allreduce_stream());
    }
    void copy_to_peer(Device& peer, size_t first, size_t count) override {
        assert(first + count <= grad_floats_);
        use();
        if (float* host = peer.host_grads()) {
            CUDA_CHECK(cudaMemcpyAsync(host + first, grads_ + first, count * sizeof(float), cudaMemcpyDeviceToHost,
                                       allreduce_stream()));
            return;
        }
        GpuDevice& to = as_gpu(peer);
        copy(to.grads_ + first, to.gpu_, grads_ + first, gpu_, count);
    }
    // Down to pinned host memory, summed there by a host function (which may
    // block on the other processes: it holds up only this stream), and up.
    // Each range has its own HostSum, which a recorded CUDA graph keeps
    // pointing at; the ranges are few (the whole buffer, buckets, --bn sync's).
    void sum_across(ProcessSum& sum, Range range) override {
        assert(host_grads_ && range.end() <= grad_floats_);
        use();
        HostSum* call = nullptr;
        for (HostSum& h : host_sums_)
            if (h.sum == &sum && h.data == host_grads_ + range.first && h.count == range.count) call = &h;
        if (!call) call = &host_sums_.emplace_back(HostSum{&sum, host_grads_ + range.first, range.count});
        const size_t bytes = range.count * sizeof(float);
        CUDA_CHECK(cudaMemcpyAsync(call->data, grads_ + range.first, bytes, cudaMemcpyDeviceToHost, allreduce_stream()));
        CUDA_CHECK(cudaLaunchHostFunc(allreduce_stream(), &GpuDevice::sum_on_host, call));
        CUDA_CHECK(cudaMemcpyAsync(grads_ + range.first, call->data, bytes, cudaMemcpyHostToDevice, allreduce_stream()));
    }


   private:
    struct HostSum {
        ProcessSum* sum;
        float* data;
        size_t count;
    };
    static void CUDART_CB sum_on_host(void* call) {
        const HostSum& h = *static_cast<const HostSum*>(call);
        h.sum->sum(h.data, h.count);
    }

    static void CUDART_CB pass_mark(void* passed) {
        auto* count = static_cast<std::atomic<uint64_t>*>(passed);
        count->fetch_add(1);
        count->notify_all();
    }

    // Kernels launch on the current device, which must be the stream's.
    void use() const { CUDA_CHECK(cudaSetDevice(gpu_)); }
    // A check no update has taken up: queued on its own.
    void flush_check() {
        if (pending_check_ == no_check) return;
        use();
        cuda::note_nonfinite(first_bad_, grads_, model_.param_count(), std::exchange(pending_check_, no_check), stream_);
    }

    // `count` gradient floats, queued on this device's allreduce stream:
    // between GPUs a peer copy, between replicas sharing a GPU a plain one.
    void copy(float* dst, int dst_gpu, const float* src, int src_gpu, size_t count) {
        const size_t bytes = count * sizeof(float);
        if (dst_gpu == src_gpu) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, allreduce_stream()));
        else CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_gpu, src, src_gpu, bytes, allreduce_stream()));
    }

    static constexpr int32_t no_bad_step = std::numeric_limits<int32_t>::max();
    void reset_first_bad() {
        copy_now(first_bad_, &no_bad_step, sizeof no_bad_step, cudaMemcpyHostToDevice, stream_);
    }

    void write(float* dst, std::span<const float> host) {
        synchronize();
        assert(host.size() == (dst == grads_ ? grad_floats_ : model_.param_count()));
        copy_now(dst, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice, stream_);
    }
    void read(std::span<float> host, const float* src) {
        synchronize();
        assert(host.size() == (src == grads_ ? grad_floats_ : model_.param_count()));
        copy_now(host.data(), src, host.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_);
    }

    const std::string name_;
    const int gpu_;
    const ReplicaSetup setup_;
    const Model& model_ = *setup_.model;
    const std::vector<Range> sync_ranges_ = model_.sync_ranges(setup_.bn);
    const size_t staging_floats_;
    const size_t grad_floats_ = setup_.grad_floats();
    std::shared_ptr<GpuData> data_;
    std::shared_ptr<SharedHostMemory> shared_;  // a mixed run's
    std::atomic<uint64_t>* marks_passed_ = nullptr;  // in shared_: the marks the stream has passed
    uint64_t marks_queued_ = 0;
    cudaStream_t stream_ = nullptr;
    cudaEvent_t event_ = nullptr;  // mark() records it; peers wait on its latest record
    // With buckets (--overlap): the allreduce's stream, an event per bucket
    // that backward records when it is done, the allreduce's end, and (--bn
    // sync) the end of a stage on the main stream.
    cudaStream_t allreduce_stream_ = nullptr;
    std::vector<cudaEvent_t> bucket_events_;
    cudaEvent_t allreduce_done_ = nullptr, main_done_ = nullptr;
    size_t buckets_awaited_ = 0;
    cuda::KernelSet kernels_{};
    float *params_ = nullptr, *grads_ = nullptr;  // the replica: one flat buffer each
    float* staging_ = nullptr;                    // what the allreduce algorithm asked this replica to keep
    float* activations_ = nullptr;
    Activations act_;                             // for setup.capacity samples
    uint32_t* order_ = nullptr;                   // the epoch's sample order
    double* loss_sum_ = nullptr;
    unsigned long long* correct_ = nullptr;
    int32_t* first_bad_ = nullptr;  // the earliest step whose gradients were not finite, or no_bad_step
    unsigned* tickets_ = nullptr;   // the split products' (kernels_.tickets)
    static constexpr int32_t no_check = std::numeric_limits<int32_t>::min();
    int32_t pending_check_ = no_check;  // check_gradients' step, until an update (or a wait) queues it
    // A multi-process run's: the gradients' way through the host (sum_across).
    float* host_grads_ = nullptr;                       // pinned
    std::deque<HostSum> host_sums_;                     // stable addresses
    struct Timeline {  // --breakdown: a stream's phase marks since the last take
        cudaStream_t stream = nullptr;
        std::vector<cudaEvent_t> events;
        std::vector<Phase> phase_of;
        size_t marks = 0;
    };
    std::array<Timeline, 2> timelines_;  // the main stream's; the allreduce stream's (with buckets)
    int loaded_ = 0;  // samples in the input; known on the host, since it is queued from here
};

GpuDevice& as_gpu(Device& d) {
    assert(d.kind() == DeviceKind::gpu);
    return static_cast<GpuDevice&>(d);
}

}  // namespace

int gpu_internal::gpu_of(Device& d) { return as_gpu(d).gpu(); }
cudaStream_t gpu_internal::stream_of(Device& d) { return as_gpu(d).stream(); }
cudaStream_t gpu_internal::allreduce_stream_of(Device& d) { return as_gpu(d).allreduce_stream(); }
float* gpu_internal::grads_of(Device& d) { return as_gpu(d).grads(); }

namespace {

// Pinned host memory mapped into every GPU's address space (portable).
class PinnedMemory final : public SharedHostMemory {
   public:
    ~PinnedMemory() override {
        for (void* p : blocks_) cudaFreeHost(p);
    }
    void* allocate(size_t bytes) override {
        void* p = nullptr;
        CUDA_CHECK(cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable | cudaHostAllocMapped));
        std::memset(p, 0, bytes);
        blocks_.push_back(p);
        return p;
    }

   private:
    std::vector<void*> blocks_;
};

}  // namespace

std::shared_ptr<SharedHostMemory> make_shared_host_memory() { return std::make_shared<PinnedMemory>(); }

std::vector<std::unique_ptr<Device>> make_gpu_devices(const ReplicaSetup& setup,
                                                      std::span<const size_t> staging_floats,
                                                      std::span<const int> gpu_ids,
                                                      std::shared_ptr<SharedHostMemory> shared) {
    const int count = int(staging_floats.size());
    const int present = probe_gpus().count();
    if (present == 0) throw std::runtime_error("no CUDA GPU to put replicas on");
    // Replica i's GPU: as listed, or round-robin over the GPUs present.
    std::vector<int> on_gpu(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) on_gpu[size_t(i)] = gpu_ids.empty() ? i % present : gpu_ids[size_t(i)];
    const int gpus = 1 + *std::max_element(on_gpu.begin(), on_gpu.end());
    if (gpus > present)
        throw std::runtime_error("no GPU " + std::to_string(gpus - 1) + ": " + std::to_string(present) + " present");
    // Named as listed (gpu:ID) when each GPU has one replica, else by replica number.
    std::vector<int> sorted = on_gpu;
    std::sort(sorted.begin(), sorted.end());
    const bool by_id = !gpu_ids.empty() && std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
    for (int g = 0; g < gpus; ++g) {
        cudaDeviceProp prop{};
        CUDA_CHECK(cudaGetDeviceProperties(&prop, g));
        if (prop.major * 10 + prop.minor < min_compute_capability)
            throw std::runtime_error("GPU " + std::to_string(g) + " (" + prop.name + ") has compute capability " +
                                     std::to_string(prop.major) + "." + std::to_string(prop.minor) +
                                     "; this dptrain has code for 7.5 and newer: use --cpus N");
        if (setup.math == Math::tf32 && prop.major < 8)
            throw InputError("--tf32 needs tensor cores that take TF32 (compute capability 8.0 or later); GPU " +
                             std::to_string(g) + " (" + prop.name + ") has " + std::to_string(prop.major) + "." +
                             std::to_string(prop.minor) + ": leave out --tf32");
    }
    enable_peer_access(gpus);
    std::map<int, std::shared_ptr<GpuData>> data;  // per GPU used
    for (int g : on_gpu)
        if (!data.count(g)) data[g] = std::make_shared<GpuData>(g, *setup.train, *setup.test);
    std::vector<std::unique_ptr<Device>> devices;
    for (int i = 0; i < count; ++i) {
        const int g = on_gpu[size_t(i)];
        devices.push_back(std::make_unique<GpuDevice>("gpu:" + std::to_string(by_id ? g : i), g, data[g], setup,
                                                      staging_floats[size_t(i)], shared));
    }
    return devices;
}


std::string describe_gpu_replicas(int count) {
    const GpuInventory inventory = probe_gpus();
    const int gpus = std::min(inventory.count(), count);
    if (gpus == 0) return inventory.why_none;
    std::map<std::string, int> models;
    for (int g = 0; g < gpus; ++g) ++models[inventory.names[size_t(g)]];
    std::string names;
    for (const auto& [name, n] : models) names += (names.empty() ? "" : ", ") + (n > 1 ? std::to_string(n) + "x " : "") + name;
    const char* kind = gpus_emulated() ? (gpus == 1 ? " emulated GPU" : " emulated GPUs")
                                       : (gpus == 1 ? " physical GPU" : " physical GPUs");
    std::string line = std::to_string(count) + (count == 1 ? " replica" : " replicas") + " on " +
                       std::to_string(gpus) + kind + " (" + names + ")";
    if (count > gpus) line += ", sharing them round-robin";
    if (gpus > 1) line += gpu_internal::all_peer_copies_direct(gpus) ? "; peer copies direct" : "; some peer copies go through host memory";
    if (gpus_emulated()) line += "; every kernel runs on this machine's CPU, so times are the emulation's, not a GPU's";
    return line;
}

// Any failure comes back as `why`, never as an exception: training then goes
// on kernel by kernel. Whatever happened, no stream is left capturing.
}  // namespace dpt
