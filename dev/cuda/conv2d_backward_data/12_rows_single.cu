// LeNet's conv2 input gradient by the trainer's tiled rows kernel with one
// input channel a thread, not two (input_grad_rows_tiled_single, and
// _single_finishing where it first adds the weight gradient's slices).
//
// Against the trainer's (kernels/cuda/conv_backward_data.cu:
// input_grad_rows_tiled_wide, a thread 2 input channels of one row, 130
// threads in 5 warps a sample, its last warp two threads): 260 threads in 9
// warps a sample, for twice the warps to issue from. The same sums in the
// same order, bit for bit.
//
// Measured: not yet timed on a GPU.
#include "cuda/conv_rows.cuh"
#include "dev.hpp"

DEV_REPLACES(conv2d_backward_data)

namespace {

using namespace dpt;
using namespace dpt::cuda;
using namespace dpt::cuda::conv;

using Tiled = TiledInputGrad<10, 1>;
__global__ void __launch_bounds__(Tiled::threads)
    input_grad_rows_tiled_single(float* dx, const float* dy, const float* w, Geometry g) {
    __shared__ __align__(16) float staged[Tiled::sw_floats + Tiled::sdy_floats];
    input_grad_rows_tiled_sums<Tiled::CH, Tiled::G>(staged, dx, dy, w, g);
}
__global__ void __launch_bounds__(Tiled::threads)
    input_grad_rows_tiled_single_finishing(float* dx, const float* dy, const float* w, Geometry g,
                                           UnfinishedWeightGrad weight) {
    finish_weight_slices(weight);
    __shared__ __align__(16) float staged[Tiled::sw_floats + Tiled::sdy_floats];
    input_grad_rows_tiled_sums<Tiled::CH, Tiled::G>(staged, dx, dy, w, g);
}


}  // namespace

namespace DEV_NAMESPACE {

void conv2d_backward_data(float* dx, const float* dy, const float* w, const ConvShape& s, float* scratch,
                          cudaStream_t stream, const UnfinishedWeightGrad& weight) {
    if (!input_grad_rows_tiled_fits(s, w)) return TRAINER(conv2d_backward_data)(dx, dy, w, s, scratch, stream, weight);
    const Geometry g(s);
    if (weight.dw)
        return launch::kernel("input_grad_rows_tiled_single_finishing", input_grad_rows_tiled_single_finishing,
                              unsigned(s.n), unsigned(Tiled::threads), stream, dx, dy, w, g, weight);
    launch::kernel("input_grad_rows_tiled_single", input_grad_rows_tiled_single, unsigned(s.n),
                   unsigned(Tiled::threads), stream, dx, dy, w, g);
}

}  // namespace DEV_NAMESPACE

DEV_VERSION("conv2d_backward_data/12_rows_single",
            "LeNet's conv2 input gradient (and the weight gradient's slices it adds first), a thread one input "
            "channel of a row (260 threads a sample, 9 warps) where the trainer's takes two (130, 5 warps): the same "
            "sums, bit for bit",
            "not yet timed", l.conv2d_backward_data = &DEV_NAMESPACE::conv2d_backward_data)
