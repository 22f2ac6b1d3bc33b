// --tf32: LeNet's conv2 weight gradient on the tensor cores by a kernel of
// its own (weight_grad_mma), a block a slice of the batch and 64 of the
// unfolded input's columns, its slices then added in order (the trainer's
// add_weight_slices, as FP32's rows kernel's are).
//
// Against the trainer's (--tf32 runs that weight gradient as an implicit
// GEMM on the GEMM core's TF32 tiles, split along the batch's pixels, a
// bias kernel and a finishing kernel): for each sample of a slice, dy (oc x
// 81) times the unfolded input (81 x 64) that the block builds in shared
// memory from the staged planes, the results held in the warps' fragments
// across the slice; the bias summed from dy as it is. The tensor cores'
// sums, within a product's rounding of the TF32 twin, not the trainer's
// bits.
//
// Measured: not yet timed on a GPU.
#include "dev.hpp"
#include "tf32/mma.cuh"

DEV_REPLACES(conv2d_backward_weight)

namespace {

using namespace dpt;
using namespace dpt::cuda;
using namespace dpt::cuda::conv;
using namespace dpt::cuda::dev::mma;

// The kernel: LeNet's conv2 weight gradient (5x5 filters, stride 1, no
// padding, 13x13 inputs, at most 20 input and 56 output channels) on the
// tensor cores. For a sample, [dw] (oc, c * 25) += dy (oc, 81 pixels) .
// unfold(x) (81 pixels, c * 25): a product along the sample's pixels, k = 81
// (11 k-steps of 8, the last 7 zeros). The unfolded input's c * 25 columns
// (500 for LeNet) go to blocks 64 at a time, so that each block unfolds its
// own and the unfolding is done once a sample; a block takes a slice of the
// batch (the FP32 rows kernel's slices, into the same scratch: [dw | db]
// an output channel, a slice after another) and one chunk of 64 columns:
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
//   kernel's order, samples, then pixels.
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
    static_assert(T::ksteps > 0 && T::dy_rows > 0 && T::half_p > 0);  // (read where the tensor cores are)
    __trap();
#endif
}

}  // namespace

namespace DEV_NAMESPACE {

void conv2d_backward_weight(float* dw, float* db, const float* dy, const float* x, const ConvShape& s, Workspace ws,
                            cudaStream_t stream) {
    if (!conv2_mma_fits<MmaWeightGrad>(s)) return TRAINER(conv2d_backward_weight)(dw, db, dy, x, s, ws, stream);
    // The batch's slices, as the rows kernel takes them (conv2d_scratch_floats holds their [dw | db]).
    const int splits = conv2d_weight_grad_splits(s), per_slice = tiled::ceil_div(s.n, splits),
              slices = tiled::ceil_div(s.n, per_slice);
    launch::kernel("weight_grad_mma", weight_grad_mma, dim3(unsigned(slices), unsigned(MmaWeightGrad::chunks(s))),
                   unsigned(MmaWeightGrad::threads), stream, ws.scratch, dy, x, Geometry(s), per_slice);
    add_weight_slices({dw, db, ws.scratch, slices, s.oc, s.col_rows()}, stream);
}

}  // namespace DEV_NAMESPACE

DEV_VERSION("tf32/09_weight_grad_mma",
            "--tf32: LeNet's conv2 weight gradient on the tensor cores by a kernel of its own, a block a slice of the "
            "batch and 64 unfolded columns (dy times the unfolded input built in shared memory, the fragments held "
            "across the slice), the slices added in order, where the trainer's runs the GEMM core's TF32 tiles, a "
            "bias kernel and a finishing kernel",
            "not yet timed", l.conv2d_backward_weight = &DEV_NAMESPACE::conv2d_backward_weight)
