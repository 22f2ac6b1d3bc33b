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

}  // namespace dpt::cpu
