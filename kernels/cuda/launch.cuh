// Launch settings and block-level helpers shared by every CUDA kernel of
// dptrain (the GEMM's own tile shape is in tiles.cuh).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "check.hpp"

namespace dpt::cuda::launch {

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

// A grid that covers `count` elements with `threads`-wide blocks, for the
// element-wise kernels (each thread then strides by the grid's size).
inline unsigned grid_for(size_t count) {
    const size_t blocks = (count + threads - 1) / threads;
    return unsigned(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

}  // namespace dpt::cuda::launch
