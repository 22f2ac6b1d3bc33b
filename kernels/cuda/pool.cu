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
// kernel took 15 times the forward's time on an H200 (a thread a tile of
// pixels, each window scanned once, is an experiment in dev/cuda/).
#include "fastdiv.cuh"
#include "kernels.hpp"
#include "launch.cuh"
#include "pool.cuh"

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
