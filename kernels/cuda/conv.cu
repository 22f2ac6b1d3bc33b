// 2-D convolution on the GPU, forward and both backwards, as implicit GEMMs
// on the tiled SGEMM of tiles.cuh. CPU twin: kernels/cpu/conv.cpp, which
// unfolds the image into a matrix first (im2col); here the loaders compute
// each element of that matrix when a tile needs it, so nothing is unfolded
// in memory, and the epilogues write NCHW directly.
//
//   forward          y (oc, n*oh*ow)  = w (oc, c*kh*kw)   . unfold(x) (c*kh*kw, n*oh*ow)
//   backward-data    dx (c, n*h*w)    = w^T (c, oc*kh*kw) . spread(dy) (oc*kh*kw, n*h*w)
//   backward-weight  dw (oc, c*kh*kw) += dy (oc, n*oh*ow)  . unfold(x)^T (n*oh*ow, c*kh*kw)
//
// spread(dy) holds, for input pixel (y, x) and filter tap (o, ky, kx), the
// output gradient that tap carried from (y, x): dy[o][(y+pad-ky)/stride][...]
// when that is a whole output position, else 0. Backward-data is then a plain
// product, each dx element written once: no atomics, the same bits every run.
//
// A small filter bank (LeNet's conv1, ResNet-18's first) is summed directly
// instead, forward and weight gradient, by kernels of its own below
// (direct_forward, small_weight_grad_partials); they also take the pooling
// after the convolution's ReLU into the forward pass, and read the weight
// gradient's dy through it (conv2d_forward_relu_pool,
// conv2d_backward_weight_pool); and when the pooled output feeds another
// convolution, that one's input gradient reaches the weight-gradient kernel
// as columns, gathered as it reads them (conv2d_backward_data_weight_pool).
//
// Under --tf32, LeNet's conv2 runs its three products on the tensor cores
// by kernels of their own, in conv_mma.cu; the launchers here pick them
// where they take a convolution.
#include "conv.cuh"
#include "kernels.hpp"
#include "launch.cuh"
#include "fastdiv.cuh"
#include "pool.cuh"
#include "tiles.cuh"
#include "versions.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace dpt::cuda {
// (conv.cuh: what this file shares with conv_mma.cu, the tensor cores' kernels.)
using conv::finish_weight_slices;
using conv::Geometry;
using conv::pool_staged_planes;
using conv::PoolGeometry;
using conv::StoreWeightsAndBias;
namespace {

// The kernels below that sum a convolution directly, on the FP32 units
// rather than through the GEMM core, take --tf32 from version 2 of the
// `tf32` launcher (versions.cu): they round each operand to TF32 as they
// stage it, as the tensor cores would, and multiply and add in FP32. A
// product of two TF32 numbers is exact in FP32, so the sums are what
// Math::tf32 means (shapes.hpp) and what the CPU twin computes. Bias sums
// take dy unrounded, as the twin's do.
bool direct_math(const ConvShape& s) { return s.math == Math::fp32 || tf32_version >= 2; }

using tiled::operand;

// unfold(x) (c*kh*kw, n*oh*ow): the input pixel that filter tap q sees at output column col.
__device__ inline float unfolded(const float* x, const Geometry& g, int q, int col) {
    const int ch = g.by_taps.div(q), t = g.by_taps.rest(q, ch), ky = g.by_kw.div(t), kx = g.by_kw.rest(t, ky);
    const int s = g.by_out_pixels.div(col), p = g.by_out_pixels.rest(col, s), oy = g.by_ow.div(p),
              ox = g.by_ow.rest(p, oy);
    const int iy = oy * g.stride - g.pad + ky, ix = ox * g.stride - g.pad + kx;
    if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) return 0.0f;  // padding
    return x[((size_t(s) * g.c + ch) * g.h + iy) * g.w + ix];
}

struct Weights {  // w as (oc, c*kh*kw), row-major
    const float* w;
    int k;
    static constexpr bool k_fast = true;
    __device__ float operator()(int o, int q) const { return w[size_t(o) * k + q]; }
    // The same in two halves (tiles.cuh: SplitsAlongK): the filter's row,
    // once per thread; then an element is an add and a load.
    using Fixed = const float*;
    using Step = int;
    __device__ Fixed fixed(int o) const { return w + size_t(o) * k; }
    __device__ Step step(int q) const { return q; }
    __device__ float load(Fixed row, Step q) const { return row[q]; }
};
struct Unfold {  // unfold(x) (c*kh*kw, n*oh*ow)
    const float* x;
    Geometry g;
    static constexpr bool k_fast = false;  // consecutive columns are neighbouring pixels
    __device__ float operator()(int q, int col) const { return unfolded(x, g, q, col); }
    // The same in two halves (tiles.cuh: SplitsColumns): the output pixel
    // of a column, once per thread, with the filter rows and columns that
    // fall inside the image as bit masks; then runs of taps down it.
    struct Column {
        const float* image;  // the column's sample
        int iy0, ix0;        // where its filter window starts
        unsigned rows, cols; // bit ky (kx): that filter row (column) is inside the image
    };
    __device__ Column column(int col) const {
        const int s = g.by_out_pixels.div(col), p = g.by_out_pixels.rest(col, s), oy = g.by_ow.div(p),
                  ox = g.by_ow.rest(p, oy);
        Column c{x + size_t(s) * g.c * g.h * g.w, oy * g.stride - g.pad, ox * g.stride - g.pad, 0u, 0u};
        for (int k = 0; k < g.kh; ++k) c.rows |= unsigned(c.iy0 + k >= 0 && c.iy0 + k < g.h) << k;
        for (int k = 0; k < g.kw; ++k) c.cols |= unsigned(c.ix0 + k >= 0 && c.ix0 + k < g.w) << k;
        return c;
    }
    // out[l] = element (q + l * stride, column) for l < N, 0 from q_end on.
    // The first tap is divided out; each next one is a step (kx, then ky,
    // then the channel) of the tap and of its offset in the sample, so a
    // run of N costs two divisions and no multiplication per element.
    template <int N, int stride>
    __device__ void load_run(const Column& c, int q, int q_end, float* out) const {
        const int ch = g.by_taps.div(q), t = g.by_taps.rest(q, ch);
        int ky = g.by_kw.div(t), kx = g.by_kw.rest(t, ky);
        int offset = (ch * g.h + c.iy0 + ky) * g.w + c.ix0 + kx;  // int: one sample's c*h*w < 2^31
#pragma unroll
        for (int l = 0; l < N; ++l) {
            const bool inside = q < q_end && ((c.rows >> ky) & (c.cols >> kx) & 1u);  // else padding, or past k
            out[l] = inside ? c.image[offset] : 0.0f;
#pragma unroll
            for (int step = 0; step < stride; ++step) {
                ++q, ++kx, ++offset;
                if (kx == g.kw) {
                    kx = 0, ++ky, offset += g.w - g.kw;
                    if (ky == g.kh) ky = 0, offset += (g.h - g.kh) * g.w;
                }
            }
        }
    }
};
// Unfold from version 8 of the forward convolution, for filters of at most
// 32 taps: what an element's tap adds to its address, and which bit of its
// column's mask says the tap falls inside the image, are read from a table
// in shared memory (prepare(), once a block) instead of being stepped
// through the filter's rows and columns: a load is a table read, a bit test
// and an add. The table runs on past the filter's last tap into the next
// channels, so a run of taps from anywhere in a channel reads it without
// wrapping. The same elements as Unfold.
struct UnfoldByTaps {
    const float* x;
    Geometry g;
    static constexpr bool k_fast = false;
    static constexpr int most_taps = 32, most_run = 16;  // a run: a k-step's rows (tiles.cuh: BK)
    struct alignas(8) Tap {  // (one 8-byte shared-memory read)
        int offset;    // from the window's corner in the run's first channel: ch*h*w + ky*w + kx
        unsigned bit;  // 1 << (ky*kw + kx)
    };
    __device__ static Tap* table() {
        __shared__ Tap taps[most_taps + most_run];
        return taps;
    }
    __device__ void prepare() const {  // every thread of the block, then a barrier (tiles.cuh)
        for (int i = int(threadIdx.x); i < g.by_taps.divisor() + most_run; i += int(blockDim.x)) {
            const int ch = g.by_taps.div(i), t = g.by_taps.rest(i, ch), ky = g.by_kw.div(t), kx = g.by_kw.rest(t, ky);
            table()[i] = {(ch * g.h + ky) * g.w + kx, 1u << t};
        }
    }
    __device__ float operator()(int q, int col) const { return unfolded(x, g, q, col); }
    struct Column {
        const float* corner;  // x at the column's window's corner in its sample's first channel, maybe outside the image
        unsigned inside;      // bit ky*kw + kx: that tap falls inside the image
    };
    __device__ Column column(int col) const {
        const int s = g.by_out_pixels.div(col), p = g.by_out_pixels.rest(col, s), oy = g.by_ow.div(p),
                  ox = g.by_ow.rest(p, oy), iy0 = oy * g.stride - g.pad, ix0 = ox * g.stride - g.pad;
        unsigned inside = 0;
        for (int ky = 0, t = 0; ky < g.kh; ++ky)
            for (int kx = 0; kx < g.kw; ++kx, ++t)
                inside |= unsigned(unsigned(iy0 + ky) < unsigned(g.h) && unsigned(ix0 + kx) < unsigned(g.w)) << t;
        return {x + size_t(s) * g.c * g.h * g.w + (iy0 * g.w + ix0), inside};
    }
    // out[l] = element (q + l * stride, column) for l < N, 0 from q_end on.
    template <int N, int stride>
    __device__ void load_run(const Column& c, int q, int q_end, float* out) const {
        static_assert(N * stride <= most_run, "a run longer than the table's tail");
        const int ch = g.by_taps.div(q), t = g.by_taps.rest(q, ch), left = q_end - q;
        const float* channel = c.corner + ch * g.h * g.w;  // int: one sample's c*h*w < 2^31
#ifdef __CUDA_ARCH__
        asm("" : "+l"(channel));  // a pointer in registers: each load one multiply-add from it, not from x again
#endif
        const Tap* tap = table() + t;
#pragma unroll
        for (int l = 0; l < N; ++l) {
            const Tap e = tap[l * stride];
            const bool inside = (l * stride < left) & ((c.inside & e.bit) != 0u);  // else padding, or past k
            out[l] = inside ? __ldg(channel + e.offset) : 0.0f;
        }
    }
};
// Unfold, or UnfoldByTaps where version 8 of the forward convolution reads
// the filter's taps from a table: f(the operand).
template <class F>
void with_unfold(const float* x, const Geometry& g, F&& f) {
    if (conv2d_forward_version >= 8 && g.kh * g.kw <= UnfoldByTaps::most_taps) f(UnfoldByTaps{x, g});
    else f(Unfold{x, g});
}

template <bool relu>
struct StoreOutput {  // y (n, oc, oh, ow) = value + b[o], then ReLU
    float* y;
    const float* b;
    int oc;
    FastDiv by_pixels;  // oh * ow
    __device__ void operator()(int, int o, int col, float v) const {
        const int s = by_pixels.div(col), p = by_pixels.rest(col, s);
        v += b[o];
        if (relu) v = v > 0.0f ? v : 0.0f;  // as cpu::relu_forward (NaN -> 0)
        y[(size_t(s) * oc + o) * by_pixels.divisor() + p] = v;
    }
};

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

