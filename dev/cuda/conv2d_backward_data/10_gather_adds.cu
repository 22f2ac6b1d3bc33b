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
#include "conv2d_backward_data/columns.cuh"
#include "dev.hpp"

namespace DEV_NAMESPACE {

void conv2d_backward_data_add(float* dx, float* spare, const float* dy, const float* w, const ConvShape& s,
                              float* scratch, cudaStream_t stream) {
    if (s.stride == 1) {  // the trainer's two calls
        conv2d_backward_data(spare, dy, w, s, scratch, stream, {});
        return sum_into(dx, spare, 1, s.in_size(), stream);
    }
    using namespace dev::columns;
    input_grad_columns(scratch, dy, WeightColumns{w, s.col_rows()}, s, stream, TrainerGemm{});
    gather<true>(dx, scratch, s, stream);
}

}  // namespace DEV_NAMESPACE

DEV_VERSION("conv2d_backward_data/10_gather_adds",
            "the input gradient of a convolution whose input another layer reads too (ResNet-18's block inputs), "
            "added to dx by the gather that ends it (the stride-2 convolutions), where the trainer's writes it into "
            "a spare buffer and sum_parts adds it: the same bits; a fused launcher of its own, which training cannot "
            "call (kernel_bench's conv2d_backward_data_add)",
            "not yet timed", l.conv2d_backward_data_add = &DEV_NAMESPACE::conv2d_backward_data_add)
