// CUDA graphs of the replicas' work (gpu.hpp: Recording, record_graph): an
// epoch's steps on every replica, recorded once and replayed with one launch.
#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "cuda/check.hpp"
#include "gpu.hpp"
#include "gpu_internal.hpp"

namespace dpt {

using gpu_internal::gpu_of;
using gpu_internal::stream_of;

namespace {

class GraphRecording final : public Recording {
   public:
    GraphRecording(std::vector<Device*> devices, cudaGraphExec_t exec) : devices_(std::move(devices)), exec_(exec) {}
    ~GraphRecording() override { cudaGraphExecDestroy(exec_); }

    void replay() override {
        join(devices_);  // e.g. the sample order, uploaded on each device's own stream
        CUDA_CHECK(cudaSetDevice(gpu_of(*devices_[0])));
        CUDA_CHECK(cudaGraphLaunch(exec_, stream_of(*devices_[0])));
        fork(devices_);
    }

    // The other streams wait for device 0's work so far / device 0 waits for theirs.
    static void fork(std::span<Device* const> devices) {
        devices[0]->mark();
        for (Device* d : devices.subspan(1)) d->wait_for(*devices[0]);
    }
    static void join(std::span<Device* const> devices) {
        for (Device* d : devices.subspan(1)) {
            d->mark();
            devices[0]->wait_for(*d);
        }
    }

   private:
    std::vector<Device*> devices_;
    cudaGraphExec_t exec_;
};

}  // namespace

std::unique_ptr<Recording> record_graph(std::span<Device* const> devices, const std::function<void()>& enqueue,
                                        std::string& why) {
    std::vector<Device*> gpu_devices(devices.begin(), devices.end());
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
        // stream, and leave it when root waits on theirs.
        GraphRecording::fork(gpu_devices);
        enqueue();
        GraphRecording::join(gpu_devices);
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
    for (Device* d : gpu_devices) {
        cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
        cudaSetDevice(gpu_of(*d));
        if (cudaStreamIsCapturing(stream_of(*d), &capturing) == cudaSuccess && capturing != cudaStreamCaptureStatusNone) {
            cudaGraph_t stray = nullptr;
            cudaStreamEndCapture(stream_of(*d), &stray);
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
    return std::make_unique<GraphRecording>(std::move(gpu_devices), exec);
}

}  // namespace dpt
