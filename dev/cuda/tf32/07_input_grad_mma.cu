// --tf32: LeNet's conv2 input gradient on the tensor cores by a kernel of
// its own (input_grad_mma, dev/cuda/tf32/input_grad_mma.cuh), a block a
// sample, 8 warps of 16 of the product's columns.
//
// Against the trainer's (--tf32 runs that input gradient in two passes:
// the unfolded gradient w^T . dy on the GEMM core's TF32 tiles into
// scratch, then a kernel in which each input pixel gathers its taps): for
// each input channel the product of its taps and dy (25 x oc by oc x 81)
// in the block's shared memory, then each input pixel the sum of its taps'
// products (the CPU twin's order of work): no columns in memory, one
// kernel. The tensor cores' sums, within a product's rounding of the TF32
// twin, not the trainer's bits.
//
// Measured: not yet timed on a GPU.
#include "dev.hpp"

DEV_REPLACES(conv2d_backward_data)

#include "tf32/input_grad_mma.cuh"

namespace DEV_NAMESPACE {

void conv2d_backward_data(float* dx, const float* dy, const float* w, const ConvShape& s, float* scratch,
                          cudaStream_t stream, const UnfinishedWeightGrad& weight) {
    dev::mma::input_grad_mma_or_trainer<1>(dx, dy, w, s, scratch, stream, weight);
}

}  // namespace DEV_NAMESPACE

DEV_VERSION("tf32/07_input_grad_mma",
            "--tf32: LeNet's conv2 input gradient on the tensor cores by a kernel of its own, a block a sample (8 "
            "warps of 16 columns): each channel's taps times dy, then each input pixel sums its taps' products, where "
            "the trainer's runs the unfolded gradient on the GEMM core's TF32 tiles and a gather kernel",
            "not yet timed", l.conv2d_backward_data = &DEV_NAMESPACE::conv2d_backward_data)
