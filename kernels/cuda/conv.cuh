// The convolution on the GPU, forward and both backwards, and what its
// sources share. CPU twin: kernels/cpu/conv.cpp, which unfolds the image
// into a matrix first (im2col). Here a product is an implicit GEMM on the
// tiled SGEMM of tiles.cuh: the loaders compute each element of that matrix
// when a tile needs it, so nothing is unfolded in memory, and the epilogues
// write NCHW directly.
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
// The shapes where a GEMM's tiles and index arithmetic cost more than its
// multiply-adds are summed directly instead, by kernels of their own: a
// small filter bank (LeNet's conv1, ResNet-18's first), forward and weight
// gradient, which also takes the pooling after the ReLU into the forward
// and reads the weight gradient's dy through it; and LeNet's conv2, all
// three products, a row of a plane a thread ("rows" kernels).
//
// A source a product, each with its launchers and kernels:
//   conv_forward.cu          conv2d_forward and its fused forms (ReLU, pooling, gathering the batch)
//   conv_backward_data.cu    conv2d_backward_data, the input gradient
//   conv_backward_weight.cu  conv2d_backward_weight, and the scratch the three need
//                            (conv2d_scratch_floats)
//   conv_weight_small.cu     a small filter bank's weight gradient, also through a pooling
//   conv_rows.cuh            LeNet's conv2 by tiled rows: the forward's and the input gradient's sums
// This header: the geometry the kernels take, the pooling of staged output
// planes, the adding of a weight gradient's slices, and then what the three
// products' sources share.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "fastdiv.cuh"
#include "kernels.hpp"
#include "launch.cuh"
#include "pool.cuh"
#include "tiles.cuh"

namespace dpt::cuda::conv {

// ConvShape's sizes, precomputed on the host for the device code, with the
// divisions the loaders make by them as multiplies (fastdiv.cuh).
struct Geometry {
    int n, c, h, w, oc, kh, kw, stride, pad, oh, ow;
    FastDiv by_taps, by_kw, by_out_pixels, by_ow, by_in_pixels, by_w, by_h, by_c;
    bool tf32;  // Math::tf32: a direct kernel rounds its operands (operand, below)
    explicit Geometry(const ConvShape& s)
        : n(s.n), c(s.c), h(s.h), w(s.w), oc(s.oc), kh(s.kh), kw(s.kw), stride(s.stride), pad(s.pad),
          oh(s.oh()), ow(s.ow()), by_taps(s.kh * s.kw), by_kw(s.kw), by_out_pixels(s.oh() * s.ow()), by_ow(s.ow()),
          by_in_pixels(s.h * s.w), by_w(s.w), by_h(s.h), by_c(s.c), tf32(s.math == Math::tf32) {}
};

// The pooling after a convolution's ReLU, for the kernels that pool what
// they computed.
struct PoolGeometry {
    int k, stride, oh, ow;
};

// Pools the block's output planes (mine of them from channel first, plane
// floats each, OW wide) from shared memory into pooled_y.
template <PoolKind kind, int OW>
__device__ inline void pool_staged_planes(float* pooled_y, const float* planes, int sample, const Geometry& g,
                                          const PoolGeometry& pg, int first, int mine, int plane) {
    const int windows = pg.oh * pg.ow;
    for (int e = int(threadIdx.x); e < mine * windows; e += int(blockDim.x)) {
        const int o = e / windows, r = e - o * windows, py = r / pg.ow, px = r - py * pg.ow;
        pooled_y[(size_t(sample) * g.oc + first) * windows + e] =
            pooled_window<kind>(planes + o * plane + py * pg.stride * OW + px * pg.stride, OW, pg.k);
    }
}

// dw (oc, taps) += the first taps columns of [dw | db] (oc, taps + 1), and
// db (oc) += its last. Split, the product's partial sums go through
// tiled::StoreSplit, and finish_splits hands their sums here.
struct StoreWeightsAndBias {
    float* dw;
    float* db;
    int taps;
    __device__ void operator()(int, int o, int q, float v) const {
        if (q < taps) dw[size_t(o) * taps + q] += v;
        else db[o] += v;
    }
};
// A weight gradient's slices added into [dw | db] in slice order, as
// finish_splits adds them: a kernel of its own (add_weight_slices), or the
// layer's input gradient's kernel before its own sums
// (input_grad_rows_tiled_finishing).
__device__ inline void finish_weight_slices(const UnfinishedWeightGrad& u) {
    const StoreWeightsAndBias out{u.dw, u.db, u.taps};
    const size_t size = size_t(u.oc) * (u.taps + 1);
    for (const size_t e : launch::grid_stride(size)) tiled::finish_split_sum(out, u.scratch, u.slices, size, u.taps + 1, e);
}

// ---- conv_forward.cu, conv_backward_data.cu, conv_backward_weight.cu ----

using tiled::operand;

// The kernels of those sources that sum a convolution directly, on the
// FP32 units rather than through the GEMM core, take --tf32 too: they round
// each operand to TF32 as they stage it, as the tensor cores would, and
// multiply and add in FP32. A product of two TF32 numbers is exact in FP32,
// so the sums are what Math::tf32 means (shapes.hpp) and what the CPU twin
// computes. Bias sums take dy unrounded, as the twin's do.

// unfold(x) (c*kh*kw, n*oh*ow): the input pixel that filter tap q sees at output column col.
__device__ inline float unfolded(const float* x, const Geometry& g, int q, int col) {
    const int ch = g.by_taps.div(q), t = g.by_taps.rest(q, ch), ky = g.by_kw.div(t), kx = g.by_kw.rest(t, ky);
    const int s = g.by_out_pixels.div(col), p = g.by_out_pixels.rest(col, s), oy = g.by_ow.div(p),
              ox = g.by_ow.rest(p, oy);
    const int iy = oy * g.stride - g.pad + ky, ix = ox * g.stride - g.pad + kx;
    if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) return 0.0f;  // padding
    return x[((size_t(s) * g.c + ch) * g.h + iy) * g.w + ix];
}

