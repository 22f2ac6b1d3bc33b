// LeNet's conv2 forward by the trainer's tiled rows kernel with one output
// channel a thread, not two (rows_forward_tiled_single).
//
// Against the trainer's (kernels/cuda/conv_forward.cu: rows_forward_tiled,
// a thread 2 output channels of one row, 225 threads in 8 warps a sample,
// its last warp one thread): 450 threads in 15 warps a sample, for twice
// the warps to issue from; each thread half the registers (two blocks of
// 480 fit a multiprocessor's 65,536 registers at 64 a thread). The same
// sums in the same order, bit for bit.
//
// Measured: not yet timed on a GPU.
#include "cuda/conv_rows.cuh"
#include "dev.hpp"

DEV_REPLACES(conv2d_forward_relu_pool)

namespace {

using namespace dpt;
using namespace dpt::cuda;
using namespace dpt::cuda::conv;

template <bool relu, bool pooled, PoolKind kind>
__global__ void __launch_bounds__(TiledRows<1>::threads, 2)
    rows_forward_tiled_single(float* y, float* pooled_y, const float* x, const float* w, const float* b, Geometry g,
                              PoolGeometry pg) {
    __shared__ __align__(16) float staged[TiledRows<1>::sw_floats + TiledRows<1>::sx_floats];
    rows_forward_tiled_sums<1, relu, pooled, kind>(staged, y, pooled_y, x, w, b, g, pg);
}

}  // namespace

namespace DEV_NAMESPACE {

void conv2d_forward_relu_pool(float* y, float* pooled, const float* x, const float* w, const float* b,
                              const ConvShape& s, PoolKind kind, const PoolShape& ps, float* scratch,
                              cudaStream_t stream) {
    if (!rows_forward_tiled_fits(s, x, w))
        return TRAINER(conv2d_forward_relu_pool)(y, pooled, x, w, b, s, kind, ps, scratch, stream);
    check_pooling(s, ps, "conv2d_forward_relu_pool");
    const PoolGeometry pg{ps.k, ps.stride, ps.oh(), ps.ow()};
    const auto kernel = kind == PoolKind::max ? rows_forward_tiled_single<true, true, PoolKind::max>
                                              : rows_forward_tiled_single<true, true, PoolKind::avg>;
    launch::kernel("rows_forward_tiled_single", kernel, unsigned(s.n), unsigned(TiledRows<1>::threads), stream, y,
                   pooled, x, w, b, Geometry(s), pg);
}

}  // namespace DEV_NAMESPACE

DEV_VERSION("conv2d_forward/12_rows_single",
            "LeNet's conv2 forward with its ReLU and pooling, a thread one output channel of a row (450 threads a "
            "sample, 15 warps) where the trainer's takes two (225, 8 warps): the same sums, bit for bit",
            "not yet timed", l.conv2d_forward_relu_pool = &DEV_NAMESPACE::conv2d_forward_relu_pool)