struct OutputGrad {  // dy as (oc, n*oh*ow)
    const float* dy;
    int oc;
    FastDiv by_pixels;  // oh * ow
    static constexpr bool k_fast = true;
    __device__ float operator()(int o, int col) const { return load(fixed(o), step(col)); }
    // In halves (tiles.cuh: SplitsAlongK): the channel's plane, and the
    // pixel of a sample, once a k-step.
    struct Fixed {
        int offset;  // o * oh*ow
    };
    __device__ Fixed fixed(int o) const { return {o * by_pixels.divisor()}; }
    struct Step {
        const float* pixel;  // dy at channel 0 of the column's sample and pixel
    };
    __device__ Step step(int col) const {
        const int s = by_pixels.div(col), p = by_pixels.rest(col, s);
        return {dy + size_t(s) * oc * by_pixels.divisor() + p};
    }
    __device__ float load(const Fixed& f, const Step& st) const { return st.pixel[f.offset]; }
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
// A block of `threads` rounded up to whole warps.
inline int whole_warps(int threads) { return tiled::ceil_div(threads, 32) * 32; }
// Chunks of at most `most` of `total`, evened out: the size of each.
inline int evened_chunk(int total, int most) { return tiled::ceil_div(total, tiled::ceil_div(total, most)); }
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
constexpr int staged_rows_floats = 12 * 1024, staged_rows_most_threads = 1024;

template <int K>
struct StagedFilters {
    static constexpr int row = (K + 3) / 4 * 4;                             // a filter row, padded to 16 bytes
    static constexpr int channel = K * row + ((K * row / 4) % 2 == 0 ? 4 : 0);  // an odd number of 16-byte units
};

// N floats (a multiple of 4) from 16-byte aligned shared memory into registers, 16 bytes a load.
template <int N>
__device__ inline void load_row(float (&to)[N], const float* from) {
#pragma unroll
    for (int v = 0; v < N / 4; ++v) tiled::read4(to + 4 * v, from + 4 * v);
}

// How the rows kernels copy a chunk from global into shared memory.
// - serial: a loop of a block's width a turn. Compiled, each turn's store
//   waits on its own load, so a thread has one load in flight: a chunk
//   costs a memory latency for each element a thread copies (LeNet's
//   conv2: 13 to 24 a round, each a read of L2 at best).
// - batched: a thread issues up to staged_batch loads, into registers,
//   before it stores any of them: a memory latency for every staged_batch
//   elements. The same values land in the same places. (12, not 16: at 16
//   the forward and input-gradient kernels spill under their 64-register
//   cap, and LeNet's conv2 takes as many rounds at 12.)
// Each rows kernel that stages so is a body (NAME_sums, given the block's
// shared memory as `staged`) and two kernels that declare that memory and
// run it: NAME, serial, and NAME_batched, so that a profile tells them apart.
enum class Staging { serial, batched };
constexpr int staged_batch = 12;

// Copies count elements into shared memory (to), the block's threads taking
// every blockDim.x-th: element e's value is element(e, at), and it goes to
// to[at].
template <Staging how, class Element>
__device__ inline void stage(float* to, int count, Element element) {
    const int step = int(blockDim.x);
    if constexpr (how == Staging::serial) {
        for (int e = int(threadIdx.x); e < count; e += step) {
            int at;
            const float v = element(e, at);
            to[at] = v;
        }
    } else {
        for (int e0 = int(threadIdx.x); e0 < count; e0 += staged_batch * step) {
            float v[staged_batch];
            int at[staged_batch] = {};
#pragma unroll
            for (int i = 0; i < staged_batch; ++i)
                if (e0 + i * step < count) v[i] = element(e0 + i * step, at[i]);
#pragma unroll
            for (int i = 0; i < staged_batch; ++i)
                if (e0 + i * step < count) to[at[i]] = v[i];
        }
    }
}

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

// N consecutive floats (2 or 4) at a boundary of N floats, global or
// shared memory, as one load (LDG.64/128, LDS.64/128), for the tiled
// kernels' filter taps and chunk loads (their staged rows go through
// load_row). The emulated GPU checks the boundary.
template <int N>
struct Floats {
    float v[N];
};
template <int N>
__device__ inline Floats<N> load_floats(const float* from) {
    static_assert(N == 2 || N == 4);
#ifdef DPTRAIN_CUDA_EMULATION
    if (reinterpret_cast<std::uintptr_t>(from) % (4 * N) != 0)
        dpt::cuda_emulation::fail("a vector load off its boundary");
    Floats<N> f;
    for (int j = 0; j < N; ++j) f.v[j] = from[j];
    return f;
#else
    if constexpr (N == 4) {
        const float4 f = *reinterpret_cast<const float4*>(from);
        return {{f.x, f.y, f.z, f.w}};
    } else {
        const float2 f = *reinterpret_cast<const float2*>(from);
        return {{f.x, f.y}};
    }
#endif
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
constexpr int tiled_input_grad_threads = 160;  // 13 rows x 10 groups = 130, in whole warps
template <int CH_>
struct TiledInputGrad {
    static constexpr int K = 5, KK = K * K, H = 13, OW = H - K + 1, G = 2, CP = 20, groups = CP / G, CH = CH_;
    static constexpr int DS = 12;        // a staged dy row: 9 values, padded to 12 floats
    static constexpr int threads = tiled_input_grad_threads;
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

template <int CH>
__device__ inline void input_grad_rows_tiled_sums(float* staged, float* dx, const float* dy, const float* w,
                                                  Geometry g) {
    using T = TiledInputGrad<CH>;
    constexpr int K = T::K, KK = T::KK, H = T::H, OW = T::OW, G = T::G, CP = T::CP, DS = T::DS, groups = T::groups;
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

// Version 8's kernel, and version 9's (named apart, so that a profile tells them apart).
__global__ void __launch_bounds__(tiled_input_grad_threads)
    input_grad_rows_tiled(float* dx, const float* dy, const float* w, Geometry g) {
    __shared__ __align__(16) float staged[TiledInputGrad<5>::sw_floats + TiledInputGrad<5>::sdy_floats];
    input_grad_rows_tiled_sums<5>(staged, dx, dy, w, g);
}
__global__ void __launch_bounds__(tiled_input_grad_threads)
    input_grad_rows_tiled_wide(float* dx, const float* dy, const float* w, Geometry g) {
    __shared__ __align__(16) float staged[TiledInputGrad<10>::sw_floats + TiledInputGrad<10>::sdy_floats];
    input_grad_rows_tiled_sums<10>(staged, dx, dy, w, g);
}

// Whether version 8's (9's) kernel takes s (and w at a 16-byte boundary).
bool input_grad_rows_tiled_fits(const ConvShape& s, const float* w) {
    using T = TiledInputGrad<5>;
    constexpr int K = T::K, H = T::H, CP = T::CP;
    return conv2d_backward_data_version >= 8 && direct_math(s) && s.n > 0 && s.stride == 1 && s.pad == 0 &&
           s.kh == K && s.kw == K && s.h == H && s.w == H && s.c <= CP && s.c % 4 == 0 &&
           reinterpret_cast<std::uintptr_t>(w) % 16 == 0;
}
// Whether s's input gradient runs on a kernel that adds a weight
// gradient's slices itself (version 9's, as input_grad_rows_tiled_finishing;
// with --tf32 from tf32 version 7, input_grad_mma).
bool input_grad_finishes_slices(const ConvShape& s, const float* w) {
    return conv::input_grad_mma_fits(s) || (conv2d_backward_data_version >= 9 && input_grad_rows_tiled_fits(s, w));
}

struct UnfoldTransposed {  // unfold(x)^T (n*oh*ow, c*kh*kw)
    const float* x;
    Geometry g;
    static constexpr bool k_fast = true;  // k runs along the output pixels
    __device__ float operator()(int col, int q) const { return unfolded(x, g, q, col); }
    // The same in two halves (tiles.cuh: SplitsAlongK): a tap (column q),
    // once per thread before the k loop; an output pixel (row col, along
    // k), once a k-step; then an element is two adds, two compares and a
    // load.
    struct Fixed {
        int offset;  // ch*h*w + ky*w + kx: the tap's place from its window's corner
        int ky, kx;
    };
    __device__ Fixed fixed(int q) const {
        const int ch = g.by_taps.div(q), t = g.by_taps.rest(q, ch), ky = g.by_kw.div(t), kx = g.by_kw.rest(t, ky);
        return {(ch * g.h + ky) * g.w + kx, ky, kx};
    }
    struct Step {
        const float* corner;  // x at the window's corner (iy0, ix0) of the pixel's sample, maybe outside the image
        int iy0, ix0;
    };
    __device__ Step step(int col) const {
        const int s = g.by_out_pixels.div(col), p = g.by_out_pixels.rest(col, s), oy = g.by_ow.div(p),
                  ox = g.by_ow.rest(p, oy), iy0 = oy * g.stride - g.pad, ix0 = ox * g.stride - g.pad;
        return {x + size_t(s) * g.c * g.h * g.w + (iy0 * g.w + ix0), iy0, ix0};
    }
    __device__ float load(const Fixed& tap, const Step& pixel) const {
        // (unsigned: a negative row or column is a large one, outside too)
        const bool inside = unsigned(pixel.iy0 + tap.ky) < unsigned(g.h) && unsigned(pixel.ix0 + tap.kx) < unsigned(g.w);
        return inside ? pixel.corner[tap.offset] : 0.0f;  // else padding
    }
};
// [unfold(x)^T | 1] (n*oh*ow, c*kh*kw + 1): UnfoldTransposed and a column of
// ones, against which the product sums dy into the bias gradient (version 4
// of the weight gradient). An element outside the image is the tap's
// `outside` value: 0 (padding) for a filter tap, and 1 for the ones column,
// whose window lies outside every image; so the ones cost no instruction
// more than the padding does.
struct UnfoldTransposedAndOnes {
    UnfoldTransposed unfold;
    int taps;
    static constexpr bool k_fast = true;
    struct Fixed {
        int offset, ky, kx;
        float outside;
    };
    using Step = UnfoldTransposed::Step;
    __device__ float operator()(int col, int q) const { return q < taps ? unfold(col, q) : 1.0f; }
    __device__ Fixed fixed(int q) const {
        if (q >= taps) return {0, -(1 << 20), -(1 << 20), 1.0f};
        const UnfoldTransposed::Fixed f = unfold.fixed(q);
        return {f.offset, f.ky, f.kx, 0.0f};
    }
    __device__ Step step(int col) const { return unfold.step(col); }
    __device__ float load(const Fixed& tap, const Step& pixel) const {
        const Geometry& g = unfold.g;
        const bool inside = unsigned(pixel.iy0 + tap.ky) < unsigned(g.h) && unsigned(pixel.ix0 + tap.kx) < unsigned(g.w);
        return inside ? pixel.corner[tap.offset] : tap.outside;
    }
};
// Version 14's two operands above: the same elements, each one predicate
// (tiles.cuh: LoadsIf). In versions 1 to 13 an element took two branches,
// one past the k-step's edge and one past the image's, and its address was
// rebuilt from the sample's element index (5 instructions); here the
// window's corner is a pointer held in registers, the edge, the rows and
// the columns one predicate, and the load predicated on it.
struct UnfoldTransposedPredicated : UnfoldTransposed {
    // The element at `offset` from the corner: one multiply-add, from a 32-bit
    // offset. (Left to itself nvcc keeps every load's offset widened to 64
    // bits across the loop: two registers a load, and a 64-bit add.)
    __device__ static float at(const float* corner, int offset) {
#ifdef __CUDA_ARCH__
        asm volatile("" : "+r"(offset));
#endif
        return __ldg(corner + offset);
    }
    __device__ Step step(int col) const {
        Step pixel = UnfoldTransposed::step(col);
#ifdef __CUDA_ARCH__
        asm("" : "+l"(pixel.corner));  // a pointer in registers: a load is one multiply-add from it
#endif
        return pixel;
    }
    // Whether the load is wanted and the tap (ky, kx) falls inside the image at the pixel.
    template <class Tap>
    __device__ static bool inside(bool wanted, const Geometry& g, const Tap& tap, const Step& pixel) {
        return wanted & (unsigned(pixel.iy0 + tap.ky) < unsigned(g.h)) & (unsigned(pixel.ix0 + tap.kx) < unsigned(g.w));
    }
    __device__ float load_if(bool wanted, const Fixed& tap, const Step& pixel) const {
        return inside(wanted, g, tap, pixel) ? at(pixel.corner, tap.offset) : 0.0f;
    }
};
// The same for a 1x1 convolution without padding (ResNet-18's shortcuts),
// whose every tap falls inside the image: the k-step's edge alone.
struct UnfoldTransposedPointwise : UnfoldTransposedPredicated {
    __device__ float load_if(bool wanted, const Fixed& tap, const Step& pixel) const {
        return wanted ? at(pixel.corner, tap.offset) : 0.0f;
    }
};
struct UnfoldTransposedAndOnesPredicated : UnfoldTransposedAndOnes {
    __device__ Step step(int col) const { return UnfoldTransposedPredicated{unfold}.step(col); }
    __device__ float load_if(bool wanted, const Fixed& tap, const Step& pixel) const {
        using U = UnfoldTransposedPredicated;
        float v = wanted ? tap.outside : 0.0f;
        if (U::inside(wanted, unfold.g, tap, pixel)) v = U::at(pixel.corner, tap.offset);
        return v;
    }
};
// f(dy, unfold(x)^T, [unfold(x)^T | 1]) as the weight gradient's version reads them.
template <class F>
void with_weight_grad_operands(const float* dy, const float* x, const ConvShape& s, F&& f) {
    const OutputGrad dy_rows{dy, s.oc, FastDiv(s.col_cols())};
    const UnfoldTransposed unfold{x, Geometry(s)};
    const UnfoldTransposedAndOnesPredicated with_ones{{unfold, s.col_rows()}};
    if (conv2d_backward_weight_version >= 14 && s.kh == 1 && s.kw == 1 && s.pad == 0)
        f(dy_rows, UnfoldTransposedPointwise{{unfold}}, with_ones);
    else if (conv2d_backward_weight_version >= 14)
        f(dy_rows, UnfoldTransposedPredicated{unfold}, with_ones);
    else
        f(dy_rows, unfold, UnfoldTransposedAndOnes{unfold, s.col_rows()});
}

void add_weight_slices(const UnfinishedWeightGrad& u, cudaStream_t stream) {
    tiled::add_splits(StoreWeightsAndBias{u.dw, u.db, u.taps}, u.scratch, u.slices, u.oc, u.taps + 1, stream);
}
// Version 9's input gradient kernel (input_grad_rows_tiled_wide) whose
// blocks first add a weight gradient's slices (version 13 of the weight
// gradient): the two gradients of LeNet's conv2 without finish_splits
// between them. The slices' sums are finish_splits', bit for bit; the
// input gradient's sums are untouched by them (none of its scratch, no
// shared memory, before its first barrier).
__global__ void __launch_bounds__(tiled_input_grad_threads)
    input_grad_rows_tiled_finishing(float* dx, const float* dy, const float* w, Geometry g,
                                    UnfinishedWeightGrad weight) {
    finish_weight_slices(weight);
    __shared__ __align__(16) float staged[TiledInputGrad<10>::sw_floats + TiledInputGrad<10>::sdy_floats];
    input_grad_rows_tiled_sums<10>(staged, dx, dy, w, g);
}

struct StorePartial {  // split z of (m, n) partial sums, or dw += value when unsplit
    float* out;
    size_t size;  // m * n
    int n;
    bool accumulate;
    __device__ void operator()(int z, int i, int j, float v) const {
        float& dst = out[size_t(z) * size + size_t(i) * n + j];
        dst = accumulate ? dst + v : v;
    }
};

// dw[i] += partial[0][i] + partial[1][i] + ..., in split order.
__global__ void add_partials(float* dw, const float* partial, int splits, size_t size) {
    for (const size_t i : launch::grid_stride(size)) {
        float sum = 0.0f;
        for (int z = 0; z < splits; ++z) sum += partial[size_t(z) * size + i];
        dw[i] += sum;
    }
}

// db[o] += sum of dy over samples and pixels of channel o: one block per channel.
__global__ void conv_bias_grad(float* db, const float* dy, int n, int oc, int pixels) {
    const int o = blockIdx.x;
    float sum = 0.0f;
    for (int s = 0; s < n; ++s) {
        const float* plane = dy + (size_t(s) * oc + o) * pixels;
        for (int p = threadIdx.x; p < pixels; p += blockDim.x) sum += plane[p];
    }
    sum = launch::block_sum(sum);
    if (threadIdx.x == 0) db[o] += sum;
}

// Version 4 sums the bias as one more column of the product, against a
// column of ones, where that column fits in the last tile's unused ones
// (taps not a multiple of the tiles' 128 columns) and in FP32 (with --tf32
// the bias sums the unrounded dy): no bias kernel of its own.
bool bias_in_product(const ConvShape& s) {
    return conv2d_backward_weight_version >= 4 && s.math == Math::fp32 && s.n > 0 && s.col_rows() % 128 != 0;
}

// Version 3 splits k twice as finely and aims at twice the blocks: each
// block of LeNet's conv2 then walks 41 k-steps instead of 81, and the GPU
// holds about 4 blocks a multiprocessor to cover their loads' latency.
int weight_grad_splits(const ConvShape& s, int version = conv2d_backward_weight_version) {
    if (version >= 3) return tiled::splits_for(s.oc, s.col_rows(), s.n * s.col_cols(), 128, 2 * tiled::target_blocks);
    return tiled::splits_for(s.oc, s.col_rows(), s.n * s.col_cols());
}
// The splits of the weight gradient's product (m = oc, n = taps, or taps
// and the bias's column of ones: as many tiles of 128 columns, since the
// bias goes there only where the taps leave the last tile room), fitted to
// whole waves (tiles.cuh: fit_waves). The rows kernels' slices
// (weight_grad_rows_kernel) keep weight_grad_splits: they are no product.
int product_weight_grad_splits(const ConvShape& s) {
    return tiled::fit_waves(s.oc, s.col_rows(), weight_grad_splits(s));
}

// Version 2 of the bias gradient: channel o's n * pixels values split into
// runs of whole samples, a block a run (grid: channels x splits), enough
// blocks to fill the GPU (tiled::target_blocks) with at least
// `bias_values_per_block` values each. Each block writes its sum, in block_sum's
// fixed order, to partial[o * splits + z]; finish_weight_grad adds them.
constexpr int bias_values_per_block = 4096;
int bias_grad_splits(const ConvShape& s) {
    const long values = long(s.n) * s.col_cols();
    const long most = std::max(1L, values / bias_values_per_block);
    const long wanted = (tiled::target_blocks + s.oc - 1) / s.oc;
    return int(std::max(1L, std::min({wanted, most, long(s.n)})));
}

__global__ void bias_grad_partials(float* partial, const float* dy, int n, int oc, int pixels, int splits) {
    const int o = blockIdx.x, z = blockIdx.y;
    // Samples [first, last) of this split: whole samples, in order.
    const int first = int(long(n) * z / splits), last = int(long(n) * (z + 1) / splits);
    const unsigned values = unsigned(last - first) * unsigned(pixels);  // a split's, < 2^32 for any real batch
    float sum = 0.0f;
    for (unsigned e = threadIdx.x; e < values; e += blockDim.x) {
        const unsigned r = e / unsigned(pixels), p = e - r * unsigned(pixels);
        sum += dy[(size_t(first + int(r)) * oc + o) * pixels + p];
    }
    sum = launch::block_sum(sum);
    if (threadIdx.x == 0) partial[size_t(o) * splits + z] = sum;
}

// dw[i] += the weight gradient's partials of element i, in split order (when
// split); db[o] += the bias partials of channel o, in split order: one pass
// for both, so version 2 queues no more kernels than version 1.
__global__ void finish_weight_grad(float* dw, const float* w_partial, int w_splits, size_t w_size, float* db,
                                   const float* b_partial, int b_splits, int oc) {
    const size_t w_count = w_splits > 1 ? w_size : 0;
    for (const size_t i : launch::grid_stride(w_count + size_t(oc))) {
        float sum = 0.0f;
        if (i < w_count) {
            for (int z = 0; z < w_splits; ++z) sum += w_partial[size_t(z) * w_size + i];
            dw[i] += sum;
        } else {
            const size_t o = i - w_count;
            for (int z = 0; z < b_splits; ++z) sum += b_partial[o * b_splits + size_t(z)];
            db[o] += sum;
        }
    }
}

// Version 3 of the weight gradient, for a small filter bank (LeNet's conv1:
// 20 x 9 weights; ResNet-18's first: 64 x 9). As a GEMM its 180 results
// fill 4% of a tile, and each block walks a long k one dependent load after
// another. Here a block takes whole samples; it stages `small_pixels`
// output pixels at a time in shared memory (dy of every channel, and the
// unfolded input of every tap), and each thread sums the products of up to
// `small_per_thread` weights and biases over them, in pixel order. Each
// block writes its sums to partial[block][weight or bias]; finish_small
// adds the blocks' sums, one block an element, in block_sum's fixed order
// (version 3), or the last block to store its sums adds them all, each
// thread an element's, in block order (version 5: no second kernel).
constexpr int small_pixels = 64, small_max_oc = 64, small_max_taps = 64, small_per_thread = 4;

bool small_bank(const ConvShape& s) {
    return s.n > 0 && s.oc <= small_max_oc && s.col_rows() <= small_max_taps &&
           s.weight_size() + size_t(s.oc) <= size_t(small_per_thread) * launch::threads;
}
bool bank_weight_grad(const ConvShape& s);
// (With --tf32, version 7's kernel alone, which rounds dy for the weights'
// sums but not for the bias's: versions 3 to 6 keep FP32.)
bool small_weight_grad(const ConvShape& s) {
    return conv2d_backward_weight_version >= 3 && small_bank(s) && (s.math == Math::fp32 || bank_weight_grad(s));
}
// A block per sample, up to a block_sum's width (finish_small adds one
// block's worth per thread).
int small_weight_grad_blocks(const ConvShape& s) { return std::min(s.n, launch::threads); }

// Where the kernel below reads the output gradient dy (n, oc, oh, ow): from
// memory, or (conv2d_backward_weight_pool) through the pooling and ReLU after
// the convolution, from the pooling's output gradient, as pool_backward
// with ReLU's mask would have written dy.
//
// Version 6's kernel reads dy in two steps where a reader allows it
// (two_step): where(sample, p) once a pixel, then load(at, o) a channel, a
// plain load with no branch before it, whose value(at, loaded) is worked out
// only when it is stored; so a thread's loads of a chunk are all in flight
// at once.
struct OutputGradIn {
    const float* dy;
    __device__ float operator()(int sample, int o, int p, const Geometry& g) const {
        return dy[(size_t(sample) * g.oc + o) * (g.oh * g.ow) + p];
    }
    static constexpr bool two_step = true;
    struct At {
        const float* dy;  // channel 0's value at the pixel
        int plane;
    };
    using Loaded = float;
    __device__ At where(int sample, int p, const Geometry& g) const {
        return {dy + size_t(sample) * g.oc * (g.oh * g.ow) + p, g.oh * g.ow};
    }
    __device__ static Loaded load(const At& at, int o) { return at.dy[size_t(o) * at.plane]; }
    __device__ static float value(const At&, Loaded v) { return v; }
};
// dy through an average pooling whose windows do not overlap and the ReLU
// before it (version 6): a pixel is in one window or none, so the value is
// pooled_input_grad's sum of one term (the same bits) without its loops.
struct OutputGradThroughAvgPoolApart {
    const float* d_pooled;  // (n, oc, ph, pw)
    const float* y;         // the convolution's output after its ReLU (n, oc, oh, ow)
    int k, stride, ph, pw;
    static constexpr bool two_step = true;
    struct At {
        const float* y;  // channel 0's output at the pixel
        const float* d;  // channel 0's pooled gradient of the pixel's window
        int y_plane, d_plane;
        bool covered;  // whether a window holds the pixel
    };
    struct Loaded {
        float y, d;
    };
    __device__ At where(int sample, int p, const Geometry& g) const {
        const int iy = g.by_ow.div(p), ix = g.by_ow.rest(p, iy), wy = iy / stride, wx = ix / stride;
        const bool covered = wy < ph && wx < pw && iy - wy * stride < k && ix - wx * stride < k;
        const size_t planes = size_t(sample) * g.oc;
        return {y + planes * (g.oh * g.ow) + p, d_pooled + planes * (ph * pw) + (covered ? wy * pw + wx : 0),
                g.oh * g.ow, ph * pw, covered};
    }
    __device__ static Loaded load(const At& at, int o) {
        return {at.y[size_t(o) * at.y_plane], at.d[size_t(o) * at.d_plane]};
    }
    __device__ float value(const At& at, Loaded v) const { return at.covered ? covered_value(v) : 0.0f; }
    // A pixel that a window holds: ReLU's mask, then the window's share.
    __device__ float covered_value(Loaded v) const {
        const float inv_area = 1.0f / float(k * k);
        return v.y > 0.0f ? 0.0f + v.d * inv_area : 0.0f;
    }
    __device__ float operator()(int sample, int o, int p, const Geometry& g) const {
        const At at = where(sample, p, g);
        return value(at, load(at, o));
    }
};
template <PoolKind kind>
struct OutputGradThroughPool {
    static constexpr bool two_step = false;
    const float* d_pooled;  // (n, oc, ph, pw)
    const float* y;         // the convolution's output after its ReLU (n, oc, oh, ow)
    const float* pooled;    // the pooling's output (n, oc, ph, pw)
    int k, stride, ph, pw;
    __device__ float operator()(int sample, int o, int p, const Geometry& g) const {
        const size_t plane = size_t(sample) * g.oc + o, outputs = plane * ph * pw;
        const float* yp = y + plane * g.oh * g.ow;
        if (!(yp[p] > 0.0f)) return 0.0f;  // ReLU's mask
        const int iy = p / g.ow, ix = p - iy * g.ow;
        return pooled_input_grad<kind>(d_pooled + outputs, yp, pooled + outputs, g.ow, k, stride, ph, pw, iy, ix);
    }
};

// The same, but with the pooling's output gradient not yet gathered: it is
// the input gradient of the convolution after the pooling (`next`, stride 1),
// left by that convolution's backward-data as columns (dcol), and each value
// is gathered from them where the pooling's backward reads it, as
// gather_input_grad would have (the same sums, bit for bit): no gather kernel
// (conv2d_backward_data_weight_pool).
struct GatheredPlane {  // d_pooled of one plane (sample, channel), read as gathered
    const float* sample;  // dcol's column (sample, 0, 0) of row 0
    size_t cols;
    Geometry next;
    int ch;
    __device__ float operator[](int out) const {
        const int iy = next.by_w.div(out), ix = next.by_w.rest(out, iy);
        return gathered_unit_stride(sample, cols, next, ch, iy, ix);
    }
};
template <PoolKind kind>
struct OutputGradThroughPoolFromColumns {
    static constexpr bool two_step = false;
    const float* dcol;    // (next.c*kh*kw, n*next.oh*next.ow)
    Geometry next;        // its input (c, h, w) is the pooling's output (oc, ph, pw)
    const float* y;       // the convolution's output after its ReLU (n, oc, oh, ow)
    const float* pooled;  // the pooling's output (n, oc, ph, pw)
    int k, stride;
    __device__ float operator()(int sample, int o, int p, const Geometry& g) const {
        const size_t plane = size_t(sample) * g.oc + o, outputs = plane * next.h * next.w;
        const float* yp = y + plane * g.oh * g.ow;
        if (!(yp[p] > 0.0f)) return 0.0f;  // ReLU's mask
        const int iy = p / g.ow, ix = p - iy * g.ow;
        const size_t cols = size_t(next.n) * next.oh * next.ow;
        const GatheredPlane d_pooled{dcol + size_t(sample) * next.oh * next.ow, cols, next, o};
        return pooled_input_grad<kind>(d_pooled, yp, pooled + outputs, g.ow, k, stride, next.h, next.w, iy, ix);
    }
};

// A thread's share of a small filter bank's sums (versions 3, 5 and 6):
// outputs j = threadIdx.x + u * threads, each a weight (o, q) or a bias
// o - weights, summed chunk by chunk, each chunk in pixel order.
struct SmallSums {
    int outputs, weights;
    int row[small_per_thread], tap[small_per_thread];  // tap -1: a bias, whose "input" is 1
    float acc[small_per_thread] = {};
    __device__ SmallSums(int taps, int weights_, int oc) : outputs(weights_ + oc), weights(weights_) {
#pragma unroll
        for (int u = 0; u < small_per_thread; ++u) {
            const int j = int(threadIdx.x) + u * launch::threads;
            row[u] = j < weights ? j / taps : j - weights;
            tap[u] = j < weights ? j % taps : -1;
        }
    }
    // Adds a staged chunk: dys[o][p], channel o's dy at the chunk's pixel p,
    // and cols[q][p], the input that tap q sees there.
    __device__ void add(const float (*dys)[small_pixels + 1], const float (*cols)[small_pixels + 1]) {
#pragma unroll
        for (int u = 0; u < small_per_thread; ++u) {
            if (int(threadIdx.x) + u * launch::threads >= outputs) break;
            float sum = 0.0f;
            if (tap[u] >= 0) {
                for (int p = 0; p < small_pixels; ++p) sum += dys[row[u]][p] * cols[tap[u]][p];
            } else {
                for (int p = 0; p < small_pixels; ++p) sum += dys[row[u]][p];
            }
            acc[u] += sum;
        }
    }
    // The block's sums into partial[block]; with a ticket, the last block to
    // store its own then adds every block's, in block order, to dw and db
    // (without one, finish_small adds them).
    __device__ void finish(float* partial, float* dw, float* db, unsigned* ticket) const {
#pragma unroll
        for (int u = 0; u < small_per_thread; ++u) {
            const int j = int(threadIdx.x) + u * launch::threads;
            if (j < outputs) partial[size_t(blockIdx.x) * outputs + j] = acc[u];
        }
        if (!ticket || !launch::last_to_arrive(ticket, gridDim.x)) return;
        for (int j = int(threadIdx.x); j < outputs; j += launch::threads) {
            float sum = 0.0f;
            for (unsigned b = 0; b < gridDim.x; ++b) sum += __ldcg(partial + size_t(b) * outputs + j);
            if (j < weights) dw[j] += sum;
            else db[j - weights] += sum;
        }
    }
};

template <class Dy>
__global__ void __launch_bounds__(launch::threads) small_weight_grad_partials(float* partial, Dy dy,
                                                                              const float* x, Geometry g,
                                                                              float* dw, float* db,
                                                                              unsigned* ticket) {
    __shared__ float dys[small_max_oc][small_pixels + 1];     // dys[o][p]: +1, so that rows fall in other banks
    __shared__ float cols[small_max_taps][small_pixels + 1];  // cols[q][p] = unfold(x)[q][pixel p]
    const int taps = g.c * g.kh * g.kw, pixels = g.oh * g.ow;
    const int first = int(long(g.n) * blockIdx.x / gridDim.x), last = int(long(g.n) * (blockIdx.x + 1) / gridDim.x);
    const int count = (last - first) * pixels;  // this block's output pixels, sample by sample
    SmallSums sums(taps, g.oc * taps, g.oc);
    for (int p0 = 0; p0 < count; p0 += small_pixels) {
        for (int e = threadIdx.x; e < g.oc * small_pixels; e += launch::threads) {
            const int o = e / small_pixels, p = e % small_pixels, at = p0 + p;
            const int s = first + at / pixels, pp = at % pixels;
            dys[o][p] = at < count ? dy(s, o, pp, g) : 0.0f;
        }
        for (int e = threadIdx.x; e < taps * small_pixels; e += launch::threads) {
            const int q = e / small_pixels, p = e % small_pixels, at = p0 + p;
            cols[q][p] = at < count ? unfolded(x, g, q, (first + at / pixels) * pixels + at % pixels) : 0.0f;
        }
        __syncthreads();
        sums.add(dys, cols);
        __syncthreads();
    }
    sums.finish(partial, dw, db, ticket);
}

// Version 6 of the small filter bank's weight gradient: version 5's sums
// (the same chunks of 64 pixels, each thread's products in the same order,
// the blocks' sums added by the last of them: the same bits), but each
// thread's loads of a chunk go out together, into registers, and the next
// chunk's go out while this one's products are summed. In version 5 a
// thread's loads of a chunk waited on one another (a loop of run-time
// length, a branch on ReLU's mask before each read through the pooling), so
// its blocks spent their time waiting on memory. A thread loads the same
// pixel of every chunk, for every 4th channel and tap; a reader without two
// steps (max pooling, overlapping windows, gathered columns) runs version 5.
constexpr int small_rows_a_pass = launch::threads / small_pixels;        // 4
constexpr int small_loads = small_max_oc / small_rows_a_pass;            // a thread's loads a chunk: 16 at most
static_assert(launch::threads % small_pixels == 0 && small_max_oc == small_max_taps);

template <class Dy>
__global__ void __launch_bounds__(launch::threads) small_weight_grad_pipelined(float* partial, Dy dy,
                                                                               const float* x, Geometry g,
                                                                               float* dw, float* db,
                                                                               unsigned* ticket) {
    __shared__ float dys[small_max_oc][small_pixels + 1];
    __shared__ float cols[small_max_taps][small_pixels + 1];
    const int taps = g.c * g.kh * g.kw, pixels = g.oh * g.ow;
    const int first = int(long(g.n) * blockIdx.x / gridDim.x), last = int(long(g.n) * (blockIdx.x + 1) / gridDim.x);
    const int count = (last - first) * pixels;
    SmallSums sums(taps, g.oc * taps, g.oc);
    // This thread's pixel of each chunk, and its rows there: row0 + i * small_rows_a_pass.
    const int p = int(threadIdx.x) % small_pixels, row0 = int(threadIdx.x) / small_pixels;
    typename Dy::At at{};
    bool in = false;  // whether the chunk's pixel p is one of the block's
    typename Dy::Loaded dv[small_loads];
    float cv[small_loads];
    const auto load = [&](int p0) {
        const int e = p0 + p;
        in = e < count;
        const int s = in ? first + e / pixels : first, pp = in ? e % pixels : 0;
        at = dy.where(s, pp, g);
        const int oy = g.by_ow.div(pp), ox = g.by_ow.rest(pp, oy);
        const int y0 = oy * g.stride - g.pad, x0 = ox * g.stride - g.pad;
        const float* xs = x + size_t(s) * g.c * g.h * g.w;
#pragma unroll
        for (int i = 0; i < small_loads; ++i) {
            const int o = row0 + i * small_rows_a_pass;
            dv[i] = o < g.oc ? Dy::load(at, o) : typename Dy::Loaded{};
        }
#pragma unroll
        for (int i = 0; i < small_loads; ++i) {
            const int q = row0 + i * small_rows_a_pass;
            const int ch = g.by_taps.div(q), t = g.by_taps.rest(q, ch), ky = g.by_kw.div(t), kx = g.by_kw.rest(t, ky);
            const int iy = y0 + ky, ix = x0 + kx;
            const bool inside = q < taps && iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;  // else padding
            cv[i] = inside ? xs[(size_t(ch) * g.h + iy) * g.w + ix] : 0.0f;
        }
    };
    const auto store = [&] {
#pragma unroll
        for (int i = 0; i < small_loads; ++i) {
            const int o = row0 + i * small_rows_a_pass;
            if (o < g.oc) dys[o][p] = in ? dy.value(at, dv[i]) : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < small_loads; ++i) {
            const int q = row0 + i * small_rows_a_pass;
            if (q < taps) cols[q][p] = in ? cv[i] : 0.0f;
        }
    };
    if (count > 0) load(0);
    for (int p0 = 0; p0 < count; p0 += small_pixels) {
        store();
        __syncthreads();
        if (p0 + small_pixels < count) load(p0 + small_pixels);  // in flight while the sums below run
        sums.add(dys, cols);
        __syncthreads();
    }
    sums.finish(partial, dw, db, ticket);
}

// Version 7, for a bank of 3 x 3 filters over one input channel (LeNet's
// conv1, ResNet-18's first conv): versions 3 to 6 give a thread one or two
// of the bank's sums and walk the pixels in chunks staged in shared memory
// (two shared loads a multiply-add, two barriers a chunk, 56 of 256 threads
// idle for LeNet's 200 sums). Here a block takes `bank_group` channels and
// a slice of the batch's output pixels, and each thread keeps all of the
// group's 40 sums in registers: a pixel is 9 inputs and 4 gradients loaded,
// 36 multiply-adds and 4 adds, no barrier. A fixed tree in shared memory then
// adds the block's threads' sums, and the last block to store its own adds
// every slice's, in slice order. The slices are a fixed number
// (bank_blocks), not the device's, so every GPU adds in the same order.
constexpr int bank_group = 4, bank_taps = 9, bank_sums = bank_group * (bank_taps + 1);
constexpr int bank_blocks = tiled::target_blocks;

bool bank_weight_grad(const ConvShape& s) {
    return conv2d_backward_weight_version >= 7 && direct_math(s) && small_bank(s) && s.c == 1 && s.kh == 3 && s.kw == 3;
}
int bank_groups(const ConvShape& s) { return (s.oc + bank_group - 1) / bank_group; }
// Slices of the batch's output pixels: at most small_weight_grad_blocks's,
// which conv2d_scratch_floats counts a block's sums for.
int bank_slices(const ConvShape& s) {
    return std::clamp((bank_blocks + bank_groups(s) - 1) / bank_groups(s), 1, small_weight_grad_blocks(s));
}

// A pixel of version 7: its inputs under the 9 taps, and what its 4
// channels' gradients are worked out from (the reader's two steps: where,
// then the loads; or, for a reader without them, the gradients).
template <class Dy, bool = Dy::two_step>
struct BankPixel {
    float x[bank_taps], d[bank_group];
    bool valid;
};
template <class Dy>
struct BankPixel<Dy, true> {
    float x[bank_taps];
    typename Dy::At at;
    typename Dy::Loaded v[bank_group];
    bool valid;
};

// The end of both bank kernels: the block's threads' sums acc (the
// block's group of channels: blockIdx.x, its slice: blockIdx.y) added by a
// fixed tree in shared memory into partial, then, by the last block to
// store its own, every slice's in slice order into dw and db.
__device__ void bank_sums_finish(float (*tree)[launch::threads], const float (&acc)[bank_group][bank_taps + 1],
                                 float* partial, const Geometry& g, float* dw, float* db, unsigned* ticket) {
    const int first = int(blockIdx.x) * bank_group, slice = int(blockIdx.y), slices = int(gridDim.y);
#pragma unroll
    for (int u = 0; u < bank_group; ++u)
#pragma unroll
        for (int q = 0; q <= bank_taps; ++q) tree[u * (bank_taps + 1) + q][threadIdx.x] = acc[u][q];
    __syncthreads();
#pragma unroll
    for (int half = launch::threads / 2; half > 0; half /= 2) {
        for (int i = int(threadIdx.x); i < bank_sums * half; i += launch::threads) {
            const int k = i / half, r = i - k * half;
            tree[k][r] += tree[k][r + half];
        }
        __syncthreads();
    }
    // The block's sums, each output's slices side by side (partial[j][slice]).
    const int taps = bank_taps, weights = g.oc * taps, outputs = weights + g.oc;
    if (int(threadIdx.x) < bank_sums) {
        const int u = int(threadIdx.x) / (taps + 1), q = int(threadIdx.x) - u * (taps + 1), o = first + u;
        if (o < g.oc) partial[size_t(q < taps ? o * taps + q : weights + o) * slices + slice] = tree[threadIdx.x][0];
    }
    if (!launch::last_to_arrive(ticket, gridDim.x * gridDim.y)) return;
    // The last block: 8 threads an output, each adding every 8th slice in
    // order, then the 8 in order.
    constexpr int lanes = 8, per_pass = launch::threads / lanes;
    const int lane = int(threadIdx.x) % lanes;
    for (int j0 = 0; j0 < outputs; j0 += per_pass) {
        const int j = j0 + int(threadIdx.x) / lanes;
        float sum = 0.0f;
        if (j < outputs)
            for (int z = lane; z < slices; z += lanes) sum += __ldcg(partial + size_t(j) * slices + z);
        tree[0][threadIdx.x] = sum;
        __syncthreads();
        if (int(threadIdx.x) < per_pass && j0 + int(threadIdx.x) < outputs) {
            const int jj = j0 + int(threadIdx.x);
            float all = 0.0f;
#pragma unroll
            for (int l = 0; l < lanes; ++l) all += tree[0][threadIdx.x * lanes + l];
            if (jj < weights) dw[jj] += all;
            else db[jj - weights] += all;
        }
        __syncthreads();
    }
}

// tf32: the weights' sums take x and dy rounded (operand()), the bias's dy as it is.
template <class Dy, bool tf32>
__global__ void __launch_bounds__(launch::threads, 2) bank_weight_grad_sums(float* partial, Dy dy, const float* x,
                                                                            Geometry g, float* dw, float* db,
                                                                            unsigned* ticket) {
    __shared__ float tree[bank_sums][launch::threads];
    const int first = int(blockIdx.x) * bank_group, slice = int(blockIdx.y), slices = int(gridDim.y);
    const long total = long(g.n) * (g.oh * g.ow);
    const int begin = int(total * slice / slices), end = int(total * (slice + 1) / slices);
    // Both pixels of a pass are fetched before either is added, with no
    // branch between their loads (a pixel past the slice reads the slice's
    // first and adds zeros), so that all of them are in flight at once.
    using Pixel = BankPixel<Dy>;
    const auto fetch = [&](int e) {
        Pixel px;
        px.valid = e < end;
        if (!px.valid) e = begin;
        const int s = g.by_out_pixels.div(e), p = g.by_out_pixels.rest(e, s), oy = g.by_ow.div(p),
                  ox = g.by_ow.rest(p, oy);
        const int y0 = oy * g.stride - g.pad, x0 = ox * g.stride - g.pad;
        const float* image = x + size_t(s) * g.h * g.w;
#pragma unroll
        for (int ky = 0; ky < 3; ++ky)
#pragma unroll
            for (int kx = 0; kx < 3; ++kx) {
                const int iy = y0 + ky, ix = x0 + kx;
                const bool inside = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
                px.x[ky * 3 + kx] = inside ? operand(image[iy * g.w + ix], tf32) : 0.0f;
            }
        if constexpr (Dy::two_step) {
            px.at = dy.where(s, p, g);
#pragma unroll
            for (int u = 0; u < bank_group; ++u)
                px.v[u] = first + u < g.oc ? Dy::load(px.at, first + u) : typename Dy::Loaded{};
        } else {
#pragma unroll
            for (int u = 0; u < bank_group; ++u) px.d[u] = first + u < g.oc ? dy(s, first + u, p, g) : 0.0f;
        }
        return px;
    };
    float acc[bank_group][bank_taps + 1] = {};  // [u][9]: the bias's
    const auto add = [&](const Pixel& px) {
#pragma unroll
        for (int u = 0; u < bank_group; ++u) {
            float d;
            if constexpr (Dy::two_step) d = dy.value(px.at, px.v[u]);
            else d = px.d[u];
            d = px.valid && first + u < g.oc ? d : 0.0f;
            const float dr = operand(d, tf32);
#pragma unroll
            for (int q = 0; q < bank_taps; ++q) acc[u][q] = fmaf(dr, px.x[q], acc[u][q]);
            acc[u][bank_taps] += d;
        }
    };
    for (int e = begin + int(threadIdx.x); e < end; e += 2 * launch::threads) {
        const Pixel a = fetch(e), b = fetch(e + launch::threads);
        add(a);
        add(b);
    }
    bank_sums_finish(tree, acc, partial, g, dw, db, ticket);
}

// Version 12, for LeNet's conv1 through its average pooling (3 x 3
// filters over one channel, stride 1, no padding; 2 x 2 windows, stride 2,
// that tile the output): version 7 takes a pixel at a time, 9 inputs and
// 4 channels' (y, pooled gradient) pairs, 17 loads, for 36 multiply-adds.
// Here a thread takes a pooling window at a time: its 4 pixels share a 4 x
// 4 patch of the input and, a channel, one pooled gradient, so a window is
// 16 + 4 x (1 + 4) = 36 loads for 144 multiply-adds, all in flight before
// the first is added. The same blocks (a group of 4 channels and a slice of
// the batch's windows), the same tree and last block as version 7's; each
// thread adds its pixels window by window, so the sums are in another
// order than version 7's.
bool bank_windows_fit(const ConvShape& s, const OutputGradThroughAvgPoolApart& dy) {
    return conv2d_backward_weight_version >= 12 && bank_weight_grad(s) && s.stride == 1 && s.pad == 0 && dy.k == 2 &&
           dy.stride == 2 && dy.ph * 2 == s.oh() && dy.pw * 2 == s.ow();
}

// (Its name on the line of __launch_bounds__: written on the next line,
// nvcc 13's host stub for the kernel did not compile.)
template <bool tf32>
__global__ void __launch_bounds__(launch::threads, 2) bank_weight_grad_windows(float* partial,
                                                                               OutputGradThroughAvgPoolApart dy,
                                                                               const float* x, Geometry g, float* dw,
                                                                               float* db, unsigned* ticket) {
    __shared__ float tree[bank_sums][launch::threads];
    const int first = int(blockIdx.x) * bank_group, slice = int(blockIdx.y), slices = int(gridDim.y);
    const int windows = dy.ph * dy.pw, channels = min(bank_group, g.oc - first);
    const long total = long(g.n) * windows;
    const int begin = int(total * slice / slices), end = int(total * (slice + 1) / slices);
    float acc[bank_group][bank_taps + 1] = {};  // [u][9]: the bias's
    for (int e = begin + int(threadIdx.x); e < end; e += launch::threads) {
        const int sample = e / windows, at = e - sample * windows, wy = at / dy.pw, wx = at - wy * dy.pw;
        const int oy = 2 * wy, ox = 2 * wx;
        const float* image = x + size_t(sample) * g.h * g.w + oy * g.w + ox;
        float patch[4][4];
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
            for (int c = 0; c < 4; ++c) patch[r][c] = operand(image[r * g.w + c], tf32);
        OutputGradThroughAvgPoolApart::Loaded v[bank_group][4];
#pragma unroll
        for (int u = 0; u < bank_group; ++u) {
            const size_t plane = size_t(sample) * g.oc + first + min(u, channels - 1);
            const float d = dy.d_pooled[plane * windows + at];
            const float* y = dy.y + plane * (g.oh * g.ow) + oy * g.ow + ox;
#pragma unroll
            for (int p = 0; p < 4; ++p) v[u][p] = {y[(p / 2) * g.ow + p % 2], d};
        }
#pragma unroll
        for (int u = 0; u < bank_group; ++u)
#pragma unroll
            for (int p = 0; p < 4; ++p) {
                const float d = u < channels ? dy.covered_value(v[u][p]) : 0.0f;
                const float dr = operand(d, tf32);
#pragma unroll
                for (int q = 0; q < bank_taps; ++q) acc[u][q] = fmaf(dr, patch[p / 2 + q / 3][p % 2 + q % 3], acc[u][q]);
                acc[u][bank_taps] += d;
            }
    }
    bank_sums_finish(tree, acc, partial, g, dw, db, ticket);
}

// dw[j] (or db[j - weights]) += the `blocks` partial sums of element j (a
// block an element; blocks <= threads).
__global__ void finish_small(float* dw, float* db, const float* partial, int blocks, int weights, int outputs) {
    const int j = blockIdx.x;
    float v = int(threadIdx.x) < blocks ? partial[size_t(threadIdx.x) * outputs + j] : 0.0f;
    v = launch::block_sum(v);
    if (threadIdx.x == 0) {
        if (j < weights) dw[j] += v;
        else db[j - weights] += v;
    }
}

// Version 2 of the forward pass, for a small filter bank on a small image
// (LeNet's conv1: 20 filters of 1 x 3 x 3 on 28 x 28; ResNet-18's first: 64
// of them). As a GEMM its k is 9: the tile's loads and index arithmetic,
// paid once a k-step, outweigh its 9 multiply-adds. Here a block takes one
// sample and `direct_group` output channels: it stages the sample's image
// and the group's filters in shared memory, and each thread sums a pixel's
// taps for the group's channels (four sums from each input value read).
// With `pooled`, the block then pools the group's output planes from shared
// memory, as pool_forward does, and writes both: the pooling layer after a
// convolution and its ReLU costs no kernel and no second read of them.
constexpr int direct_group = 4;  // (tiled::read4's width)
constexpr int direct_max_taps = 64, direct_max_oc = 64, direct_max_image = 4096,
              direct_max_plane = 1024;

bool direct_forward_fits(const ConvShape& s) {
    return conv2d_forward_version >= 2 && direct_math(s) && s.n > 0 && s.oc <= direct_max_oc &&
           s.col_rows() <= direct_max_taps && size_t(s.c) * s.h * s.w <= size_t(direct_max_image) &&
           s.oh() * s.ow() <= direct_max_plane;
}

// A sample's image (c x h x w) into shared memory, its values rounded as
// g's arithmetic takes them: read from x, or (from.x) gathered from the
// dataset's bytes as gather_samples would, and then, by the block that
// keeps them, stored with the label for the backward.
__device__ void stage_image(float* image, int sample, const float* x, const Geometry& g, const GatherSource& from,
                            bool keep) {
    const int image_size = g.c * g.h * g.w, step = int(blockDim.x);
    if (from.x) {
        const uint32_t stored = from.index[sample];
        const uint8_t* pixels_in = from.images + size_t(stored) * image_size;
        float* xs = from.x + size_t(sample) * image_size;
        for (int e = int(threadIdx.x); e < image_size; e += step) {
            const float v = float(pixels_in[e]) * (1.0f / 255.0f);  // as gather
            image[e] = operand(v, g.tf32);
            if (keep) xs[e] = v;  // (the backward rounds what it reads)
        }
        if (keep && threadIdx.x == 0) from.labels_out[sample] = from.labels[stored];
    } else {
        const float* xs = x + size_t(sample) * image_size;
        for (int e = int(threadIdx.x); e < image_size; e += step) image[e] = operand(xs[e], g.tf32);
    }
}

// K: the filters' size when it is 3 x 3, whose taps then unroll; 0: g's.
// From version 5, with `from` (GatherSource: its x is then x), the first
// layer's kernel gathers each sample's image from the dataset as it stages
// it, as gather_samples would, and the blocks of its first channels store
// it and the label for the backward: no gather kernel.
template <bool relu, bool pooled, PoolKind kind, int K>
__global__ void __launch_bounds__(launch::threads) direct_forward(float* y, float* pooled_y, const float* x,
                                                                  const float* w, const float* b, Geometry g,
                                                                  PoolGeometry pg, GatherSource from) {
    __shared__ float image[direct_max_image];
    __shared__ __align__(16) float filters[direct_max_taps][direct_group];  // filters[q][u]: channel first + u
    __shared__ float planes[pooled ? direct_group * direct_max_plane : 1];
    const int sample = blockIdx.x, first = blockIdx.y * direct_group;
    const int taps = g.c * g.kh * g.kw, pixels = g.oh * g.ow;
    stage_image(image, sample, x, g, from, blockIdx.y == 0);
    for (int q = threadIdx.x; q < taps; q += launch::threads) {
#pragma unroll
        for (int u = 0; u < direct_group; ++u)
            filters[q][u] = first + u < g.oc ? operand(w[size_t(first + u) * taps + q], g.tf32) : 0.0f;
    }
    __syncthreads();
    for (int p = threadIdx.x; p < pixels; p += launch::threads) {
        const int oy = p / g.ow, ox = p - oy * g.ow;
        float acc[direct_group] = {};
        const int kh = K ? K : g.kh, kw = K ? K : g.kw, y0 = oy * g.stride - g.pad, x0 = ox * g.stride - g.pad;
        for (int ch = 0; ch < g.c; ++ch) {
            const float* plane = image + ch * g.h * g.w;
#pragma unroll
            for (int ky = 0; ky < kh; ++ky) {
                const int iy = y0 + ky;
                if (iy < 0 || iy >= g.h) continue;  // padding
#pragma unroll
                for (int kx = 0; kx < kw; ++kx) {
                    const int ix = x0 + kx;
                    if (ix < 0 || ix >= g.w) continue;
                    const float v = plane[iy * g.w + ix];
                    float f[direct_group];
                    tiled::read4(f, filters[(ch * kh + ky) * kw + kx]);
#pragma unroll
                    for (int u = 0; u < direct_group; ++u) acc[u] = fmaf(f[u], v, acc[u]);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < direct_group; ++u) {
            if (first + u >= g.oc) break;
            float v = acc[u] + b[first + u];
            if (relu) v = v > 0.0f ? v : 0.0f;
            y[(size_t(sample) * g.oc + first + u) * pixels + p] = v;
            if (pooled) planes[u * pixels + p] = v;
        }
    }
    if (!pooled) return;
    __syncthreads();
    const int windows = pg.oh * pg.ow, group = min(direct_group, g.oc - first);
    for (int e = threadIdx.x; e < group * windows; e += launch::threads) {
        const int u = e / windows, r = e - u * windows, oy = r / pg.ow, ox = r - oy * pg.ow;
        pooled_y[(size_t(sample) * g.oc + first + u) * windows + r] =
            pooled_window<kind>(planes + u * pixels + oy * pg.stride * g.ow + ox * pg.stride, g.ow, pg.k);
    }
}

// Version 11 of the forward pass, for LeNet's conv1 and the pooling after
// it (20 filters of 3 x 3 on one 28 x 28 channel, stride 1, no padding; 2 x
// 2 windows, stride 2, that tile the 26 x 26 output). Version 2's kernel
// takes a block a sample and 4 channels: 1,280 blocks, 1.62 waves of an
// H100 at batch 256, each staging the sample's image again and summing 36
// products a pixel. Here a block takes a sample and all 20 channels, and a
// thread one pooling window: it reads the window's 4 x 4 patch of the image
// into registers once, sums its 4 outputs for the 20 channels (720 FFMA,
// each filter tap one broadcast read of 5 x 16 bytes for all 4), stores
// them, and pools them itself: no plane in shared memory, no second
// barrier. Each output's sum is version 2's, in its order, bit for bit.
constexpr int window_channels = 20, window_threads = 192;

bool window_forward_fits(const ConvShape& s, const PoolGeometry& pg) {
    return conv2d_forward_version >= 11 && direct_forward_fits(s) && s.c == 1 && s.oc == window_channels &&
           s.kh == 3 && s.kw == 3 && s.stride == 1 && s.pad == 0 && pg.k == 2 && pg.stride == 2 &&
           pg.oh * 2 == s.oh() && pg.ow * 2 == s.ow() && pg.oh * pg.ow <= window_threads;
}

template <PoolKind kind>
__global__ void __launch_bounds__(window_threads) window_forward(float* y, float* pooled_y, const float* x,
                                                                 const float* w, const float* b, Geometry g,
                                                                 PoolGeometry pg, GatherSource from) {
    constexpr int taps = 9;
    __shared__ float image[direct_max_image];
    __shared__ __align__(16) float filters[taps][window_channels];  // filters[q][u]: channel u's tap q
    const int sample = int(blockIdx.x), t = int(threadIdx.x);
    stage_image(image, sample, x, g, from, true);
    for (int e = t; e < taps * window_channels; e += window_threads) {
        const int u = e / taps, q = e - u * taps;
        filters[q][u] = operand(w[e], g.tf32);
    }
    __syncthreads();
    const int windows = pg.oh * pg.ow;
    if (t >= windows) return;
    const int wy = t / pg.ow, wx = t - wy * pg.ow, oy = 2 * wy, ox = 2 * wx;
    float patch[4][4];
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c) patch[r][c] = image[(oy + r) * g.w + ox + c];
    float acc[4][window_channels] = {};  // acc[2 * dy + dx][u]: output (oy + dy, ox + dx) of channel u
#pragma unroll
    for (int ky = 0; ky < 3; ++ky)
#pragma unroll
        for (int kx = 0; kx < 3; ++kx) {
            float f[window_channels];
#pragma unroll
            for (int u = 0; u < window_channels; u += 4) tiled::read4(f + u, &filters[ky * 3 + kx][u]);
#pragma unroll
            for (int d = 0; d < 4; ++d) {
                const float v = patch[d / 2 + ky][d % 2 + kx];
#pragma unroll
                for (int u = 0; u < window_channels; ++u) acc[d][u] = fmaf(f[u], v, acc[d][u]);
            }
        }
    const int pixels = g.oh * g.ow;
#pragma unroll
    for (int u = 0; u < window_channels; ++u) {
        float window[4];
        float* out = y + (size_t(sample) * window_channels + u) * pixels + oy * g.ow + ox;
#pragma unroll
        for (int d = 0; d < 4; ++d) {
            float v = acc[d][u] + b[u];
            v = v > 0.0f ? v : 0.0f;
            window[d] = v;
            out[(d / 2) * g.ow + d % 2] = v;
        }
        pooled_y[(size_t(sample) * window_channels + u) * windows + t] = pooled_window<kind>(window, 2, 2);
    }
}

template <PoolKind kind>
void launch_window_forward(float* y, float* pooled_y, const float* x, const float* w, const float* b,
                           const ConvShape& s, PoolGeometry pg, cudaStream_t stream, const GatherSource& from) {
    launch::kernel("window_forward", window_forward<kind>, unsigned(s.n), window_threads, stream, y, pooled_y, x, w,
                   b, Geometry(s), pg, from);
}

// The small filter bank's weight gradient (version 3): the blocks' partial
// sums into scratch, then finish_small; in version 5, with the workspace's
// tickets, added by the last block instead. dy read through `Dy`.
template <class Dy>
void launch_small_weight_grad(float* dw, float* db, Dy dy, const float* x, const ConvShape& s, Workspace ws,
                              cudaStream_t stream) {
    const int blocks = small_weight_grad_blocks(s), weights = int(s.weight_size()), outputs = weights + s.oc;
    if (bank_weight_grad(s)) {
        const dim3 grid(unsigned(bank_groups(s)), unsigned(bank_slices(s)));
        if constexpr (std::is_same_v<Dy, OutputGradThroughAvgPoolApart>)
            if (bank_windows_fit(s, dy)) {
                const auto kernel =
                    s.math == Math::tf32 ? bank_weight_grad_windows<true> : bank_weight_grad_windows<false>;
                return launch::kernel("bank_weight_grad_windows", kernel, grid, launch::threads, stream, ws.scratch,
                                      dy, x, Geometry(s), dw, db, ws.tickets);
            }
        const auto kernel = s.math == Math::tf32 ? bank_weight_grad_sums<Dy, true> : bank_weight_grad_sums<Dy, false>;
        return launch::kernel("bank_weight_grad_sums", kernel, grid, launch::threads, stream, ws.scratch, dy, x,
                              Geometry(s), dw, db, ws.tickets);
    }
    unsigned* ticket = conv2d_backward_weight_version >= 5 ? ws.tickets : nullptr;
    bool pipelined = false;
    if constexpr (Dy::two_step) {
        pipelined = conv2d_backward_weight_version >= 6;
        if (pipelined)
            launch::kernel("small_weight_grad_pipelined", small_weight_grad_pipelined<Dy>, unsigned(blocks),
                           launch::threads, stream, ws.scratch, dy, x, Geometry(s), dw, db, ticket);
    }
    if (!pipelined)
        launch::kernel("small_weight_grad_partials", small_weight_grad_partials<Dy>, unsigned(blocks),
                       launch::threads, stream, ws.scratch, dy, x, Geometry(s), dw, db, ticket);
    if (ticket) return;
    launch::kernel("finish_small", finish_small, unsigned(outputs), launch::threads, stream, dw, db,
                   static_cast<const float*>(ws.scratch), blocks, weights, outputs);
}

// Throws unless ps pools the output of convolution s.
void check_pooling(const ConvShape& s, const PoolShape& ps, const char* launcher) {
    if (ps.n != s.n || ps.c != s.oc || ps.h != s.oh() || ps.w != s.ow())
        throw std::invalid_argument(std::string(launcher) + ": the pooling's input is not the convolution's output");
}

template <bool relu, bool pooled, PoolKind kind = PoolKind::max>
void launch_direct_forward(float* y, float* pooled_y, const float* x, const float* w, const float* b,
                           const ConvShape& s, PoolGeometry pg, cudaStream_t stream, const GatherSource& from = {}) {
    if constexpr (relu && pooled)
        if (window_forward_fits(s, pg)) return launch_window_forward<kind>(y, pooled_y, x, w, b, s, pg, stream, from);
    const dim3 grid(unsigned(s.n), unsigned((s.oc + direct_group - 1) / direct_group));
    if (s.kh == 3 && s.kw == 3)
        launch::kernel("direct_forward", direct_forward<relu, pooled, kind, 3>, grid, launch::threads, stream, y,
                       pooled_y, x, w, b, Geometry(s), pg, from);
    else
        launch::kernel("direct_forward", direct_forward<relu, pooled, kind, 0>, grid, launch::threads, stream, y,
                       pooled_y, x, w, b, Geometry(s), pg, from);
}

// Version 6 of the forward product, for the stride-1 convolutions that
// backward-data version 5 takes (LeNet's conv2), summed directly the same way: a block a
// sample, a chunk of input channels at a time staged in shared memory with
// their filters (the input's rows with the padding's zeros on both sides,
// padded to 16 bytes; filters as in StagedFilters, a channel's filters for
// one input channel side by side), and a thread a row of one output channel
// in registers (thread = row * oc + channel). Each sum runs over input
// channels, filter rows, filter columns, then adds the bias; ReLU, and a
// pooling after it, in the same kernel (the rows through shared memory).
// No split, no columns, no finishing or pooling kernel.
template <int K, int P_, int OW>
struct RowsForward {
    static constexpr int P = P_;
    static constexpr int W = OW + K - 1 - 2 * P_;    // the input's width
    static constexpr int XP = (OW + K - 1 + 3) / 4 * 4;  // a staged input row: P zeros, W values, zeros
};

// Stages input channels c0 to c0 + count of a sample (x_sample) in rows of
// R::XP floats: P zeros, the row's values, zeros.
template <class R, Staging how>
__device__ inline void stage_input_rows(float* sx, const float* x_sample, const Geometry& g, int c0, int count) {
    const float* from = x_sample + size_t(c0) * g.h * R::W;
    stage<how>(sx, count * g.h * R::XP, [&](int e, int& at) {
        const int r = e / R::XP, ix = e - r * R::XP - R::P;
        at = e;
        return ix >= 0 && ix < R::W ? from[size_t(r) * R::W + ix] : 0.0f;
    });
}

// Version 7 splits each sample's output channels between gridDim.y blocks
// (`split`): a block stages the filters of its own channels alone, and each
// sum stays in one thread, in the same order.
template <int K, int P, int OW, bool relu, bool pooled, PoolKind kind, bool split, Staging how>
__device__ inline void rows_forward_sums(float* staged, float* y, float* pooled_y, const float* x, const float* w,
                                         const float* b, Geometry g, PoolGeometry pg, int chunk) {
    using R = RowsForward<K, P, OW>;
    using F = StagedFilters<K>;
    constexpr int KK = K * K;
    float* const sx = staged;                               // chunk x h rows of XP
    float* const sw = staged + size_t(chunk) * g.h * R::XP;  // chunk x per channels of F::channel
    const int sample = int(blockIdx.x);
    // The block's output channels: per of them from first (mine of them in the last block).
    const int per = split ? (g.oc + int(gridDim.y) - 1) / int(gridDim.y) : g.oc;
    const int first = split ? int(blockIdx.y) * per : 0, mine = split ? min(per, g.oc - first) : g.oc;
    const int oy = int(threadIdx.x) / per, lo = int(threadIdx.x) - oy * per, co = first + lo;
    const bool active = oy < g.oh && lo < mine;
    float acc[OW] = {};
    const float* x_sample = x + size_t(sample) * g.c * g.h * R::W;
    for (int c0 = 0; c0 < g.c; c0 += chunk) {
        const int count = min(chunk, g.c - c0);
        __syncthreads();  // the previous chunk's sums are done
        stage_input_rows<R, how>(sx, x_sample, g, c0, count);
        stage<how>(sw, count * mine * KK, [&](int e, int& at) {
            // e runs along w's layout (oc, c, kh, kw) within the block's output and the chunk's input channels.
            const int q = e / KK, t = e - q * KK, o = q / count, cc = q - o * count, ky = t / K;
            at = (cc * per + o) * F::channel + ky * F::row + (t - ky * K);
            return w[(size_t(first + o) * g.c + c0 + cc) * KK + t];
        });
        __syncthreads();
        if (!active) continue;
        for (int cc = 0; cc < count; ++cc) {
            const float* wp = sw + (cc * per + lo) * F::channel;
#pragma unroll
            for (int ky = 0; ky < K; ++ky) {
                const int iy = oy + ky - P;
                if (iy < 0 || iy >= g.h) continue;  // a padding row
                float xr[R::XP], wv[F::row];
                load_row<R::XP>(xr, sx + (cc * g.h + iy) * R::XP);
                load_row<F::row>(wv, wp + ky * F::row);
#pragma unroll
                for (int kx = 0; kx < K; ++kx) {
#pragma unroll
                    for (int ox = 0; ox < OW; ++ox) acc[ox] = fmaf(xr[ox + kx], wv[kx], acc[ox]);
                }
            }
        }
    }
    const int plane = g.oh * OW;
    if (active) {
        float* row = y + (size_t(sample) * g.oc + co) * plane + oy * OW;
#pragma unroll
        for (int ox = 0; ox < OW; ++ox) {
            float v = acc[ox] + b[co];
            if (relu) v = v > 0.0f ? v : 0.0f;
            acc[ox] = v;
            row[ox] = v;
        }
    }
    if (!pooled) return;
    __syncthreads();  // the last chunk's reads are done: its space holds the planes now
    if (active) {
#pragma unroll
        for (int ox = 0; ox < OW; ++ox) staged[lo * plane + oy * OW + ox] = acc[ox];
    }
    __syncthreads();
    pool_staged_planes<kind, OW>(pooled_y, staged, sample, g, pg, first, mine, plane);
}

template <int K, int P, int OW, bool relu, bool pooled, PoolKind kind, bool split>
__global__ void __launch_bounds__(staged_rows_most_threads) rows_forward(float* y, float* pooled_y, const float* x,
                                                                         const float* w, const float* b, Geometry g,
                                                                         PoolGeometry pg, int chunk) {
    __shared__ __align__(16) float staged[staged_rows_floats];
    rows_forward_sums<K, P, OW, relu, pooled, kind, split, Staging::serial>(staged, y, pooled_y, x, w, b, g, pg, chunk);
}

// Forward version 9's kernel: its chunks staged in batches.
template <int K, int P, int OW, bool relu, bool pooled, PoolKind kind, bool split>
__global__ void __launch_bounds__(staged_rows_most_threads)
    rows_forward_batched(float* y, float* pooled_y, const float* x, const float* w, const float* b, Geometry g,
                         PoolGeometry pg, int chunk) {
    __shared__ __align__(16) float staged[staged_rows_floats];
    rows_forward_sums<K, P, OW, relu, pooled, kind, split, Staging::batched>(staged, y, pooled_y, x, w, b, g, pg,
                                                                            chunk);
}

// Version 6's (7's, 9's) forward for s: the kernel (null where the other
// versions' kernels run), its chunk of input channels, blocks a sample and
// threads. It takes the shapes of backward-data version 5. On an H200
// (kernel_bench, batch 256), LeNet's conv2 with its ReLU and pooling took
// 0.95x of version 3's time (0.0664 ms against 0.0702; the product alone,
// 1.01x), ResNet-18's 3x3 on 12x12 and 6x6 1.23x and 1.17x, which version 3
// keeps. Version 7 gives each sample two blocks (LeNet's 256 samples make
// 256 blocks of version 6, 0.65 of a wave).
template <bool relu, bool pooled, PoolKind kind>
using RowsForwardKernel = void (*)(float*, float*, const float*, const float*, const float*, Geometry, PoolGeometry,
                                   int);
template <bool relu, bool pooled, PoolKind kind>
struct RowsForwardLaunch {
    RowsForwardKernel<relu, pooled, kind> kernel;
    int chunk, parts, threads;
    const char* name;
};
template <bool relu, bool pooled, PoolKind kind>
RowsForwardLaunch<relu, pooled, kind> rows_forward_kernel(const ConvShape& s) {
    const int parts = conv2d_forward_version >= 7 && s.oc >= 2 ? 2 : 1, per = tiled::ceil_div(s.oc, parts);
    RowsForwardLaunch<relu, pooled, kind> l{nullptr, 0, parts, whole_warps(s.oh() * per), "rows_forward"};
    if (conv2d_forward_version < 6 || s.math != Math::fp32 || s.n <= 0 || s.stride != 1 || s.kh != s.kw ||
        l.threads > staged_rows_most_threads || size_t(per) * s.oh() * s.ow() > size_t(staged_rows_floats))
        return l;
    const int k = s.kh, p = s.pad, ow = s.ow();
    const auto fits = [&](int xp, int channel) {
        const int most = staged_rows_floats / (s.h * xp + per * channel);
        if (most < 1) return false;
        l.chunk = evened_chunk(s.c, most);
        return true;
    };
    // Version 9: the chunks staged in batches (rows_forward_batched).
    const bool batch = conv2d_forward_version >= 9;
    const auto pick = [&](auto split, auto whole, auto split_batched, auto whole_batched) {
        l.kernel = batch ? (parts > 1 ? split_batched : whole_batched) : (parts > 1 ? split : whole);
        if (batch) l.name = "rows_forward_batched";
    };
    if (k == 5 && p == 0 && ow == 9 && fits(RowsForward<5, 0, 9>::XP, StagedFilters<5>::channel))
        pick(rows_forward<5, 0, 9, relu, pooled, kind, true>, rows_forward<5, 0, 9, relu, pooled, kind, false>,
             rows_forward_batched<5, 0, 9, relu, pooled, kind, true>,
             rows_forward_batched<5, 0, 9, relu, pooled, kind, false>);
    else if (k == 3 && p == 0 && ow == 7 && fits(RowsForward<3, 0, 7>::XP, StagedFilters<3>::channel))
        pick(rows_forward<3, 0, 7, relu, pooled, kind, true>, rows_forward<3, 0, 7, relu, pooled, kind, false>,
             rows_forward_batched<3, 0, 7, relu, pooled, kind, true>,
             rows_forward_batched<3, 0, 7, relu, pooled, kind, false>);
    return l;
}

// Version 10 of the forward, for LeNet's conv2 alone (5x5 filters, stride
// 1, no padding, 13x13 inputs, input channels a multiple of 4, at most 50
// output channels): version 8's sums in its order, bit for bit, with more of
// them a thread and the loads of a chunk in flight while the one before is
// summed. Version 8's thread summed one output row of one channel: 45 FFMA
// for 6 shared-memory loads, and 15 warps a sample that all stopped at each
// chunk's barrier while its copy, one load in flight at a time, came in.
// Here:
// - a thread sums G = 2 output channels of one output row (18 sums in
//   registers, thread = row * 25 + group): 90 FFMA for 9 loads (4 of 16
//   bytes of the input row, 5 of 8 bytes, the two channels' taps), a block
//   of 256 threads a sample. (4 channels a thread, 180 FFMA for 9 loads
//   with 128 threads a sample, took 6% longer on an H200: half the warps.)
// - the filters of a chunk of CH = 4 input channels are staged transposed,
//   a tap's 50 output channels side by side (those past oc zero), so that a
//   thread's 2 channels of a tap are one load; the input's rows are 20
//   floats apart, so that the rows a warp reads fall in different banks;
// - each thread loads its share of the next chunk (5 + 1 loads of 16 bytes,
//   all issued before any is used) into registers before it sums the
//   current one, and stores them after: the copy's latency hides behind the
//   sums, and the only stalls are two barriers a chunk.
// The sums run over input channels, filter rows, filter columns, then add
// the bias, as version 8's; ReLU and the pooling after it as there.
struct TiledRows {
    static constexpr int K = 5, KK = K * K, H = 13, OW = H - K + 1, G = 2, CH = 4;
    static constexpr int OCP = 50, groups = OCP / G;  // the most output channels (those past oc staged as zeros)
    static constexpr int XS = 20;                     // a staged input row: 13 values, padded
    static constexpr int threads = (OW * groups + 31) / 32 * 32;
    static constexpr int filter_fours = CH * KK / 4 * OCP;  // 16-byte loads of a chunk's filters: 25 a channel
    static constexpr int input_fours = CH * H * H / 4;      // and of its inputs
    static constexpr int filter_loads = (filter_fours + threads - 1) / threads;
    static constexpr int input_loads = (input_fours + threads - 1) / threads;
    static constexpr int sw_floats = CH * KK * OCP, sx_floats = CH * H * XS;
    static_assert(OCP % G == 0 && OCP * OW * OW <= sw_floats + sx_floats && (CH * H * H) % 4 == 0);

    struct Chunk {  // a thread's share of a chunk, in registers between its loads and its stores
        Floats<4> w[filter_loads], x[input_loads];
    };

    // Loads chunk c0's filters (as 16-byte runs of one output channel's
    // taps, the channels fastest; zeros for the channels past oc) and inputs.
    __device__ static void load_chunk(Chunk& to, const float* x_sample, const float* w, int c, int oc, int c0) {
        const int t = int(threadIdx.x);
#pragma unroll
        for (int i = 0; i < filter_loads; ++i) {
            const int q = t + i * threads, run = q / OCP, co = q - run * OCP;
            to.w[i] = q < filter_fours && co < oc ? load_floats<4>(w + (size_t(co) * c + c0) * KK + 4 * run)
                                                  : Floats<4>{};
        }
#pragma unroll
        for (int i = 0; i < input_loads; ++i) {
            const int q = t + i * threads;
            if (q < input_fours) to.x[i] = load_floats<4>(x_sample + size_t(c0) * H * H + 4 * q);
        }
    }

    // Stores a chunk from registers: filter tap r (channel, row, column
    // within the chunk) of output channel co at sw[r * OCP + co]; input value
    // e (channel, row, column) at sx[(channel * H + row) * XS + column]; each
    // an operand (rounded to TF32 with --tf32, from tf32 version 3).
    __device__ static void store_chunk(float* sw, float* sx, const Chunk& from, bool tf32) {
        const int t = int(threadIdx.x);
#pragma unroll
        for (int i = 0; i < filter_loads; ++i) {
            const int q = t + i * threads, run = q / OCP, co = q - run * OCP;
            if (q < filter_fours) {
#pragma unroll
                for (int j = 0; j < 4; ++j) sw[(4 * run + j) * OCP + co] = operand(from.w[i].v[j], tf32);
            }
        }
#pragma unroll
        for (int i = 0; i < input_loads; ++i) {
            const int q = t + i * threads;
            if (q < input_fours) {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int e = 4 * q + j, row = e / H;  // (channel * H + row)
                    sx[row * XS + (e - row * H)] = operand(from.x[i].v[j], tf32);
                }
            }
        }
    }
};

template <bool relu, bool pooled, PoolKind kind>
__global__ void __launch_bounds__(TiledRows::threads)
    rows_forward_tiled(float* y, float* pooled_y, const float* x, const float* w, const float* b, Geometry g,
                       PoolGeometry pg) {
    using T = TiledRows;
    constexpr int K = T::K, H = T::H, OW = T::OW, G = T::G, CH = T::CH, XS = T::XS, OCP = T::OCP;
    __shared__ __align__(16) float staged[T::sw_floats + T::sx_floats];
    float* const sw = staged;
    float* const sx = staged + T::sw_floats;
    const int sample = int(blockIdx.x), t = int(threadIdx.x);
    const int oy = t / T::groups, group = t - oy * T::groups, co0 = G * group;
    const bool active = oy < OW;
    const float* x_sample = x + size_t(sample) * g.c * H * H;
    float acc[G][OW] = {};
    T::Chunk next;
    T::load_chunk(next, x_sample, w, g.c, g.oc, 0);
    for (int c0 = 0; c0 < g.c; c0 += CH) {
        __syncthreads();  // the previous chunk's sums are done
        T::store_chunk(sw, sx, next, g.tf32);
        __syncthreads();
        if (c0 + CH < g.c) T::load_chunk(next, x_sample, w, g.c, g.oc, c0 + CH);
        if (!active) continue;
#pragma unroll 1
        for (int cc = 0; cc < CH; ++cc) {
#pragma unroll
            for (int ky = 0; ky < K; ++ky) {
                float xr[16];  // the row's 13 values and 3 no sum reads
                load_row<16>(xr, sx + (cc * H + oy + ky) * XS);
                Floats<G> wv[K];
#pragma unroll
                for (int kx = 0; kx < K; ++kx) wv[kx] = load_floats<G>(sw + ((cc * K + ky) * K + kx) * OCP + co0);
#pragma unroll
                for (int kx = 0; kx < K; ++kx)
#pragma unroll
                    for (int o = 0; o < G; ++o)
#pragma unroll
                        for (int ox = 0; ox < OW; ++ox) acc[o][ox] = fmaf(xr[ox + kx], wv[kx].v[o], acc[o][ox]);
            }
        }
    }
    constexpr int plane = OW * OW;
#pragma unroll
    for (int o = 0; o < G; ++o) {
        const int co = co0 + o;
        if (!active || co >= g.oc) continue;
        float* row = y + (size_t(sample) * g.oc + co) * plane + oy * OW;
#pragma unroll
        for (int ox = 0; ox < OW; ++ox) {
            float v = acc[o][ox] + b[co];
            if (relu) v = v > 0.0f ? v : 0.0f;
            acc[o][ox] = v;
            row[ox] = v;
        }
    }
    if (!pooled) return;
    __syncthreads();  // the last chunk's reads are done: its space holds the planes now
#pragma unroll
    for (int o = 0; o < G; ++o) {
        const int co = co0 + o;
        if (!active || co >= g.oc) continue;
#pragma unroll
        for (int ox = 0; ox < OW; ++ox) staged[co * plane + oy * OW + ox] = acc[o][ox];
    }
    __syncthreads();
    pool_staged_planes<kind, OW>(pooled_y, staged, sample, g, pg, 0, g.oc, plane);
}

// Whether version 10's kernel takes s (and x and w at 16-byte boundaries):
// FP32, and from tf32 version 3 --tf32 too.
bool rows_forward_tiled_fits(const ConvShape& s, const float* x, const float* w) {
    using T = TiledRows;
    return conv2d_forward_version >= 10 && (s.math == Math::fp32 || tf32_version >= 3) && s.n > 0 &&
           s.stride == 1 && s.pad == 0 && s.kh == T::K && s.kw == T::K && s.h == T::H && s.w == T::H &&
           s.c % T::CH == 0 && s.oc <= T::OCP && reinterpret_cast<std::uintptr_t>(x) % 16 == 0 &&
           reinterpret_cast<std::uintptr_t>(w) % 16 == 0;
}


// Runs version 6's, 7's, 9's or 10's forward, or tf32 version 4's, where one takes s; false where none does.
template <bool relu, bool pooled, PoolKind kind = PoolKind::max>
bool launch_rows_forward(float* y, float* pooled_y, const float* x, const float* w, const float* b,
                         const ConvShape& s, PoolGeometry pg, cudaStream_t stream) {
    if (conv::rows_forward_mma_fits(s)) {
        conv::launch_rows_forward_mma(relu, pooled, kind, y, pooled_y, x, w, b, s, pg, stream);
        return true;
    }
    if (rows_forward_tiled_fits(s, x, w)) {
        launch::kernel("rows_forward_tiled", rows_forward_tiled<relu, pooled, kind>, unsigned(s.n),
                       unsigned(TiledRows::threads), stream, y, pooled_y, x, w, b, Geometry(s), pg);
        return true;
    }
    const auto l = rows_forward_kernel<relu, pooled, kind>(s);
    if (!l.kernel) return false;
    launch::kernel(l.name, l.kernel, dim3(unsigned(s.n), unsigned(l.parts)), unsigned(l.threads), stream, y,
                   pooled_y, x, w, b, Geometry(s), pg, l.chunk);
    return true;
}

// Version 3 of the forward product: split along k, the splits' partial sums
// in scratch added in split order by finish_splits, when its tiles would
// leave a multiprocessor fewer than 4 blocks (LeNet's conv2 at batch 256:
// 162 blocks of 64 x 128 for 132 multiprocessors, each walking k = 500 one
// k-step after another, waiting on each step's loads). Splits of at least
// 128, at most 8; the same on every GPU, so every GPU rounds alike.
constexpr int forward_target_blocks = 4 * 132, forward_split_min_k = 128, forward_split_most = 8;
int forward_splits(const ConvShape& s) {
    const int k = s.col_rows(), cols = s.n * s.col_cols();
    if (conv2d_forward_version < 3 || cols <= 0 || k / forward_split_min_k < 2) return 1;
    const long tiles = long(tiled::ceil_div(s.oc, 64)) * tiled::ceil_div(cols, 128);
    const long want = (forward_target_blocks + tiles - 1) / tiles;
    const int splits =
        int(std::clamp<long>(std::min<long>({want, k / forward_split_min_k, forward_split_most}), 1, forward_split_most));
    return tiled::fit_waves(s.oc, cols, splits);
}
// Scratch for forward_splits at this shape and at any smaller batch: splits
// times oc x cols, where splits < target / tiles + 1 and tiles >= oc / 64 x
// cols / 128 (whatever the version selected: the benchmark switches).
size_t forward_split_floats(const ConvShape& s) {
    if (s.col_rows() / forward_split_min_k < 2) return 0;
    return size_t(64) * 128 * forward_target_blocks + size_t(s.oc) * s.n * s.col_cols();
}

// leave_splits (batch_norm 8, conv2d_forward_for_stats): a product split
// along k stores its splits' partial sums in scratch and leaves them, for
// the batch norm's statistics to add (the same StoreSplit product
// gemm_splits runs before finish_splits).
template <bool relu>
UnfinishedConv forward(float* y, const float* x, const float* w, const float* b, const ConvShape& s, float* scratch,
                       cudaStream_t stream, bool leave_splits = false) {
    if (direct_forward_fits(s)) {
        launch_direct_forward<relu, false>(y, nullptr, x, w, b, s, {}, stream);
        return {};
    }
    if (launch_rows_forward<relu, false>(y, nullptr, x, w, b, s, {}, stream)) return {};
    const Geometry g(s);
    const int m = s.oc, n = s.n * s.col_cols(), k = s.col_rows(), splits = forward_splits(s);
    const bool leave = leave_splits && splits > 1 && m > 0 && n > 0;
    const StoreOutput<relu> out{y, b, s.oc, FastDiv(s.col_cols())};
    with_unfold(x, g, [&](auto unfold) {
        if (leave)
            tiled::gemm(m, n, k, Weights{w, k}, unfold, tiled::StoreSplit{scratch, size_t(m) * n, n}, stream, splits,
                        s.math);
        else if (splits > 1)
            tiled::gemm_splits(m, n, k, Weights{w, k}, unfold, out, Workspace{scratch, nullptr}, splits, stream, s.math);
        else
            tiled::gemm(m, n, k, Weights{w, k}, unfold, out, stream, 1, s.math);
    });
    return leave ? UnfinishedConv{y, scratch, b, splits} : UnfinishedConv{};
}

// Version 4: a split forward product (version 3) with a ReLU and a pooling
// whose windows do not overlap after it (conv2d_forward_relu_pool; LeNet's
// conv2) has its splits added by a kernel that pools too, instead of
// finish_splits and then pool_forward: a thread a pooled output, which
// finishes its cell of the ReLU's output (the stride x stride pixels from its
// window's corner, to the plane's edge in the last row and column of cells:
// the cells tile the plane, so every pixel of y is written once), stores it
// and pools its window. The same sums in the same order as the two kernels,
// bit for bit: the splits in split order, then the bias and the ReLU
// (StoreOutput), the window's taps row by row (pooled_window).
struct CellGeometry {
    int oc, h, w, k, stride, oh, ow;  // the convolution's output (h x w) and its pooling's (oh x ow)
    FastDiv by_ow, by_oh, by_oc;
};

template <PoolKind kind>
__global__ void finish_splits_pool(float* y, float* pooled, const float* scratch, const float* b, int splits,
                                   int count, CellGeometry g) {
    const int pixels = g.h * g.w;
    const size_t size = size_t(count / (g.oh * g.ow)) * pixels;  // the product's: oc x (n * pixels)
    const int cols = int(size / size_t(g.oc));
    for (const int i : launch::grid_stride(count)) {
        const int row = g.by_ow.div(i), ox = g.by_ow.rest(i, row), plane = g.by_oh.div(row),
                  oy = g.by_oh.rest(row, plane), sample = g.by_oc.div(plane), o = g.by_oc.rest(plane, sample);
        const int y0 = oy * g.stride, x0 = ox * g.stride;
        const int rows = oy == g.oh - 1 ? g.h - y0 : g.stride, columns = ox == g.ow - 1 ? g.w - x0 : g.stride;
        const float* partial = scratch + size_t(o) * cols + size_t(sample) * pixels;
        float* out = y + size_t(plane) * pixels;
        float acc = 0.0f;
        for (int r = 0; r < rows; ++r)
            for (int c = 0; c < columns; ++c) {
                const int p = (y0 + r) * g.w + x0 + c;
                float v = 0.0f;
                for (int z = 0; z < splits; ++z) v += partial[size_t(z) * size + p];
                v += b[o];
                v = v > 0.0f ? v : 0.0f;  // as StoreOutput<true>
                out[p] = v;
                if (r < g.k && c < g.k) {
                    if (kind == PoolKind::avg) acc += v;
                    else acc = (r == 0 && c == 0) || v > acc ? v : acc;
                }
            }
        pooled[i] = kind == PoolKind::max ? acc : acc * (1.0f / float(g.k * g.k));
    }
}

// Whether version 4 runs conv2d_forward_relu_pool on shape s.
bool pools_in_finish(const ConvShape& s, const PoolShape& ps) {
    return conv2d_forward_version >= 4 && !direct_forward_fits(s) && forward_splits(s) > 1 && windows_apart(ps) &&
           ps.out_size() > 0 && ps.out_size() < (size_t(1) << 31);
}

void forward_relu_pool_split(float* y, float* pooled, const float* x, const float* w, const float* b,
                             const ConvShape& s, PoolKind kind, const PoolShape& ps, float* scratch,
                             cudaStream_t stream) {
    const Geometry g(s);
    const int m = s.oc, n = s.n * s.col_cols(), k = s.col_rows(), splits = forward_splits(s);
    with_unfold(x, g, [&](auto unfold) {
        tiled::gemm(m, n, k, Weights{w, k}, unfold, tiled::StoreSplit{scratch, size_t(m) * n, n}, stream, splits, s.math);
    });
    const CellGeometry cg{s.oc, s.oh(), s.ow(), ps.k, ps.stride, ps.oh(), ps.ow(), FastDiv(ps.ow()), FastDiv(ps.oh()),
                          FastDiv(s.oc)};
    const int count = int(ps.out_size());
    if (kind == PoolKind::max)
        launch::kernel("finish_splits_pool", finish_splits_pool<PoolKind::max>, launch::grid_for(size_t(count)),
                       launch::threads, stream, y, pooled, static_cast<const float*>(scratch), b, splits, count, cg);
    else
        launch::kernel("finish_splits_pool", finish_splits_pool<PoolKind::avg>, launch::grid_for(size_t(count)),
                       launch::threads, stream, y, pooled, static_cast<const float*>(scratch), b, splits, count, cg);
}

// Version 2 of backward-data, its first half: the unfolded input gradient
// w^T . dy (c*kh*kw, n*oh*ow) into dcol, for a gather to add up.
void input_grad_columns(float* dcol, const float* dy, const float* w, const ConvShape& s, cudaStream_t stream) {
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

size_t input_grad_columns_floats(const ConvShape& s) { return size_t(s.col_rows()) * s.n * s.col_cols(); }

// Version 3 of backward-data: whether `next`'s input gradient can be left as
// columns for the small weight gradient of s, the convolution before the
// pooling ps that feeds `next`, to gather as it reads them.
bool gathers_into_weight_pool(const ConvShape& next, const ConvShape& s, const PoolShape& ps) {
    return conv2d_backward_data_version == 3 && small_weight_grad(s) && ps.in_size() > 0 && next.stride == 1 &&
           next.n == s.n && next.c == ps.c && next.h == ps.oh() && next.w == ps.ow();
}

}  // namespace

// The weight gradient's partial sums (when split), then the bias gradient's
// (version 2).
int conv2d_weight_grad_depth(const ConvShape& s) {
    const int k = s.n * s.col_cols(), splits = product_weight_grad_splits(s);
    return splits == 1 ? k : tiled::split_length(k, splits, tiled::Tile128::BK);
}

int conv2d_forward_splits(const ConvShape& s) { return forward_splits(s); }
int conv2d_weight_grad_splits(const ConvShape& s) { return product_weight_grad_splits(s); }

size_t conv2d_scratch_floats(const ConvShape& s) {
    // (The most of any version's: the benchmark switches versions.)
    const int splits = std::max(weight_grad_splits(s, 2), weight_grad_splits(s, 3));
    const size_t weight_grad = (splits > 1 ? size_t(splits) * s.weight_size() : 0) + size_t(bias_grad_splits(s)) * s.oc;
    const size_t with_bias = size_t(weight_grad_splits(s, 3)) * s.oc * (s.col_rows() + 1);  // version 4's [dw | db]
    // dcol (version 2 of backward-data); in version 3, with the small weight
    // gradient's partial sums of the convolution before after it.
    const size_t input_grad =
        input_grad_columns_floats(s) + size_t(small_weight_grad_blocks(s)) * small_per_thread * launch::threads;
    // Version 3's partial sums, a block's for each weight and bias (whether
    // or not it is selected now: the benchmark switches versions).
    const size_t small = size_t(std::min(s.n, launch::threads)) * (s.weight_size() + size_t(s.oc));
    // The forward's splits; with batch_norm 8 they are left, and the
    // statistics' slices follow them.
    const size_t forward = forward_split_floats(s);
    const size_t forward_and_stats = forward > 0 ? forward + batch_norm_scratch_floats({s.n, s.oc, s.col_cols()}) : 0;
    return std::max({weight_grad, with_bias, input_grad, small, forward_and_stats});
}

void conv2d_forward(float* y, const float* x, const float* w, const float* b, const ConvShape& s, float* scratch,
                    cudaStream_t stream) {
    forward<false>(y, x, w, b, s, scratch, stream);
}

void conv2d_forward_relu(float* y, const float* x, const float* w, const float* b, const ConvShape& s,
                         float* scratch, cudaStream_t stream) {
    forward<true>(y, x, w, b, s, scratch, stream);
}

UnfinishedConv conv2d_forward_for_stats(float* y, const float* x, const float* w, const float* b, const ConvShape& s,
                                        float* scratch, cudaStream_t stream) {
    return forward<false>(y, x, w, b, s, scratch, stream, batch_norm_version >= 8);
}

bool conv2d_forward_gathers(const ConvShape& s) {
    return conv2d_forward_version >= 5 && direct_forward_fits(s);
}

void conv2d_forward_relu_pool_gathered(float* y, float* pooled, const GatherSource& from, const float* w,
                                       const float* b, const ConvShape& s, PoolKind kind, const PoolShape& ps,
                                       cudaStream_t stream) {
    if (!conv2d_forward_gathers(s) || from.count != s.n || size_t(from.pixels) != size_t(s.c) * s.h * s.w)
        throw std::invalid_argument("conv2d_forward_relu_pool_gathered: a convolution that cannot gather its input, "
                                    "or a batch of another shape");
    check_pooling(s, ps, "conv2d_forward_relu_pool_gathered");
    const PoolGeometry pg{ps.k, ps.stride, ps.oh(), ps.ow()};
    if (kind == PoolKind::max)
        launch_direct_forward<true, true, PoolKind::max>(y, pooled, from.x, w, b, s, pg, stream, from);
    else launch_direct_forward<true, true, PoolKind::avg>(y, pooled, from.x, w, b, s, pg, stream, from);
}

void conv2d_forward_relu_pool(float* y, float* pooled, const float* x, const float* w, const float* b,
                              const ConvShape& s, PoolKind kind, const PoolShape& ps, float* scratch,
                              cudaStream_t stream) {
    check_pooling(s, ps, "conv2d_forward_relu_pool");
    if (!direct_forward_fits(s)) {
        const PoolGeometry pg{ps.k, ps.stride, ps.oh(), ps.ow()};
        if (kind == PoolKind::max ? launch_rows_forward<true, true, PoolKind::max>(y, pooled, x, w, b, s, pg, stream)
                                  : launch_rows_forward<true, true, PoolKind::avg>(y, pooled, x, w, b, s, pg, stream))
            return;
    }
    if (pools_in_finish(s, ps)) return forward_relu_pool_split(y, pooled, x, w, b, s, kind, ps, scratch, stream);
    if (!direct_forward_fits(s)) {
        forward<true>(y, x, w, b, s, scratch, stream);
        return pool2d_forward(pooled, y, kind, ps, stream);
    }
    const PoolGeometry pg{ps.k, ps.stride, ps.oh(), ps.ow()};
    if (kind == PoolKind::max) launch_direct_forward<true, true, PoolKind::max>(y, pooled, x, w, b, s, pg, stream);
    else launch_direct_forward<true, true, PoolKind::avg>(y, pooled, x, w, b, s, pg, stream);
}

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
        return launch::kernel("input_grad_rows_tiled_finishing", input_grad_rows_tiled_finishing, unsigned(s.n),
                              unsigned(tiled_input_grad_threads), stream, dx, dy, w, g, weight);
    if (weight.dw) add_weight_slices(weight, stream);  // (before any kernel below reuses the scratch)
    if (input_grad_rows_tiled_fits(s, w))
        return conv2d_backward_data_version >= 9
                   ? launch::kernel("input_grad_rows_tiled_wide", input_grad_rows_tiled_wide, unsigned(s.n),
                                    unsigned(tiled_input_grad_threads), stream, dx, dy, w, g)
                   : launch::kernel("input_grad_rows_tiled", input_grad_rows_tiled, unsigned(s.n),
                                    unsigned(tiled_input_grad_threads), stream, dx, dy, w, g);
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

// Version 8 of the weight gradient, for LeNet's conv2 (5x5 filters on
// 9-wide outputs, no padding; the tests' batches of 7 and 64 split it too):
// summed directly, as the rows kernels sum
// the forward and the input gradient. A block takes a slice of the batch
// and half the output channels; for each sample it stages x (rows padded to
// 16 bytes, channels an odd number of 16-byte units apart) and its channels'
// dy in shared memory, and each thread keeps one (output, input) channel
// pair's K x K taps in registers, plus the output channel's bias sum: for
// each output row, the dy row is read once and multiplied into the K input
// rows it meets. Each slice's sums go to scratch as a split product's would
// ([dw | db], a row an output channel), and add_splits adds the slices in
// order. Every sum runs over the slice's samples, then output rows, then
// output columns.
constexpr int weight_rows_parts = 2, weight_rows_most_threads = 512;  // (25 sums a thread in registers)

template <int K, int OW_>
struct RowsWeight {
    static constexpr int OW = OW_, W = OW + K - 1, XP = (W + 3) / 4 * 4, OWP = (OW + 3) / 4 * 4;
    // A channel's rows: h of XP floats, padded to an odd number of 16-byte units.
    __host__ __device__ static constexpr int channel(int h) { return h * XP + ((h * XP / 4) % 2 == 0 ? 4 : 0); }
};

// Stages a sample's x (every channel, xc floats apart) and its dy rows of
// output channels first to first + mine, for the weight gradient's rows
// kernels. H, where not 0, is x's height known when compiled: each staged
// float then divides by a constant, not by g.h.
template <class R, Staging how, int H = 0>
__device__ inline void stage_weight_rows(float* sx, float* sdy, const float* x, const float* dy, const Geometry& g,
                                         int sample, int first, int mine, int xc) {
    const int h = H ? H : g.h;
    const float* xs = x + size_t(sample) * g.c * h * R::W;
    stage<how>(sx, g.c * h * R::XP, [&](int e, int& at) {
        const int r = e / R::XP, ix = e - r * R::XP, c = r / h;
        at = c * xc + (r - c * h) * R::XP + ix;
        return ix < R::W ? xs[size_t(r) * R::W + ix] : 0.0f;
    });
    const float* dys = dy + (size_t(sample) * g.oc + first) * g.oh * R::OW;
    stage<how>(sdy, mine * g.oh * R::OW, [&](int e, int& at) {
        const int r = e / R::OW;
        at = r * R::OWP + (e - r * R::OW);
        return dys[e];
    });
}

// Where a thread of the weight gradient's rows kernels works: its block's
// slice of the batch (samples s0 to s1) and output channels (mine from
// first), and its (output, input) channel pair (co = first + lo, ch).
struct WeightRowsThread {
    int slice, first, mine, lo, ch, co, s0, s1;
    bool active;
    __device__ WeightRowsThread(const Geometry& g, int per_slice) {
        slice = int(blockIdx.x);
        const int per = (g.oc + int(gridDim.y) - 1) / int(gridDim.y);
        first = int(blockIdx.y) * per, mine = min(per, g.oc - first);
        lo = int(threadIdx.x) / g.c, ch = int(threadIdx.x) - lo * g.c, co = first + lo;
        active = lo < mine;
        s0 = slice * per_slice, s1 = min(g.n, s0 + per_slice);
    }
};

// A thread's sums of a slice into its row of partial ([dw | db] an output
// channel, a slice after another): its pair's K x K taps, and the bias from
// the threads of input channel 0.
template <int K>
__device__ inline void store_weight_rows(float* partial, const float (&acc)[K][K], float bias, const Geometry& g,
                                         int slice, int co, int ch) {
    constexpr int KK = K * K;
    const int taps = g.c * KK;
    float* out = partial + (size_t(slice) * g.oc + co) * (taps + 1);
#pragma unroll
    for (int ky = 0; ky < K; ++ky)
#pragma unroll
        for (int kx = 0; kx < K; ++kx) out[ch * KK + ky * K + kx] = acc[ky][kx];
    if (ch == 0) out[taps] = bias;
}

template <int K, int OW>
__global__ void __launch_bounds__(weight_rows_most_threads) weight_grad_rows(float* partial, const float* dy,
                                                                             const float* x, Geometry g,
                                                                             int per_slice) {
    using R = RowsWeight<K, OW>;
    __shared__ __align__(16) float staged[staged_rows_floats];
    const int xc = R::channel(g.h);
    float* const sx = staged;                  // c channels of xc
    float* const sdy = staged + g.c * xc;      // the block's output channels, oh rows of OWP each
    const WeightRowsThread t(g, per_slice);
    const int lo = t.lo, ch = t.ch;
    float acc[K][K] = {}, bias = 0.0f;
    for (int sample = t.s0; sample < t.s1; ++sample) {
        __syncthreads();  // the previous sample's sums are done
        stage_weight_rows<R, Staging::serial>(sx, sdy, x, dy, g, sample, t.first, t.mine, xc);
        __syncthreads();
        if (!t.active) continue;
        for (int oy = 0; oy < g.oh; ++oy) {
            float d[R::OWP];
            load_row<R::OWP>(d, sdy + (lo * g.oh + oy) * R::OWP);
#pragma unroll
            for (int ox = 0; ox < OW; ++ox) bias += d[ox];
#pragma unroll
            for (int ky = 0; ky < K; ++ky) {
                float xr[R::XP];
                load_row<R::XP>(xr, sx + ch * xc + (oy + ky) * R::XP);
#pragma unroll
                for (int kx = 0; kx < K; ++kx) {
#pragma unroll
                    for (int ox = 0; ox < OW; ++ox) acc[ky][kx] = fmaf(d[ox], xr[ox + kx], acc[ky][kx]);
                }
            }
        }
    }
    if (t.active) store_weight_rows<K>(partial, acc, bias, g, t.slice, t.co, ch);
}

// Version 9 of the weight gradient: version 8's sums, in its order, bit for
// bit, with the input rows read once a sample. Version 8 reads, for each
// output row, the dy row and the K input rows it meets: 45 input-row reads
// a sample (of 13 rows), each a different channel's for most of a warp's
// threads. Here the loop runs over the input rows, and the dy rows that
// meet an input row (the last K of them) stay in registers, a window that
// each new dy row refreshes: 13 input-row reads and 9 dy-row reads a
// sample. Each tap's sum still runs over output rows, then columns. The
// output's height is known when compiled, so the whole loop unrolls and
// the window's rows are registers.
// One staged sample's sums into a thread's taps (acc) and bias: the input
// rows in order, each against the dy rows that meet it. With tf32 (--tf32,
// from tf32 version 6) x and dy are staged rounded to TF32, and the bias
// sums dy's rows as they are, from their copy at sdy_raw.
template <int K, int OW, int OH, bool tf32 = false>
__device__ inline void weight_rows_window_sample(float (&acc)[K][K], float& bias, const float* sx, const float* sdy,
                                                 int lo, int ch, int xc, const float* sdy_raw = nullptr) {
    using R = RowsWeight<K, OW>;
    constexpr int H = OH + K - 1;
    float d[K][R::OWP];  // dy row oy in d[oy % K]
#pragma unroll
    for (int iy = 0; iy < H; ++iy) {
        if (iy < OH) {
            load_row<R::OWP>(d[iy % K], sdy + (lo * OH + iy) * R::OWP);
            if constexpr (tf32) {
                float raw[R::OWP];
                load_row<R::OWP>(raw, sdy_raw + (lo * OH + iy) * R::OWP);
#pragma unroll
                for (int ox = 0; ox < OW; ++ox) bias += raw[ox];
            } else {
#pragma unroll
                for (int ox = 0; ox < OW; ++ox) bias += d[iy % K][ox];
            }
        }
        float xr[R::XP];
        load_row<R::XP>(xr, sx + ch * xc + iy * R::XP);
#pragma unroll
        for (int ky = 0; ky < K; ++ky) {
            const int oy = iy - ky;  // the dy row that meets input row iy through filter row ky
            if (oy < 0 || oy >= OH) continue;
#pragma unroll
            for (int kx = 0; kx < K; ++kx) {
#pragma unroll
                for (int ox = 0; ox < OW; ++ox) acc[ky][kx] = fmaf(d[oy % K][ox], xr[ox + kx], acc[ky][kx]);
            }
        }
    }
}

template <int K, int OW, int OH, Staging how>
__device__ inline void weight_grad_rows_window_sums(float* staged, float* partial, const float* dy, const float* x,
                                                    Geometry g, int per_slice) {
    using R = RowsWeight<K, OW>;
    constexpr int H = OH + K - 1;
    const int xc = R::channel(H);
    float* const sx = staged;              // c channels of xc
    float* const sdy = staged + g.c * xc;  // the block's output channels, OH rows of OWP each
    const WeightRowsThread t(g, per_slice);
    float acc[K][K] = {}, bias = 0.0f;
    for (int sample = t.s0; sample < t.s1; ++sample) {
        __syncthreads();  // the previous sample's sums are done
        stage_weight_rows<R, how, H>(sx, sdy, x, dy, g, sample, t.first, t.mine, xc);
        __syncthreads();
        if (t.active) weight_rows_window_sample<K, OW, OH>(acc, bias, sx, sdy, t.lo, t.ch, xc);
    }
    if (t.active) store_weight_rows<K>(partial, acc, bias, g, t.slice, t.co, t.ch);
}

template <int K, int OW, int OH>
__global__ void __launch_bounds__(weight_rows_most_threads)
    weight_grad_rows_window(float* partial, const float* dy, const float* x, Geometry g, int per_slice) {
    __shared__ __align__(16) float staged[staged_rows_floats];
    weight_grad_rows_window_sums<K, OW, OH, Staging::serial>(staged, partial, dy, x, g, per_slice);
}

// Weight-gradient version 10's kernel: each sample's x and dy staged in batches.
template <int K, int OW, int OH>
__global__ void __launch_bounds__(weight_rows_most_threads)
    weight_grad_rows_window_batched(float* partial, const float* dy, const float* x, Geometry g, int per_slice) {
    __shared__ __align__(16) float staged[staged_rows_floats];
    weight_grad_rows_window_sums<K, OW, OH, Staging::batched>(staged, partial, dy, x, g, per_slice);
}

// Weight-gradient version 11: version 9's sums, in its order, bit for bit,
// with the next sample's x and dy loaded into registers (x 16 bytes a load)
// before the current sample is summed, and stored into shared memory after,
// as the forward's and input gradient's tiled kernels do with their chunks:
// the copy's latency hides behind a sample's sums. A block's threads hold
// at most 2 loads of x and 4 of dy each (LeNet's conv2: 845 and 2,025 for
// 512 threads). (In the unnamed namespace, as Floats is: a type outside it
// with a field of a type inside it is a warning.)
namespace {
template <int K, int OW>
struct WeightRowsPrefetch {
    using R = RowsWeight<K, OW>;
    static constexpr int OH = OW, H = OH + K - 1, x_loads = 2, dy_loads = 4;
    Floats<4> x[x_loads];
    float dy[dy_loads];

    __device__ void load(const float* x_all, const float* dy_all, const Geometry& g, int sample, int first, int mine) {
        const int t = int(threadIdx.x), step = int(blockDim.x), fours = g.c * H * R::W / 4;
        const float* xs = x_all + size_t(sample) * g.c * H * R::W;
#pragma unroll
        for (int i = 0; i < x_loads; ++i)
            if (t + i * step < fours) x[i] = load_floats<4>(xs + 4 * (t + i * step));
        const float* dys = dy_all + (size_t(sample) * g.oc + first) * OH * OW;
#pragma unroll
        for (int i = 0; i < dy_loads; ++i)
            if (t + i * step < mine * OH * OW) dy[i] = dys[t + i * step];
    }
    // Where stage_weight_rows puts each value (x's padding columns are not
    // stored: no sum reads them); where tf32, x and dy rounded to TF32, and
    // dy as it is at sdy_raw too, for the bias.
    __device__ void store(float* sx, float* sdy, const Geometry& g, int mine, int xc, bool tf32,
                          float* sdy_raw) const {
        const int t = int(threadIdx.x), step = int(blockDim.x), fours = g.c * H * R::W / 4;
#pragma unroll
        for (int i = 0; i < x_loads; ++i)
            if (t + i * step < fours) {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int e = 4 * (t + i * step) + j, r = e / R::W, ix = e - r * R::W, c = r / H;
                    sx[c * xc + (r - c * H) * R::XP + ix] = operand(x[i].v[j], tf32);
                }
            }
#pragma unroll
        for (int i = 0; i < dy_loads; ++i) {
            const int e = t + i * step;
            if (e < mine * OH * OW) {
                const int r = e / OW;
                sdy[r * R::OWP + (e - r * OW)] = operand(dy[i], tf32);
                if (tf32) sdy_raw[r * R::OWP + (e - r * OW)] = dy[i];
            }
        }
    }
    // Whether a block of `threads` holds a sample of s this way.
    static bool fits(const ConvShape& s, int per, int threads) {
        return s.c * H * R::W % 4 == 0 && s.c * H * R::W / 4 <= x_loads * threads &&
               per * OH * OW <= dy_loads * threads;
    }
};
}  // namespace

template <int K, int OW, bool tf32>
__global__ void __launch_bounds__(weight_rows_most_threads)
    weight_grad_rows_prefetched(float* partial, const float* dy, const float* x, Geometry g, int per_slice) {
    using P = WeightRowsPrefetch<K, OW>;
    using R = RowsWeight<K, OW>;
    __shared__ __align__(16) float staged[staged_rows_floats];
    const int xc = R::channel(P::H);
    float* const sx = staged;
    float* const sdy = staged + g.c * xc;
    const WeightRowsThread t(g, per_slice);
    float* const sdy_raw = sdy + t.mine * P::OH * R::OWP;  // (tf32) dy as it is, for the bias
    float acc[K][K] = {}, bias = 0.0f;
    P next;
    if (t.s0 < t.s1) next.load(x, dy, g, t.s0, t.first, t.mine);
    for (int sample = t.s0; sample < t.s1; ++sample) {
        __syncthreads();  // the previous sample's sums are done
        next.store(sx, sdy, g, t.mine, xc, tf32, sdy_raw);
        __syncthreads();
        if (sample + 1 < t.s1) next.load(x, dy, g, sample + 1, t.first, t.mine);
        if (t.active) weight_rows_window_sample<K, OW, P::OH, tf32>(acc, bias, sx, sdy, t.lo, t.ch, xc, sdy_raw);
    }
    if (t.active) store_weight_rows<K>(partial, acc, bias, g, t.slice, t.co, t.ch);
}

namespace {  // (Geometry's namespace)
// Version 8's kernel for s (null where the other versions run), the
// batch's slices (the splits add_splits adds), the samples in each, the
// block's threads, and the blocks a slice (grid y); or, with --tf32 from
// tf32 version 9, the tensor cores' kernel, into the same slices.
using WeightRowsKernel = conv::WeightSlicesKernel;
struct WeightRowsLaunch {
    WeightRowsKernel kernel;
    int slices, per_slice, threads;
    const char* name;
    int parts = weight_rows_parts;
};
WeightRowsLaunch weight_grad_rows_kernel(const ConvShape& s, const float* x) {
    // The batch's slices: weight_grad_splits(s, 3) of them, whole samples
    // each (conv2d_scratch_floats holds this many [dw | db]).
    const int splits = weight_grad_splits(s, 3), per_slice = tiled::ceil_div(s.n, splits),
              slices = per_slice > 0 ? tiled::ceil_div(s.n, per_slice) : 0;
    if (conv::weight_grad_mma_fits(s))
        return {conv::weight_grad_mma_kernel(), slices, per_slice, conv::weight_grad_mma_threads, "weight_grad_mma",
                conv::weight_grad_mma_chunks(s)};
    WeightRowsLaunch l{nullptr, 0, 0, whole_warps(tiled::ceil_div(s.oc, weight_rows_parts) * s.c), "weight_grad_rows"};
    // --tf32 from tf32 version 6, on version 11's kernel alone.
    const bool tf32 = s.math == Math::tf32;
    if (conv2d_backward_weight_version < 8 || (tf32 && (tf32_version < 6 || conv2d_backward_weight_version < 11)) ||
        s.n <= 0 || s.stride != 1 || s.pad != 0 || s.kh != s.kw)
        return l;
    if (splits < 2 || l.threads > weight_rows_most_threads) return l;
    l.per_slice = per_slice, l.slices = slices;
    using R = RowsWeight<5, 9>;
    const int per = tiled::ceil_div(s.oc, weight_rows_parts);
    if (s.kh == 5 && s.ow() == 9 && s.c * R::channel(s.h) + per * s.oh() * R::OWP <= staged_rows_floats) {
        l.kernel = weight_grad_rows<5, 9>;
        if (conv2d_backward_weight_version >= 9 && s.oh() == 9) {
            l.kernel = weight_grad_rows_window<5, 9, 9>, l.name = "weight_grad_rows_window";
            if (conv2d_backward_weight_version == 10)
                l.kernel = weight_grad_rows_window_batched<5, 9, 9>, l.name = "weight_grad_rows_window_batched";
            if (conv2d_backward_weight_version >= 11 && WeightRowsPrefetch<5, 9>::fits(s, per, l.threads) &&
                reinterpret_cast<std::uintptr_t>(x) % 16 == 0)
                l.kernel = tf32 ? weight_grad_rows_prefetched<5, 9, true> : weight_grad_rows_prefetched<5, 9, false>,
                l.name = "weight_grad_rows_prefetched";
        }
    }
    // (--tf32 stages dy twice: rounded, and as it is for the bias.)
    if (tf32 && (l.kernel != weight_grad_rows_prefetched<5, 9, true> ||
                 s.c * R::channel(s.h) + 2 * per * s.oh() * R::OWP > staged_rows_floats))
        l.kernel = nullptr;
    return l;
}
// Version 13's slices kernel for s: the rows kernel (null where version 13
// leaves nothing, or runs whole: not the rows kernel).
WeightRowsLaunch weight_slices_left(const ConvShape& s, const float* x) {
    if (conv2d_backward_weight_version < 13 || small_weight_grad(s)) return {};
    return weight_grad_rows_kernel(s, x);
}
// The rows kernel's slices of s's weight gradient into scratch, not added.
UnfinishedWeightGrad weight_rows_slices(const WeightRowsLaunch& l, float* dw, float* db, const float* dy,
                                        const float* x, const ConvShape& s, float* scratch, cudaStream_t stream) {
    launch::kernel(l.name, l.kernel, dim3(unsigned(l.slices), unsigned(l.parts)), unsigned(l.threads),
                   stream, scratch, dy, x, Geometry(s), l.per_slice);
    return {dw, db, scratch, l.slices, s.oc, s.col_rows()};
}
}  // namespace

bool conv2d_backward_weight_leaves_slices(const ConvShape& s, const float* x, const float* w) {
    return weight_slices_left(s, x).kernel && input_grad_finishes_slices(s, w);
}

UnfinishedWeightGrad conv2d_backward_weight_unfinished(float* dw, float* db, const float* dy, const float* x,
                                                       const ConvShape& s, Workspace ws, cudaStream_t stream) {
    if (const WeightRowsLaunch l = weight_slices_left(s, x); l.kernel)
        return weight_rows_slices(l, dw, db, dy, x, s, ws.scratch, stream);
    conv2d_backward_weight(dw, db, dy, x, s, ws, stream);
    return {};
}

void conv2d_backward_weight(float* dw, float* db, const float* dy, const float* x, const ConvShape& s,
                            Workspace ws, cudaStream_t stream) {
    float* scratch = ws.scratch;
    if (small_weight_grad(s)) return launch_small_weight_grad(dw, db, OutputGradIn{dy}, x, s, ws, stream);
    if (const WeightRowsLaunch l = weight_grad_rows_kernel(s, x); l.kernel)
        return add_weight_slices(weight_rows_slices(l, dw, db, dy, x, s, scratch, stream), stream);
    const int m = s.oc, n = s.col_rows(), k = s.n * s.col_cols(), splits = product_weight_grad_splits(s);
    if (bias_in_product(s)) {  // version 4: [dw | db] += dy . [unfold(x)^T | 1]
        with_weight_grad_operands(dy, x, s, [&](auto a, auto, auto b1) {
            const StoreWeightsAndBias out{dw, db, n};
            if (splits == 1) tiled::gemm(m, n + 1, k, a, b1, out, stream);
            else tiled::gemm_splits(m, n + 1, k, a, b1, out, ws, splits, stream);
        });
        return;
    }
    with_weight_grad_operands(dy, x, s, [&](auto a, auto b, auto) {
        if (splits == 1) {
            tiled::gemm(m, n, k, a, b, StorePartial{dw, s.weight_size(), n, true}, stream, 1, s.math);
        } else {
            tiled::gemm(m, n, k, a, b, StorePartial{scratch, s.weight_size(), n, false}, stream, splits, s.math);
        }
    });
    if (conv2d_backward_weight_version >= 2) {
        if (s.n == 0) return;  // (no samples: k is 0, so the product was not split either)
        float* b_partial = scratch + (splits > 1 ? size_t(splits) * s.weight_size() : 0);
        const int b_splits = bias_grad_splits(s);
        launch::kernel("bias_grad_partials", bias_grad_partials, dim3(unsigned(s.oc), unsigned(b_splits)),
                       launch::threads, stream, b_partial, dy, s.n, s.oc, s.col_cols(), b_splits);
        const size_t count = (splits > 1 ? s.weight_size() : 0) + size_t(s.oc);
        launch::kernel("finish_weight_grad", finish_weight_grad, launch::grid_for(count), launch::threads, stream,
                       dw, scratch, splits, s.weight_size(), db, b_partial, b_splits, s.oc);
        return;
    }
    if (splits > 1) {
        launch::kernel("add_partials", add_partials, launch::grid_for(s.weight_size()), launch::threads, stream,
            dw, scratch, splits, s.weight_size());
    }
    if (s.n > 0) {
        launch::kernel("conv_bias_grad", conv_bias_grad, unsigned(s.oc), launch::threads, stream,
            db, dy, s.n, s.oc, s.col_cols());
    }
}

void conv2d_backward_weight_pool(float* dw, float* db, float* dy, const float* d_pooled, const float* x,
                                 const float* y, const float* pooled, const ConvShape& s, PoolKind kind,
                                 const PoolShape& ps, Workspace ws, cudaStream_t stream) {
    check_pooling(s, ps, "conv2d_backward_weight_pool");
    if (!small_weight_grad(s) || ps.in_size() == 0) {
        pool2d_backward_relu(dy, d_pooled, y, pooled, kind, ps, stream);
        return conv2d_backward_weight(dw, db, dy, x, s, ws, stream);
    }
    if (kind == PoolKind::avg && windows_apart(ps) && conv2d_backward_weight_version >= 6)
        launch_small_weight_grad(dw, db, OutputGradThroughAvgPoolApart{d_pooled, y, ps.k, ps.stride, ps.oh(), ps.ow()},
                                 x, s, ws, stream);
    else if (kind == PoolKind::max)
        launch_small_weight_grad(dw, db, OutputGradThroughPool<PoolKind::max>{d_pooled, y, pooled, ps.k, ps.stride,
                                                                              ps.oh(), ps.ow()},
                                 x, s, ws, stream);
    else
        launch_small_weight_grad(dw, db, OutputGradThroughPool<PoolKind::avg>{d_pooled, y, pooled, ps.k, ps.stride,
                                                                              ps.oh(), ps.ow()},
                                 x, s, ws, stream);
}

void conv2d_backward_data_weight_pool(float* d_pooled, const float* next_dy, const float* next_w,
                                      const ConvShape& next, float* dw, float* db, float* dy, const float* x,
                                      const float* y, const float* pooled, const ConvShape& s, PoolKind kind,
                                      const PoolShape& ps, Workspace ws, cudaStream_t stream,
                                      const UnfinishedWeightGrad& next_weight) {
    check_pooling(s, ps, "conv2d_backward_data_weight_pool");
    if (!gathers_into_weight_pool(next, s, ps)) {
        conv2d_backward_data(d_pooled, next_dy, next_w, next, ws.scratch, stream, next_weight);
        return conv2d_backward_weight_pool(dw, db, dy, d_pooled, x, y, pooled, s, kind, ps, ws, stream);
    }
    if (next_weight.dw) add_weight_slices(next_weight, stream);  // (before the columns take the scratch)
    input_grad_columns(ws.scratch, next_dy, next_w, next, stream);
    const Workspace after_columns{ws.scratch + input_grad_columns_floats(next), ws.tickets};
    const Geometry g(next);
    if (kind == PoolKind::max)
        launch_small_weight_grad(dw, db, OutputGradThroughPoolFromColumns<PoolKind::max>{ws.scratch, g, y, pooled, ps.k, ps.stride},
                                 x, s, after_columns, stream);
    else
        launch_small_weight_grad(dw, db, OutputGradThroughPoolFromColumns<PoolKind::avg>{ws.scratch, g, y, pooled, ps.k, ps.stride},
                                 x, s, after_columns, stream);
}

}  // namespace dpt::cuda
