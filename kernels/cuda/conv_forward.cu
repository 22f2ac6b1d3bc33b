// The convolution's forward on the GPU (conv.cuh: the three products, and
// what their sources share): conv2d_forward, and its forms with the ReLU,
// the pooling after it, and the batch gathered from the dataset.
// - the GEMM (Weights . Unfold), split along k where its tiles are too few
//   to fill the GPU (forward_splits), the splits added by finish_splits or,
//   with a pooling after the ReLU, by finish_splits_pool;
// - a small filter bank summed directly (direct_forward: LeNet's conv1,
//   ResNet-18's first), which also pools, and gathers the first layer's
//   input from the dataset's bytes as it stages it;
// - LeNet's conv2 by rows of output planes (rows_forward_tiled; other
//   stride-1 convolutions of small planes, rows_forward_batched), with its
//   ReLU and pooling.
#include "conv.cuh"
#include "conv_rows.cuh"
#include "kernels.hpp"
#include "launch.cuh"
#include "fastdiv.cuh"
#include "pool.cuh"
#include "tiles.cuh"

#include <algorithm>
#include <cstdint>

namespace dpt::cuda {
using namespace conv;  // (conv.cuh: what the convolution's sources share, the product's operands too)
namespace {

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

// The forward pass of a small filter bank on a small image
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
    return s.n > 0 && s.oc <= direct_max_oc &&
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
// With `from` (GatherSource: its x is then x), the first
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

template <bool relu, bool pooled, PoolKind kind = PoolKind::max>
void launch_direct_forward(float* y, float* pooled_y, const float* x, const float* w, const float* b,
                           const ConvShape& s, PoolGeometry pg, cudaStream_t stream, const GatherSource& from = {}) {
    const dim3 grid(unsigned(s.n), unsigned((s.oc + direct_group - 1) / direct_group));
    if (s.kh == 3 && s.kw == 3)
        launch::kernel("direct_forward", direct_forward<relu, pooled, kind, 3>, grid, launch::threads, stream, y,
                       pooled_y, x, w, b, Geometry(s), pg, from);
    else
        launch::kernel("direct_forward", direct_forward<relu, pooled, kind, 0>, grid, launch::threads, stream, y,
                       pooled_y, x, w, b, Geometry(s), pg, from);
}

// The forward of the stride-1 convolutions of small planes that the
// tiled kernel below does not take, summed directly as the input
// gradient's rows kernels are (conv_backward_data.cu): a block a
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

// Each sample's output channels are split between gridDim.y blocks
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

// The kernel: its chunks staged in batches (conv.cuh: stage).
template <int K, int P, int OW, bool relu, bool pooled, PoolKind kind, bool split>
__global__ void __launch_bounds__(staged_rows_most_threads)
    rows_forward_batched(float* y, float* pooled_y, const float* x, const float* w, const float* b, Geometry g,
                         PoolGeometry pg, int chunk) {
    __shared__ __align__(16) float staged[staged_rows_floats];
    rows_forward_sums<K, P, OW, relu, pooled, kind, split, Staging::batched>(staged, y, pooled_y, x, w, b, g, pg,
                                                                            chunk);
}

// The rows kernel for s: the kernel (null where it does not take s), its
// chunk of input channels, blocks a sample and threads. Each sample takes
// two blocks (LeNet's 256 samples made 256 blocks, 0.65 of an H100's wave).
template <bool relu, bool pooled, PoolKind kind>
using RowsForwardKernel = void (*)(float*, float*, const float*, const float*, const float*, Geometry, PoolGeometry,
                                   int);
template <bool relu, bool pooled, PoolKind kind>
struct RowsForwardLaunch {
    RowsForwardKernel<relu, pooled, kind> kernel;
    int chunk, parts, threads;
};
template <bool relu, bool pooled, PoolKind kind>
RowsForwardLaunch<relu, pooled, kind> rows_forward_kernel(const ConvShape& s) {
    const int parts = s.oc >= 2 ? 2 : 1, per = tiled::ceil_div(s.oc, parts);
    RowsForwardLaunch<relu, pooled, kind> l{nullptr, 0, parts, whole_warps(s.oh() * per)};
    if (s.math != Math::fp32 || s.n <= 0 || s.stride != 1 || s.kh != s.kw ||
        l.threads > staged_rows_most_threads || size_t(per) * s.oh() * s.ow() > size_t(staged_rows_floats))
        return l;
    const int k = s.kh, p = s.pad, ow = s.ow();
    const auto fits = [&](int xp, int channel) {
        const int most = staged_rows_floats / (s.h * xp + per * channel);
        if (most < 1) return false;
        l.chunk = evened_chunk(s.c, most);
        return true;
    };
    const auto pick = [&](auto split, auto whole) { l.kernel = parts > 1 ? split : whole; };
    if (k == 5 && p == 0 && ow == 9 && fits(RowsForward<5, 0, 9>::XP, StagedFilters<5>::channel))
        pick(rows_forward_batched<5, 0, 9, relu, pooled, kind, true>,
             rows_forward_batched<5, 0, 9, relu, pooled, kind, false>);
    else if (k == 3 && p == 0 && ow == 7 && fits(RowsForward<3, 0, 7>::XP, StagedFilters<3>::channel))
        pick(rows_forward_batched<3, 0, 7, relu, pooled, kind, true>,
             rows_forward_batched<3, 0, 7, relu, pooled, kind, false>);
    return l;
}

template <bool relu, bool pooled, PoolKind kind>
__global__ void __launch_bounds__(TiledRows<2>::threads)
    rows_forward_tiled(float* y, float* pooled_y, const float* x, const float* w, const float* b, Geometry g,
                       PoolGeometry pg) {
    __shared__ __align__(16) float staged[TiledRows<2>::sw_floats + TiledRows<2>::sx_floats];
    rows_forward_tiled_sums<2, relu, pooled, kind>(staged, y, pooled_y, x, w, b, g, pg);
}

// Runs the tiled or the rows kernel where one takes s; false where none does.
template <bool relu, bool pooled, PoolKind kind = PoolKind::max>
bool launch_rows_forward(float* y, float* pooled_y, const float* x, const float* w, const float* b,
                         const ConvShape& s, PoolGeometry pg, cudaStream_t stream) {
    if (rows_forward_tiled_fits(s, x, w)) {
        launch::kernel("rows_forward_tiled", rows_forward_tiled<relu, pooled, kind>, unsigned(s.n),
                       unsigned(TiledRows<2>::threads), stream, y, pooled_y, x, w, b, Geometry(s), pg);
        return true;
    }
    const auto l = rows_forward_kernel<relu, pooled, kind>(s);
    if (!l.kernel) return false;
    launch::kernel("rows_forward_batched", l.kernel, dim3(unsigned(s.n), unsigned(l.parts)), unsigned(l.threads), stream, y,
                   pooled_y, x, w, b, Geometry(s), pg, l.chunk);
    return true;
}

// The forward product split along k, the splits' partial sums
// in scratch added in split order by finish_splits, when its tiles would
// leave a multiprocessor fewer than 4 blocks (LeNet's conv2 at batch 256:
// 162 blocks of 64 x 128 for 132 multiprocessors, each walking k = 500 one
// k-step after another, waiting on each step's loads). Splits of at least
// 128, at most 8; the same on every GPU, so every GPU rounds alike.
constexpr int forward_target_blocks = 4 * 132, forward_split_min_k = 128, forward_split_most = 8;
int forward_splits(const ConvShape& s) {
    const int k = s.col_rows(), cols = s.n * s.col_cols();
    if (cols <= 0 || k / forward_split_min_k < 2) return 1;
    const long tiles = long(tiled::ceil_div(s.oc, 64)) * tiled::ceil_div(cols, 128);
    const long want = (forward_target_blocks + tiles - 1) / tiles;
    return int(std::clamp<long>(std::min<long>({want, k / forward_split_min_k, forward_split_most}), 1,
                                forward_split_most));
}
template <bool relu>
void forward(float* y, const float* x, const float* w, const float* b, const ConvShape& s, float* scratch,
             cudaStream_t stream) {
    if (direct_forward_fits(s)) return launch_direct_forward<relu, false>(y, nullptr, x, w, b, s, {}, stream);
    if (launch_rows_forward<relu, false>(y, nullptr, x, w, b, s, {}, stream)) return;
    const Geometry g(s);
    const int m = s.oc, n = s.n * s.col_cols(), k = s.col_rows(), splits = forward_splits(s);
    const StoreOutput<relu> out{y, b, s.oc, FastDiv(s.col_cols())};
    with_unfold(x, g, [&](auto unfold) {
        if (splits > 1)
            tiled::gemm_splits(m, n, k, Weights{w, k}, unfold, out, scratch, splits, stream, s.math);
        else
            tiled::gemm(m, n, k, Weights{w, k}, unfold, out, stream, 1, s.math);
    });
}

// A split forward product with a ReLU and a pooling
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

// Whether finish_splits_pool runs conv2d_forward_relu_pool on shape s.
bool pools_in_finish(const ConvShape& s, const PoolShape& ps) {
    return !direct_forward_fits(s) && forward_splits(s) > 1 && windows_apart(ps) &&
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

}  // namespace

// Scratch for forward_splits at this shape and at any smaller batch: splits
// times oc x cols, where splits < target / tiles + 1 and tiles >= oc / 64 x
// cols / 128.
size_t conv::forward_split_floats(const ConvShape& s) {
    if (s.col_rows() / forward_split_min_k < 2) return 0;
    return size_t(64) * 128 * forward_target_blocks + size_t(s.oc) * s.n * s.col_cols();
}

int conv2d_forward_splits(const ConvShape& s) { return forward_splits(s); }

void conv2d_forward(float* y, const float* x, const float* w, const float* b, const ConvShape& s, float* scratch,
                    cudaStream_t stream) {
    forward<false>(y, x, w, b, s, scratch, stream);
}

void conv2d_forward_relu(float* y, const float* x, const float* w, const float* b, const ConvShape& s,
                         float* scratch, cudaStream_t stream) {
    forward<true>(y, x, w, b, s, scratch, stream);
}

bool conv2d_forward_gathers(const ConvShape& s) { return direct_forward_fits(s); }

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

}  // namespace dpt::cuda
