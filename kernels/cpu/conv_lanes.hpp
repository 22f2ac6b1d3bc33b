// Convolutions with the batch in the vector lanes (conv_lanes.cpp): 5x5
// filters on an AVX-512 build (shapes in whole 3x3 tiles, LeNet's conv2
// among them, go to winograd_lanes.hpp first); conv.cpp's three kernels
// hand those shapes over.
#pragma once
#include <cstddef>

#include "shapes.hpp"

namespace dpt::cpu {

enum class ConvPass { forward, data, weight };

// A 5x5 filter, stride 1, no padding, output rows of at least 4 pixels; all
// three passes on a build whose vectors hold 16 floats (AVX-512), the data
// gradient alone with AVX2's 8 (its forward and weight gradient are faster
// as the implicit GEMM: dev/cpu/README.md), none on other builds.
bool lanes_conv_fits(const ConvShape& s, ConvPass pass);

size_t lanes_conv_scratch_floats(const ConvShape& s);

// The conv2d kernels' contracts (kernels.hpp), for a shape that fits.
// relu: y = max(y, 0) as it is stored (conv2d_forward_relu).
void lanes_conv_forward(float* y, const float* x, const float* w, const float* b, const ConvShape& s,
                        float* scratch, bool relu = false);
void lanes_conv_backward_data(float* dx, const float* dy, const float* w, const ConvShape& s, float* scratch);
void lanes_conv_backward_weight(float* dw, float* db, const float* dy, const float* x, const ConvShape& s,
                                float* scratch);

// The lanes' layout: dst [planes][16 samples] from src (count samples of
// `planes` floats each, `stride` floats apart (0: planes); the lanes past
// count zeros), and back (the first count lanes).
void lanes_transpose_in(float* dst, const float* src, size_t planes, int count, size_t stride = 0);
void lanes_transpose_out(float* dst, const float* src, size_t planes, int count);

}  // namespace dpt::cpu
