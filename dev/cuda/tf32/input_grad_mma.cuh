#pragma once
#include "dev.hpp"
#include "tf32/mma.cuh"

namespace dpt::cuda::dev::mma {

// The kernel of tf32/07 (FC 1) and tf32/08 (FC 2): LeNet's conv2 input
// gradient (5x5 filters, stride 1, no padding, 13x13 inputs, at most 20
// input and 56 output channels) on the tensor cores, a block a sample. Unfolding dy for a
// product along k = oc * 25 would copy each value 25 times (240,000 copies
// a sample, for a product of 4.2 million multiply-adds, half of them by
// zeros); instead the block multiplies first and unfolds after, as the
// CPU's GEMM twin does (conv2d_backward_data_gemm): for each input channel
//   z (25 taps, 81 pixels) = w[:, ch]^T (25, oc) . dy (oc, 81),
//   dx[ch] (13 x 13): each input pixel the sum over taps (ky, kx) of z at
//   the output pixel (iy - ky, ix - kx) where that is one (col2im),
// so that the product is dense (2.0 million multiply-adds a sample) and
// the unfolding 20 x 169 sums of at most 25 terms:
// - dy staged once, rounded to TF32, as B: oc rows padded with zeros to 56
//   (7 k-steps of 8), each 9 x 9 plane in rows 13 floats apart (the last 4
//   zeros) in 128 columns. Each warp then holds its columns' fragments in
//   registers for every channel (07: 8 warps of 16 columns, 7
//   fragments each; 08: 4 warps of 32, 14), and the shared memory
//   is reused for A and z;
// - a channel's taps as A, 25 rows padded to 32 (rounded; zeros past 25
//   and past oc, stored once): a thread's loads of the next channel (6 in
//   07, 11 in 08) in flight while this one is multiplied. Every warp
//   loads all of A's fragments, so 08's warps, with twice the
//   columns, load half as many a block as 07's;
// - each warp's 2 x FC fragments of z stored to shared memory; then a
//   thread an input pixel sums its taps in order. z's columns keep dy's
//   rows 13 apart, so a tap that falls left or right of the plane reads
//   one of its zero columns (or, left of z's first row, zeros before it):
//   a thread tests its 5 filter rows alone.
// Three barriers a channel. The tensor cores add each product's terms in an
// order of their own: dx is the TF32 twin's within a product's rounding;
// 07 and 08 are the same bits.
struct MmaInputGradShape {  // the shapes both versions take
    static constexpr int K = 5, KK = K * K, H = 13, OW = H - K + 1, P = OW * OW;
    static constexpr int most_c = 20, most_oc = 56;
};
template <int FC_>
struct MmaInputGrad : MmaInputGradShape {
    static constexpr int FC = FC_;  // a warp's columns of fragments
    static constexpr int R = H;     // a plane's row in z
    static constexpr int M = 32, N = 128, KC = most_oc;  // z's rows (taps) and columns (pixels); k, all at once
    static constexpr int AS = KC + 4, BS = N + 8;       // shared rows of A, and of dy and z, padded
    static constexpr int warps = N / (16 * FC), threads = warps * 32, ksteps = KC / 8;
    static constexpr int a_floats = M * AS, gap = 8, z_floats = M * BS;  // z after A and `gap` zeros
    static constexpr int staged_floats = KC * BS;                        // dy; then A, the gap and z
    static constexpr int a_loads = (KK * most_oc + threads - 1) / threads;
    static_assert(OW * R <= N && R >= OW + K - 1 && gap >= K - 1 && a_floats + gap + z_floats <= staged_floats &&
                  M >= KK && KC % 8 == 0 && N % (16 * FC) == 0 && (a_floats + gap) % 8 == 0);

