// --tf32: tf32/07's kernel (input_grad_mma, dev/cuda/tf32/input_grad_mma.cuh)
// with 4 warps a block instead of 8, each 32 of the product's columns
// instead of 16.
//
// Against the trainer's (--tf32 runs LeNet's conv2 input gradient in two
// passes: the unfolded gradient w^T . dy on the GEMM core's TF32 tiles into
// scratch, then a gather kernel) as 07 is; against 07: every warp loads
// all of a channel's tap fragments, so a block loads half as many, and
// each thread 11 taps of the next channel in flight instead of 6. The same
// sums as 07, bit for bit.
//
// Measured: not yet timed on a GPU.
#include "dev.hpp"

DEV_REPLACES(conv2d_backward_data)

#include "tf32/input_grad_mma.cuh"

namespace DEV_NAMESPACE {

void conv2d_backward_data(float* dx, const float* dy, const float* w, const ConvShape& s, float* scratch,
                          cudaStream_t stream, const UnfinishedWeightGrad& weight) {
    dev::mma::input_grad_mma_or_trainer<2>(dx, dy, w, s, scratch, stream, weight);
}

}  // namespace DEV_NAMESPACE

DEV_VERSION("tf32/08_input_grad_mma_wide",
            "--tf32: tf32/07's tensor-core kernel for LeNet's conv2 input gradient with 4 warps of 32 columns instead "
            "of 8 of 16: a block loads each channel's tap fragments half as often; 07's bits",
            "not yet timed", l.conv2d_backward_data = &DEV_NAMESPACE::conv2d_backward_data)