// dy as (oc, n*oh*ow): the weight gradient's left operand, and (as
// OutputGradColumns) the unfolded input gradient's right one.
struct OutputGrad {
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

// A block of `threads` rounded up to whole warps.
inline int whole_warps(int threads) { return tiled::ceil_div(threads, 32) * 32; }
// Chunks of at most `most` of `total`, evened out: the size of each.
inline int evened_chunk(int total, int most) { return tiled::ceil_div(total, tiled::ceil_div(total, most)); }

// The rows kernels (LeNet's conv2, each product: a block a sample, or a
// slice of the batch) stage their chunks in shared memory, at most this
// many floats, and run at most this many threads a block.
constexpr int staged_rows_floats = 12 * 1024, staged_rows_most_threads = 1024;

// How the rows kernels stage K x K filters: each filter row padded to 16
// bytes, so that a thread reads it 16 bytes at a time, and a channel's
// filters to an odd number of 16-byte units, so that the 8 channels a
// quarter-warp reads fall in different banks.
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

// N consecutive floats (1, 2 or 4) at a boundary of N floats, global or
// shared memory, as one load (LDG/LDS .32, .64 or .128), for the tiled
// kernels' filter taps and chunk loads (their staged rows go through
// load_row). The emulated GPU checks the boundary.
template <int N>
struct Floats {
    float v[N];
};
template <int N>
__device__ inline Floats<N> load_floats(const float* from) {
    static_assert(N == 1 || N == 2 || N == 4);
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
    } else if constexpr (N == 1) {
        return {{*from}};
    } else {
        const float2 f = *reinterpret_cast<const float2*>(from);
        return {{f.x, f.y}};
    }
#endif
}

// The products' operands (tiles.cuh's loaders) and the weight gradient's
// epilogue, for the three sources (and dev/cuda/'s versions of them).
// The forward's, w and unfold(x) (conv_forward.cu).
struct Weights {  // w as (oc, c*kh*kw), row-major
    const float* w;
    int k;
    static constexpr bool k_fast = true;
    // Element (o, q), w[o * k + q], read in two halves (tiles.cuh:
    // SplitsAlongK): the filter's row, once per thread; then an element is
    // an add and a load.
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
    // Element (q, col), unfolded(x, g, q, col) (conv.cuh), read in two
    // halves (tiles.cuh: SplitsColumns): the output pixel
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
// Unfold for filters of at most
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
// UnfoldByTaps, which reads the filter's taps from a table, where the table
// holds them; else Unfold: f(the operand).
template <class F>
void with_unfold(const float* x, const Geometry& g, F&& f) {
    if (g.kh * g.kw <= UnfoldByTaps::most_taps) f(UnfoldByTaps{x, g});
    else f(Unfold{x, g});
}

// The weight gradient's (conv_backward_weight.cu).
struct UnfoldTransposed {  // unfold(x)^T (n*oh*ow, c*kh*kw)
    const float* x;
    Geometry g;
    static constexpr bool k_fast = true;  // k runs along the output pixels
    // Element (col, q), unfolded(x, g, q, col) (conv.cuh), read in two
    // halves (tiles.cuh: SplitsAlongK): a tap (column q),
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
// ones, against which the product sums dy into the bias gradient. An element outside the image is the tap's
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

// The input gradient's first pass, w^T . dy (conv_backward_data.cu).
struct WeightColumns {  // w^T as (c*kh*kw, oc): column o is filter o
    const float* w;
    int rows;  // c*kh*kw
    static constexpr bool k_fast = false;  // consecutive rows are consecutive addresses
    __device__ float operator()(int q, int o) const { return w[size_t(o) * rows + q]; }
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

// Throws unless ps pools the output of convolution s.
inline void check_pooling(const ConvShape& s, const PoolShape& ps, const char* launcher) {
    if (ps.n != s.n || ps.c != s.oc || ps.h != s.oh() || ps.w != s.ow())
        throw std::invalid_argument(std::string(launcher) + ": the pooling's input is not the convolution's output");
}

// What one product's source does for another's.
// conv_forward.cu: the scratch the forward's splits take at s, and at any
// smaller batch.
size_t forward_split_floats(const ConvShape& s);
// conv_backward_data.cu: the floats of the unfolded input gradient w^T . dy
// (c*kh*kw, n*oh*ow) that its two passes keep in scratch; and whether s's
// input gradient runs on a kernel that adds a weight gradient's slices
// itself.
size_t input_grad_columns_floats(const ConvShape& s);
bool input_grad_finishes_slices(const ConvShape& s, const float* w);
// conv_backward_weight.cu: a weight gradient's slices added into [dw | db],
// in slice order, by a kernel of their own.
void add_weight_slices(const UnfinishedWeightGrad& u, cudaStream_t stream);
// conv_weight_small.cu: whether s's weight gradient is a small filter
// bank's, summed directly, and that sum with dy read from memory.
bool small_weight_grad(const ConvShape& s);
void small_weight_grad_from(float* dw, float* db, const float* dy, const float* x, const ConvShape& s, Workspace ws,
                            cudaStream_t stream);

}  // namespace dpt::cuda::conv
