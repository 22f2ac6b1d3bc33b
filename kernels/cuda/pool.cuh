// Pooling of one window, and pooling's backward for one input pixel, shared
// by pool.cu's kernels, the convolution kernels that pool their output
// (conv_forward.cu: conv2d_forward_relu_pool) or read their output gradient through
// the pooling after them (conv2d_backward_weight_pool), and the dense layer
// that writes its data gradient through the pooling before it (dense.cu:
// dense_backward_pool).
#pragma once
#include "shapes.hpp"

namespace dpt::cuda {

// Windows that do not overlap: every input pixel in at most one.
inline bool windows_apart(const PoolShape& ps) { return ps.k <= ps.stride; }

// The max or the mean of the k x k window at win, in rows w apart.
template <PoolKind kind>
__device__ inline float pooled_window(const float* win, int w, int k) {
    float acc = kind == PoolKind::max ? win[0] : 0.0f;
    for (int r = 0; r < k; ++r)
        for (int c = 0; c < k; ++c) {
            const float v = win[r * w + c];
            if (kind == PoolKind::max) acc = v > acc ? v : acc;
            else acc += v;
        }
    return kind == PoolKind::max ? acc : acc * (1.0f / float(k * k));
}

// Where in the k x k window at win (rows w apart) its maximum m first
// occurs, as r * w + c: the tap that max pooling's backward credits.
__device__ inline int first_max_tap(const float* win, int w, int k, float m) {
    int at = -1;
    for (int r = 0; r < k; ++r)
        for (int c = 0; c < k; ++c)
            if (at < 0 && win[r * w + c] == m) at = r * w + c;
    return at;
}

// Along one axis, the windows (k wide, stride apart, `windows` of them)
// that cover input index i: first_covering .. last_covering.
__device__ inline int first_covering(int i, int k, int stride) { return i >= k ? (i - k) / stride + 1 : 0; }
__device__ inline int last_covering(int i, int stride, int windows) { return min(i / stride, windows - 1); }

// The gradient that input pixel (iy, ix) of one plane receives from the
// windows covering it: x (h, w) is the plane's input, y and dy (oh, ow) its
// output and the output's gradient. Windows (oy, ox) with
// oy * stride <= iy < oy * stride + k, likewise ox, in the order the CPU
// scatters them; max pooling credits the first tap equal to the window's max.
// dy[out] is read only for the windows that credit the pixel: a pointer, or
// a view that computes the value there (conv_backward_weight.cu: GatheredPlane).
template <PoolKind kind, class Dy>
__device__ inline float pooled_input_grad(Dy dy, const float* x, const float* y, int w, int k, int stride,
                                          int oh, int ow, int iy, int ix) {
    const float inv_area = 1.0f / float(k * k);
    const int oy_lo = first_covering(iy, k, stride), oy_hi = last_covering(iy, stride, oh);
    const int ox_lo = first_covering(ix, k, stride), ox_hi = last_covering(ix, stride, ow);
    float grad = 0.0f;
    for (int oy = oy_lo; oy <= oy_hi; ++oy)
        for (int ox = ox_lo; ox <= ox_hi; ++ox) {
            const int out = oy * ow + ox;
            if (kind == PoolKind::avg) {
                grad += dy[out] * inv_area;
            } else {
                const int base = oy * stride * w + ox * stride;
                if (base + first_max_tap(x + base, w, k, y[out]) == iy * w + ix) grad += dy[out];
            }
        }
    return grad;
}

}  // namespace dpt::cuda
