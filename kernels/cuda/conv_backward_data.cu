// The convolution's input gradient on the GPU (conv.cuh: the three
// products, and what their sources share): conv2d_backward_data.
// - version 1: the product w^T . spread(dy), each dx element once;
// - version 2: the unfolded gradient w^T . dy into columns, then each pixel
//   gathers its taps (gather_input_grad), no product of a known zero;
// - version 3: those columns left for the weight gradient of the small
//   filter bank before the pooling to gather as it reads them
//   (conv2d_backward_data_weight_pool, in conv_backward_weight.cu);
// - from version 4, the stride-1 convolutions of small planes by rows of
//   the input plane (input_grad_rows and its successors: LeNet's conv2 on
//   input_grad_rows_tiled_wide, which can first add conv2's weight
//   gradient's slices); under --tf32, from tf32 version 7, on the tensor
//   cores (conv_mma.cu).
#include "conv.cuh"
#include "kernels.hpp"
#include "launch.cuh"
#include "fastdiv.cuh"
#include "pool.cuh"
#include "tiles.cuh"
#include "versions.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>

namespace dpt::cuda {
using namespace conv;  // (conv.cuh: what the convolution's sources share)
namespace {

struct WeightsTransposed {  // w^T as (c, oc*kh*kw)
    const float* w;
    int c;
    FastDiv by_taps;
    static constexpr bool k_fast = true;  // along the taps of one filter
    __device__ float operator()(int ch, int q) const {
        const int o = by_taps.div(q), t = by_taps.rest(q, o);
        return w[(size_t(o) * c + ch) * by_taps.divisor() + t];
    }
};
struct Spread {  // spread(dy) (oc*kh*kw, n*h*w)
    const float* dy;
    Geometry g;
    static constexpr bool k_fast = false;
    __device__ float operator()(int q, int col) const {
        const int o = g.by_taps.div(q), t = g.by_taps.rest(q, o), ky = g.by_kw.div(t), kx = g.by_kw.rest(t, ky);
        const int s = g.by_in_pixels.div(col), p = g.by_in_pixels.rest(col, s), iy = g.by_w.div(p),
                  ix = g.by_w.rest(p, iy);
        const int ty = iy + g.pad - ky, tx = ix + g.pad - kx;
        if (ty < 0 || tx < 0 || ty % g.stride != 0 || tx % g.stride != 0) return 0.0f;
        const int oy = ty / g.stride, ox = tx / g.stride;
        if (oy >= g.oh || ox >= g.ow) return 0.0f;
        return dy[((size_t(s) * g.oc + o) * g.oh + oy) * g.ow + ox];
    }
};
struct StoreInputGrad {  // dx (n, c, h, w) = value
    float* dx;
    int c, pixels;
    __device__ void operator()(int, int ch, int col, float v) const {
        const int s = col / pixels, p = col - s * pixels;
        dx[(size_t(s) * c + ch) * pixels + p] = v;
    }
};

// Version 2 of backward-data, in two passes with no product of a known
// zero: dcol (c*kh*kw, n*oh*ow) = w^T (c*kh*kw, oc) . dy (oc, n*oh*ow), the
// gradient of every unfolded element; then each dx element gathers the
// dcol elements of the taps that saw it (col2im), in tap order.
struct WeightColumns {  // w^T as (c*kh*kw, oc): column o is filter o
    const float* w;
    int rows;  // c*kh*kw
    static constexpr bool k_fast = false;  // consecutive rows are consecutive addresses
    __device__ float operator()(int q, int o) const { return w[size_t(o) * rows + q]; }
};
// Version 11's (FP32): a thread's loads of w^T, all in its row q (tiles.cuh:
// SplitsColumns), read as a run down the output channels, `rows` floats
// apart: an add and a load. On 32- and 64-row tiles: on the 128-row one
// nvcc gave the runs 137 registers (128 without), one block a
// multiprocessor where there were two.
struct WeightColumnsByRuns : WeightColumns {
    static constexpr int run_rows_most = 64;
    using Column = int;  // tap q of filter 0: an offset (32 bits, held in one register)
    __device__ Column column(int q) const { return q; }
    template <int N, int stride>
    __device__ void load_run(Column q, int o, int o_end, float* out) const {
        int at = o * rows + q;  // (a weight tensor has fewer than 2^31 values)
#pragma unroll
        for (int l = 0; l < N; ++l, at += stride * rows) out[l] = o + l * stride < o_end ? w[at] : 0.0f;
    }
};
struct OutputGradColumns : OutputGrad {  // dy as (oc, n*oh*ow), read as the product's right operand
    static constexpr bool k_fast = false;  // consecutive columns are neighbouring pixels
    // Down a column (tiles.cuh: SplitsColumns): its sample and pixel once
    // a thread; then the next channel is a plane on, a pointer's add.
    using Column = const float*;  // dy at channel 0 of the column's sample and pixel
    __device__ Column column(int col) const { return step(col).pixel; }
    template <int N, int stride>
    __device__ void load_run(Column c, int o, int o_end, float* out) const {
        const size_t plane = by_pixels.divisor();
        const float* at = c + size_t(o) * plane;
#pragma unroll
        for (int l = 0; l < N; ++l, at += stride * plane) out[l] = o + l * stride < o_end ? *at : 0.0f;
    }
};

// (int indices split by multiplication: dx has fewer than 2^31 elements,
// which conv2d_backward_data checks.) With stride 1 the taps that reach an
// output pixel are a range of ky and of kx, found once; otherwise each tap
// is tested. Either way the taps are added in the same order (ky, then kx).
// With `add` (version 10), dx[i] += the sum: sum_parts' value, in place.
template <bool unit_stride>
__global__ void gather_input_grad(float* dx, const float* dcol, Geometry g, bool add) {
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
        dx[i] = add ? dx[i] + sum : sum;
    }
}

// Version 4 of backward-data, for a stride-1 convolution of small planes
// (LeNet's conv2, ResNet-18's 3x3 convolutions on 12x12 and 6x6): version 2
// writes the unfolded gradient w^T . dy to memory and reads it back to
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
                                                                      Geometry g, bool add) {
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
        for (int ix = 0; ix < W; ++ix) row[ix] = add ? row[ix] + acc[u][ix] : acc[u][ix];  // (add: version 10)
    }
}

