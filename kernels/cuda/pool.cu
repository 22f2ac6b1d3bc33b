// 2-D average and max pooling on the GPU. CPU twin: kernels/cpu/pool.cpp.
//
// Forward: one thread per output. Backward: one thread per *input* pixel,
// which gathers from every window that covers it (in the order the CPU
// scatters them), so each dx element is written once, with no atomics, and
// pooling backward gives the same bits as the CPU.
//
// Max pooling's backward finds the tap that each covering window credits by
// scanning the window: with ResNet-18's overlapping 3x3 windows at stride 2
// that is up to 4 windows of 9 loads each, for every input pixel, and the
// kernel took 15 times the forward's time on an H200. Version 2 of "pool"
// (versions.hpp) gives a thread a stride x stride tile of input pixels
// instead (max_pool_backward_tiles): the windows that cover any of them
// are scanned once each, in the order the CPU scatters them, and each
// credits the tile's pixel it points at. Every pixel adds the same values
// in the same order: the same bits, 9 loads a pixel there instead of 36.
#include "fastdiv.cuh"
#include "kernels.hpp"
#include "launch.cuh"
#include "pool.cuh"
#include "versions.hpp"

#include <stdexcept>
#include <string>

namespace dpt::cuda {
namespace {

// Indices are ints, split into (plane, row, column) by multiplication
// (fastdiv.cuh): 64-bit division, which size_t indices cost, is a long
// subroutine on a GPU, and ran for every element.
struct Geometry {
    int planes, h, w, k, stride, oh, ow;
    FastDiv by_w, by_h, by_ow, by_oh;
    explicit Geometry(const PoolShape& s)
        : planes(s.n * s.c), h(s.h), w(s.w), k(s.k), stride(s.stride), oh(s.oh()), ow(s.ow()), by_w(s.w),
          by_h(s.h), by_ow(s.ow()), by_oh(s.oh()) {
        if (s.in_size() >= (size_t(1) << 31))
            throw std::length_error("pooling over " + std::to_string(s.in_size()) +
                                    " values: a launch indexes at most 2^31 (use a smaller batch per device)");
    }
};

template <PoolKind kind>
__global__ void pool_forward(float* y, const float* x, Geometry g) {
    const int count = g.planes * g.oh * g.ow;
    for (const int i : launch::grid_stride(count)) {
        const int row = g.by_ow.div(i), ox = g.by_ow.rest(i, row), plane = g.by_oh.div(row), oy = g.by_oh.rest(row, plane);
        y[i] = pooled_window<kind>(x + size_t(plane) * g.h * g.w + oy * g.stride * g.w + ox * g.stride, g.w, g.k);
    }
}

// relu_mask: also apply ReLU's backward, dx = 0 where x <= 0 (x being the ReLU output).
template <PoolKind kind, bool relu_mask>
__global__ void pool_backward(float* dx, const float* dy, const float* x, const float* y, Geometry g) {
    const int count = g.planes * g.h * g.w;
    for (const int i : launch::grid_stride(count)) {
        const int row = g.by_w.div(i), ix = g.by_w.rest(i, row), plane = g.by_h.div(row), iy = g.by_h.rest(row, plane);
        const float* xp = x + size_t(plane) * g.h * g.w;
        const size_t outputs = size_t(plane) * g.oh * g.ow;
        float grad = pooled_input_grad<kind>(dy + outputs, xp, y + outputs, g.w, g.k, g.stride, g.oh, g.ow, iy, ix);
        if (relu_mask && !(xp[iy * g.w + ix] > 0.0f)) grad = 0.0f;
        dx[i] = grad;
    }
}

// Version 2, max pooling: thread i the tile (plane, ty, tx) of the input,
// rows ty * stride ... and columns tx * stride ..., stride x stride pixels
// where they lie inside the plane (at most tile_most on a side).
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
        // The windows covering the tile: those covering its first pixel's row
        // through its last's, likewise columns.
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
void backward(float* dx, const float* dy, const float* x, const float* y, PoolKind kind, const PoolShape& s,
              cudaStream_t stream) {
    if (s.in_size() == 0) return;
    const Geometry g(s);
    if (kind == PoolKind::max && pool_version >= 2 && s.stride <= tile_most) {
        const int tiles_h = (s.h + s.stride - 1) / s.stride, tiles_w = (s.w + s.stride - 1) / s.stride;
        const size_t tiles = size_t(g.planes) * tiles_h * tiles_w;
        launch::kernel("max_pool_backward_tiles", max_pool_backward_tiles<relu_mask>, launch::grid_for(tiles),
                       launch::threads, stream, dx, dy, x, y, g, tiles_h, tiles_w, FastDiv(tiles_w), FastDiv(tiles_h));
        return;
    }
    const unsigned grid = launch::grid_for(s.in_size());
    if (kind == PoolKind::avg)
        launch::kernel("pool_backward", pool_backward<PoolKind::avg, relu_mask>, grid, launch::threads, stream,
                       dx, dy, x, y, g);
    else
        launch::kernel("pool_backward", pool_backward<PoolKind::max, relu_mask>, grid, launch::threads, stream,
                       dx, dy, x, y, g);
}

}  // namespace

void pool2d_forward(float* y, const float* x, PoolKind kind, const PoolShape& s, cudaStream_t stream) {
    if (s.out_size() == 0) return;
    const Geometry g(s);
    const unsigned grid = launch::grid_for(s.out_size());
    if (kind == PoolKind::avg)
        launch::kernel("pool_forward", pool_forward<PoolKind::avg>, grid, launch::threads, stream, y, x, g);
    else
        launch::kernel("pool_forward", pool_forward<PoolKind::max>, grid, launch::threads, stream, y, x, g);
}

void pool2d_backward(float* dx, const float* dy, const float* x, const float* y, PoolKind kind,
                     const PoolShape& s, cudaStream_t stream) {
    backward<false>(dx, dy, x, y, kind, s, stream);
}

void pool2d_backward_relu(float* dx, const float* dy, const float* x, const float* y, PoolKind kind,
                          const PoolShape& s, cudaStream_t stream) {
    backward<true>(dx, dy, x, y, kind, s, stream);
}

}  // namespace dpt::cuda
