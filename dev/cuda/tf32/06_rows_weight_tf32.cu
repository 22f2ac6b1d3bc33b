// --tf32: LeNet's conv2 weight gradient on the FP32 units by a rows kernel
// (weight_grad_rows_tf32), as FP32 runs it, each operand rounded to TF32 as
// it is staged (a product of two TF32 numbers is exact in FP32), and dy
// staged as it is too, for the bias.
//
// Against the trainer's (--tf32 runs that weight gradient as an implicit
// GEMM on the GEMM core's TF32 tiles, split along the batch's pixels, then
// a bias kernel and a finishing kernel; FP32 runs it on the prefetching
// rows kernel, kernels/cuda/conv_backward_weight.cu): a block a slice of
// the batch and half the output channels, a thread an (output, input)
// channel pair's 25 taps and its output channel's bias in registers, a
// sample's x and dy staged at a time, the loop over x's rows with the 5 dy
// rows that meet the current one in registers (the trainer's
// weight_rows_window_sample, staged serially: no prefetch); then the
// slices added in order (add_weight_slices). The FP32 twin's sums on
// rounded operands, not the trainer's --tf32 bits (its tensor cores add in
// their own order).
//
// Measured: not yet timed on a GPU.
#include "cuda/conv.cuh"
#include "dev.hpp"

DEV_REPLACES(conv2d_backward_weight)

namespace {

using namespace dpt;
using namespace dpt::cuda;
using namespace dpt::cuda::conv;

// LeNet's conv2: 5x5 filters on 13x13 inputs, 9x9 outputs.
struct Rows {
    static constexpr int K = 5, KK = K * K, OW = 9, OH = 9, H = OH + K - 1, W = OW + K - 1;
    static constexpr int XP = (W + 3) / 4 * 4, OWP = (OW + 3) / 4 * 4;  // staged rows, padded to 16 bytes
    static constexpr int xc = H * XP + ((H * XP / 4) % 2 == 0 ? 4 : 0);  // a channel: an odd number of 16-byte units
    static constexpr int parts = 2, most_threads = 512;                  // blocks a slice (output channels halved)
    static int per(const ConvShape& s) { return tiled::ceil_div(s.oc, parts); }
    static int threads(const ConvShape& s) { return whole_warps(per(s) * s.c); }
    // Staged: x (c channels of xc), dy rounded and dy as it is (the block's channels, OH rows of OWP each).
    static bool fits(const ConvShape& s) {
        return s.math == Math::tf32 && s.n > 0 && s.stride == 1 && s.pad == 0 && s.kh == K && s.kw == K &&
               s.h == H && s.w == W && threads(s) <= most_threads &&
               s.c * xc + 2 * per(s) * OH * OWP <= staged_rows_floats;
    }
};

__global__ void __launch_bounds__(Rows::most_threads)
    weight_grad_rows_tf32(float* partial, const float* dy, const float* x, Geometry g, int per_slice) {
    using R = Rows;
    constexpr int K = R::K, KK = R::KK, OH = R::OH, OW = R::OW;
    __shared__ __align__(16) float staged[staged_rows_floats];
    const int slice = int(blockIdx.x), per = (g.oc + int(gridDim.y) - 1) / int(gridDim.y);
    const int first = int(blockIdx.y) * per, mine = min(per, g.oc - first);
    const int lo = int(threadIdx.x) / g.c, ch = int(threadIdx.x) - lo * g.c;
    const bool active = lo < mine;
    const int s0 = slice * per_slice, s1 = min(g.n, s0 + per_slice);
    float* const sx = staged;
    float* const sdy = staged + g.c * R::xc;
    float* const sdy_raw = sdy + mine * OH * R::OWP;
    float acc[K][K] = {}, bias = 0.0f;
    for (int sample = s0; sample < s1; ++sample) {
        __syncthreads();  // the previous sample's sums are done
        const float* xs = x + size_t(sample) * g.c * R::H * R::W;
        for (int e = int(threadIdx.x); e < g.c * R::H * R::XP; e += int(blockDim.x)) {
            const int r = e / R::XP, ix = e - r * R::XP, c = r / R::H;
            sx[c * R::xc + (r - c * R::H) * R::XP + ix] = ix < R::W ? operand(xs[size_t(r) * R::W + ix], true) : 0.0f;
        }
        const float* dys = dy + (size_t(sample) * g.oc + first) * OH * OW;
        for (int e = int(threadIdx.x); e < mine * OH * OW; e += int(blockDim.x)) {
            const int r = e / OW, at = r * R::OWP + (e - r * OW);
            sdy[at] = operand(dys[e], true);
            sdy_raw[at] = dys[e];
        }
        __syncthreads();
        if (!active) continue;
        float d[K][R::OWP];  // dy row oy in d[oy % K]
#pragma unroll
        for (int iy = 0; iy < R::H; ++iy) {
            if (iy < OH) {
                load_row<R::OWP>(d[iy % K], sdy + (lo * OH + iy) * R::OWP);
                float raw[R::OWP];
                load_row<R::OWP>(raw, sdy_raw + (lo * OH + iy) * R::OWP);
#pragma unroll
                for (int ox = 0; ox < OW; ++ox) bias += raw[ox];
            }
            float xr[R::XP];
            load_row<R::XP>(xr, sx + ch * R::xc + iy * R::XP);
#pragma unroll
            for (int ky = 0; ky < K; ++ky) {
                const int oy = iy - ky;  // the dy row that meets input row iy through filter row ky
                if (oy < 0 || oy >= OH) continue;
#pragma unroll
                for (int kx = 0; kx < K; ++kx)
#pragma unroll
                    for (int ox = 0; ox < OW; ++ox) acc[ky][kx] = fmaf(d[oy % K][ox], xr[ox + kx], acc[ky][kx]);
            }
        }
    }
    if (!active) return;
    // [dw | db] an output channel, a slice after another: the pair's taps, and the bias from input channel 0's threads.
    const int taps = g.c * KK;
    float* out = partial + (size_t(slice) * g.oc + first + lo) * (taps + 1);
#pragma unroll
    for (int ky = 0; ky < K; ++ky)
#pragma unroll
        for (int kx = 0; kx < K; ++kx) out[ch * KK + ky * K + kx] = acc[ky][kx];
    if (ch == 0) out[taps] = bias;
}

}  // namespace