// Version 4's block: a thread a row of each channel group, in whole warps.
int input_grad_rows_threads(const ConvShape& s) {
    return tiled::ceil_div(tiled::ceil_div(s.c, rows_group) * s.h, 32) * 32;
}

// The kernel of version 4 for s, or null where version 2 runs instead:
// stride 1, a 5x5 filter without padding on 9-wide outputs (LeNet's conv2),
// a 3x3 with padding 1 on 12 or 6 (ResNet-18's) or without on 7 (a test's).
// On an H200 (kernel_bench, batch 256) these took 1.00x (LeNet's conv2),
// 0.57x (64 channels on 12x12) and 0.85x (128 on 6x6) of version 2's time;
// ResNet-18's 256 channels on 3x3 took 1.23x (why was not measured), so
// version 2 keeps them.
using RowsKernel = void (*)(float*, const float*, const float*, Geometry, bool);
using RowsStagedKernel = void (*)(float*, const float*, const float*, Geometry, int);
struct StagedLaunch {  // version 5's, 6's or 7's kernel (null where none runs), its chunk, blocks a sample, threads
    RowsStagedKernel kernel;
    int chunk, parts, threads;
    const char* name;
};
RowsKernel input_grad_rows_kernel(const ConvShape& s) {
    if (conv2d_backward_data_version < 4 || s.math != Math::fp32 || s.n <= 0 || s.stride != 1 || s.kh != s.kw ||
        s.oh() * s.ow() > rows_staged || input_grad_rows_threads(s) > rows_most_threads)
        return nullptr;
    const int k = s.kh, p = s.pad, ow = s.ow();
    if (k == 5 && p == 0 && ow == 9) return input_grad_rows<5, 0, 9>;
    if (k == 3 && p == 1 && ow == 12) return input_grad_rows<3, 1, 12>;
    if (k == 3 && p == 1 && ow == 6) return input_grad_rows<3, 1, 6>;
    if (k == 3 && p == 0 && ow == 7) return input_grad_rows<3, 0, 7>;
    return nullptr;
}

