// Winograd's F(3x3, 5x5) with the batch in the vector lanes
// (winograd_lanes.cpp): the three passes of LeNet's conv2 on AVX2 and
// AVX-512 builds; conv.cpp hands those shapes over.
#pragma once
#include <cstddef>

#include "shapes.hpp"

namespace dpt::cpu {

// A 5x5 filter, stride 1, no padding, outputs in whole 3x3 tiles (oh and ow
// multiples of 3), on a build with AVX2 or AVX-512.
bool winograd5_fits(const ConvShape& s);

size_t winograd5_scratch_floats(const ConvShape& s);

// conv2d_forward's and conv2d_backward_data's contracts (kernels.hpp), for a
// shape that fits. relu: y = max(y, 0) as it is stored; pooled, where not
// null: y's 2x2 averages of stride 2 too (conv2d_forward_relu_pool's, the
// bits of pool2d_forward), pooled in the lanes.
void winograd5_forward(float* y, const float* x, const float* w, const float* b, const ConvShape& s, float* scratch,
                       bool relu = false, float* pooled = nullptr);
void winograd5_backward_data(float* dx, const float* dy, const float* w, const ConvShape& s, float* scratch);
// conv2d_backward_weight's, as the forward's adjoint: dU = the sum over
// tiles and samples of (A dy A^T) (.) (B^T d B), dw += G^T dU G.
void winograd5_backward_weight(float* dw, float* db, const float* dy, const float* x, const ConvShape& s,
                               float* scratch);

}  // namespace dpt::cpu
