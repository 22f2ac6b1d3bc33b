// The weight and bias gradients of a small filter bank on the GPU (conv.cuh:
// the three products, and what their sources share), summed directly
// (small_weight_grad_*, bank_weight_grad_*: LeNet's conv1, ResNet-18's
// first), dy read from memory or through the pooling after the ReLU
// (conv2d_backward_weight_pool).
#include "conv.cuh"
#include "kernels.hpp"
#include "launch.cuh"
#include "fastdiv.cuh"
#include "pool.cuh"
#include "tiles.cuh"

#include <algorithm>
#include <type_traits>

namespace dpt::cuda {
using namespace conv;  // (conv.cuh: what the convolution's sources share)
namespace {

// The weight gradient of a small filter bank (LeNet's conv1:
// 20 x 9 weights; ResNet-18's first: 64 x 9). As a GEMM its 180 results
// fill 4% of a tile, and each block walks a long k one dependent load after
// another. Here a block takes whole samples; it stages `small_pixels`
// output pixels at a time in shared memory (dy of every channel, and the
// unfolded input of every tap), and each thread sums the products of up to
// `small_per_thread` weights and biases over them, in pixel order. Each
// block writes its sums to partial[block][weight or bias]; finish_small
// adds the blocks' sums, one block an element, in block_sum's fixed order,
// or, with the workspace's tickets, the last block to store its sums adds
// them all, each thread an element's, in block order (no second kernel).
constexpr int small_pixels = 64, small_max_oc = 64, small_max_taps = 64, small_per_thread = 4;

bool small_bank(const ConvShape& s) {
    return s.n > 0 && s.oc <= small_max_oc && s.col_rows() <= small_max_taps &&
           s.weight_size() + size_t(s.oc) <= size_t(small_per_thread) * launch::threads;
}
// A block per sample, up to a block_sum's width (finish_small adds one
// block's worth per thread).
int small_weight_grad_blocks(const ConvShape& s) { return std::min(s.n, launch::threads); }

// Where the kernel below reads the output gradient dy (n, oc, oh, ow): from
// memory, or (conv2d_backward_weight_pool) through the pooling and ReLU after
// the convolution, from the pooling's output gradient, as pool_backward
// with ReLU's mask would have written dy.
//
// small_weight_grad_pipelined reads dy in two steps where a reader allows it
// (two_step): where(sample, p) once a pixel, then load(at, o) a channel, a
// plain load with no branch before it, whose value(at, loaded) is worked out
// only when it is stored; so a thread's loads of a chunk are all in flight
// at once.
struct OutputGradIn {
    const float* dy;
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
// before it: a pixel is in one window or none, so the value is
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

// A thread's share of a small filter bank's sums (small_weight_grad_*):
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

// small_weight_grad_partials' sums (the same chunks of 64 pixels, each
// thread's products in the same order, the blocks' sums added alike: the
// same bits), but each thread's loads of a chunk go out together, into
// registers, and the next chunk's go out while this one's products are
// summed. In small_weight_grad_partials a thread's loads of a chunk wait on
// one another (a loop of run-time length, a branch on ReLU's mask before
// each read through the pooling), so its blocks spend their time waiting on
// memory. A thread loads the same pixel of every chunk, for every 4th
// channel and tap; a reader without two steps (max pooling, overlapping
// windows) runs small_weight_grad_partials.
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

// A bank of 3 x 3 filters over one input channel (LeNet's conv1,
// ResNet-18's first conv): the kernels above give a thread one or two
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
    return small_bank(s) && s.c == 1 && s.kh == 3 && s.kw == 3;
}
int bank_groups(const ConvShape& s) { return (s.oc + bank_group - 1) / bank_group; }
// Slices of the batch's output pixels: at most small_weight_grad_blocks's,
// which conv2d_scratch_floats counts a block's sums for.
int bank_slices(const ConvShape& s) {
    return std::clamp((bank_blocks + bank_groups(s) - 1) / bank_groups(s), 1, small_weight_grad_blocks(s));
}

// A pixel of bank_weight_grad_sums: its inputs under the 9 taps, and what its 4
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

// LeNet's conv1 through its average pooling (3 x 3 filters over one
// channel, stride 1, no padding; 2 x 2 windows, stride 2, that tile the
// output): bank_weight_grad_sums takes a pixel at a time, 9 inputs and
// 4 channels' (y, pooled gradient) pairs, 17 loads, for 36 multiply-adds.
// Here a thread takes a pooling window at a time: its 4 pixels share a 4 x
// 4 patch of the input and, a channel, one pooled gradient, so a window is
// 16 + 4 x (1 + 4) = 36 loads for 144 multiply-adds, all in flight before
// the first is added. The same blocks (a group of 4 channels and a slice of
// the batch's windows), the same tree and last block as
// bank_weight_grad_sums'; each thread adds its pixels window by window, so
// the sums are in another order than there.
bool bank_windows_fit(const ConvShape& s, const OutputGradThroughAvgPoolApart& dy) {
    return bank_weight_grad(s) && s.stride == 1 && s.pad == 0 && dy.k == 2 &&
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

// The small filter bank's weight gradient: the blocks' partial sums into
// scratch, then finish_small; with the workspace's tickets, added by the
// last block instead. dy read through `Dy`.
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
    unsigned* ticket = ws.tickets;
    if constexpr (Dy::two_step)
        launch::kernel("small_weight_grad_pipelined", small_weight_grad_pipelined<Dy>, unsigned(blocks),
                       launch::threads, stream, ws.scratch, dy, x, Geometry(s), dw, db, ticket);
    else
        launch::kernel("small_weight_grad_partials", small_weight_grad_partials<Dy>, unsigned(blocks),
                       launch::threads, stream, ws.scratch, dy, x, Geometry(s), dw, db, ticket);
    if (ticket) return;
    launch::kernel("finish_small", finish_small, unsigned(outputs), launch::threads, stream, dw, db,
                   static_cast<const float*>(ws.scratch), blocks, weights, outputs);
}

}  // namespace

// (With --tf32, the bank kernel alone, which rounds dy for the weights'
// sums but not for the bias's: the other small kernels take FP32.)
bool conv::small_weight_grad(const ConvShape& s) { return small_bank(s) && (s.math == Math::fp32 || bank_weight_grad(s)); }

void conv::small_weight_grad_from(float* dw, float* db, const float* dy, const float* x, const ConvShape& s,
                                  Workspace ws, cudaStream_t stream) {
    launch_small_weight_grad(dw, db, OutputGradIn{dy}, x, s, ws, stream);
}

void conv2d_backward_weight_pool(float* dw, float* db, float* dy, const float* d_pooled, const float* x,
                                 const float* y, const float* pooled, const ConvShape& s, PoolKind kind,
                                 const PoolShape& ps, Workspace ws, cudaStream_t stream) {
    check_pooling(s, ps, "conv2d_backward_weight_pool");
    if (!small_weight_grad(s) || ps.in_size() == 0) {
        pool2d_backward_relu(dy, d_pooled, y, pooled, kind, ps, stream);
        return conv2d_backward_weight(dw, db, dy, x, s, ws, stream);
    }
    if (kind == PoolKind::avg && windows_apart(ps))
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

}  // namespace dpt::cuda