// Version 5 of backward-data: version 4's sums, in its order, bit for bit,
// with three things changed that a LeNet step's profile pointed at (version
// 4's kernel was its longest, at 12 TFLOP/s):
// - the filters of a chunk of output channels are staged in shared memory
//   beside dy (version 4 read them from global memory in the inner loop);
// - the staged rows are padded to a multiple of 4 floats, so that a thread
//   reads a dy row and a filter row 16 bytes at a time, and a channel's
//   filters to an odd number of 16-byte units, so that the 8 channels a
//   quarter-warp reads fall in different banks;
// - a thread sums a row of one channel, and the threads of one input row
//   sit side by side (thread = row * c + channel): a warp spans two or three
//   rows, which skip nearly the same filter rows, where version 4's warps
//   spanned a group's every row and ran the union of their filter rows, and
//   twice the threads are in flight.
// (conv.cuh: staged_rows_floats, StagedFilters, stage.)

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

// Version 6 splits each sample's input channels between gridDim.y blocks
// (`split`): a block stages the filters of its own channels alone, and each
// sum stays in one thread, in the same order.
template <int K, int P, int OW, bool split, Staging how>
__device__ inline void input_grad_rows_staged_sums(float* staged, float* dx, const float* dy, const float* w,
                                                   Geometry g, int chunk) {
    constexpr int W = OW + K - 1 - 2 * P;  // the input's width (stride 1)
    constexpr int OWP = (OW + 3) / 4 * 4, KK = K * K;
    using F = StagedFilters<K>;
    float* const sdy = staged;                           // chunk x oh rows of OWP
    float* const sw = staged + size_t(chunk) * g.oh * OWP;  // chunk x per channels of F::channel
    const int sample = int(blockIdx.x);
    // The block's input channels: per of them from first (mine of them in the last block).
    const int per = split ? (g.c + int(gridDim.y) - 1) / int(gridDim.y) : g.c;
    const int first = split ? int(blockIdx.y) * per : 0, mine = split ? min(per, g.c - first) : g.c;
    const int iy = int(threadIdx.x) / per, lc = int(threadIdx.x) - iy * per, ch = first + lc;
    const bool active = iy < g.h && lc < mine;
    float acc[W] = {};
    const float* dy_sample = dy + size_t(sample) * g.oc * g.oh * OW;
    for (int co0 = 0; co0 < g.oc; co0 += chunk) {
        const int count = min(chunk, g.oc - co0);
        __syncthreads();  // the previous chunk's sums are done
        stage_output_grad_rows<OW, OWP, how>(sdy, dy_sample, g, co0, count);
        if constexpr (split) {
            const float* w_chunk = w + size_t(co0) * g.c * KK;
            stage<how>(sw, count * mine * KK, [&](int e, int& at) {
                const int q = e / KK, t = e - q * KK, o = q / mine, cl = q - o * mine, ky = t / K;
                at = (o * per + cl) * F::channel + ky * F::row + (t - ky * K);
                return operand(w_chunk[(size_t(o) * g.c + first + cl) * KK + t], g.tf32);
            });
        } else {
            stage_filters_by_output<K, how>(sw, w, g, co0, count);
        }
        __syncthreads();
        if (!active) continue;
        for (int co = 0; co < count; ++co) {
            const float* wp = sw + (co * per + lc) * F::channel;
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

template <int K, int P, int OW, bool split>
__global__ void __launch_bounds__(staged_rows_most_threads)
    input_grad_rows_staged(float* dx, const float* dy, const float* w, Geometry g, int chunk) {
    __shared__ __align__(16) float staged[staged_rows_floats];
    input_grad_rows_staged_sums<K, P, OW, split, Staging::serial>(staged, dx, dy, w, g, chunk);
}

// Backward-data version 7's kernel: its chunks staged in batches.
template <int K, int P, int OW, bool split>
__global__ void __launch_bounds__(staged_rows_most_threads)
    input_grad_rows_staged_batched(float* dx, const float* dy, const float* w, Geometry g, int chunk) {
    __shared__ __align__(16) float staged[staged_rows_floats];
    input_grad_rows_staged_sums<K, P, OW, split, Staging::batched>(staged, dx, dy, w, g, chunk);
}

// Version 5's (or 6's) kernel for s, or null where version 4's (or 2's) runs;
// chunk is the output channels a block stages at a time. It takes LeNet's conv2 (5x5
// filters on 9-wide outputs) and a test's 3x3 on 7-wide ones. On an H200
// (kernel_bench, batch 256) it took 0.73x of version 4's time on LeNet's
// conv2 (0.0652 ms against 0.0897), but 1.27x and 1.50x on ResNet-18's 3x3
// convolutions on 12x12 and 6x6 (64 and 128 channels: 768 threads a block,
// half the rows of a warp skipping a filter row the other half needs, where
// version 4's 2 channels a thread read each dy row for both), which version 4
// keeps.
// Version 7 runs version 5's kernel, a block a sample, with its chunks
// staged in batches (input_grad_rows_staged_batched).
StagedLaunch input_grad_rows_staged_kernel(const ConvShape& s) {
    // Version 6: each sample's channels in two blocks (LeNet's 256 samples
    // make 256 blocks of version 5, half a wave).
    const int parts = conv2d_backward_data_version == 6 && s.c >= 2 ? 2 : 1, per = tiled::ceil_div(s.c, parts);
    const bool batch = conv2d_backward_data_version >= 7;
    StagedLaunch l{nullptr, 0, parts, whole_warps(per * s.h),
                   batch ? "input_grad_rows_staged_batched" : "input_grad_rows_staged"};
    if (conv2d_backward_data_version < 5 || !direct_math(s) || s.n <= 0 || s.stride != 1 || s.kh != s.kw ||
        l.threads > staged_rows_most_threads)
        return l;
    const int k = s.kh, p = s.pad, ow = s.ow();
    // As many output channels a chunk as fit, then the chunks evened out.
    const auto fits = [&](int channel) {
        const int most = staged_rows_floats / (s.oh() * tiled::ceil_div(ow, 4) * 4 + per * channel);
        if (most < 1) return false;
        l.chunk = evened_chunk(s.oc, most);
        return true;
    };
    if (k == 5 && p == 0 && ow == 9 && fits(StagedFilters<5>::channel))
        l.kernel = batch       ? input_grad_rows_staged_batched<5, 0, 9, false>
                   : parts > 1 ? input_grad_rows_staged<5, 0, 9, true>
                               : input_grad_rows_staged<5, 0, 9, false>;
    else if (k == 3 && p == 0 && ow == 7 && fits(StagedFilters<3>::channel))
        l.kernel = batch       ? input_grad_rows_staged_batched<3, 0, 7, false>
                   : parts > 1 ? input_grad_rows_staged<3, 0, 7, true>
                               : input_grad_rows_staged<3, 0, 7, false>;
    return l;
}

// Version 8 of backward-data, for LeNet's conv2 alone (5x5 filters, stride
// 1, no padding, 13x13 inputs, at most 20 input channels and a multiple of
// 4): version 5's sums in its order (version 4's), bit for bit, with two
// input channels a thread and the loads of a chunk in flight while the one
// before is summed, as forward version 10 does:
// - a thread sums G = 2 input channels of one input row (26 sums in
//   registers, thread = row * 10 + group): 90 FFMA for 3 loads of 16 bytes
//   (the output gradient's row) and 5 of 8 (the two channels' taps), a block
//   of 160 threads a sample;
// - the filters of a chunk of CH output channels are staged transposed, a
//   tap's 20 input channels side by side: version 8, CH = 5 (10 chunks, two
//   barriers each); version 9, CH = 10 (half the barriers, 25 KB of shared
//   memory a block);
// - each thread loads its share of the next chunk (for CH = 5, up to 4
//   loads of 16 bytes and 3 of 4) into registers before it sums the current
//   one.
// The sums run over output channels, filter rows, filter columns, as version
// 5's; with --tf32 each operand is rounded as it is stored, as there.
//
// Version 12 runs version 9's kernel with G = 1 (input_grad_rows_tiled_single,
// _single_finishing): a thread one input channel of one row, 260 threads (9
// warps) a sample where version 9 has 130 in 5; the same sums.
template <int CH_, int G_>
struct TiledInputGrad {
    static constexpr int K = 5, KK = K * K, H = 13, OW = H - K + 1, G = G_, CP = 20, groups = CP / G, CH = CH_;
    static constexpr int DS = 12;  // a staged dy row: 9 values, padded to 12 floats
    static constexpr int threads = (H * groups + 31) / 32 * 32;  // G = 2: 130 threads, 160 in whole warps
    static constexpr int filter_fours = CH * CP * KK / 4;  // 16-byte loads of a chunk's filters, at most
    static constexpr int dy_floats = CH * OW * OW;         // and loads of its dy
    static constexpr int filter_loads = (filter_fours + threads - 1) / threads;
    static constexpr int dy_loads = (dy_floats + threads - 1) / threads;
    static constexpr int sw_floats = CH * KK * CP, sdy_floats = CH * OW * DS;
    static_assert(H * groups <= threads && CP % G == 0);

    struct Chunk {
        Floats<4> w[filter_loads];
        float dy[dy_loads];
    };

    // Loads output channels co0 to co0 + count's filters (count * c * KK
    // floats from w, where they lie side by side) and dy rows.
    __device__ static void load_chunk(Chunk& to, const float* dy_sample, const float* w, int c, int co0, int count) {
        const int t = int(threadIdx.x), fours = count * c * KK / 4;
        const float* w_chunk = w + size_t(co0) * c * KK;
#pragma unroll
        for (int i = 0; i < filter_loads; ++i) {
            const int q = t + i * threads;
            if (q < fours) to.w[i] = load_floats<4>(w_chunk + 4 * q);
        }
        const float* dy_chunk = dy_sample + size_t(co0) * OW * OW;
#pragma unroll
        for (int i = 0; i < dy_loads; ++i) {
            const int e = t + i * threads;
            if (e < count * OW * OW) to.dy[i] = dy_chunk[e];
        }
    }

    // Stores a chunk from registers: tap t of output channel cc (within the
    // chunk) and input channel ch at sw[(cc * KK + t) * CP + ch]; dy value e
    // (channel, row, column) at sdy[(channel * OW + row) * DS + column]; each
    // an operand (rounded to TF32 with --tf32).
    __device__ static void store_chunk(float* sw, float* sdy, const Chunk& from, const Geometry& g, int count) {
        const int t = int(threadIdx.x), fours = count * g.c * KK / 4;
#pragma unroll
        for (int i = 0; i < filter_loads; ++i) {
            const int q = t + i * threads;
            if (q < fours) {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int e = 4 * q + j, row = e / KK, tap = e - row * KK;  // row: cc * c + ch
                    const int cc = g.by_c.div(row), ch = g.by_c.rest(row, cc);
                    sw[(cc * KK + tap) * CP + ch] = operand(from.w[i].v[j], g.tf32);
                }
            }
        }
#pragma unroll
        for (int i = 0; i < dy_loads; ++i) {
            const int e = t + i * threads;
            if (e < count * OW * OW) {
                const int row = e / OW;
                sdy[row * DS + (e - row * OW)] = operand(from.dy[i], g.tf32);
            }
        }
    }
};

template <int CH, int G>
__device__ inline void input_grad_rows_tiled_sums(float* staged, float* dx, const float* dy, const float* w,
                                                  Geometry g) {
    using T = TiledInputGrad<CH, G>;
    constexpr int K = T::K, KK = T::KK, H = T::H, OW = T::OW, CP = T::CP, DS = T::DS, groups = T::groups;
    float* const sw = staged;
    float* const sdy = staged + T::sw_floats;
    const int sample = int(blockIdx.x), t = int(threadIdx.x);
    const int iy = t / groups, group = t - iy * groups, ch0 = G * group;
    const bool active = iy < H && ch0 < g.c;
    const float* dy_sample = dy + size_t(sample) * g.oc * OW * OW;
    float acc[G][H] = {};
    typename T::Chunk next;
    T::load_chunk(next, dy_sample, w, g.c, 0, min(CH, g.oc));
    for (int co0 = 0; co0 < g.oc; co0 += CH) {
        const int count = min(CH, g.oc - co0);
        __syncthreads();  // the previous chunk's sums are done
        T::store_chunk(sw, sdy, next, g, count);
        __syncthreads();
        if (co0 + CH < g.oc) T::load_chunk(next, dy_sample, w, g.c, co0 + CH, min(CH, g.oc - co0 - CH));
        if (!active) continue;
#pragma unroll 1
        for (int cc = 0; cc < count; ++cc) {
#pragma unroll
            for (int ky = 0; ky < K; ++ky) {
                const int oy = iy - ky;
                if (oy < 0 || oy >= OW) continue;  // this filter row misses the thread's row
                float d[DS];
                load_row<DS>(d, sdy + (cc * OW + oy) * DS);
                Floats<G> wv[K];
#pragma unroll
                for (int kx = 0; kx < K; ++kx) wv[kx] = load_floats<G>(sw + (cc * KK + ky * K + kx) * CP + ch0);
#pragma unroll
                for (int kx = 0; kx < K; ++kx)
#pragma unroll
                    for (int o = 0; o < G; ++o)
#pragma unroll
                        for (int ox = 0; ox < OW; ++ox) acc[o][ox + kx] = fmaf(d[ox], wv[kx].v[o], acc[o][ox + kx]);
            }
        }
    }
    if (!active) return;
#pragma unroll
    for (int o = 0; o < G; ++o) {
        if (ch0 + o >= g.c) continue;
        float* row = dx + ((size_t(sample) * g.c + ch0 + o) * H + iy) * H;
#pragma unroll
        for (int ix = 0; ix < H; ++ix) row[ix] = acc[o][ix];
    }
}

// Version 8's kernel, version 9's and version 12's (named apart, so that a
// profile tells them apart).
using Tiled8 = TiledInputGrad<5, 2>;
using Tiled9 = TiledInputGrad<10, 2>;
using Tiled12 = TiledInputGrad<10, 1>;
__global__ void __launch_bounds__(Tiled8::threads)
    input_grad_rows_tiled(float* dx, const float* dy, const float* w, Geometry g) {
    __shared__ __align__(16) float staged[Tiled8::sw_floats + Tiled8::sdy_floats];
    input_grad_rows_tiled_sums<Tiled8::CH, Tiled8::G>(staged, dx, dy, w, g);
}
__global__ void __launch_bounds__(Tiled9::threads)
    input_grad_rows_tiled_wide(float* dx, const float* dy, const float* w, Geometry g) {
    __shared__ __align__(16) float staged[Tiled9::sw_floats + Tiled9::sdy_floats];
    input_grad_rows_tiled_sums<Tiled9::CH, Tiled9::G>(staged, dx, dy, w, g);
}
__global__ void __launch_bounds__(Tiled12::threads)
    input_grad_rows_tiled_single(float* dx, const float* dy, const float* w, Geometry g) {
    __shared__ __align__(16) float staged[Tiled12::sw_floats + Tiled12::sdy_floats];
    input_grad_rows_tiled_sums<Tiled12::CH, Tiled12::G>(staged, dx, dy, w, g);
}

// Whether version 8's (9's) kernel takes s (and w at a 16-byte boundary).
bool input_grad_rows_tiled_fits(const ConvShape& s, const float* w) {
    using T = Tiled8;
    constexpr int K = T::K, H = T::H, CP = T::CP;
    return conv2d_backward_data_version >= 8 && direct_math(s) && s.n > 0 && s.stride == 1 && s.pad == 0 &&
           s.kh == K && s.kw == K && s.h == H && s.w == H && s.c <= CP && s.c % 4 == 0 &&
           reinterpret_cast<std::uintptr_t>(w) % 16 == 0;
}
// Version 9's input gradient kernel (input_grad_rows_tiled_wide) whose
// blocks first add a weight gradient's slices (version 13 of the weight
// gradient): the two gradients of LeNet's conv2 without finish_splits
// between them. The slices' sums are finish_splits', bit for bit; the
// input gradient's sums are untouched by them (none of its scratch, no
// shared memory, before its first barrier).
__global__ void __launch_bounds__(Tiled9::threads)
    input_grad_rows_tiled_finishing(float* dx, const float* dy, const float* w, Geometry g,
                                    UnfinishedWeightGrad weight) {
    finish_weight_slices(weight);
    __shared__ __align__(16) float staged[Tiled9::sw_floats + Tiled9::sdy_floats];
    input_grad_rows_tiled_sums<Tiled9::CH, Tiled9::G>(staged, dx, dy, w, g);
}
__global__ void __launch_bounds__(Tiled12::threads)
    input_grad_rows_tiled_single_finishing(float* dx, const float* dy, const float* w, Geometry g,
                                           UnfinishedWeightGrad weight) {
    finish_weight_slices(weight);
    __shared__ __align__(16) float staged[Tiled12::sw_floats + Tiled12::sdy_floats];
    input_grad_rows_tiled_sums<Tiled12::CH, Tiled12::G>(staged, dx, dy, w, g);
}

}  // namespace

// Whether s's input gradient runs on a kernel that adds a weight
// gradient's slices itself (version 9's, as input_grad_rows_tiled_finishing;
// with --tf32 from tf32 version 7, input_grad_mma).
bool conv::input_grad_finishes_slices(const ConvShape& s, const float* w) {
    return conv::input_grad_mma_fits(s) || (conv2d_backward_data_version >= 9 && input_grad_rows_tiled_fits(s, w));
}

// Version 2 of backward-data, its first half: the unfolded input gradient
// w^T . dy (c*kh*kw, n*oh*ow) into dcol, for a gather to add up.
void conv::input_grad_columns(float* dcol, const float* dy, const float* w, const ConvShape& s, cudaStream_t stream) {
    if (s.in_size() >= (size_t(1) << 31))
        throw std::length_error("a convolution's input of " + std::to_string(s.in_size()) +
                                " values: its gradient's gather indexes at most 2^31 (use a smaller batch per device)");
    const int cols = s.n * s.col_cols();
    const OutputGradColumns b{{dy, s.oc, FastDiv(s.col_cols())}};
    const tiled::StoreMatrix out{dcol, cols, false};
    if (conv2d_backward_data_version >= 11 && s.math == Math::fp32)
        tiled::gemm(s.col_rows(), cols, s.oc, WeightColumnsByRuns{{w, s.col_rows()}}, b, out, stream, 1, s.math);
    else
        tiled::gemm(s.col_rows(), cols, s.oc, WeightColumns{w, s.col_rows()}, b, out, stream, 1, s.math);
}

size_t conv::input_grad_columns_floats(const ConvShape& s) { return size_t(s.col_rows()) * s.n * s.col_cols(); }

// Version 10: where the kernels that end the input gradient are
// input_grad_rows (version 4's) or gather_input_grad (version 2's), they can
// add it to dx (ResNet-18's block inputs, which two layers read).
bool conv2d_backward_data_adds(const ConvShape& s, const float* w) {
    return conv2d_backward_data_version >= 10 && !conv::input_grad_mma_fits(s) && !input_grad_rows_tiled_fits(s, w) &&
           !input_grad_rows_staged_kernel(s).kernel;
}

void conv2d_backward_data(float* dx, const float* dy, const float* w, const ConvShape& s, float* scratch,
                          cudaStream_t stream, const UnfinishedWeightGrad& weight, bool add) {
    if (add && !conv2d_backward_data_adds(s, w))
        throw std::logic_error("conv2d_backward_data: asked to add where its kernels cannot (conv2d_backward_data_adds)");
    const Geometry g(s);
    if (conv::input_grad_mma_fits(s)) return conv::launch_input_grad_mma(dx, dy, w, s, weight, stream);
    if (weight.dw && input_grad_finishes_slices(s, w))
        return conv2d_backward_data_version >= 12
                   ? launch::kernel("input_grad_rows_tiled_single_finishing", input_grad_rows_tiled_single_finishing,
                                    unsigned(s.n), unsigned(Tiled12::threads), stream, dx, dy, w, g, weight)
                   : launch::kernel("input_grad_rows_tiled_finishing", input_grad_rows_tiled_finishing, unsigned(s.n),
                                    unsigned(Tiled9::threads), stream, dx, dy, w, g, weight);
    if (weight.dw) add_weight_slices(weight, stream);  // (before any kernel below reuses the scratch)
    if (input_grad_rows_tiled_fits(s, w)) {
        if (conv2d_backward_data_version >= 12)
            return launch::kernel("input_grad_rows_tiled_single", input_grad_rows_tiled_single, unsigned(s.n),
                                  unsigned(Tiled12::threads), stream, dx, dy, w, g);
        return conv2d_backward_data_version >= 9
                   ? launch::kernel("input_grad_rows_tiled_wide", input_grad_rows_tiled_wide, unsigned(s.n),
                                    unsigned(Tiled9::threads), stream, dx, dy, w, g)
                   : launch::kernel("input_grad_rows_tiled", input_grad_rows_tiled, unsigned(s.n),
                                    unsigned(Tiled8::threads), stream, dx, dy, w, g);
    }
    if (const StagedLaunch l = input_grad_rows_staged_kernel(s); l.kernel) {
        return launch::kernel(l.name, l.kernel, dim3(unsigned(s.n), unsigned(l.parts)),
                              unsigned(l.threads), stream, dx, dy, w, g, l.chunk);
    }
    if (const RowsKernel rows = input_grad_rows_kernel(s)) {
        return launch::kernel("input_grad_rows", rows, unsigned(s.n), unsigned(input_grad_rows_threads(s)), stream, dx,
                              dy, w, g, add);
    }
    if (conv2d_backward_data_version >= 2) {
        input_grad_columns(scratch, dy, w, s, stream);
        if (s.stride == 1)
            launch::kernel("gather_input_grad", gather_input_grad<true>, launch::grid_for(s.in_size()), launch::threads,
                           stream, dx, scratch, g, add);
        else
            launch::kernel("gather_input_grad", gather_input_grad<false>, launch::grid_for(s.in_size()), launch::threads,
                           stream, dx, scratch, g, add);
        return;
    }
    tiled::gemm(s.c, s.n * s.h * s.w, s.oc * s.kh * s.kw, WeightsTransposed{w, s.c, FastDiv(s.kh * s.kw)}, Spread{dy, g},
                StoreInputGrad{dx, s.c, s.h * s.w}, stream, 1, s.math);
}

}  // namespace dpt::cuda
