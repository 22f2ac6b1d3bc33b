// Winograd's F(2x2, 3x3) for the 3x3 convolutions it fits (winograd.cpp);
// conv.cpp's three kernels hand those shapes over.
#pragma once
#include <cstddef>

#include "shapes.hpp"

namespace dpt::cpu {

// Stride 1, padding 1, a 3x3 filter and an even height and width: the
// output tiles into 2x2 blocks (ResNet-18's 12x12 and 6x6 maps).
bool winograd_fits(const ConvShape& s);
size_t winograd_scratch_floats(const ConvShape& s);

// The conv2d kernels' contracts (kernels.hpp), for shapes that fit.
void winograd_forward(float* y, const float* x, const float* w, const float* b, const ConvShape& s, float* scratch);
void winograd_backward_data(float* dx, const float* dy, const float* w, const ConvShape& s, float* scratch);
void winograd_backward_weight(float* dw, float* db, const float* dy, const float* x, const ConvShape& s,
                              float* scratch);

}  // namespace dpt::cpu
