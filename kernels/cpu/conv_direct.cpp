// Convolutions of a one-channel image (the first layer of LeNet and of
// ResNet-18: 28x28 -> 26x26, 3x3 filters, no padding, stride 1) as direct
// sums along the rows, 8 output pixels to a vector; conv.cpp hands these
// shapes over. CUDA twin: the same layers run through kernels/cuda/conv_*.cu.
//
// As a GEMM this layer is badly shaped: its depth is the 9 taps of one
// channel, so each 6x16 tile of the micro-kernel did 9 steps of k between
// loading and storing its outputs, and the weight gradient's 9 columns
// filled 9 of the tile's 16 (or 32): slower than these direct sums in
// all three passes (build/bench/conv_cpu; docs/performance.md has the
// figures). Each pass keeps what it reuses in registers:
// the forward a channel's 9 weights, the data gradient 9 running sums
// over 8 output channels at a time, the weight gradient 9 sums a channel.
//
// The forward and the weight gradient walk the image rows; a row's last
// vector starts at ow - 8 and overlaps the one before. The forward
// recomputes those outputs with the same sums in the same order; the
// weight gradient multiplies the lanes already counted by a zero dy (an
// infinite input there would add NaN, where the true sum has an infinity:
// either way the run's divergence check sees it).
//
// Followed by its ReLU and a 2x2 average pooling (LeNet's first layer), the
// forward pools each pair of output rows while they are in registers, and
// the weight gradient makes each vector of dy from the pooling's gradient
// and the ReLU's mask where it reads it: no pass over the pooling's input
// and no dy written and read back, 1.7 MB each for a 32-sample chunk.
#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "conv_direct.hpp"

