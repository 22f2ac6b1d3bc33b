// The GEMM core's FP32 tiles with their shared-memory rows padded by 4
// floats (PaddedFmaCore), on plain row-major matrices (the gemm launcher).
//
// Against the trainer's (kernels/cuda/tiles.cuh: FmaCore, rows packed):
// packed, a k-step's stores of an operand read along k (k_fast: weights,
// dy, a weight gradient's unfolded input) fall in 4 of the 32 banks: a
// warp's 32 stores are 8 values of kk at each of 4 places along the side,
// and with rows of 64 or 128 floats (whole multiples of the 32 banks) the 8
// kk of a place share one bank, so each store takes 8 passes where 1 would
// do. Padded by 4, kk's row starts 4 banks after kk - 1's, and the 32
// stores fall in 32 banks. The reads stay within one row, 4 consecutive
// floats at a 16-byte boundary; the same elements, the same sums, the same
// bits. A change to the core, which every product runs on: kernel_bench
// times it on the layers' product shapes through the gemm launcher, which
// training does not call (so no epoch of its own).
//
// Measured: not yet timed on a GPU. (An earlier version of the core, its k
// loop two k-steps an iteration, took LeNet 0.99x and ResNet-18 1.02x on an
// H200, and was taken out.)
#include "cuda/tiles.cuh"
#include "dev.hpp"

DEV_REPLACES(gemm)

namespace {

using namespace dpt;
using namespace dpt::cuda;
using namespace dpt::cuda::tiled;

constexpr int padded_rows = 4;

// FmaCore (tiles.cuh) with its rows padded.
template <class T>
struct PaddedFmaCore {
    static constexpr int BM = T::BM, BN = T::BN, BK = T::BK, TM = T::TM, TN = T::TN;
    static constexpr int a_stride = BM + padded_rows, b_stride = BN + padded_rows;  // shared-memory rows
    float acc[TM][TN] = {};

    __device__ static void round(float*, int) {}
    __device__ void step(const float (*as)[a_stride], const float (*bs)[b_stride]) {
        const int tx = threadIdx.x % (BN / TN), ty = threadIdx.x / (BN / TN);
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float av[TM], bv[TN];
#pragma unroll
            for (int r = 0; r < TM; r += 4) read4(av + r, &as[kk][spread_index<TM, BM>(ty, r)]);
#pragma unroll
            for (int c = 0; c < TN; c += 4) read4(bv + c, &bs[kk][spread_index<TN, BN>(tx, c)]);
#pragma unroll
            for (int r = 0; r < TM; ++r)
#pragma unroll
                for (int c = 0; c < TN; ++c) acc[r][c] += av[r] * bv[c];
        }
    }
    template <class Out>
    __device__ void finish(const Out& out, int z, int m, int n, int row0, int col0) {
        const int tx = threadIdx.x % (BN / TN), ty = threadIdx.x / (BN / TN);
#pragma unroll
        for (int r = 0; r < TM; ++r)
#pragma unroll
            for (int c = 0; c < TN; ++c) {
                const int i = row0 + spread_index<TM, BM>(ty, r), j = col0 + spread_index<TN, BN>(tx, c);
                if (i < m && j < n) out(z, i, j, acc[r][c]);
            }
    }
};

// (kernels/cuda/gemm.cu's loaders.)
template <bool transposed>
struct RowsByK {
    const float* p;
    int rows, k;
    static constexpr bool k_fast = !transposed;
    __device__ float operator()(int i, int kk) const { return transposed ? p[size_t(kk) * rows + i] : p[size_t(i) * k + kk]; }
};
template <bool transposed>
struct KByCols {
    const float* p;
    int k, cols;
    static constexpr bool k_fast = transposed;
    __device__ float operator()(int kk, int j) const { return transposed ? p[size_t(j) * k + kk] : p[size_t(kk) * cols + j]; }
};

template <bool ta, bool tb>
void run(float* c, const float* a, const float* b, int m, int n, int k, bool accumulate, cudaStream_t stream) {
    if (m <= 0 || n <= 0) return;
    const RowsByK<ta> A{a, m, k};
    const KByCols<tb> B{b, k, n};
    const StoreMatrix out{c, n, accumulate};
    const int rows = tile_rows(m, [&](int r) { return long(ceil_div(m, r)) * ceil_div(n, 128); });
    with_tile(rows, [&](auto tile) {
        using T = decltype(tile);
        using Core = PaddedFmaCore<T>;
        const dim3 grid(unsigned(ceil_div(n, T::BN)), unsigned(ceil_div(m, T::BM)), 1u);
        launch::kernel("gemm_kernel", gemm_kernel<T, RowsByK<ta>, KByCols<tb>, StoreMatrix, Core>, grid, T::threads,
                       stream, T{}, Arithmetic<Core>{}, m, n, k, split_length(k, 1, T::BK), A, B, out);
    });
}

}  // namespace

namespace DEV_NAMESPACE {

void gemm(float* c, const float* a, const float* b, int m, int n, int k, bool trans_a, bool trans_b, bool accumulate,
          cudaStream_t stream) {
    if (trans_a) {
        if (trans_b) run<true, true>(c, a, b, m, n, k, accumulate, stream);
        else run<true, false>(c, a, b, m, n, k, accumulate, stream);
    } else {
        if (trans_b) run<false, true>(c, a, b, m, n, k, accumulate, stream);
        else run<false, false>(c, a, b, m, n, k, accumulate, stream);
    }
}

}  // namespace DEV_NAMESPACE

DEV_VERSION("gemm/03_padded_rows",
            "the GEMM core's FP32 tiles with their shared-memory rows padded by 4 floats: a warp's stores of an "
            "operand read along k in 32 banks, not 4 (1 pass where the trainer's take 8); the same bits",
            "not yet timed", l.gemm = &DEV_NAMESPACE::gemm)
