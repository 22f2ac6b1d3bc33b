// Direct sums for the convolutions of a one-channel image (conv_direct.cpp);
// conv.cpp's three kernels hand those shapes over.
#pragma once
#include <cstddef>

#include "shapes.hpp"

namespace dpt::cpu {

// A 3x3 filter over one input channel, stride 1, no padding, and output
// rows of at least 8 pixels (one vector): LeNet's and ResNet-18's first layers.
bool direct_conv_fits(const ConvShape& s);

// The scratch floats the data gradient needs (the others need none).
size_t direct_conv_scratch_floats(const ConvShape& s);

// The conv2d kernels' contracts (kernels.hpp), for a shape that fits.
// relu: y = max(y, 0) as it is stored (conv2d_forward_relu).
void direct_conv_forward(float* y, const float* x, const float* w, const float* b, const ConvShape& s,
                         bool relu = false);
void direct_conv_backward_data(float* dx, const float* dy, const float* w, const ConvShape& s, float* scratch);
void direct_conv_backward_weight(float* dw, float* db, const float* dy, const float* x, const ConvShape& s);

// Such a convolution followed by its ReLU and a 2x2 average pooling of
// stride 2 that covers every output (even output rows and columns): LeNet's
// first layer. ps: the pooling's shape.
bool direct_pool_fits(const ConvShape& s, PoolKind kind, const PoolShape& ps);
// conv2d_forward_relu_pool for such a layer: each pair of output rows pooled
// while it is in registers; the bits of the convolution, then the pooling.
void direct_conv_forward_relu_pool(float* y, float* pooled, const float* x, const float* w, const float* b,
                                   const ConvShape& s);
// conv2d_backward_weight_pool for such a layer, without a dy buffer: each
// vector of dy made from the pooling's gradient and the ReLU's mask (y > 0)
// where the weight sums read it; the bits of pool2d_backward_relu, then
// direct_conv_backward_weight.
void direct_conv_backward_weight_pool(float* dw, float* db, const float* d_pooled, const float* x, const float* y,
                                      const ConvShape& s);

}  // namespace dpt::cpu
