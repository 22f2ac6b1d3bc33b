// Winograd's F(m x m, 3x3) for the 3x3 convolutions it fits (winograd.cpp);
// conv.cpp's three kernels hand those shapes over.
#pragma once
#include <cstddef>

#include "shapes.hpp"

namespace dpt::cpu {

// Whether output tiles of tile x tile (2, 3 or 4) fit the shape: a 3x3
// filter, stride 1, padding 1, and a height and width that tile divides.
bool winograd_tile_fits(const ConvShape& s, int tile);
// The tile conv2d_* take: the largest that fits (fewest products per
// output: 4, 2.78 and 2.25 for 2, 3 and 4 against the direct 9), or 0 for
// none. ResNet-18: 4 on 12x12 maps, 3 on 6x6 and 3x3 maps.
int winograd_tile(const ConvShape& s);
inline bool winograd_fits(const ConvShape& s) { return winograd_tile(s) != 0; }
size_t winograd_scratch_floats(const ConvShape& s, int tile);

// The conv2d kernels' contracts (kernels.hpp), for a tile that fits.
void winograd_forward(float* y, const float* x, const float* w, const float* b, const ConvShape& s, float* scratch,
                      int tile);
void winograd_backward_data(float* dx, const float* dy, const float* w, const ConvShape& s, float* scratch, int tile);
void winograd_backward_weight(float* dw, float* db, const float* dy, const float* x, const ConvShape& s,
                              float* scratch, int tile);

}  // namespace dpt::cpu
