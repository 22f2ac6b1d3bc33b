// CUDA graphs of the replicas' work (gpu.hpp: Recording, record_graph): an
// epoch's steps on every replica, recorded once and replayed with one launch.
#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "cuda/check.hpp"
#include "devices/gpu.hpp"
#include "devices/gpu_internal.hpp"

namespace dpt {

using gpu_internal::allreduce_stream_of;
using gpu_internal::gpu_of;
using gpu_internal::stream_of;

namespace {

// Events of each device's main stream, for making the others wait on it:
// the graph's fork and join. (Device::mark would record on the allreduce
// stream, which with --overlap is another.)
class StreamEvents {
   public:
    explicit StreamEvents(std::span<Device* const> devices) : devices_(devices.begin(), devices.end()) {
        for (Device* d : devices_) {
            CUDA_CHECK(cudaSetDevice(gpu_of(*d)));
            cudaEvent_t e = nullptr;
            CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
            events_.push_back(e);
        }
    }
    ~StreamEvents() {
        for (cudaEvent_t e : events_) cudaEventDestroy(e);
    }
    StreamEvents(const StreamEvents&) = delete;
    StreamEvents& operator=(const StreamEvents&) = delete;

    // The other streams wait for device 0's work so far.
    void fork() {
        record(0);
        for (size_t i = 1; i < devices_.size(); ++i) wait(i, 0);
    }
    // Each device's allreduce stream (--overlap) joins the recording from its
    // main stream at the start, so that what it queues before its first
    // hand-over (a phase mark of --trace) is recorded too.
    void fork_allreduce_streams() {
        for (size_t i = 0; i < devices_.size(); ++i) {
            Device& d = *devices_[i];
            if (allreduce_stream_of(d) == stream_of(d)) continue;
            record(i);
            CUDA_CHECK(cudaStreamWaitEvent(allreduce_stream_of(d), events_[i], 0));
        }
    }
    // Device 0's stream waits for the others' work so far.
    void join() {
        for (size_t i = 1; i < devices_.size(); ++i) {
            record(i);
            wait(0, i);
        }
    }
    const std::vector<Device*>& devices() const { return devices_; }

   private:
    void record(size_t i) {
        CUDA_CHECK(cudaSetDevice(gpu_of(*devices_[i])));
        CUDA_CHECK(cudaEventRecord(events_[i], stream_of(*devices_[i])));
    }
    void wait(size_t waiter, size_t i) {
        CUDA_CHECK(cudaSetDevice(gpu_of(*devices_[waiter])));
        CUDA_CHECK(cudaStreamWaitEvent(stream_of(*devices_[waiter]), events_[i], 0));
    }

    std::vector<Device*> devices_;
    std::vector<cudaEvent_t> events_;
};

class GraphRecording final : public Recording {
   public:
    GraphRecording(std::unique_ptr<StreamEvents> events, cudaGraphExec_t exec) : events_(std::move(events)), exec_(exec) {}
    ~GraphRecording() override { cudaGraphExecDestroy(exec_); }

    void replay() override {
        events_->join();  // e.g. the sample order, uploaded on each device's own stream
        Device& root = *events_->devices()[0];
        CUDA_CHECK(cudaSetDevice(gpu_of(root)));
        CUDA_CHECK(cudaGraphLaunch(exec_, stream_of(root)));
        events_->fork();
        for (Device* d : events_->devices()) gpu_internal::marks_replayed(*d);
    }

   private:
    std::unique_ptr<StreamEvents> events_;
    cudaGraphExec_t exec_;
};

}  // namespace

std::unique_ptr<Recording> record_graph(std::span<Device* const> devices, const std::function<void()>& enqueue,
                                        std::string& why) {
    auto events = std::make_unique<StreamEvents>(devices);
    for (Device* d : devices) gpu_internal::forget_recorded_marks(*d);
    const int root_gpu = gpu_of(*devices[0]);
    cudaStream_t const root_stream = stream_of(*devices[0]);
    const auto cuda_failure = [](const char* what, cudaError_t status) {
        cudaGetLastError();  // clears a sticky launch error, so later calls start clean
        return std::string(what) + ": " + cudaGetErrorString(status);
    };
    cudaError_t status = cudaSetDevice(root_gpu);
    if (status == cudaSuccess) status = cudaStreamBeginCapture(root_stream, cudaStreamCaptureModeThreadLocal);
    if (status != cudaSuccess) {
        why = cuda_failure("CUDA could not start recording", status);
        return nullptr;
    }
    std::string failure;
    try {
        // The other streams join the capture by waiting on an event of root's
        // stream, and leave it when root waits on theirs. (With --overlap the
        // allreduce streams join and leave through their main streams'
        // hand-overs and await_allreduce.)
        events->fork();
        events->fork_allreduce_streams();
        enqueue();
        events->join();
    } catch (const std::exception& e) {
        failure = e.what();
    } catch (...) {
        failure = "an unknown error while recording";
    }
    // End the capture in every case. After a failure midway some streams may
    // not have rejoined root's; ending root's capture ends theirs too, and any
    // stream still capturing after that is ended on its own.
    cudaGraph_t graph = nullptr;
    cudaSetDevice(root_gpu);
    status = cudaStreamEndCapture(root_stream, &graph);
    if (failure.empty() && status != cudaSuccess) failure = cuda_failure("CUDA could not finish recording", status);
    for (Device* d : devices)
        for (cudaStream_t stream : {stream_of(*d), allreduce_stream_of(*d)}) {
            cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
            cudaSetDevice(gpu_of(*d));
            if (cudaStreamIsCapturing(stream, &capturing) == cudaSuccess && capturing != cudaStreamCaptureStatusNone) {
                cudaGraph_t stray = nullptr;
                cudaStreamEndCapture(stream, &stray);
                if (stray) cudaGraphDestroy(stray);
            }
        }
    cudaGraphExec_t exec = nullptr;
    if (failure.empty()) {
        status = cudaGraphInstantiate(&exec, graph, 0);
        if (status != cudaSuccess) failure = cuda_failure("CUDA could not instantiate the recorded graph", status);
    }
    if (graph) cudaGraphDestroy(graph);
    if (!failure.empty()) {
        cudaGetLastError();
        why = failure;
        return nullptr;
    }
    return std::make_unique<GraphRecording>(std::move(events), exec);
}

}  // namespace dpt
