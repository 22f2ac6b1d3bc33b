// --tf32: LeNet's conv2 forward with its ReLU and pooling on the FP32 units
// by the trainer's tiled rows kernel (kernels/cuda/conv_rows.cuh:
// rows_forward_tiled_sums, which FP32 runs), its operands rounded to TF32
// as it stages them (a product of two TF32 numbers is exact in FP32).
//
// Against the trainer's (--tf32 runs that forward as an implicit GEMM on
// the GEMM core's TF32 tiles, 162 tiles of 64 x 128 split along k, then a
// kernel that adds the splits and pools): one kernel, a block a sample, as
// FP32 runs it. The FP32 twin's sums on rounded operands, not the trainer's
// --tf32 bits (its tensor cores add in their own order).
//
// Measured: not yet timed on a GPU.
#include "cuda/conv_rows.cuh"
#include "dev.hpp"

DEV_REPLACES(conv2d_forward_relu_pool)

namespace {

using namespace dpt;
using namespace dpt::cuda;
using namespace dpt::cuda::conv;

template <PoolKind kind>
__global__ void __launch_bounds__(TiledRows<2>::threads, 2)
    rows_forward_tiled_tf32(float* y, float* pooled_y, const float* x, const float* w, const float* b, Geometry g,
                            PoolGeometry pg) {
    __shared__ __align__(16) float staged[TiledRows<2>::sw_floats + TiledRows<2>::sx_floats];
    rows_forward_tiled_sums<2, true, true, kind>(staged, y, pooled_y, x, w, b, g, pg);
}

// Whether s is a --tf32 convolution that the rows kernel takes (as it takes FP32's).
bool fits(const ConvShape& s, const float* x, const float* w) {
    ConvShape fp32 = s;
    fp32.math = Math::fp32;
    return s.math == Math::tf32 && rows_forward_tiled_fits(fp32, x, w);
}

}  // namespace

namespace DEV_NAMESPACE {

void conv2d_forward_relu_pool(float* y, float* pooled, const float* x, const float* w, const float* b,
                              const ConvShape& s, PoolKind kind, const PoolShape& ps, float* scratch,
                              cudaStream_t stream) {
    if (!fits(s, x, w)) return TRAINER(conv2d_forward_relu_pool)(y, pooled, x, w, b, s, kind, ps, scratch, stream);
    check_pooling(s, ps, "conv2d_forward_relu_pool");
    const PoolGeometry pg{ps.k, ps.stride, ps.oh(), ps.ow()};
    const auto kernel =
        kind == PoolKind::max ? rows_forward_tiled_tf32<PoolKind::max> : rows_forward_tiled_tf32<PoolKind::avg>;
    launch::kernel("rows_forward_tiled_tf32", kernel, unsigned(s.n), unsigned(TiledRows<2>::threads), stream, y,
                   pooled, x, w, b, Geometry(s), pg);
}

}  // namespace DEV_NAMESPACE

DEV_VERSION("tf32/03_rows_forward_tf32",
            "--tf32: LeNet's conv2 forward with its ReLU and pooling on the FP32 units by the trainer's tiled rows "
            "kernel, its operands rounded to TF32 as it stages them, where the trainer's runs the GEMM core's TF32 "
            "tiles split along k and a kernel that adds the splits and pools",
            "not yet timed", l.conv2d_forward_relu_pool = &DEV_NAMESPACE::conv2d_forward_relu_pool)
