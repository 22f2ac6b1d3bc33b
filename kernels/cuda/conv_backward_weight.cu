// The convolution's weight and bias gradients on the GPU (conv.cuh: the
// three products, and what their sources share): conv2d_backward_weight,
// its form that leaves its slices for the input gradient's kernel, and the scratch every product
// needs (conv2d_scratch_floats). A small filter bank's, summed directly, is
// conv_weight_small.cu's.
// - the GEMM dy . unfold(x)^T, split along k (the batch's output pixels),
//   in FP32 with the bias as one more column, against ones;
// - LeNet's conv2 by rows (weight_grad_rows_prefetched, and the kernels it
//   builds on), a slice of the batch a block, the slices added by
//   add_weight_slices or by the input gradient's kernel.
#include "conv.cuh"
#include "kernels.hpp"
#include "launch.cuh"
#include "fastdiv.cuh"
#include "pool.cuh"
#include "tiles.cuh"

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace dpt::cuda {
using namespace conv;  // (conv.cuh: what the convolution's sources share)
namespace {

// f(dy, unfold(x)^T, [unfold(x)^T | 1]): the weight gradient's operands (conv.cuh).
template <class F>
void with_weight_grad_operands(const float* dy, const float* x, const ConvShape& s, F&& f) {
    const OutputGrad dy_rows{dy, s.oc, FastDiv(s.col_cols())};
    const UnfoldTransposed unfold{x, Geometry(s)};
    f(dy_rows, unfold, UnfoldTransposedAndOnes{unfold, s.col_rows()});
}

// The bias summed as one more column of the product, against a
// column of ones, where that column fits in the last tile's unused ones
// (taps not a multiple of the tiles' 128 columns) and in FP32 (with --tf32
// the bias sums the unrounded dy): no bias kernel of its own.
bool bias_in_product(const ConvShape& s) {
    return s.math == Math::fp32 && s.n > 0 && s.col_rows() % 128 != 0;
}

// The splits of the weight gradient's product along k (the batch's output
// pixels), aiming at twice target_blocks (splits of at least 128): each
// block of LeNet's conv2 walks 41 k-steps instead of 81, and the GPU holds
// about 4 blocks a multiprocessor to cover their loads' latency. The rows
// kernels' slices (weight_grad_rows_kernel) are as many.
int weight_grad_splits(const ConvShape& s) {
    return tiled::splits_for(s.oc, s.col_rows(), s.n * s.col_cols(), 128, 2 * tiled::target_blocks);
}

// The bias gradient where the product does not sum it: channel o's n * pixels values split into
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
// for both.
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

// The weight gradient of LeNet's conv2 (5x5 filters on
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

// weight_grad_rows_window: weight_grad_rows' sums, in its order, bit for
// bit, with the input rows read once a sample. weight_grad_rows reads, for each
// output row, the dy row and the K input rows it meets: 45 input-row reads
// a sample (of 13 rows), each a different channel's for most of a warp's
// threads. Here the loop runs over the input rows, and the dy rows that
// meet an input row (the last K of them) stay in registers, a window that
// each new dy row refreshes: 13 input-row reads and 9 dy-row reads a
// sample. Each tap's sum still runs over output rows, then columns. The
// output's height is known when compiled, so the whole loop unrolls and
// the window's rows are registers.
// One staged sample's sums into a thread's taps (acc) and bias: the input
// rows in order, each against the dy rows that meet it.
template <int K, int OW, int OH>
__device__ inline void weight_rows_window_sample(float (&acc)[K][K], float& bias, const float* sx, const float* sdy,
                                                 int lo, int ch, int xc) {
    using R = RowsWeight<K, OW>;
    constexpr int H = OH + K - 1;
    float d[K][R::OWP];  // dy row oy in d[oy % K]
#pragma unroll
    for (int iy = 0; iy < H; ++iy) {
        if (iy < OH) {
            load_row<R::OWP>(d[iy % K], sdy + (lo * OH + iy) * R::OWP);
#pragma unroll
            for (int ox = 0; ox < OW; ++ox) bias += d[iy % K][ox];
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

// weight_grad_rows_prefetched: weight_grad_rows_window's sums, in its order, bit for bit,
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
    // stored: no sum reads them).
    __device__ void store(float* sx, float* sdy, const Geometry& g, int mine, int xc) const {
        const int t = int(threadIdx.x), step = int(blockDim.x), fours = g.c * H * R::W / 4;
#pragma unroll
        for (int i = 0; i < x_loads; ++i)
            if (t + i * step < fours) {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int e = 4 * (t + i * step) + j, r = e / R::W, ix = e - r * R::W, c = r / H;
                    sx[c * xc + (r - c * H) * R::XP + ix] = x[i].v[j];
                }
            }
#pragma unroll
        for (int i = 0; i < dy_loads; ++i) {
            const int e = t + i * step;
            if (e < mine * OH * OW) {
                const int r = e / OW;
                sdy[r * R::OWP + (e - r * OW)] = dy[i];
            }
        }
    }
    // Whether a block of `threads` holds a sample of s this way.
    static bool fits(const ConvShape& s, int per, int threads) {
        return s.c * H * R::W % 4 == 0 && s.c * H * R::W / 4 <= x_loads * threads &&
               per * OH * OW <= dy_loads * threads;
    }
};

template <int K, int OW>
__global__ void __launch_bounds__(weight_rows_most_threads)
    weight_grad_rows_prefetched(float* partial, const float* dy, const float* x, Geometry g, int per_slice) {
    using P = WeightRowsPrefetch<K, OW>;
    using R = RowsWeight<K, OW>;
    __shared__ __align__(16) float staged[staged_rows_floats];
    const int xc = R::channel(P::H);
    float* const sx = staged;
    float* const sdy = staged + g.c * xc;
    const WeightRowsThread t(g, per_slice);
    float acc[K][K] = {}, bias = 0.0f;
    P next;
    if (t.s0 < t.s1) next.load(x, dy, g, t.s0, t.first, t.mine);
    for (int sample = t.s0; sample < t.s1; ++sample) {
        __syncthreads();  // the previous sample's sums are done
        next.store(sx, sdy, g, t.mine, xc);
        __syncthreads();
        if (sample + 1 < t.s1) next.load(x, dy, g, sample + 1, t.first, t.mine);
        if (t.active) weight_rows_window_sample<K, OW, P::OH>(acc, bias, sx, sdy, t.lo, t.ch, xc);
    }
    if (t.active) store_weight_rows<K>(partial, acc, bias, g, t.slice, t.co, t.ch);
}

// The rows kernel for s (null where none takes s: the product runs), the
// batch's slices (the splits add_splits adds), the samples in each, the
// block's threads and its name; weight_rows_parts blocks a slice (grid y).
// FP32 alone.
using WeightRowsKernel = void (*)(float* partial, const float* dy, const float* x, Geometry g, int per_slice);
struct WeightRowsLaunch {
    WeightRowsKernel kernel;
    int slices, per_slice, threads;
    const char* name;
};
WeightRowsLaunch weight_grad_rows_kernel(const ConvShape& s, const float* x) {
    // The batch's slices: weight_grad_splits(s) of them, whole samples
    // each (conv2d_scratch_floats holds this many [dw | db]).
    const int splits = weight_grad_splits(s), per_slice = tiled::ceil_div(s.n, splits),
              slices = per_slice > 0 ? tiled::ceil_div(s.n, per_slice) : 0;
    WeightRowsLaunch l{nullptr, 0, 0, whole_warps(tiled::ceil_div(s.oc, weight_rows_parts) * s.c), "weight_grad_rows"};
    if (s.math != Math::fp32 || s.n <= 0 || s.stride != 1 || s.pad != 0 || s.kh != s.kw) return l;
    if (splits < 2 || l.threads > weight_rows_most_threads) return l;
    l.per_slice = per_slice, l.slices = slices;
    using R = RowsWeight<5, 9>;
    const int per = tiled::ceil_div(s.oc, weight_rows_parts);
    if (s.kh == 5 && s.ow() == 9 && s.c * R::channel(s.h) + per * s.oh() * R::OWP <= staged_rows_floats) {
        l.kernel = weight_grad_rows<5, 9>;
        if (s.oh() == 9) {
            l.kernel = weight_grad_rows_window<5, 9, 9>, l.name = "weight_grad_rows_window";
            if (WeightRowsPrefetch<5, 9>::fits(s, per, l.threads) && reinterpret_cast<std::uintptr_t>(x) % 16 == 0)
                l.kernel = weight_grad_rows_prefetched<5, 9>, l.name = "weight_grad_rows_prefetched";
        }
    }
    return l;
}
// The slices kernel for s that conv2d_backward_weight_unfinished leaves
// unfinished: the rows kernel (null where it leaves nothing).
WeightRowsLaunch weight_slices_left(const ConvShape& s, const float* x) {
    if (small_weight_grad(s)) return {};
    return weight_grad_rows_kernel(s, x);
}
// The rows kernel's slices of s's weight gradient into scratch, not added.
UnfinishedWeightGrad weight_rows_slices(const WeightRowsLaunch& l, float* dw, float* db, const float* dy,
                                        const float* x, const ConvShape& s, float* scratch, cudaStream_t stream) {
    launch::kernel(l.name, l.kernel, dim3(unsigned(l.slices), unsigned(weight_rows_parts)), unsigned(l.threads),
                   stream, scratch, dy, x, Geometry(s), l.per_slice);
    return {dw, db, scratch, l.slices, s.oc, s.col_rows()};
}

}  // namespace

void conv::add_weight_slices(const UnfinishedWeightGrad& u, cudaStream_t stream) {
    tiled::add_splits(StoreWeightsAndBias{u.dw, u.db, u.taps}, u.scratch, u.slices, u.oc, u.taps + 1, stream);
}

int conv2d_weight_grad_depth(const ConvShape& s) {
    const int k = s.n * s.col_cols(), splits = weight_grad_splits(s);
    return splits == 1 ? k : tiled::split_length(k, splits, tiled::Tile128::BK);
}

int conv2d_weight_grad_splits(const ConvShape& s) { return weight_grad_splits(s); }

size_t conv2d_scratch_floats(const ConvShape& s) {
    // The product's splits and the bias's (TF32), or [dw | db]'s splits (FP32).
    const int splits = weight_grad_splits(s);
    const size_t weight_grad = (splits > 1 ? size_t(splits) * s.weight_size() : 0) + size_t(bias_grad_splits(s)) * s.oc;
    const size_t with_bias = size_t(splits) * s.oc * (s.col_rows() + 1);
    // The input gradient's columns (its two passes).
    const size_t input_grad = input_grad_columns_floats(s);
    // A small filter bank's partial sums, a block's for each weight and bias.
    const size_t small = size_t(std::min(s.n, launch::threads)) * (s.weight_size() + size_t(s.oc));
    return std::max({weight_grad, with_bias, input_grad, small, forward_split_floats(s)});
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
    if (small_weight_grad(s)) return small_weight_grad_from(dw, db, dy, x, s, ws, stream);
    if (const WeightRowsLaunch l = weight_grad_rows_kernel(s, x); l.kernel)
        return add_weight_slices(weight_rows_slices(l, dw, db, dy, x, s, scratch, stream), stream);
    const int m = s.oc, n = s.col_rows(), k = s.n * s.col_cols(), splits = weight_grad_splits(s);
    if (bias_in_product(s)) {  // [dw | db] += dy . [unfold(x)^T | 1]
        with_weight_grad_operands(dy, x, s, [&](auto a, auto, auto b1) {
            const StoreWeightsAndBias out{dw, db, n};
            if (splits == 1) tiled::gemm(m, n + 1, k, a, b1, out, stream);
            else tiled::gemm_splits(m, n + 1, k, a, b1, out, ws.scratch, splits, stream);
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
    if (s.n == 0) return;  // (no samples: k is 0, so the product was not split either)
    float* b_partial = scratch + (splits > 1 ? size_t(splits) * s.weight_size() : 0);
    const int b_splits = bias_grad_splits(s);
    launch::kernel("bias_grad_partials", bias_grad_partials, dim3(unsigned(s.oc), unsigned(b_splits)),
                   launch::threads, stream, b_partial, dy, s.n, s.oc, s.col_cols(), b_splits);
    const size_t count = (splits > 1 ? s.weight_size() : 0) + size_t(s.oc);
    launch::kernel("finish_weight_grad", finish_weight_grad, launch::grid_for(count), launch::threads, stream,
                   dw, scratch, splits, s.weight_size(), db, b_partial, b_splits, s.oc);
}


}  // namespace dpt::cuda
