// Max pooling's backward, a thread a stride x stride tile of input pixels.
//
// Against the trainer's (kernels/cuda/pool.cu: pool_backward, a thread an
// input pixel, which scans every window covering it for the tap that window
// credits): the windows that cover any pixel of a tile are scanned once
// each, in the order the CPU scatters them, and each credits the tile's
// pixel it points at. Every pixel adds the same values in the same order:
// the same bits. With ResNet-18's overlapping 3x3 windows at stride 2 a
// pixel takes 9 loads instead of 36. Average pooling, and strides over 4,
// stay the trainer's.
//
// Measured: not yet timed on a GPU.
#include "cuda/fastdiv.cuh"
#include "cuda/launch.cuh"
#include "cuda/pool.cuh"
#include "dev.hpp"

#include <stdexcept>
#include <string>

DEV_REPLACES(pool2d_backward)
DEV_REPLACES(pool2d_backward_relu)

namespace {

using dpt::PoolKind;
using dpt::PoolShape;
using namespace dpt::cuda;

struct Geometry {
    int planes, h, w, k, stride, oh, ow;
    FastDiv by_w;
    explicit Geometry(const PoolShape& s)
        : planes(s.n * s.c), h(s.h), w(s.w), k(s.k), stride(s.stride), oh(s.oh()), ow(s.ow()), by_w(s.w) {
        if (s.in_size() >= (size_t(1) << 31))
            throw std::length_error("pooling over " + std::to_string(s.in_size()) +
                                    " values: a launch indexes at most 2^31 (use a smaller batch per device)");
    }
};

// Thread i: the tile (plane, ty, tx) of the input, rows ty * stride ... and
// columns tx * stride ..., stride x stride pixels where they lie inside the
// plane (at most tile_most on a side).
constexpr int tile_most = 4;

template <bool relu_mask>
__global__ void max_pool_backward_tiles(float* dx, const float* dy, const float* x, const float* y, Geometry g,
                                        int tiles_h, int tiles_w, FastDiv by_tiles_w, FastDiv by_tiles_h) {
    const int count = g.planes * tiles_h * tiles_w;
    for (const int i : launch::grid_stride(count)) {
        const int row = by_tiles_w.div(i), tx = by_tiles_w.rest(i, row), plane = by_tiles_h.div(row),
                  ty = by_tiles_h.rest(row, plane);
        const int y0 = ty * g.stride, x0 = tx * g.stride;
        const int rows = min(g.stride, g.h - y0), cols = min(g.stride, g.w - x0);
        const float* xp = x + size_t(plane) * g.h * g.w;
        const size_t outputs = size_t(plane) * g.oh * g.ow;
        float grad[tile_most][tile_most];
#pragma unroll
        for (int r = 0; r < tile_most; ++r)
#pragma unroll
            for (int c = 0; c < tile_most; ++c) grad[r][c] = 0.0f;
        // The windows covering the tile: those covering its first pixel's
        // row through its last's, likewise columns.
        const int oy_lo = first_covering(y0, g.k, g.stride), oy_hi = last_covering(y0 + rows - 1, g.stride, g.oh);
        const int ox_lo = first_covering(x0, g.k, g.stride), ox_hi = last_covering(x0 + cols - 1, g.stride, g.ow);
        for (int oy = oy_lo; oy <= oy_hi; ++oy)
            for (int ox = ox_lo; ox <= ox_hi; ++ox) {
                const int out = oy * g.ow + ox, base = oy * g.stride * g.w + ox * g.stride;
                const int at = first_max_tap(xp + base, g.w, g.k, y[outputs + out]);
                if (at < 0) continue;  // (a NaN window credits no pixel, as pooled_input_grad)
                const int tap = base + at, tap_row = g.by_w.div(tap);
                const int r = tap_row - y0, c = g.by_w.rest(tap, tap_row) - x0;
                if (r < 0 || r >= rows || c < 0 || c >= cols) continue;
                const float d = dy[outputs + out];
                // (Constant indices, so that grad stays in registers.)
#pragma unroll
                for (int rr = 0; rr < tile_most; ++rr)
#pragma unroll
                    for (int cc = 0; cc < tile_most; ++cc)
                        if (rr == r && cc == c) grad[rr][cc] += d;
            }
#pragma unroll
        for (int r = 0; r < tile_most; ++r)
#pragma unroll
            for (int c = 0; c < tile_most; ++c)
                if (r < rows && c < cols) {
                    const int at = (y0 + r) * g.w + x0 + c;
                    dx[size_t(plane) * g.h * g.w + at] = relu_mask && !(xp[at] > 0.0f) ? 0.0f : grad[r][c];
                }
    }
}

template <bool relu_mask>
void launch_tiles(float* dx, const float* dy, const float* x, const float* y, const PoolShape& s,
                  cudaStream_t stream) {
    const Geometry g(s);
    const int tiles_h = (s.h + s.stride - 1) / s.stride, tiles_w = (s.w + s.stride - 1) / s.stride;
    const size_t tiles = size_t(g.planes) * tiles_h * tiles_w;
    launch::kernel("max_pool_backward_tiles", max_pool_backward_tiles<relu_mask>, launch::grid_for(tiles),
                   launch::threads, stream, dx, dy, x, y, g, tiles_h, tiles_w, FastDiv(tiles_w), FastDiv(tiles_h));
}

bool takes(PoolKind kind, const PoolShape& s) { return kind == PoolKind::max && s.stride <= tile_most && s.in_size() > 0; }

}  // namespace

namespace DEV_NAMESPACE {

void pool2d_backward(float* dx, const float* dy, const float* x, const float* y, PoolKind kind, const PoolShape& s,
                     cudaStream_t stream) {
    if (!takes(kind, s)) return TRAINER(pool2d_backward)(dx, dy, x, y, kind, s, stream);
    launch_tiles<false>(dx, dy, x, y, s, stream);
}

void pool2d_backward_relu(float* dx, const float* dy, const float* x, const float* y, PoolKind kind,
                          const PoolShape& s, cudaStream_t stream) {
    if (!takes(kind, s)) return TRAINER(pool2d_backward_relu)(dx, dy, x, y, kind, s, stream);
    launch_tiles<true>(dx, dy, x, y, s, stream);
}

}  // namespace DEV_NAMESPACE

DEV_VERSION("pool2d_backward/02_tiles",
            "max pooling's backward a thread a stride x stride tile of input pixels, each covering window scanned "
            "once: the same bits, 9 loads a pixel where the trainer's takes 36 (ResNet-18's 3x3 windows at stride 2)",
            "not yet timed", l.pool2d_backward = &DEV_NAMESPACE::pool2d_backward)
