// tiled::gemm, the tiled shared-memory SGEMM that the convolutions and the
// dense layers run on. It reads its operands through small loader objects,
// a(i, kk) and b(kk, j), and hands each result to an epilogue,
// out(split, i, j, value). Loaders let the convolutions run as *implicit*
// GEMMs: the unfolded (im2col) matrix is never written out, its elements are
// computed from the image as the tiles are loaded. Epilogues let a layer add
// its bias, apply ReLU and write NCHW in the same pass. (Launch settings and
// block_sum, shared by every kernel, are in launch.cuh.)
//
// Tiles: a block of 256 threads computes a 64x64 tile of C, 16 columns of
// A and rows of B at a time, staged in shared memory; each thread keeps a
// 4x4 block of C in registers, at rows ty + 16r and columns tx + 16c so that
// a warp reads consecutive shared-memory words (no bank conflicts) and writes
// consecutive columns. A loader declares k_fast when its consecutive
// addresses run along k, so the tile is loaded with consecutive threads
// stepping along k (coalesced reads) rather than along the rows.
//
// A long k with few tiles (the weight gradients: k is the batch's pixels)
// is split over blockIdx.z; each split hands its partial sum to the epilogue
// with its split index, and the caller adds the partials in a fixed order.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "check.hpp"
#include "launch.cuh"

namespace dpt::cuda::tiled {

constexpr int BM = 64, BN = 64, BK = 16, threads = 256;  // threads: one GEMM block (16 x 16, 4 x 4 results each)
// Enough blocks to fill an H100's 132 multiprocessors about twice. A fixed
// number, not the device's, so every GPU splits (and rounds) the same way.
constexpr int target_blocks = 256;

template <class A, class B, class Out>
__global__ void __launch_bounds__(threads) gemm_kernel(int m, int n, int k, int k_per_split, A a, B b, Out out) {
    __shared__ float as[BK][BM + 4];  // as[kk][i] = A(row0 + i, k0 + kk)
    __shared__ float bs[BK][BN + 4];  // bs[kk][j] = B(k0 + kk, col0 + j)
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int k_begin = blockIdx.z * k_per_split;
    const int k_end = min(k, k_begin + k_per_split);
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;

    float acc[4][4] = {};
    for (int k0 = k_begin; k0 < k_end; k0 += BK) {
#pragma unroll
        for (int l = 0; l < BM * BK / threads; ++l) {
            const int e = threadIdx.x + l * threads;
            const int i = A::k_fast ? e / BK : e % BM, kk = A::k_fast ? e % BK : e / BM;
            const int gi = row0 + i, gk = k0 + kk;
            as[kk][i] = gi < m && gk < k_end ? a(gi, gk) : 0.0f;
        }
#pragma unroll
        for (int l = 0; l < BN * BK / threads; ++l) {
            const int e = threadIdx.x + l * threads;
            const int j = B::k_fast ? e / BK : e % BN, kk = B::k_fast ? e % BK : e / BN;
            const int gj = col0 + j, gk = k0 + kk;
            bs[kk][j] = gj < n && gk < k_end ? b(gk, gj) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float av[4], bv[4];
#pragma unroll
            for (int r = 0; r < 4; ++r) av[r] = as[kk][ty + 16 * r];
#pragma unroll
            for (int c = 0; c < 4; ++c) bv[c] = bs[kk][tx + 16 * c];
#pragma unroll
            for (int r = 0; r < 4; ++r)
#pragma unroll
                for (int c = 0; c < 4; ++c) acc[r][c] += av[r] * bv[c];
        }
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const int i = row0 + ty + 16 * r, j = col0 + tx + 16 * c;
            if (i < m && j < n) out(int(blockIdx.z), i, j, acc[r][c]);
        }
}

inline int ceil_div(long a, long b) { return int((a + b - 1) / b); }

// Splits of k for an (m, n, k) product: enough to reach target_blocks, each
// split at least `min_k` long. Never fewer for a larger k, so scratch sized
// for the largest k suffices for smaller ones.
inline int splits_for(int m, int n, int k, int min_k = 256) {
    const int tiles = ceil_div(m, BM) * ceil_div(n, BN);
    int splits = target_blocks / tiles;
    splits = splits < k / min_k ? splits : k / min_k;
    return splits > 1 ? splits : 1;
}

// C (m, n) through `out` = A (m, k) . B (k, n), in `splits` parts along k.
template <class A, class B, class Out>
void gemm(int m, int n, int k, A a, B b, Out out, cudaStream_t stream, int splits = 1) {
    if (m <= 0 || n <= 0) return;
    // Each split covers whole BK-wide steps, so only the last one is ragged.
    const int k_per_split = ceil_div(ceil_div(k, splits), BK) * BK;
    const dim3 grid(unsigned(ceil_div(n, BN)), unsigned(ceil_div(m, BM)), unsigned(splits));
    launch::kernel("gemm_kernel", gemm_kernel<A, B, Out>, grid, threads, stream, m, n, k, k_per_split, a, b, out);
}

// The plain epilogue: C (m, n) row-major = value, or += when accumulating.
struct StoreMatrix {
    float* c;
    int n;
    bool accumulate;
    __device__ void operator()(int, int i, int j, float v) const {
        float& dst = c[size_t(i) * n + j];
        dst = accumulate ? dst + v : v;
    }
};

}  // namespace dpt::cuda::tiled
