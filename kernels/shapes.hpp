// Shapes shared by the CPU kernels (kernels/cpu/) and their CUDA twins
// (kernels/cuda/): both sides take the same structs, so a test can run one
// shape through both and compare.
#pragma once
#include <cstddef>

namespace dpt {

// The arithmetic of a layer's products: FP32 throughout, or TF32 operands
// (FP32 rounded to 10 bits of fraction, to nearest, ties away from zero)
// with FP32 products and sums: what tensor cores compute with --tf32. The
// CPU kernels round the operands the same way and then compute in FP32, so
// the two sides still agree to FP32's rounding. Sums that are not products
// (bias gradients) stay FP32 either way.
enum class Math : unsigned char { fp32, tf32 };

// A 2-D convolution over a batch in NCHW layout: x (n, c, h, w) -> y (n, oc, oh, ow),
// weights (oc, c, kh, kw), bias (oc).
struct ConvShape {
    int n, c, h, w;      // input
    int oc, kh, kw;      // filters
    int stride = 1, pad = 0;
    Math math = Math::fp32;

    int oh() const { return (h + 2 * pad - kh) / stride + 1; }
    int ow() const { return (w + 2 * pad - kw) / stride + 1; }
    // Rows of the im2col matrix (one per filter tap) and its columns (one per output pixel).
    int col_rows() const { return c * kh * kw; }
    int col_cols() const { return oh() * ow(); }
    size_t in_size() const { return size_t(n) * c * h * w; }
    size_t out_size() const { return size_t(n) * oc * oh() * ow(); }
    size_t weight_size() const { return size_t(oc) * c * kh * kw; }
};

// A fully connected layer over n samples: x (n, in) -> y (n, out).
struct DenseShape {
    int n, in, out;
    Math math = Math::fp32;
};

enum class PoolKind { avg, max };

// Pooling over windows of k x k taken every `stride` pixels, NCHW; a window
// that would cross the bottom or right edge is dropped (floor), as in the
// tutorial's LeNet (9x9 -> 4x4).
struct PoolShape {
    int n, c, h, w;
    int k = 2, stride = 2;

    int oh() const { return (h - k) / stride + 1; }
    int ow() const { return (w - k) / stride + 1; }
    size_t in_size() const { return size_t(n) * c * h * w; }
    size_t out_size() const { return size_t(n) * c * oh() * ow(); }
};

// Whether ps is a 2x2 average pooling of stride 2 of the output of the
// convolution s (the convolution kernels that pool as they go take those).
inline bool averages_by_two(const ConvShape& s, PoolKind kind, const PoolShape& ps) {
    return kind == PoolKind::avg && ps.k == 2 && ps.stride == 2 && ps.n == s.n && ps.c == s.oc && ps.h == s.oh() &&
           ps.w == s.ow();
}

// Batch normalisation of x (n, c, hw) NCHW, with hw = h * w: every channel
// normalised over its n * hw values (over the whole batch when the
// statistics of several devices' parts are summed first: --bn sync).
struct NormShape {
    int n, c, hw;
    size_t size() const { return size_t(n) * c * hw; }
    // The values a channel's statistics sum over, on this device.
    double per_channel() const { return double(n) * hw; }
};

// One batch norm layer's running statistics, to be moved by its batch's
// sums (batch_norm_update_running_all: several layers a call, at most
// running_updates_a_call).
struct RunningUpdate {
    float* running;      // (2, c): mean, var
    const float* stats;  // (2, c): the batch's sums of x and of x^2
    double count;        // the values each channel's sums are over
    int c;
};
constexpr int running_updates_a_call = 16;

}  // namespace dpt
