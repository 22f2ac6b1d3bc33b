// LeNet's conv2 on the tensor cores under --tf32: a kernel for each of its
// three products, the forward (tf32 version 4: rows_forward_mma), the input
// gradient (7 and 8: input_grad_mma) and the weight gradient (9:
// weight_grad_mma), through CUDA's warp matrix API (nvcuda::wmma, m16n16k8,
// TF32 operands, FP32 sums), which the emulated GPU models as well. The
// launchers of conv_forward.cu, conv_backward_data.cu and
// conv_backward_weight.cu run them where they take a convolution (conv.cuh
// declares how); each is held to the TF32 twin by gpu_tests tf32.
#include "conv.cuh"
#include "versions.hpp"

namespace dpt::cuda::conv {

// Version 4 of --tf32: LeNet's conv2 forward (5x5 filters, stride 1, no
// padding, 13x13 inputs, at most 20 input and 64 output channels) on the
// tensor cores by a kernel of its own, a block a sample. Through the GEMM
// core it was a product of 162 tiles of 64 x 128 split along k, and then a
// kernel to add the splits and pool; version 3 summed it on the FP32 units.
// Here the sample's product, y (oc, 81) = w (oc, c*25) . unfold(x) (c*25,
// 81), padded to 64 x 96 in 4 x 6 fragments of 16 x 16, runs as:
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
//   block's copies run beside the other's products. (Loading the next
//   chunk's taps into registers during the products, and the k-steps in a
//   loop to make room for them, took 17% more instructions a chunk.)
// - then bias, ReLU and the pooling after it, as version 3's kernel does,
//   from the results staged in shared memory.
// The tensor cores add each product's terms in an order of their own, so
// the sums are not version 3's bits; they are the TF32 twin's within a
// product's rounding, as the GEMM core's TF32 tiles are.
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

// A warp's 2 x 2 fragments of a block's product (rows m0 to m0 + 32,
// columns n0 to n0 + 32; warps in pairs down the rows), from A in shared
// rows of AS floats and B in rows of BS, on the tensor cores (compute
// capability 8.0 and later; before it they trap, as Tf32Core's do). The
// forward's and the weight gradient's kernels multiply through it.
template <int AS, int BS>
struct MmaWarp {
    int m0, n0;
#ifdef DPTRAIN_TENSOR_CORES
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 8, float> acc[2][2];

