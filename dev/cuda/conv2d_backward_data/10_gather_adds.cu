// The input gradient of a convolution whose input another layer reads too
// (ResNet-18's block inputs, read by a block's first convolution and its
// shortcut), added to dx by the kernel that ends it: dx += the gradient.
//
// Against the trainer's (kernels/cuda/kernels.hpp: backward_data, with
// `accumulate`: the input gradient into a spare buffer, then sum_parts adds
// it to dx): where the trainer's ends in the gather of the unfolded
// gradient's taps (the stride-2 convolutions: the downsampling blocks'
// first 3x3 and their 1x1 shortcuts), the gather adds each pixel's sum to
// dx itself, as sum_parts would (one rounding): no spare buffer, no
// sum_parts kernel, dx read once instead of twice. The same bits. Other
// shapes run the trainer's two calls.
//
// The model hands a layer's backward the spare buffer and the trainer's
// launcher writes its gradient, so training cannot run this: a fused
// launcher of its own (dev.hpp: ConvBackwardDataAdd), which kernel_bench's
// conv2d_backward_data_add run times against the trainer's two calls. To
// adopt it, the kernel set's backward_data would call it where it adds.
//
// Measured: not yet timed on a GPU.
#include <stdexcept>
#include <string>

#include "cuda/conv.cuh"
#include "dev.hpp"

namespace {

using namespace dpt;
using namespace dpt::cuda;
using namespace dpt::cuda::conv;

// (kernels/cuda/conv_backward_data.cu's two passes, the gather adding.)
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

// (int indices split by multiplication: dx has fewer than 2^31 elements,
// which input_grad_columns checks.) Each tap is tested; the taps are added
// in the trainer's order (ky, then kx).
__global__ void gather_input_grad_adding(float* dx, const float* dcol, Geometry g) {
    const int count = g.n * g.c * g.h * g.w;
    const size_t cols = size_t(g.n) * g.oh * g.ow;
    for (const int i : launch::grid_stride(count)) {
        const int row = g.by_w.div(i), ix = g.by_w.rest(i, row), plane = g.by_h.div(row), iy = g.by_h.rest(row, plane);
        const int s = g.by_c.div(plane), ch = g.by_c.rest(plane, s);
        const float* sample = dcol + size_t(s) * g.oh * g.ow;  // column (s, 0, 0) of row 0
        float sum = 0.0f;
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
        dx[i] += sum;  // sum_parts' value: dx + the gradient, one rounding
    }
}

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

namespace DEV_NAMESPACE {

void conv2d_backward_data_add(float* dx, float* spare, const float* dy, const float* w, const ConvShape& s,
                              float* scratch, cudaStream_t stream) {
    if (s.stride == 1) {  // the trainer's two calls
        conv2d_backward_data(spare, dy, w, s, scratch, stream, {});
        return sum_into(dx, spare, 1, s.in_size(), stream);
    }
    input_grad_columns(scratch, dy, w, s, stream);
    launch::kernel("gather_input_grad_adding", gather_input_grad_adding, launch::grid_for(s.in_size()),
                   launch::threads, stream, dx, scratch, Geometry(s));
}

}  // namespace DEV_NAMESPACE

DEV_VERSION("conv2d_backward_data/10_gather_adds",
            "the input gradient of a convolution whose input another layer reads too (ResNet-18's block inputs), "
            "added to dx by the gather that ends it (the stride-2 convolutions), where the trainer's writes it into "
            "a spare buffer and sum_parts adds it: the same bits; a fused launcher of its own, which training cannot "
            "call (kernel_bench's conv2d_backward_data_add)",
            "not yet timed", l.conv2d_backward_data_add = &DEV_NAMESPACE::conv2d_backward_data_add)