namespace DEV_NAMESPACE {

void conv2d_backward_weight(float* dw, float* db, const float* dy, const float* x, const ConvShape& s, Workspace ws,
                            cudaStream_t stream) {
    if (!Rows::fits(s)) return TRAINER(conv2d_backward_weight)(dw, db, dy, x, s, ws, stream);
    // The batch's slices, as FP32's rows kernel takes them (conv2d_scratch_floats holds their [dw | db]).
    const int splits = conv2d_weight_grad_splits(s), per_slice = tiled::ceil_div(s.n, splits),
              slices = tiled::ceil_div(s.n, per_slice);
    launch::kernel("weight_grad_rows_tf32", weight_grad_rows_tf32, dim3(unsigned(slices), unsigned(Rows::parts)),
                   unsigned(Rows::threads(s)), stream, ws.scratch, dy, x, Geometry(s), per_slice);
    add_weight_slices({dw, db, ws.scratch, slices, s.oc, s.col_rows()}, stream);
}

}  // namespace DEV_NAMESPACE

DEV_VERSION("tf32/06_rows_weight_tf32",
            "--tf32: LeNet's conv2 weight gradient on the FP32 units by a rows kernel, a block a slice of the batch "
            "and half the output channels, x and dy rounded to TF32 as they are staged (dy as it is too, for the "
            "bias), the slices added in order, where the trainer's runs the GEMM core's TF32 tiles, a bias kernel "
            "and a finishing kernel",
            "not yet timed", l.conv2d_backward_weight = &DEV_NAMESPACE::conv2d_backward_weight)