    __device__ explicit MmaWarp(int warp) : m0(32 * (warp % 2)), n0(32 * (warp / 2)) {
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int j = 0; j < 2; ++j) nvcuda::wmma::fill_fragment(acc[i][j], 0.0f);
    }
    // Adds the product of A's first 8 * ksteps columns and B's first 8 * ksteps rows.
    template <int ksteps>
    __device__ void multiply(const float* sa, const float* sb) {
        using namespace nvcuda;
#pragma unroll
        for (int ks = 0; ks < ksteps; ++ks) {
            wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fb[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(fa[i], sa + (m0 + 16 * i) * AS + 8 * ks, AS);
#pragma unroll
            for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[j], sb + 8 * ks * BS + n0 + 16 * j, BS);
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
    }
    // Stores the fragments into `to`, rows of BS floats.
    __device__ void store(float* to) const {
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int j = 0; j < 2; ++j)
                nvcuda::wmma::store_matrix_sync(to + (m0 + 16 * i) * BS + n0 + 16 * j, acc[i][j], BS,
                                                nvcuda::wmma::mem_row_major);
    }
#else
    __device__ explicit MmaWarp(int) : m0(0), n0(0) { __trap(); }
    template <int ksteps>
    __device__ void multiply(const float*, const float*) { __trap(); }
    __device__ void store(float*) const { __trap(); }
#endif
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

// Whether s, with --tf32, is the convolution a tensor-core kernel's T takes:
// LeNet's conv2 (T::K x T::K filters, stride 1, no padding, T::H x T::H
// inputs), with at most T::most_c input and T::most_oc output channels.
template <class T>
bool conv2_mma_fits(const ConvShape& s) {
    return s.math == Math::tf32 && s.n > 0 && s.stride == 1 && s.pad == 0 && s.kh == T::K && s.kw == T::K &&
           s.h == T::H && s.w == T::H && s.c >= 1 && s.c <= T::most_c && s.oc >= 1 && s.oc <= T::most_oc;
}

// Versions 7 and 8 of --tf32: LeNet's conv2 input gradient (5x5 filters,
// stride 1, no padding, 13x13 inputs, at most 20 input and 56 output
// channels) on the tensor cores, a block a sample. Unfolding dy for a
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
//   registers for every channel (version 7: 8 warps of 16 columns, 7
//   fragments each; version 8: 4 warps of 32, 14), and the shared memory
//   is reused for A and z;
// - a channel's taps as A, 25 rows padded to 32 (rounded; zeros past 25
//   and past oc, stored once): a thread's loads of the next channel (6 in
//   version 7, 11 in 8) in flight while this one is multiplied. Every warp
//   loads all of A's fragments, so version 8's warps, with twice the
//   columns, load half as many a block as version 7's;
// - each warp's 2 x FC fragments of z stored to shared memory; then a
//   thread an input pixel sums its taps in order. z's columns keep dy's
//   rows 13 apart, so a tap that falls left or right of the plane reads
//   one of its zero columns (or, left of z's first row, zeros before it):
//   a thread tests its 5 filter rows alone.
// Three barriers a channel. With conv2d_backward_weight 13 (as
// input_grad_rows_tiled_finishing) its blocks first add the weight
// gradient's slices that the layer's weight gradient left
// (finish_weight_slices: finish_splits' bits). The tensor cores add each
// product's terms in an order of their own: dx is the TF32 twin's within a
// product's rounding; versions 7 and 8 are the same bits.
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

template <int FC, bool finishing>
__global__ void __launch_bounds__(MmaInputGrad<FC>::threads, 2)
    input_grad_mma(float* dx, const float* dy, const float* w, Geometry g, UnfinishedWeightGrad weight) {
    using T = MmaInputGrad<FC>;
#ifdef DPTRAIN_TENSOR_CORES
    using namespace nvcuda;
    constexpr int H = T::H, K = T::K, OW = T::OW, P = T::P, R = T::R, N = T::N, AS = T::AS, BS = T::BS;
    if constexpr (finishing) finish_weight_slices(weight);
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
    (void)dx, (void)dy, (void)w, (void)g, (void)weight;
    __trap();
#endif
}


// Version 9 of --tf32: LeNet's conv2 weight gradient (5x5 filters, stride
// 1, no padding, 13x13 inputs, at most 20 input and 56 output channels) on
// the tensor cores. For a sample, [dw] (oc, c * 25) += dy (oc, 81 pixels) .
// unfold(x) (81 pixels, c * 25): a product along the sample's pixels, k = 81
// (11 k-steps of 8, the last 7 zeros). The unfolded input's c * 25 columns
// (500 for LeNet) go to blocks 64 at a time, so that each block unfolds its
// own and the unfolding is done once a sample; a block takes a slice of the
// batch (the rows kernels' slices, into the same scratch: [dw | db] an
// output channel, a slice after another) and one chunk of 64 columns:
// - for each sample, dy staged as A (oc rows of 81 pixels, rows 92 floats
//   apart, zeros past oc and past 81, rounded), and the chunk's input
//   channels (at most 4) staged rounded; then its unfolded input built as B
//   (81 rows of 64 columns, then 7 rows of zeros): each of the 128 threads
//   one column's half of the pixels, whose places in the staged planes are
//   known when compiled;
// - each of 4 warps 2 x 2 fragments of the block's 64 x 64 results, held
//   across the slice's samples, so each (output channel, tap) sums samples
//   then pixels in the tensor cores' order;
// - A's rows past 56 are the staged input channels: A's fragments of 16
//   rows read them, and only result rows past oc, never stored, take them;
// - the bias, from dy as it is (the TF32 twin's): the chunk's block of a
//   slice sums output channels chunk, chunk + chunks, ... in the rows
//   kernels' order, samples, then pixels.
// Three barriers a sample. The tensor cores add each product's terms in an
// order of their own: dw is the TF32 twin's within a product's rounding.
struct MmaWeightGrad {
    static constexpr int K = 5, KK = K * K, H = 13, OW = H - K + 1, P = OW * OW;
    static constexpr int most_c = 20, most_oc = 56;
    static constexpr int M = 64, N = 64, KP = 88;  // the block's result rows and columns; k, padded to k-steps
    static constexpr int AS = KP + 4, BS = N + 4;  // shared rows of A and B, padded
    static constexpr int warps = 4, threads = warps * 32, ksteps = KP / 8;
    static constexpr int most_planes = (N - 1 + KK - 1) / KK + 1;  // input channels a chunk's columns meet
    static constexpr int a_floats = M * AS, x_at = most_oc * AS, b_floats = KP * BS;
    static constexpr int dy_rows = 4, half_p = (P + 1) / 2;  // rows of dy a warp stages at a time; a half-column
    static_assert(threads == 2 * N && KP >= P && KP % 8 == 0 && 3 * 32 >= P && x_at + most_planes * H * H <= a_floats &&
                  M * BS <= b_floats && M == 64 && warps == 2 * (N / 32));  // (MmaWarp: warps in pairs down the rows)
    static int chunks(const ConvShape& s) { return tiled::ceil_div(s.c * KK, N); }

