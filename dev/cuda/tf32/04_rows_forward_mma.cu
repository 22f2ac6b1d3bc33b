// LeNet's conv2 forward under --tf32 on the tensor cores, by a kernel of its
// own (rows_forward_mma), a block a sample.
//
// Against the trainer's (--tf32 runs LeNet's conv2 forward as an implicit
// GEMM on the tensor cores' tiles: 162 tiles of 64 x 128 split along k, then
// a kernel that adds the splits and pools): the sample's product, y (oc,
// 81) = w (oc, c*25) . unfold(x) (c*25, 81), padded to 64 x 96 in 4 x 6
// fragments of 16 x 16 (nvcuda::wmma, m16n16k8), runs as:
// - the sample's image staged once in shared memory, rounded to TF32;
// - k in chunks of 32 (4 k-steps of 8): the chunk's filter taps (A, 64 x 32,
//   zeros past oc and c*25, rounded; a thread's 11 loads issued before it
//   stores any) and its unfolded input (B, 32 x 96, zeros past the 81
//   pixels and c*25) copied from the staged image, a thread a column,
//   through a table of where each k's channel and tap start;
// - each of 6 warps 2 x 2 fragments of the result (2 A and 2 B loads for 4
//   multiply-adds a k-step); shared rows padded so that a fragment's 8 rows
//   start in different banks;
// - two blocks a multiprocessor (registers bounded to 168), so that one
//   block's copies run beside the other's products;
// - then bias, ReLU and the pooling after it, from the results staged in
//   shared memory: no split, no finishing or pooling kernel.
// The tensor cores add each product's terms in an order of their own: the
// TF32 twin's sums within a product's rounding, not the trainer's bits.
//
// Measured: not yet timed on a GPU.
#include "dev.hpp"
#include "tf32/mma.cuh"

DEV_REPLACES(conv2d_forward_relu_pool)

namespace {

using namespace dpt;
using namespace dpt::cuda;
using namespace dpt::cuda::conv;
using namespace dpt::cuda::dev::mma;

struct MmaRows {
    static constexpr int K = 5, KK = K * K, H = 13, OW = H - K + 1, P = OW * OW;
    static constexpr int most_c = 20, most_oc = 64;
    static constexpr int M = 64, N = 96;           // the product's rows and columns, in whole fragments
    static constexpr int KC = 32;                  // a chunk of k: 4 k-steps of 8
    static constexpr int AS = KC + 4, BS = N + 8;  // shared rows of A and B, padded
    static constexpr int warps = 6, threads = warps * 32;
    static constexpr int a_floats = M * AS, b_floats = KC * BS, x_floats = most_c * H * H;
    static constexpr int chunks = (most_c * KK + KC - 1) / KC, a_loads = (M * KC + threads - 1) / threads;
    static_assert(threads == 2 * N && M * BS <= a_floats + b_floats + x_floats && M >= most_oc && N >= P);

