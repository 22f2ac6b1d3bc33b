// What `dptrain devices` and the rest of dptrain learn about the GPUs (gpu.hpp):
// the inventory, each GPU's properties, which pairs can copy directly, and
// the measured copy speed between every pair. A build without CUDA links
// gpu_none.cpp instead.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cuda/check.hpp"
#include "devices/gpu.hpp"
#include "devices/gpu_internal.hpp"

namespace dpt {

bool gpu_internal::can_access_peer(int a, int b) {
    int can = 0;
    CUDA_CHECK(cudaDeviceCanAccessPeer(&can, a, b));
    return can != 0;
}

// Direct copies between every pair of the GPUs in use, where the hardware allows.
void gpu_internal::enable_peer_access(int gpus) {
    for (int a = 0; a < gpus; ++a)
        for (int b = 0; b < gpus; ++b) {
            if (a == b || !can_access_peer(a, b)) continue;
            CUDA_CHECK(cudaSetDevice(a));
            const cudaError_t status = cudaDeviceEnablePeerAccess(b, 0);
            if (status == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
            else CUDA_CHECK(status);
        }
}

bool gpu_internal::all_peer_copies_direct(int gpus) {
    for (int a = 0; a < gpus; ++a)
        for (int b = 0; b < gpus; ++b)
            if (a != b && !can_access_peer(a, b)) return false;
    return true;
}


bool gpus_emulated() {
#ifdef DPTRAIN_CUDA_EMULATION
    return true;
#else
    return false;
#endif
}

GpuInventory probe_gpus() {
    GpuInventory inventory;
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
        cudaGetLastError();
        // Static cudart reports a missing driver as an insufficient one.
        const std::string reason = status == cudaErrorInsufficientDriver
                                       ? "no CUDA driver, or one older than this build's CUDA " +
                                             std::to_string(CUDART_VERSION / 1000) + "." +
                                             std::to_string(CUDART_VERSION % 1000 / 10) + " runtime"
                                   : status == cudaErrorNoDevice ? "no CUDA GPU found"
                                                                 : std::string(cudaGetErrorString(status));
        inventory.why_none = "no CUDA GPU is usable: " + reason;
        return inventory;
    }
    for (int i = 0; i < count; ++i) {
        cudaDeviceProp prop{};
        if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
            cudaGetLastError();
            continue;
        }
        inventory.names.push_back(prop.name);
    }
    if (inventory.names.empty()) inventory.why_none = "no CUDA GPU is visible";
    return inventory;
}


std::vector<GpuProperties> gpu_properties() {
    std::vector<GpuProperties> gpus;
    for (int g = 0; g < probe_gpus().count(); ++g) {
        cudaDeviceProp prop{};
        CUDA_CHECK(cudaGetDeviceProperties(&prop, g));
        gpus.push_back({prop.name, double(prop.totalGlobalMem) / 1e9, prop.major, prop.minor, prop.multiProcessorCount});
    }
    return gpus;
}

std::vector<std::vector<bool>> gpu_peer_matrix() {
    const int n = probe_gpus().count();
    std::vector<std::vector<bool>> peer(size_t(n), std::vector<bool>(size_t(n), false));
    for (int a = 0; a < n; ++a)
        for (int b = 0; b < n; ++b) peer[size_t(a)][size_t(b)] = a != b && gpu_internal::can_access_peer(a, b);
    return peer;
}

double gpu_copy_bandwidth(int from, int to, size_t bytes) {
    gpu_internal::enable_peer_access(probe_gpus().count());  // as make_gpu_devices does
    void *src = nullptr, *dst = nullptr;
    cudaStream_t stream = nullptr;
    cudaEvent_t start = nullptr, stop = nullptr;
    // Everything made here goes on the way out, thrown or not (null handles are ignored).
    const auto release = [&] {
        if (start) cudaEventDestroy(start);
        if (stop) cudaEventDestroy(stop);
        if (stream) cudaStreamDestroy(stream);
        cudaFree(dst);
        cudaSetDevice(from);
        cudaFree(src);
    };
    std::vector<float> ms;
    try {
        CUDA_CHECK(cudaSetDevice(from));
        CUDA_CHECK(cudaMalloc(&src, bytes));
        CUDA_CHECK(cudaMemset(src, 1, bytes));
        CUDA_CHECK(cudaDeviceSynchronize());  // the fill ran on the legacy stream; the copies below do not
        CUDA_CHECK(cudaSetDevice(to));  // the copy is queued on the receiving GPU, as device 0 does when it gathers
        CUDA_CHECK(cudaMalloc(&dst, bytes));
        CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        CUDA_CHECK(cudaEventCreate(&start));
        CUDA_CHECK(cudaEventCreate(&stop));
        constexpr int warm_up = 3, timed = 20;
        for (int i = 0; i < warm_up + timed; ++i) {
            CUDA_CHECK(cudaEventRecord(start, stream));
            CUDA_CHECK(cudaMemcpyPeerAsync(dst, to, src, from, bytes, stream));
            CUDA_CHECK(cudaEventRecord(stop, stream));
            CUDA_CHECK(cudaEventSynchronize(stop));
            float t = 0;
            CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
            if (i >= warm_up) ms.push_back(t);
        }
    } catch (...) {
        release();
        throw;
    }
    release();
    std::nth_element(ms.begin(), ms.begin() + ptrdiff_t(ms.size() / 2), ms.end());
    return double(bytes) / (double(ms[ms.size() / 2]) / 1e3) / 1e9;
}

}  // namespace dpt