namespace dpt::cpu {
namespace {

constexpr int lanes = 8;  // a vector's floats where the rows or the build allow no wider

// The starts of a row's vectors of Lanes: 0, Lanes, ..., and ow - Lanes
// last (overlapping when Lanes does not divide ow); body(ox, first_new_lane).
template <int Lanes = lanes, class Body>
void for_each_vector(int ow, Body body) {
    int ox = 0;
    for (; ox + Lanes <= ow; ox += Lanes) body(ox, 0);
    if (ox < ow) body(ow - Lanes, ox - (ow - Lanes));
}

constexpr int taps = 9;  // 3x3

// Vectors of Lanes floats, and of half as many: a pooled row's.
template <int Lanes>
struct Wide {
    typedef float W __attribute__((vector_size(Lanes * sizeof(float))));
    typedef float Half __attribute__((vector_size(Lanes / 2 * sizeof(float))));
    static W load(const float* p) {
        W v;
        std::memcpy(&v, p, sizeof v);
        return v;
    }
    static void store(float* p, W v) { std::memcpy(p, &v, sizeof v); }
    template <size_t... Lane>
    static W splat(float x, std::index_sequence<Lane...>) {
        return W{((void)Lane, x)...};
    }
    static W splat(float x) { return splat(x, std::make_index_sequence<Lanes>{}); }
    // The 9 shifted vectors of output row oy's taps, from column ox.
    static void taps_of(W (&in)[taps], const float* xi, int w, int oy, int ox) {
        for (int t = 0; t < taps; ++t) in[t] = load(xi + (oy + t / 3) * w + ox + t % 3);
    }
    // Output channel o at those pixels: bias, then the taps in order; the ReLU
    // with relu_forward's test (NaN gives 0).
    static W output(const W (&in)[taps], const float* w, float bias, int o, bool relu) {
        W acc = splat(bias);
        for (int t = 0; t < taps; ++t) acc += w[o * taps + t] * in[t];
        const W zero = {};
        return relu ? (acc > zero ? acc : zero) : acc;
    }
    // Lanes 0, 2, 4, ... and 1, 3, 5, ...: the left and right taps of 2x2 windows.
    template <size_t... I>
    static Half evens(W v, std::index_sequence<I...>) {
        return __builtin_shufflevector(v, v, (2 * I)...);
    }
    template <size_t... I>
    static Half odds(W v, std::index_sequence<I...>) {
        return __builtin_shufflevector(v, v, (2 * I + 1)...);
    }
    // The 2x2 averages of rows a (top) and b: pool.cpp's sum, taps in row
    // order from 0, then the scale.
    static Half pooled(W a, W b) {
        constexpr auto half = std::make_index_sequence<Lanes / 2>{};
        return ((((0.0f + evens(a, half)) + odds(a, half)) + evens(b, half)) + odds(b, half)) * 0.25f;
    }
    // Lanes below `from` (0 to Lanes) zeroed: what an overlapping last vector adds anew.
    static W keep_from(W v, int from) {
        static constexpr auto ones_after_zeros = [] {
            std::array<float, 2 * Lanes> t{};
            for (int l = Lanes; l < 2 * Lanes; ++l) t[size_t(l)] = 1.0f;
            return t;
        }();
        return v * load(ones_after_zeros.data() + Lanes - from);
    }
    static float sum(W v) {  // lane by lane, in order
        float lane[Lanes], s = 0.0f;
        std::memcpy(lane, &v, sizeof v);
        for (int l = 0; l < Lanes; ++l) s += lane[l];
        return s;
    }
    // Each of h's lanes twice: a pooled row's values under their 2x2 windows' columns.
    template <size_t... I>
    static W doubled(Half h, std::index_sequence<I...>) {
        return __builtin_shufflevector(h, h, (I / 2)...);
    }
    // dy of output pixels (oy, ox..ox+Lanes-1) in plane `plane`, as
    // pool2d_backward_relu makes it under a 2x2 average pooling of stride 2
    // (ox even): each window's gradient scaled by 1/4 and added to a
    // cleared dy, then 0 where the ReLU's output y is not above 0.
    static W pooled_gradient(const float* d_pooled, const float* y, size_t plane, int oy, int ox, int ow,
                             int pixels) {
        Half q;
        std::memcpy(&q, d_pooled + plane * (pixels / 4) + oy / 2 * (ow / 2) + ox / 2, sizeof q);
        const W g = 0.0f + doubled(q, std::make_index_sequence<Lanes>{}) * 0.25f;
        const W mask = load(y + plane * pixels + oy * ow + ox), zero = {};
        return mask > zero ? g : zero;
    }
};

}  // namespace

bool direct_conv_fits(const ConvShape& s) {
    return s.c == 1 && s.kh == 3 && s.kw == 3 && s.stride == 1 && s.pad == 0 && s.ow() >= lanes;
}

// Per sample and output row: the row's 9 shifted input vectors are loaded
// once and serve every output channel, so that the work is the fused
// multiply-adds alone (the weights are broadcast from L1). Vectors as wide as
// the build's (16 lanes with AVX-512) where the row is that wide; the
// optional ReLU is applied as each output is stored, not in a pass of its own.
template <int Lanes>
void direct_forward_rows(float* y, const float* x, const float* w, const float* b, const ConvShape& s, bool relu) {
    using V = Wide<Lanes>;
    const int oh = s.oh(), ow = s.ow(), pixels = oh * ow;
    for (int i = 0; i < s.n; ++i) {
        const float* xi = x + size_t(i) * s.h * s.w;
        float* yi = y + size_t(i) * s.oc * pixels;
        for (int oy = 0; oy < oh; ++oy)
            for_each_vector<Lanes>(ow, [&](int ox, int) {  // (an overlapping last vector: the same sums again)
                typename V::W in[taps];
                V::taps_of(in, xi, s.w, oy, ox);
                for (int o = 0; o < s.oc; ++o) {
                    const auto out = V::output(in, w, b[o], o, relu);
                    V::store(yi + size_t(o) * pixels + oy * ow + ox, out);
                }
            });
    }
}

void direct_conv_forward(float* y, const float* x, const float* w, const float* b, const ConvShape& s, bool relu) {
#if defined(__AVX512F__)
    if (s.ow() >= 16) return direct_forward_rows<16>(y, x, w, b, s, relu);
#endif
    direct_forward_rows<lanes>(y, x, w, b, s, relu);
}

bool direct_pool_fits(const ConvShape& s, PoolKind kind, const PoolShape& ps) {
    return direct_conv_fits(s) && averages_by_two(s, kind, ps) && s.oh() % 2 == 0 && s.ow() % 2 == 0;
}

// Two output rows at a time, each vector's two rows pooled as soon as they
// are made (the vectors start at even columns: ow is even). y is still
// written: the backward's ReLU mask.
template <int Lanes>
void direct_forward_pool_rows(float* y, float* pooled, const float* x, const float* w, const float* b,
                              const ConvShape& s) {
    using V = Wide<Lanes>;
    const int oh = s.oh(), ow = s.ow(), pixels = oh * ow, pw = ow / 2, pooled_pixels = pixels / 4;
    for (int i = 0; i < s.n; ++i) {
        const float* xi = x + size_t(i) * s.h * s.w;
        float* yi = y + size_t(i) * s.oc * pixels;
        float* pi = pooled + size_t(i) * s.oc * pooled_pixels;
        for (int oy = 0; oy < oh; oy += 2)
            for_each_vector<Lanes>(ow, [&](int ox, int) {
                typename V::W top[taps], bottom[taps];
                V::taps_of(top, xi, s.w, oy, ox);
                V::taps_of(bottom, xi, s.w, oy + 1, ox);
                for (int o = 0; o < s.oc; ++o) {
                    const auto a = V::output(top, w, b[o], o, true), c = V::output(bottom, w, b[o], o, true);
                    float* yo = yi + size_t(o) * pixels + oy * ow + ox;
                    V::store(yo, a);
                    V::store(yo + ow, c);
                    const auto p = V::pooled(a, c);
                    std::memcpy(pi + size_t(o) * pooled_pixels + oy / 2 * pw + ox / 2, &p, sizeof p);
                }
            });
    }
}

void direct_conv_forward_relu_pool(float* y, float* pooled, const float* x, const float* w, const float* b,
                                   const ConvShape& s) {
#if defined(__AVX512F__)
    if (s.ow() >= 16) return direct_forward_pool_rows<16>(y, pooled, x, w, b, s);
#endif
    direct_forward_pool_rows<lanes>(y, pooled, x, w, b, s);
}

size_t direct_conv_scratch_floats(const ConvShape& s) { return size_t(taps) * s.oh() * s.ow(); }

// Per sample: what each tap sends back, back (9, oh*ow) = w^T (9, oc) . dy
// (oc, oh*ow), over the output pixels as one flat run that 8 output
// channels at a time stream through (the 9 sums of a vector stay in
// registers meanwhile); then each tap's part added into dx at its shift.
void direct_conv_backward_data(float* dx, const float* dy, const float* w, const ConvShape& s, float* scratch) {
    using V = Wide<lanes>;
    const int oh = s.oh(), ow = s.ow(), pixels = oh * ow;
    constexpr int block = 8;  // output channels per pass over back
    float* back = scratch;
    for (int i = 0; i < s.n; ++i) {
        const float* dyi = dy + size_t(i) * s.oc * pixels;
        for (int o0 = 0; o0 < s.oc; o0 += block) {
            const int count = std::min(block, s.oc - o0);
            int p = 0;
            for (; p + lanes <= pixels; p += lanes) {
                typename V::W sum[taps];
                for (int t = 0; t < taps; ++t) sum[t] = o0 == 0 ? typename V::W{} : V::load(back + t * pixels + p);
                for (int o = o0; o < o0 + count; ++o) {
                    const auto g = V::load(dyi + size_t(o) * pixels + p);
                    for (int t = 0; t < taps; ++t) sum[t] += V::splat(w[o * taps + t]) * g;
                }
                for (int t = 0; t < taps; ++t) V::store(back + t * pixels + p, sum[t]);
            }
            for (; p < pixels; ++p)  // the last pixels, fewer than a vector
                for (int t = 0; t < taps; ++t) {
                    float sum = o0 == 0 ? 0.0f : back[t * pixels + p];
                    for (int o = o0; o < o0 + count; ++o) sum += w[o * taps + t] * dyi[size_t(o) * pixels + p];
                    back[t * pixels + p] = sum;
                }
        }
        float* dxi = dx + size_t(i) * s.h * s.w;
        std::fill(dxi, dxi + s.h * s.w, 0.0f);
        for (int t = 0; t < taps; ++t)
            for (int oy = 0; oy < oh; ++oy) {
                const float* src = back + t * pixels + oy * ow;
                float* dst = dxi + (oy + t / 3) * s.w + t % 3;
                for (int ox = 0; ox < ow; ++ox) dst[ox] += src[ox];
            }
    }
}

// Per Block output channels over the whole part, so that their 9 weight
// sums and bias sum stay in registers throughout, and each shifted input
// vector loaded serves them all; dy is read plane by plane, or made where it
// is read (Pooled: from the pooling's gradient). Vectors as wide as the
// forward's. (Each channel's sums are the same, in the same order, for any
// Block.)
template <int Lanes, int Block, bool Pooled>
void weight_sums(float* dw, float* db, const float* dy, const float* x, const ConvShape& s, int o0, const float* y) {
    using V = Wide<Lanes>;
    const int oh = s.oh(), ow = s.ow(), pixels = oh * ow;
    typename V::W acc[Block][taps] = {}, acc_b[Block] = {};
    for (int i = 0; i < s.n; ++i) {
        const float* xi = x + size_t(i) * s.h * s.w;
        const size_t plane = size_t(i) * s.oc + o0;
        for (int oy = 0; oy < oh; ++oy)
            for_each_vector<Lanes>(ow, [&](int ox, int first_new) {
                typename V::W g[Block];
                for (int b = 0; b < Block; ++b) {
                    if constexpr (Pooled) g[b] = V::pooled_gradient(dy, y, plane + b, oy, ox, ow, pixels);
                    else g[b] = V::load(dy + (plane + b) * pixels + oy * ow + ox);
                    g[b] = V::keep_from(g[b], first_new);
                    acc_b[b] += g[b];
                }
                for (int t = 0; t < taps; ++t) {
                    const auto in = V::load(xi + (oy + t / 3) * s.w + ox + t % 3);
                    for (int b = 0; b < Block; ++b) acc[b][t] += g[b] * in;
                }
            });
    }
    for (int b = 0; b < Block; ++b) {
        for (int t = 0; t < taps; ++t) dw[(o0 + b) * taps + t] += V::sum(acc[b][t]);
        db[o0 + b] += V::sum(acc_b[b]);
    }
}

// Two output channels at a time (one for an odd last), 16 lanes where the
// rows are that wide on an AVX-512 build.
template <bool Pooled>
void weight_gradient(float* dw, float* db, const float* dy, const float* x, const ConvShape& s, const float* y) {
    const auto with = [&](auto lanes_of) {
        constexpr int L = decltype(lanes_of)::value;
        int o = 0;
        for (; o + 2 <= s.oc; o += 2) weight_sums<L, 2, Pooled>(dw, db, dy, x, s, o, y);
        if (o < s.oc) weight_sums<L, 1, Pooled>(dw, db, dy, x, s, o, y);
    };
#if defined(__AVX512F__)
    if (s.ow() >= 16) return with(std::integral_constant<int, 16>{});
#endif
    with(std::integral_constant<int, lanes>{});
}

void direct_conv_backward_weight(float* dw, float* db, const float* dy, const float* x, const ConvShape& s) {
    weight_gradient<false>(dw, db, dy, x, s, nullptr);
}

void direct_conv_backward_weight_pool(float* dw, float* db, const float* d_pooled, const float* x, const float* y,
                                      const ConvShape& s) {
    weight_gradient<true>(dw, db, d_pooled, x, s, y);
}

}  // namespace dpt::cpu