    // Channel ch's taps, w[o][ch][tap] rounded to TF32, a thread's share:
    // element q is output channel q / 25, tap q % 25, so that a warp reads
    // runs of 25 floats; `at` holds where each of the thread's elements
    // lies from channel 0's (-1 past oc), worked out once. store() puts
    // them at sa[tap][o].
    struct Taps {
        int at[a_loads];
        float v[a_loads];
        __device__ explicit Taps(const Geometry& g) {
#pragma unroll
            for (int i = 0; i < a_loads; ++i) {
                const int q = int(threadIdx.x) + i * threads, o = q / KK;
                at[i] = q < g.oc * KK ? o * g.c * KK + (q - o * KK) : -1;
            }
        }
        __device__ void load(const float* w, int ch) {
            const float* w_ch = w + ch * KK;
#pragma unroll
            for (int i = 0; i < a_loads; ++i)
                if (at[i] >= 0) v[i] = operand(w_ch[at[i]], true);
        }
        __device__ void store(float* sa) const {
#pragma unroll
            for (int i = 0; i < a_loads; ++i) {
                const int q = int(threadIdx.x) + i * threads, o = q / KK;
                if (at[i] >= 0) sa[(q - o * KK) * AS + o] = v[i];
            }
        }
    };
};

template <int FC>
__global__ void __launch_bounds__(MmaInputGrad<FC>::threads, 2)
    input_grad_mma(float* dx, const float* dy, const float* w, Geometry g) {
    using T = MmaInputGrad<FC>;
#ifdef DPTRAIN_TENSOR_CORES
    using namespace nvcuda;
    constexpr int H = T::H, K = T::K, OW = T::OW, P = T::P, R = T::R, N = T::N, AS = T::AS, BS = T::BS;
    __shared__ __align__(32) float staged[T::staged_floats];
    const int sample = int(blockIdx.x), t = int(threadIdx.x), warp = t / 32;
    const float* dy_sample = dy + size_t(sample) * g.oc * P;
    for (int e = t; e < T::KC * N; e += T::threads) {
        const int o = e / N, c = e - o * N, oy = c / R, ox = c - oy * R;
        staged[o * BS + c] = o < g.oc && oy < OW && ox < OW ? operand(dy_sample[o * P + oy * OW + ox], true) : 0.0f;
    }
    typename T::Taps taps(g);
    taps.load(w, 0);
    __syncthreads();
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fb[FC][T::ksteps];
#pragma unroll
    for (int j = 0; j < FC; ++j)
#pragma unroll
        for (int ks = 0; ks < T::ksteps; ++ks)
            wmma::load_matrix_sync(fb[j][ks], staged + 8 * ks * BS + 16 * (FC * warp + j), BS);
    __syncthreads();  // dy is in registers: the space holds A, the gap and z now
    for (int e = t; e < T::a_floats + T::gap + T::z_floats; e += T::threads) staged[e] = 0.0f;
    float* const sa = staged;
    float* const sz = staged + T::a_floats + T::gap;
    float* const dx_sample = dx + size_t(sample) * g.c * H * H;
    for (int ch = 0; ch < g.c; ++ch) {
        __syncthreads();  // the channel before is multiplied and summed (the first time: the zeros stored)
        taps.store(sa);
        __syncthreads();
        if (ch + 1 < g.c) taps.load(w, ch + 1);
        wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc[2][FC];
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int j = 0; j < FC; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
#pragma unroll
        for (int ks = 0; ks < T::ksteps; ++ks) {
            wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                wmma::load_matrix_sync(fa, sa + 16 * i * AS + 8 * ks, AS);
#pragma unroll
                for (int j = 0; j < FC; ++j) wmma::mma_sync(acc[i][j], fa, fb[j][ks], acc[i][j]);
            }
        }
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int j = 0; j < FC; ++j)
                wmma::store_matrix_sync(sz + 16 * i * BS + 16 * (FC * warp + j), acc[i][j], BS, wmma::mem_row_major);
        __syncthreads();
        for (int p = t; p < H * H; p += T::threads) {  // input pixel (iy, ix)
            const int iy = p / H, ix = p - iy * H;
            const float* const z_at = sz + iy * R + ix;
            float sum = 0.0f;
#pragma unroll
            for (int ky = 0; ky < K; ++ky) {
                if (unsigned(iy - ky) >= unsigned(OW)) continue;  // this filter row misses the pixel's row
#pragma unroll
                for (int kx = 0; kx < K; ++kx) sum += z_at[(ky * K + kx) * BS - ky * R - kx];
            }
            dx_sample[ch * H * H + p] = sum;
        }
    }
#else
    (void)dx, (void)dy, (void)w, (void)g;
    __trap();
#endif
}

// conv2d_backward_data by input_grad_mma<FC> where it takes s (a weight
// gradient's slices left to it added first), else by the trainer's
// launcher. (A version includes this after DEV_REPLACES(conv2d_backward_data).)
template <int FC>
void input_grad_mma_or_trainer(float* dx, const float* dy, const float* w, const ConvShape& s, float* scratch,
                               cudaStream_t stream, const UnfinishedWeightGrad& weight) {
    if (!conv2_mma_fits<MmaInputGradShape>(s))
        return TRAINER(conv2d_backward_data)(dx, dy, w, s, scratch, stream, weight);
    if (weight.dw) add_weight_slices(weight, stream);
    launch::kernel("input_grad_mma", input_grad_mma<FC>, unsigned(s.n), unsigned(MmaInputGrad<FC>::threads), stream,
                   dx, dy, w, Geometry(s));
}

}  // namespace dpt::cuda::dev::mma
