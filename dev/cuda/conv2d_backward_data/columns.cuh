// The trainer's input gradient in two passes (kernels/cuda/conv_backward_data.cu:
// the unfolded gradient w^T . dy into scratch, then each input pixel
// gathers its taps), copied for the versions that change a pass
// (conv2d_backward_data/10 and 11), for the stride-2 convolutions, whose
// input gradient the trainer always runs so. The first pass's operands are
// the trainer's (conv.cuh).
#pragma once
#include <stdexcept>
#include <string>

#include "cuda/conv.cuh"
#include "cuda/tiles.cuh"
#include "gemm/core.cuh"

namespace dpt::cuda::dev::columns {

using namespace dpt::cuda::conv;
using core::DevGemm;
using core::TrainerGemm;

// The second pass, for a stride above 1: dx (or, adding, dx +) each
// pixel's taps gathered from dcol, each tested, in the trainer's order (ky,
// then kx). (int indices split by multiplication: dx has fewer than 2^31
// elements, which input_grad_columns checks.)
template <bool adding>
__global__ void gather_input_grad(float* dx, const float* dcol, Geometry g) {
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
        if (adding) dx[i] += sum;  // sum_parts' value: dx + the gradient, one rounding
        else dx[i] = sum;
    }
}

// The first pass, dcol = w^T . dy, w^T read through `weights` (the
// trainer's WeightColumns, or a version's), launched by `gemm`
// (gemm/core.cuh: TrainerGemm or DevGemm).
template <class Weights, class Gemm>
void input_grad_columns(float* dcol, const float* dy, Weights weights, const ConvShape& s, cudaStream_t stream,
                        Gemm gemm) {
    if (s.in_size() >= (size_t(1) << 31))
        throw std::length_error("a convolution's input of " + std::to_string(s.in_size()) +
                                " values: its gradient's gather indexes at most 2^31 (use a smaller batch per device)");
    const int cols = s.n * s.col_cols();
    const OutputGradColumns b{{dy, s.oc, FastDiv(s.col_cols())}};
    const tiled::StoreMatrix out{dcol, cols, false};
    gemm(s.col_rows(), cols, s.oc, weights, b, out, stream, 1, s.math);
}



template <bool adding>
void gather(float* dx, const float* dcol, const ConvShape& s, cudaStream_t stream) {
    launch::kernel(adding ? "gather_input_grad_adding" : "gather_input_grad", gather_input_grad<adding>,
                   launch::grid_for(s.in_size()), launch::threads, stream, dx, dcol, Geometry(s));
}

}  // namespace dpt::cuda::dev::columns