    // Builds rows `from` to `to` (pixels) of the unfolded column whose
    // window starts at sx + at (at < 0: a column past c * 25, zeros).
    template <int from, int to>
    __device__ static void unfold(float* sb, const float* sx, int at, int col) {
#pragma unroll
        for (int p = from; p < to; ++p) sb[p * BS + col] = at >= 0 ? sx[at + (p / OW) * H + p % OW] : 0.0f;
    }
};

__global__ void __launch_bounds__(MmaWeightGrad::threads, 4)
    weight_grad_mma(float* partial, const float* dy, const float* x, Geometry g, int per_slice) {
    using T = MmaWeightGrad;
#ifdef DPTRAIN_TENSOR_CORES
    constexpr int H = T::H, KK = T::KK, P = T::P, AS = T::AS, BS = T::BS, N = T::N;
    __shared__ __align__(32) float staged[T::a_floats + T::b_floats];
    float* const sa = staged;
    float* const sx = staged + T::x_at;
    float* const sb = staged + T::a_floats;
    const int slice = int(blockIdx.x), chunk = int(blockIdx.y), chunks = int(gridDim.y), t = int(threadIdx.x);
    const int s0 = slice * per_slice, s1 = min(g.n, s0 + per_slice), taps = g.c * KK;
    // The chunk's columns and the input channels they meet.
    const int n0 = chunk * N, c0 = n0 / KK, planes = min(g.c, (n0 + N - 1) / KK + 1) - c0;
    // This thread's column of B and half of its pixels, and where the
    // column's window starts among the staged planes.
    const int col = t % N, half = t / N, n = n0 + col, ch = n / KK, tap = n - ch * KK, ky = tap / T::K;
    const int at = n < taps ? (ch - c0) * H * H + ky * H + (tap - ky * T::K) : -1;
    // The bias: output channel `bias_o` of the slice, where this thread has one.
    const int bias_o = chunk + t * chunks;
    float bias = 0.0f;
    for (int e = t; e < T::a_floats + T::b_floats; e += T::threads) staged[e] = 0.0f;
    const int warp = t / 32, lane = t % 32;
    MmaWarp<AS, BS> product(warp);  // the block's 64 x 64 results, held across the slice's samples
    for (int sample = s0; sample < s1; ++sample) {
        __syncthreads();  // the sample before is multiplied (the first time: the zeros are stored)
        const float* dy_sample = dy + size_t(sample) * g.oc * P;
        for (int o0 = warp; o0 < g.oc; o0 += T::dy_rows * T::warps) {  // a warp a row, 3 pixels a lane
            float v[T::dy_rows][3];  // a batch's loads in flight before it stores any
#pragma unroll
            for (int r = 0; r < T::dy_rows; ++r)
#pragma unroll
                for (int q = 0; q < 3; ++q) {
                    const int o = o0 + r * T::warps, p = lane + 32 * q;
                    v[r][q] = o < g.oc && p < P ? operand(dy_sample[o * P + p], true) : 0.0f;
                }
#pragma unroll
            for (int r = 0; r < T::dy_rows; ++r)
#pragma unroll
                for (int q = 0; q < 3; ++q) {
                    const int o = o0 + r * T::warps, p = lane + 32 * q;
                    if (o < g.oc && p < P) sa[o * AS + p] = v[r][q];
                }
        }
        const float* x_planes = x + (size_t(sample) * g.c + c0) * H * H;
        for (int e = t; e < planes * H * H; e += T::threads) sx[e] = operand(x_planes[e], true);
        __syncthreads();
        if (half == 0) T::unfold<0, T::half_p>(sb, sx, at, col);
        else T::unfold<T::half_p, P>(sb, sx, at, col);
        if (bias_o < g.oc) {
            const float* row = dy_sample + bias_o * P;
            for (int p = 0; p < P; ++p) bias += row[p];
        }
        __syncthreads();
        product.multiply<T::ksteps>(sa, sb);
    }
    __syncthreads();  // every warp's last fragments are read: B's space holds the results now (M rows of BS)
    product.store(sb);
    __syncthreads();
    float* const out = partial + size_t(slice) * g.oc * (taps + 1);
    for (int e = t; e < g.oc * N; e += T::threads) {
        const int o = e / N, q = e - o * N;
        if (n0 + q < taps) out[size_t(o) * (taps + 1) + n0 + q] = sb[o * BS + q];
    }
    if (bias_o < g.oc) out[size_t(bias_o) * (taps + 1) + taps] = bias;
#else
    (void)partial, (void)dy, (void)x, (void)g, (void)per_slice;
    __trap();
#endif
}

bool rows_forward_mma_fits(const ConvShape& s) { return tf32_version >= 4 && conv2_mma_fits<MmaRows>(s); }

void launch_rows_forward_mma(bool relu, bool pooled, PoolKind kind, float* y, float* pooled_y, const float* x,
                             const float* w, const float* b, const ConvShape& s, PoolGeometry pg, cudaStream_t stream) {
    const auto run = [&](auto kernel) {
        launch::kernel("rows_forward_mma", kernel, unsigned(s.n), unsigned(MmaRows::threads), stream, y, pooled_y, x,
                       w, b, Geometry(s), pg);
    };
    if (pooled)  // (after the ReLU: conv_forward.cu pools no other forward)
        return kind == PoolKind::max ? run(rows_forward_mma<true, true, PoolKind::max>)
                                     : run(rows_forward_mma<true, true, PoolKind::avg>);
    return relu ? run(rows_forward_mma<true, false, PoolKind::max>) : run(rows_forward_mma<false, false, PoolKind::max>);
}

// Whether tf32 version 7's (8's) kernel takes s.
bool input_grad_mma_fits(const ConvShape& s) { return tf32_version >= 7 && conv2_mma_fits<MmaInputGradShape>(s); }

void launch_input_grad_mma(float* dx, const float* dy, const float* w, const ConvShape& s,
                           const UnfinishedWeightGrad& weight, cudaStream_t stream) {
    const Geometry g(s);
    const auto run = [&](auto kernel, unsigned threads) {
        launch::kernel("input_grad_mma", kernel, unsigned(s.n), threads, stream, dx, dy, w, g, weight);
    };
    if (tf32_version >= 8)
        return weight.dw ? run(input_grad_mma<2, true>, MmaInputGrad<2>::threads)
                         : run(input_grad_mma<2, false>, MmaInputGrad<2>::threads);
    return weight.dw ? run(input_grad_mma<1, true>, MmaInputGrad<1>::threads)
                     : run(input_grad_mma<1, false>, MmaInputGrad<1>::threads);
}

// Whether tf32 version 9's kernel takes s.
bool weight_grad_mma_fits(const ConvShape& s) {
    return tf32_version >= 9 && s.n > 0 && conv2_mma_fits<MmaWeightGrad>(s);
}
WeightSlicesKernel weight_grad_mma_kernel() { return weight_grad_mma; }
int weight_grad_mma_chunks(const ConvShape& s) { return MmaWeightGrad::chunks(s); }
static_assert(MmaWeightGrad::threads == weight_grad_mma_threads);

}  // namespace dpt::cuda::conv
