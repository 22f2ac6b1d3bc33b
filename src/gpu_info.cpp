// What `dptrain devices` reports about the GPUs: their properties, which
// pairs can copy directly, and copy bandwidth measured the way the
// allreduce copies (cudaMemcpyPeerAsync on the receiving GPU's stream).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "cuda/check.hpp"
#include "gpu.hpp"

namespace dpt {

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
        for (int b = 0; b < n; ++b) {
            int can = 0;
            if (a != b) CUDA_CHECK(cudaDeviceCanAccessPeer(&can, a, b));
            peer[size_t(a)][size_t(b)] = can != 0;
        }
    return peer;
}

double gpu_copy_bandwidth(int from, int to, size_t bytes) {
    for (const auto& [a, b] : {std::pair{to, from}, std::pair{from, to}}) {
        int can = 0;
        if (a == b) continue;
        CUDA_CHECK(cudaDeviceCanAccessPeer(&can, a, b));
        if (!can) continue;
        CUDA_CHECK(cudaSetDevice(a));
        const cudaError_t status = cudaDeviceEnablePeerAccess(b, 0);
        if (status == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
        else CUDA_CHECK(status);
    }
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
    const double seconds = double(ms[ms.size() / 2]) / 1e3;
    return double(bytes) / seconds / 1e9;
}

}  // namespace dpt
