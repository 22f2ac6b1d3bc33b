// The trainer's weight-gradient product (kernels/cuda/conv_backward_weight.cu:
// conv2d_backward_weight where neither a small filter bank's kernel nor the
// rows kernel takes the shape), its bias kernel and finishing copied (its
// operands and epilogue are conv.cuh's, its splits conv2d_weight_grad_splits),
// for the versions that change how the product loads its operands
// (conv2d_backward_weight/14) or how many splits it takes (waves/02). product() runs it with the operands, the GEMM launch and the
// splits a version hands it; with the trainer's three it is the trainer's
// path, kernel for kernel.
#pragma once
#include <algorithm>

#include "cuda/conv.cuh"
#include "cuda/tiles.cuh"
#include "gemm/core.cuh"

namespace dpt::cuda::dev::weight_product {

using namespace dpt::cuda::conv;
using core::DevGemm;
using core::TrainerGemm;

// Whether the trainer's own kernels take s before the product: a small
// filter bank's, or (conservatively) any shape its rows kernel might.
inline bool trainer_kernel_takes(const ConvShape& s) {
    return small_weight_grad(s) || (s.math == Math::fp32 && s.stride == 1 && s.pad == 0 && s.kh == 5 && s.kw == 5);
}

// f(dy, unfold(x)^T, [unfold(x)^T | 1]): the trainer's operands.
struct TrainerOperands {
    template <class F>
    void operator()(const float* dy, const float* x, const ConvShape& s, F&& f) const {
        const OutputGrad dy_rows{dy, s.oc, FastDiv(s.col_cols())};
        const UnfoldTransposed unfold{x, Geometry(s)};
        f(dy_rows, unfold, UnfoldTransposedAndOnes{unfold, s.col_rows()});
    }
};

// The bias summed as one more column of the product, against a
// column of ones, where that column fits in the last tile's unused ones
// (taps not a multiple of the tiles' 128 columns) and in FP32 (with --tf32
// the bias sums the unrounded dy): no bias kernel of its own.
inline bool bias_in_product(const ConvShape& s) {
    return s.math == Math::fp32 && s.n > 0 && s.col_rows() % 128 != 0;
}

// The bias gradient where the product does not sum it: channel o's n * pixels values split into
// runs of whole samples, a block a run (grid: channels x splits), enough
// blocks to fill the GPU (tiled::target_blocks) with at least
// `bias_values_per_block` values each. Each block writes its sum, in block_sum's
// fixed order, to partial[o * splits + z]; finish_weight_grad adds them.
constexpr int bias_values_per_block = 4096;
inline int bias_grad_splits(const ConvShape& s) {
    const long values = long(s.n) * s.col_cols();
    const long most = std::max(1L, values / bias_values_per_block);
    const long wanted = (tiled::target_blocks + s.oc - 1) / s.oc;
    return int(std::max(1L, std::min({wanted, most, long(s.n)})));
}

static __global__ void bias_grad_partials(float* partial, const float* dy, int n, int oc, int pixels, int splits) {
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
static __global__ void finish_weight_grad(float* dw, const float* w_partial, int w_splits, size_t w_size, float* db,
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


// dw, db += the weight and bias gradients of s by the product of the
// operands with_operands hands its function, launched by gemm, split
// `splits` ways along k (at most conv2d_weight_grad_splits(s): the scratch holds
// that many).
template <class WithOperands, class Gemm>
void product(float* dw, float* db, const float* dy, const float* x, const ConvShape& s, Workspace ws,
             cudaStream_t stream, int splits, WithOperands with_operands, Gemm gemm) {
    float* scratch = ws.scratch;
    const int m = s.oc, n = s.col_rows(), k = s.n * s.col_cols();
    if (bias_in_product(s)) {  // [dw | db] += dy . [unfold(x)^T | 1]
        with_operands(dy, x, s, [&](auto a, auto, auto b1) {
            const StoreWeightsAndBias out{dw, db, n};
            if (splits == 1) return gemm(m, n + 1, k, a, b1, out, stream, 1, s.math);
            gemm(m, n + 1, k, a, b1, tiled::StoreSplit{ws.scratch, size_t(m) * (n + 1), n + 1}, stream, splits,
                 s.math);
            tiled::add_splits(out, ws.scratch, splits, m, n + 1, stream);
        });
        return;
    }
    with_operands(dy, x, s, [&](auto a, auto b, auto) {
        if (splits == 1) gemm(m, n, k, a, b, StorePartial{dw, s.weight_size(), n, true}, stream, 1, s.math);
        else gemm(m, n, k, a, b, StorePartial{scratch, s.weight_size(), n, false}, stream, splits, s.math);
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

}  // namespace dpt::cuda::dev::weight_product
