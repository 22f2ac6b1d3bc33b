// The convolution's weight and bias gradients on the GPU (conv.cuh: the
// three products, and what their sources share): conv2d_backward_weight,
// its forms that leave their slices for the input gradient's kernel or read
// dy through the pooling after the ReLU, and the scratch every version of
// every product needs (conv2d_scratch_floats).
// - the GEMM dy . unfold(x)^T, split along k (the batch's output pixels),
//   from version 4 with the bias as one more column, against ones;
// - a small filter bank summed directly (small_weight_grad_*,
//   bank_weight_grad_*: LeNet's conv1, ResNet-18's first), dy read from
//   memory, through the pooling, or gathered from the next layer's columns
//   (conv2d_backward_data_weight_pool);
// - LeNet's conv2 by rows (weight_grad_rows and its successors), a slice of
//   the batch a block, the slices added by add_weight_slices or by the input
//   gradient's kernel; under --tf32, from tf32 version 9, on the tensor cores
//   (conv_mma.cu).
#include "conv.cuh"
#include "kernels.hpp"
#include "launch.cuh"
#include "fastdiv.cuh"
#include "pool.cuh"
#include "tiles.cuh"
#include "versions.hpp"

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace dpt::cuda {
using namespace conv;  // (conv.cuh: what the convolution's sources share)
namespace {

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

// Version 3 of backward-data: whether `next`'s input gradient can be left as
// columns for the small weight gradient of s, the convolution before the
// pooling ps that feeds `next`, to gather as it reads them.
bool gathers_into_weight_pool(const ConvShape& next, const ConvShape& s, const PoolShape& ps) {
    return conv2d_backward_data_version == 3 && small_weight_grad(s) && ps.in_size() > 0 && next.stride == 1 &&
           next.n == s.n && next.c == ps.c && next.h == ps.oh() && next.w == ps.ow();
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
// 512 threads).
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

void conv::add_weight_slices(const UnfinishedWeightGrad& u, cudaStream_t stream) {
    tiled::add_splits(StoreWeightsAndBias{u.dw, u.db, u.taps}, u.scratch, u.slices, u.oc, u.taps + 1, stream);
}

// The weight gradient's partial sums (when split), then the bias gradient's
// (version 2).
int conv2d_weight_grad_depth(const ConvShape& s) {
    const int k = s.n * s.col_cols(), splits = product_weight_grad_splits(s);
    return splits == 1 ? k : tiled::split_length(k, splits, tiled::Tile128::BK);
}

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