    // Loads chunk k0's filter taps, w[m][k0 + kk] rounded to TF32 (zeros
    // past oc and past c*25), a thread's share: element q of the chunk is
    // row q / KC, column q % KC, so a warp reads a row's 32 taps together.
    // store_a puts them in shared memory, rows of AS floats.
    __device__ static void load_a(float (&to)[a_loads], const float* w, int oc, int k_all, int k0) {
#pragma unroll
        for (int i = 0; i < a_loads; ++i) {
            const int q = int(threadIdx.x) + i * threads, m = q / KC, k = k0 + (q - m * KC);
            to[i] = q < M * KC && m < oc && k < k_all ? operand(w[size_t(m) * k_all + k], true) : 0.0f;
        }
    }
    __device__ static void store_a(float* sa, const float (&from)[a_loads]) {
#pragma unroll
        for (int i = 0; i < a_loads; ++i) {
            const int q = int(threadIdx.x) + i * threads, m = q / KC;
            if (q < M * KC) sa[m * AS + (q - m * KC)] = from[i];
        }
    }
};

template <bool relu, bool pooled, PoolKind kind>
__global__ void __launch_bounds__(MmaRows::threads, 2) rows_forward_mma(float* y, float* pooled_y, const float* x,
                                                                     const float* w, const float* b, Geometry g,
                                                                     PoolGeometry pg) {
    using T = MmaRows;
    constexpr int H = T::H, KK = T::KK, P = T::P, KC = T::KC, BS = T::BS;
    __shared__ __align__(32) float staged[T::a_floats + T::b_floats + T::x_floats];
    __shared__ int tap_at[T::chunks * KC];  // where k's (channel, ky, kx) starts in sx; -1 past c*25
    float* const sa = staged;
    float* const sb = sa + T::a_floats;
    float* const sx = sb + T::b_floats;
    const int sample = int(blockIdx.x), t = int(threadIdx.x), k_all = g.c * KK;
    const float* x_sample = x + size_t(sample) * g.c * H * H;
    for (int e = t; e < g.c * H * H; e += T::threads) sx[e] = operand(x_sample[e], true);
    for (int k = t; k < T::chunks * KC; k += T::threads) {
        const int ch = k / KK, tap = k - ch * KK, ky = tap / T::K;
        tap_at[k] = k < k_all ? ch * H * H + ky * H + (tap - ky * T::K) : -1;
    }
    // This thread's column of B (pixel `col`, where its window starts in a
    // plane; -1 past the 81 pixels), and its half of the chunk's rows.
    const int col = t % T::N, half = t / T::N, oy = col / T::OW;
    const int at = col < P ? oy * H + (col - oy * T::OW) : -1;
    MmaWarp<T::AS, T::BS> product(t / 32);
    for (int k0 = 0; k0 < k_all; k0 += KC) {
        float taps[T::a_loads];
        T::load_a(taps, w, g.oc, k_all, k0);
        __syncthreads();  // the chunk before is multiplied (and, the first time, sx and tap_at are staged)
        T::store_a(sa, taps);
#pragma unroll 4
        for (int r = half; r < KC; r += 2) {
            const int from = tap_at[k0 + r];
            sb[r * BS + col] = from >= 0 && at >= 0 ? sx[from + at] : 0.0f;
        }
        __syncthreads();
        product.multiply<KC / 8>(sa, sb);
    }
    __syncthreads();  // every warp's last fragments are read: the space holds the results now (oc rows of BS)
    product.store(staged);
    __syncthreads();
    float* const y_sample = y + size_t(sample) * g.oc * P;
    for (int e = t; e < g.oc * P; e += T::threads) {
        const int o = e / P, p = e - o * P;
        float v = staged[o * BS + p] + b[o];
        if (relu) v = v > 0.0f ? v : 0.0f;
        y_sample[e] = v;
        staged[o * BS + p] = v;
    }
    if (!pooled) return;
    __syncthreads();
    pool_staged_planes<kind, T::OW>(pooled_y, staged, sample, g, pg, 0, g.oc, BS);
}


}  // namespace

namespace DEV_NAMESPACE {

void conv2d_forward_relu_pool(float* y, float* pooled, const float* x, const float* w, const float* b,
                              const ConvShape& s, PoolKind kind, const PoolShape& ps, float* scratch,
                              cudaStream_t stream) {
    if (!conv2_mma_fits<MmaRows>(s))
        return TRAINER(conv2d_forward_relu_pool)(y, pooled, x, w, b, s, kind, ps, scratch, stream);
    check_pooling(s, ps, "conv2d_forward_relu_pool");
    const PoolGeometry pg{ps.k, ps.stride, ps.oh(), ps.ow()};
    const auto kernel = kind == PoolKind::max ? rows_forward_mma<true, true, PoolKind::max>
                                              : rows_forward_mma<true, true, PoolKind::avg>;
    launch::kernel("rows_forward_mma", kernel, unsigned(s.n), unsigned(MmaRows::threads), stream, y, pooled, x, w, b,
                   Geometry(s), pg);
}

}  // namespace DEV_NAMESPACE

DEV_VERSION("tf32/04_rows_forward_mma",
            "--tf32: LeNet's conv2 forward with its ReLU and pooling on the tensor cores by a kernel of its own, a "
            "block a sample (6 warps, 2 x 2 wmma fragments each), where the trainer's runs the GEMM core's TF32 tiles "
            "split along k and a kernel that adds the splits and pools",
            "not yet timed", l.conv2d_forward_relu_pool = &DEV_NAMESPACE::conv2d_forward_relu_pool)
