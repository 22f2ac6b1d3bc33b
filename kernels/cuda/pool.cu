// 2-D average and max pooling on the GPU. CPU twin: kernels/cpu/pool.cpp.
//
// Forward: one thread per output. Backward: one thread per *input* pixel,
// which gathers from every window that covers it (in the order the CPU
// scatters them), so each dx element is written once, with no atomics, and
// pooling backward gives the same bits as the CPU.
#include "fastdiv.cuh"
#include "kernels.hpp"
#include "launch.cuh"

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
    const float inv_area = 1.0f / float(g.k * g.k);
    for (const int i : launch::grid_stride(count)) {
        const int row = g.by_ow.div(i), ox = g.by_ow.rest(i, row), plane = g.by_oh.div(row), oy = g.by_oh.rest(row, plane);
        const float* win = x + size_t(plane) * g.h * g.w + oy * g.stride * g.w + ox * g.stride;
        float acc = kind == PoolKind::max ? win[0] : 0.0f;
        for (int r = 0; r < g.k; ++r)
            for (int c = 0; c < g.k; ++c) {
                const float v = win[r * g.w + c];
                if (kind == PoolKind::max) acc = v > acc ? v : acc;
                else acc += v;
            }
        y[i] = kind == PoolKind::max ? acc : acc * inv_area;
    }
}

// relu_mask: also apply ReLU's backward, dx = 0 where x <= 0 (x being the ReLU output).
template <PoolKind kind, bool relu_mask>
__global__ void pool_backward(float* dx, const float* dy, const float* x, const float* y, Geometry g) {
    const int count = g.planes * g.h * g.w;
    const float inv_area = 1.0f / float(g.k * g.k);
    for (const int i : launch::grid_stride(count)) {
        const int row = g.by_w.div(i), ix = g.by_w.rest(i, row), plane = g.by_h.div(row), iy = g.by_h.rest(row, plane);
        const float* xp = x + size_t(plane) * g.h * g.w;
        // Windows (oy, ox) with oy * stride <= iy < oy * stride + k, likewise ox.
        const int oy_lo = iy >= g.k ? (iy - g.k) / g.stride + 1 : 0, oy_hi = min(iy / g.stride, g.oh - 1);
        const int ox_lo = ix >= g.k ? (ix - g.k) / g.stride + 1 : 0, ox_hi = min(ix / g.stride, g.ow - 1);
        float grad = 0.0f;
        for (int oy = oy_lo; oy <= oy_hi; ++oy)
            for (int ox = ox_lo; ox <= ox_hi; ++ox) {
                const size_t out = (size_t(plane) * g.oh + oy) * g.ow + ox;
                if (kind == PoolKind::avg) {
                    grad += dy[out] * inv_area;
                } else {
                    // Credit goes to the window's first tap equal to its max.
                    const float m = y[out];
                    const int base = oy * g.stride * g.w + ox * g.stride;
                    int at = -1;
                    for (int r = 0; r < g.k && at < 0; ++r)
                        for (int c = 0; c < g.k && at < 0; ++c)
                            if (xp[base + r * g.w + c] == m) at = base + r * g.w + c;
                    if (at == iy * g.w + ix) grad += dy[out];
                }
            }
        if (relu_mask && !(xp[iy * g.w + ix] > 0.0f)) grad = 0.0f;
        dx[i] = grad;
    }
}

template <bool relu_mask>
void backward(float* dx, const float* dy, const float* x, const float* y, PoolKind kind, const PoolShape& s,
              cudaStream_t stream) {
    if (s.in_size() == 0) return;
    const Geometry g(s);
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
