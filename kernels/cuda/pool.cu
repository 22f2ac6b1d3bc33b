// 2-D average and max pooling on the GPU. CPU twin: kernels/cpu/pool.cpp.
//
// Forward: one thread per output. Backward: one thread per *input* pixel,
// which gathers from every window that covers it (in the order the CPU
// scatters them), so each dx element is written once, with no atomics, and
// pooling backward gives the same bits as the CPU.
#include "kernels.hpp"
#include "launch.cuh"

namespace dpt::cuda {
namespace {

struct Geometry {
    int planes, h, w, k, stride, oh, ow;
    explicit Geometry(const PoolShape& s)
        : planes(s.n * s.c), h(s.h), w(s.w), k(s.k), stride(s.stride), oh(s.oh()), ow(s.ow()) {}
};

template <PoolKind kind>
__global__ void pool_forward(float* y, const float* x, Geometry g) {
    const size_t count = size_t(g.planes) * g.oh * g.ow;
    const float inv_area = 1.0f / float(g.k * g.k);
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
        const int ox = int(i % g.ow), oy = int(i / g.ow % g.oh);
        const size_t plane = i / (size_t(g.oh) * g.ow);
        const float* win = x + plane * g.h * g.w + size_t(oy) * g.stride * g.w + size_t(ox) * g.stride;
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
    const size_t count = size_t(g.planes) * g.h * g.w;
    const float inv_area = 1.0f / float(g.k * g.k);
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
        const int ix = int(i % g.w), iy = int(i / g.w % g.h);
        const size_t plane = i / (size_t(g.h) * g.w);
        const float* xp = x + plane * g.h * g.w;
        // Windows (oy, ox) with oy * stride <= iy < oy * stride + k, likewise ox.
        const int oy_lo = iy >= g.k ? (iy - g.k) / g.stride + 1 : 0, oy_hi = min(iy / g.stride, g.oh - 1);
        const int ox_lo = ix >= g.k ? (ix - g.k) / g.stride + 1 : 0, ox_hi = min(ix / g.stride, g.ow - 1);
        float grad = 0.0f;
        for (int oy = oy_lo; oy <= oy_hi; ++oy)
            for (int ox = ox_lo; ox <= ox_hi; ++ox) {
                const size_t out = (plane * g.oh + oy) * g.ow + ox;
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
