// The convolution's input gradient on the GPU (conv.cuh: the three
// products, and what their sources share): conv2d_backward_data.
// - the unfolded gradient w^T . dy into columns, then each pixel gathers
//   its taps (gather_input_grad), no product of a known zero;
// - the stride-1 convolutions of small planes by rows of the input plane
//   (input_grad_rows, input_grad_rows_staged_batched; LeNet's conv2 on
//   input_grad_rows_tiled_wide, which can first add conv2's weight
//   gradient's slices).
#include "conv.cuh"
#include "conv_rows.cuh"
#include "kernels.hpp"
#include "launch.cuh"
#include "fastdiv.cuh"
#include "pool.cuh"
#include "tiles.cuh"

#include <cstdint>
#include <stdexcept>
#include <string>

namespace dpt::cuda {
using namespace conv;  // (conv.cuh: what the convolution's sources share)
namespace {

// The input gradient in two passes with no product of a known
// zero: dcol (c*kh*kw, n*oh*ow) = w^T (c*kh*kw, oc) . dy (oc, n*oh*ow), the
// gradient of every unfolded element; then each dx element gathers the
// dcol elements of the taps that saw it (col2im), in tap order. (The
// first pass's operands: conv.cuh's WeightColumns and OutputGradColumns.)

// The input gradient of pixel (iy, ix) of channel ch from the columns of its
// sample (`sample`: column (s, 0, 0) of row 0; `cols`: a row's length), with
// stride 1: the taps that reach it are a range of ky and of kx.
__device__ inline float gathered_unit_stride(const float* sample, size_t cols, const Geometry& g, int ch, int iy,
                                             int ix) {
    // Output (iy + pad - ky, ix + pad - kx) must lie in the output.
    const int ky_lo = max(0, iy + g.pad - g.oh + 1), ky_hi = min(g.kh - 1, iy + g.pad);
    const int kx_lo = max(0, ix + g.pad - g.ow + 1), kx_hi = min(g.kw - 1, ix + g.pad);
    float sum = 0.0f;
    for (int ky = ky_lo; ky <= ky_hi; ++ky) {
        const float* tap_row = sample + size_t((ch * g.kh + ky) * g.kw) * cols + (iy + g.pad - ky) * g.ow + ix + g.pad;
        for (int kx = kx_lo; kx <= kx_hi; ++kx) sum += tap_row[size_t(kx) * cols - kx];
    }
    return sum;
}

// (int indices split by multiplication: dx has fewer than 2^31 elements,
// which conv2d_backward_data checks.) With stride 1 the taps that reach an
// output pixel are a range of ky and of kx, found once; otherwise each tap
// is tested. Either way the taps are added in the same order (ky, then kx).
template <bool unit_stride>
__global__ void gather_input_grad(float* dx, const float* dcol, Geometry g) {
    const int count = g.n * g.c * g.h * g.w;
    const size_t cols = size_t(g.n) * g.oh * g.ow;
    for (const int i : launch::grid_stride(count)) {
        const int row = g.by_w.div(i), ix = g.by_w.rest(i, row), plane = g.by_h.div(row), iy = g.by_h.rest(row, plane);
        const int s = g.by_c.div(plane), ch = g.by_c.rest(plane, s);
        const float* sample = dcol + size_t(s) * g.oh * g.ow;  // column (s, 0, 0) of row 0
        float sum = 0.0f;
        if constexpr (unit_stride) {
            sum = gathered_unit_stride(sample, cols, g, ch, iy, ix);
        } else {
            for (int ky = 0; ky < g.kh; ++ky) {
                const int ty = iy + g.pad - ky;
                if (ty < 0 || ty % g.stride != 0 || ty / g.stride >= g.oh) continue;
                for (int kx = 0; kx < g.kw; ++kx) {
                    const int tx = ix + g.pad - kx;
                    if (tx < 0 || tx % g.stride != 0 || tx / g.stride >= g.ow) continue;
                    const size_t r = size_t((ch * g.kh + ky) * g.kw + kx);
                    sum += sample[r * cols + (ty / g.stride) * g.ow + tx / g.stride];
                }
            }
        }
        dx[i] = sum;
    }
}

// The input gradient of a stride-1 convolution of small planes (ResNet-18's
// 3x3 convolutions on 12x12 and 6x6): the two passes above write the unfolded gradient w^T . dy to memory and reads it back to
// gather each pixel's taps, two passes over c*kh*kw values a pixel (41 MB
// each way for LeNet's conv2 at batch 256). Here a block takes a sample,
// stages its dy in shared memory, as many output channels at a time as
// fit, and each
// thread sums a row of the input gradient for `rows_group` channels in
// registers: for each output channel and filter row, the dy row it reaches
// is read once and multiplied into the whole row, every filter tap a
// multiply-add a row pixel and no product of a known zero (a thread whose
// row a filter row misses skips it). Each sum runs over output channels,
// then filter rows, then filter columns: a fixed order. The row's width and
// the filter are template arguments (so the row lives in registers); the
// shapes dispatched are listed in input_grad_rows_kernel.
constexpr int rows_group = 2, rows_staged = 4096, rows_most_threads = 512;

template <int K, int P, int OW>
__global__ void __launch_bounds__(rows_most_threads) input_grad_rows(float* dx, const float* dy, const float* w,
                                                                      Geometry g) {
    constexpr int W = OW + K - 1 - 2 * P;  // the input's width (stride 1)
    __shared__ float staged[rows_staged];
    const int sample = int(blockIdx.x), plane = g.oh * OW, chunk = rows_staged / plane;
    const int group = int(threadIdx.x) / g.h, iy = int(threadIdx.x) - group * g.h, c0 = group * rows_group;
    const bool active = c0 < g.c;
    float acc[rows_group][W] = {};
    const float* dy_sample = dy + size_t(sample) * g.oc * plane;
    for (int co0 = 0; co0 < g.oc; co0 += chunk) {
        const int count = min(chunk, g.oc - co0);
        __syncthreads();  // the previous chunk's sums are done
        for (int e = int(threadIdx.x); e < count * plane; e += int(blockDim.x)) staged[e] = dy_sample[size_t(co0) * plane + e];
        __syncthreads();
        if (!active) continue;
        for (int co = 0; co < count; ++co) {
            const float* wp = w + (size_t(co0 + co) * g.c + c0) * (K * K);
#pragma unroll
            for (int ky = 0; ky < K; ++ky) {
                const int oy = iy + P - ky;
                if (oy < 0 || oy >= g.oh) continue;  // this filter row misses the thread's row
                float d[OW];
#pragma unroll
                for (int ox = 0; ox < OW; ++ox) d[ox] = staged[co * plane + oy * OW + ox];
#pragma unroll
                for (int kx = 0; kx < K; ++kx) {
                    float wv[rows_group];
#pragma unroll
                    for (int u = 0; u < rows_group; ++u) wv[u] = c0 + u < g.c ? wp[(u * K + ky) * K + kx] : 0.0f;
#pragma unroll
                    for (int ox = 0; ox < OW; ++ox) {
                        const int ix = ox + kx - P;
                        if (ix < 0 || ix >= W) continue;  // (known when compiled)
#pragma unroll
                        for (int u = 0; u < rows_group; ++u) acc[u][ix] = fmaf(d[ox], wv[u], acc[u][ix]);
                    }
                }
            }
        }
    }
    if (!active) return;
#pragma unroll
    for (int u = 0; u < rows_group; ++u) {
        if (c0 + u >= g.c) break;
        float* row = dx + ((size_t(sample) * g.c + c0 + u) * g.h + iy) * W;
#pragma unroll
        for (int ix = 0; ix < W; ++ix) row[ix] = acc[u][ix];
    }
}

// input_grad_rows' block: a thread a row of each channel group, in whole warps.
int input_grad_rows_threads(const ConvShape& s) {
    return tiled::ceil_div(tiled::ceil_div(s.c, rows_group) * s.h, 32) * 32;
}

// input_grad_rows for s, or null where the two passes run instead: stride
// 1, a 5x5 filter without padding on 9-wide outputs (LeNet's conv2), a 3x3
// with padding 1 on 12 or 6 (ResNet-18's) or without on 7 (a test's). On
// an H200 (kernel_bench, batch 256) these took 1.00x (LeNet's conv2), 0.57x
// (64 channels on 12x12) and 0.85x (128 on 6x6) of the two passes' time;
// ResNet-18's 256 channels on 3x3 took 1.23x, so the two passes keep them.
using RowsKernel = void (*)(float*, const float*, const float*, Geometry);
using RowsStagedKernel = void (*)(float*, const float*, const float*, Geometry, int);
struct StagedLaunch {  // the staged kernel (null where it does not run), its chunk, threads
    RowsStagedKernel kernel;
    int chunk, threads;
};
RowsKernel input_grad_rows_kernel(const ConvShape& s) {
    if (s.math != Math::fp32 || s.n <= 0 || s.stride != 1 || s.kh != s.kw ||
        s.oh() * s.ow() > rows_staged || input_grad_rows_threads(s) > rows_most_threads)
        return nullptr;
    const int k = s.kh, p = s.pad, ow = s.ow();
    if (k == 5 && p == 0 && ow == 9) return input_grad_rows<5, 0, 9>;
    if (k == 3 && p == 1 && ow == 12) return input_grad_rows<3, 1, 12>;
    if (k == 3 && p == 1 && ow == 6) return input_grad_rows<3, 1, 6>;
    if (k == 3 && p == 0 && ow == 7) return input_grad_rows<3, 0, 7>;
    return nullptr;
}

// input_grad_rows_staged_batched: input_grad_rows' sums, in its order, bit
// for bit, with four things changed that a LeNet step's profile pointed at
// (input_grad_rows was its longest kernel, at 12 TFLOP/s):
// - the filters of a chunk of output channels are staged in shared memory
//   beside dy (input_grad_rows reads them from global memory in the inner
//   loop);
// - the staged rows are padded to a multiple of 4 floats, so that a thread
//   reads a dy row and a filter row 16 bytes at a time, and a channel's
//   filters to an odd number of 16-byte units, so that the 8 channels a
//   quarter-warp reads fall in different banks;
// - a thread sums a row of one channel, and the threads of one input row
//   sit side by side (thread = row * c + channel): a warp spans two or three
//   rows, which skip nearly the same filter rows, where input_grad_rows'
//   warps span a group's every row and run the union of their filter rows,
//   and twice the threads are in flight;
// - each chunk is staged in batches (conv.cuh: staged_rows_floats,
//   StagedFilters, stage).

// Stages output channels co0 to co0 + count of a sample's dy (dy_sample), in
// rows of OWP floats, each value an operand (rounded to TF32 with --tf32).
template <int OW, int OWP, Staging how>
__device__ inline void stage_output_grad_rows(float* sdy, const float* dy_sample, const Geometry& g, int co0,
                                              int count) {
    const float* from = dy_sample + size_t(co0) * g.oh * OW;
    stage<how>(sdy, count * g.oh * OW, [&](int e, int& at) {
        const int r = e / OW;
        at = r * OWP + (e - r * OW);
        return operand(from[e], g.tf32);
    });
}

// Stages the filters of output channels co0 to co0 + count for every input
// channel, a channel's filters for one output channel side by side
// (StagedFilters), each value an operand.
template <int K, Staging how>
__device__ inline void stage_filters_by_output(float* sw, const float* w, const Geometry& g, int co0, int count) {
    using F = StagedFilters<K>;
    constexpr int KK = K * K;
    const float* w_chunk = w + size_t(co0) * g.c * KK;
    stage<how>(sw, count * g.c * KK, [&](int e, int& at) {
        const int q = e / KK, t = e - q * KK, ky = t / K;
        at = q * F::channel + ky * F::row + (t - ky * K);
        return operand(w_chunk[e], g.tf32);
    });
}

template <int K, int P, int OW, Staging how>
__device__ inline void input_grad_rows_staged_sums(float* staged, float* dx, const float* dy, const float* w,
                                                   Geometry g, int chunk) {
    constexpr int W = OW + K - 1 - 2 * P;  // the input's width (stride 1)
    constexpr int OWP = (OW + 3) / 4 * 4;
    using F = StagedFilters<K>;
    float* const sdy = staged;                           // chunk x oh rows of OWP
    float* const sw = staged + size_t(chunk) * g.oh * OWP;  // chunk x c channels of F::channel
    const int sample = int(blockIdx.x);
    const int iy = int(threadIdx.x) / g.c, ch = int(threadIdx.x) - iy * g.c;
    const bool active = iy < g.h;
    float acc[W] = {};
    const float* dy_sample = dy + size_t(sample) * g.oc * g.oh * OW;
    for (int co0 = 0; co0 < g.oc; co0 += chunk) {
        const int count = min(chunk, g.oc - co0);
        __syncthreads();  // the previous chunk's sums are done
        stage_output_grad_rows<OW, OWP, how>(sdy, dy_sample, g, co0, count);
        stage_filters_by_output<K, how>(sw, w, g, co0, count);
        __syncthreads();
        if (!active) continue;
        for (int co = 0; co < count; ++co) {
            const float* wp = sw + (co * g.c + ch) * F::channel;
#pragma unroll
            for (int ky = 0; ky < K; ++ky) {
                const int oy = iy + P - ky;
                if (oy < 0 || oy >= g.oh) continue;  // this filter row misses the thread's row
                float d[OWP], wv[F::row];
                load_row<OWP>(d, sdy + (co * g.oh + oy) * OWP);
                load_row<F::row>(wv, wp + ky * F::row);
#pragma unroll
                for (int kx = 0; kx < K; ++kx) {
#pragma unroll
                    for (int ox = 0; ox < OW; ++ox) {
                        const int ix = ox + kx - P;
                        if (ix < 0 || ix >= W) continue;  // (known when compiled)
                        acc[ix] = fmaf(d[ox], wv[kx], acc[ix]);
                    }
                }
            }
        }
    }
    if (!active) return;
    float* row = dx + ((size_t(sample) * g.c + ch) * g.h + iy) * W;
#pragma unroll
    for (int ix = 0; ix < W; ++ix) row[ix] = acc[ix];
}

template <int K, int P, int OW>
__global__ void __launch_bounds__(staged_rows_most_threads)
    input_grad_rows_staged_batched(float* dx, const float* dy, const float* w, Geometry g, int chunk) {
    __shared__ __align__(16) float staged[staged_rows_floats];
    input_grad_rows_staged_sums<K, P, OW, Staging::batched>(staged, dx, dy, w, g, chunk);
}

// The staged kernel for s, or null where input_grad_rows (or the two
// passes) runs; chunk is the output channels a block stages at a time. It
// takes LeNet's conv2 (5x5 filters on 9-wide outputs) where the tiled
// kernel below does not, and a test's 3x3 on 7-wide ones. On an H200
// (kernel_bench, batch 256) it took 0.73x of input_grad_rows' time on
// LeNet's conv2 (0.0652 ms against 0.0897), but 1.27x and 1.50x on
// ResNet-18's 3x3 convolutions on 12x12 and 6x6 (64 and 128 channels: 768
// threads a block, half the rows of a warp skipping a filter row the other
// half needs, where input_grad_rows' 2 channels a thread read each dy row
// for both), which input_grad_rows keeps.
StagedLaunch input_grad_rows_staged_kernel(const ConvShape& s) {
    StagedLaunch l{nullptr, 0, whole_warps(s.c * s.h)};
    if (s.n <= 0 || s.stride != 1 || s.kh != s.kw || l.threads > staged_rows_most_threads) return l;
    const int k = s.kh, p = s.pad, ow = s.ow();
    // As many output channels a chunk as fit, then the chunks evened out.
    const auto fits = [&](int channel) {
        const int most = staged_rows_floats / (s.oh() * tiled::ceil_div(ow, 4) * 4 + s.c * channel);
        if (most < 1) return false;
        l.chunk = evened_chunk(s.oc, most);
        return true;
    };
    if (k == 5 && p == 0 && ow == 9 && fits(StagedFilters<5>::channel))
        l.kernel = input_grad_rows_staged_batched<5, 0, 9>;
    else if (k == 3 && p == 0 && ow == 7 && fits(StagedFilters<3>::channel))
        l.kernel = input_grad_rows_staged_batched<3, 0, 7>;
    return l;
}

using Tiled = TiledInputGrad<10, 2>;  // (conv_rows.cuh)
__global__ void __launch_bounds__(Tiled::threads)
    input_grad_rows_tiled_wide(float* dx, const float* dy, const float* w, Geometry g) {
    __shared__ __align__(16) float staged[Tiled::sw_floats + Tiled::sdy_floats];
    input_grad_rows_tiled_sums<Tiled::CH, Tiled::G>(staged, dx, dy, w, g);
}

// The tiled kernel whose blocks first add a weight gradient's slices
// (conv2d_backward_weight_unfinished): the two gradients of LeNet's conv2 without finish_splits
// between them. The slices' sums are finish_splits', bit for bit; the
// input gradient's sums are untouched by them (none of its scratch, no
// shared memory, before its first barrier).
__global__ void __launch_bounds__(Tiled::threads)
    input_grad_rows_tiled_finishing(float* dx, const float* dy, const float* w, Geometry g,
                                    UnfinishedWeightGrad weight) {
    finish_weight_slices(weight);
    __shared__ __align__(16) float staged[Tiled::sw_floats + Tiled::sdy_floats];
    input_grad_rows_tiled_sums<Tiled::CH, Tiled::G>(staged, dx, dy, w, g);
}

// The two passes' first half: the unfolded input gradient
// w^T . dy (c*kh*kw, n*oh*ow) into dcol, for a gather to add up.
void input_grad_columns(float* dcol, const float* dy, const float* w, const ConvShape& s, cudaStream_t stream) {
    if (s.in_size() >= (size_t(1) << 31))
        throw std::length_error("a convolution's input of " + std::to_string(s.in_size()) +
                                " values: its gradient's gather indexes at most 2^31 (use a smaller batch per device)");
    const int cols = s.n * s.col_cols();
    const OutputGradColumns b{{dy, s.oc, FastDiv(s.col_cols())}};
    const tiled::StoreMatrix out{dcol, cols, false};
    tiled::gemm(s.col_rows(), cols, s.oc, WeightColumns{w, s.col_rows()}, b, out, stream, 1, s.math);
}

}  // namespace

// Whether s's input gradient runs on a kernel that adds a weight
// gradient's slices itself (input_grad_rows_tiled_finishing).
bool conv::input_grad_finishes_slices(const ConvShape& s, const float* w) { return input_grad_rows_tiled_fits(s, w); }

size_t conv::input_grad_columns_floats(const ConvShape& s) { return size_t(s.col_rows()) * s.n * s.col_cols(); }

void conv2d_backward_data(float* dx, const float* dy, const float* w, const ConvShape& s, float* scratch,
                          cudaStream_t stream, const UnfinishedWeightGrad& weight) {
    const Geometry g(s);
    if (weight.dw && input_grad_finishes_slices(s, w))
        return launch::kernel("input_grad_rows_tiled_finishing", input_grad_rows_tiled_finishing, unsigned(s.n),
                              unsigned(Tiled::threads), stream, dx, dy, w, g, weight);
    if (weight.dw) add_weight_slices(weight, stream);  // (before any kernel below reuses the scratch)
    if (input_grad_rows_tiled_fits(s, w))
        return launch::kernel("input_grad_rows_tiled_wide", input_grad_rows_tiled_wide, unsigned(s.n),
                              unsigned(Tiled::threads), stream, dx, dy, w, g);
    if (const StagedLaunch l = input_grad_rows_staged_kernel(s); l.kernel)
        return launch::kernel("input_grad_rows_staged_batched", l.kernel, unsigned(s.n), unsigned(l.threads), stream,
                              dx, dy, w, g, l.chunk);
    if (const RowsKernel rows = input_grad_rows_kernel(s))
        return launch::kernel("input_grad_rows", rows, unsigned(s.n), unsigned(input_grad_rows_threads(s)), stream, dx,
                              dy, w, g);
    input_grad_columns(scratch, dy, w, s, stream);
    if (s.stride == 1)
        launch::kernel("gather_input_grad", gather_input_grad<true>, launch::grid_for(s.in_size()), launch::threads,
                       stream, dx, scratch, g);
    else
        launch::kernel("gather_input_grad", gather_input_grad<false>, launch::grid_for(s.in_size()), launch::threads,
                       stream, dx, scratch, g);
}

}  // namespace dpt::cuda
