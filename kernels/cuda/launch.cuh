// Launch settings and block-level helpers shared by every CUDA kernel of
// dptrain (the GEMM's own tile shape is in tiles.cuh), and the one function
// that launches them all.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>

#include "check.hpp"

// A device function compiled once and called, not inlined where it is
// called (nvcc's __noinline__, which the emulated GPU's C++ build, beside
// the standard library's own use of that name, cannot define).
#ifdef DPTRAIN_CUDA_EMULATION
#define DPT_NOINLINE __attribute__((noinline))
#else
#define DPT_NOINLINE __noinline__
#endif

namespace dpt::cuda::launch {

// Every kernel launch of dptrain goes through here: the one place where
// <<<...>>> is written, which the emulated GPU's build replaces with its
// own (kernels/cuda_emulation/). `name` is for messages (and names the update,
// "sgd" or "sgd_checked", by which the emulated GPU counts training steps). A bad launch
// configuration throws here, at its launch.
template <class... Params, class... Args>
void kernel(const char* name, void (*k)(Params...), dim3 grid, dim3 block, cudaStream_t stream, Args&&... args) {
#ifdef DPTRAIN_CUDA_EMULATION
    ::dpt::cuda_emulation::launch(name, k, grid, block, stream, std::forward<Args>(args)...);
#else
    k<<<grid, block, 0, stream>>>(std::forward<Args>(args)...);
#endif
    if (const cudaError_t status = cudaGetLastError(); status != cudaSuccess)
        throw CudaError(status, std::string("CUDA: the launch of kernel ") + name + " failed: " +
                                    cudaGetErrorString(status));
}

// Threads per block of the element-wise and reduction kernels.
constexpr int threads = 256;

// The sum of v over the block, in a fixed order; valid in thread 0.
// blockDim.x must be `threads`.
template <class T>
__device__ T block_sum(T v) {
    __shared__ T partial[threads];
    partial[threadIdx.x] = v;
    __syncthreads();
    for (int half = threads / 2; half > 0; half /= 2) {
        if (int(threadIdx.x) < half) partial[threadIdx.x] += partial[threadIdx.x + half];
        __syncthreads();
    }
    return partial[0];
}

// Whether the calling block is the last of the grid's `blocks` to get here,
// counted on *ticket: an unsigned in device memory that is 0 before the
// first block arrives, and that the last one puts back to 0 for the next
// launch. What every block stored before it arrived is visible to the last
// one after (a fence on each side of the count). Read it with __ldcg, past
// the multiprocessor's own cache, where another block of the same
// multiprocessor may have read the same line before it was all stored.
// Every thread of every block must call it; no float is added atomically.
__device__ inline bool last_to_arrive(unsigned* ticket, unsigned blocks) {
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(ticket, 1u) == blocks - 1;
        if (last) *ticket = 0;
    }
    __syncthreads();
    if (last) __threadfence();
    return last;
}

// A count in mapped host memory that a host thread raises: on a GPU a
// volatile read, so every read goes to host memory; on the emulated GPU an
// atomic load, as the host thread's write is atomic (a volatile read beside
// it is a race to ThreadSanitizer).
__device__ inline unsigned long long read_from_host(const volatile unsigned long long* count) {
#ifdef DPTRAIN_CUDA_EMULATION
    return std::atomic_ref<unsigned long long>(*const_cast<unsigned long long*>(count)).load(std::memory_order_relaxed);
#else
    return *count;
#endif
}

// After a GPU thread has seen a count that a host thread raised in mapped
// memory: order what comes after it behind what the host wrote before. On a
// GPU a system-wide fence; on the emulated GPU an acquire, which
// ThreadSanitizer is told of (the count is a host atomic there).
__device__ inline void acquire_from_host(const volatile void* count) {
#ifdef DPTRAIN_CUDA_EMULATION
    ::dpt::cuda_emulation::acquire(count);
#else
    (void)count;
    __threadfence_system();
#endif
}

// The indices [0, count) the calling thread takes when the grid strides
// over them: its global index, then on by the grid's size.
//   for (const size_t i : launch::grid_stride(count)) ...
// Index: int where count is known to stay below 2^31 (cheaper arithmetic),
// else size_t.
template <class Index>
struct GridStride {
    Index count;
    struct Iterator {
        Index i, step;
        __device__ Index operator*() const { return i; }
        __device__ Iterator& operator++() {
            i += step;
            return *this;
        }
        __device__ bool operator!=(const Iterator& end) const { return i < end.i; }
    };
    __device__ Iterator begin() const {
        return {Index(blockIdx.x) * Index(blockDim.x) + Index(threadIdx.x), Index(gridDim.x) * Index(blockDim.x)};
    }
    __device__ Iterator end() const { return {count, 0}; }
};
template <class Index>
__device__ GridStride<Index> grid_stride(Index count) {
    return {count};
}

// A grid that covers `count` elements with `threads`-wide blocks, for the
// element-wise kernels (each thread then strides by the grid's size).
inline unsigned grid_for(size_t count) {
    const size_t blocks = (count + threads - 1) / threads;
    return unsigned(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

}  // namespace dpt::cuda::launch
