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
#include <algorithm>
#include <cstring>
#include <utility>

#include "conv_direct.hpp"

namespace dpt::cpu {
namespace {

constexpr int lanes = 8;
typedef float V __attribute__((vector_size(lanes * sizeof(float))));

V load(const float* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
void store(float* p, V v) { std::memcpy(p, &v, sizeof v); }
template <size_t... Lane>
V splat(float x, std::index_sequence<Lane...>) {
    return V{((void)Lane, x)...};
}
V splat(float x) { return splat(x, std::make_index_sequence<lanes>{}); }
// Lanes below `from` (0 to 8) zeroed: what an overlapping last vector adds anew.
V keep_from(V v, int from) {
    static constexpr float ones_after_zeros[2 * lanes] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
    return v * load(ones_after_zeros + lanes - from);
}
float sum_lanes(V v) {
    float s = 0.0f;
    for (int l = 0; l < lanes; ++l) s += v[l];
    return s;
}

// The starts of a row's vectors of Lanes: 0, Lanes, ..., and ow - Lanes
// last (overlapping when Lanes does not divide ow); body(ox, first_new_lane).
template <int Lanes = lanes, class Body>
void for_each_vector(int ow, Body body) {
    int ox = 0;
    for (; ox + Lanes <= ow; ox += Lanes) body(ox, 0);
    if (ox < ow) body(ow - Lanes, ox - (ow - Lanes));
}

constexpr int taps = 9;  // 3x3

}  // namespace

bool direct_conv_fits(const ConvShape& s) {
    return s.c == 1 && s.kh == 3 && s.kw == 3 && s.stride == 1 && s.pad == 0 && s.ow() >= lanes;
}

// Per sample and output row: the row's 9 shifted input vectors are loaded
// once and serve every output channel, so that the work is the fused
// multiply-adds alone (the weights are broadcast from L1). Vectors as wide as
// the build's (16 lanes with AVX-512) where the row is that wide; the
// optional ReLU is applied as each output is stored, not in a pass of its own.
// (splat for a vector of any width: the helpers above are for V alone.)
template <class W, size_t... Lane>
W splat_as(float x, std::index_sequence<Lane...>) {
    return W{((void)Lane, x)...};
}

template <int Lanes>
void direct_forward_rows(float* y, const float* x, const float* w, const float* b, const ConvShape& s, bool relu) {
    typedef float W __attribute__((vector_size(Lanes * sizeof(float))));
    const auto load_w = [](const float* p) {
        W v;
        std::memcpy(&v, p, sizeof v);
        return v;
    };
    const W zero = {};
    const auto lanes_of = std::make_index_sequence<Lanes>{};
    const int oh = s.oh(), ow = s.ow(), pixels = oh * ow;
    for (int i = 0; i < s.n; ++i) {
        const float* xi = x + size_t(i) * s.h * s.w;
        float* yi = y + size_t(i) * s.oc * pixels;
        for (int oy = 0; oy < oh; ++oy)
            for_each_vector<Lanes>(ow, [&](int ox, int) {  // (an overlapping last vector: the same sums again)
                W in[taps];
                for (int t = 0; t < taps; ++t) in[t] = load_w(xi + (oy + t / 3) * s.w + ox + t % 3);
                for (int o = 0; o < s.oc; ++o) {
                    W acc = splat_as<W>(b[o], lanes_of);
                    for (int t = 0; t < taps; ++t) acc += w[o * taps + t] * in[t];
                    if (relu) acc = acc > zero ? acc : zero;  // relu_forward's test: NaN gives 0
                    std::memcpy(yi + size_t(o) * pixels + oy * ow + ox, &acc, sizeof acc);
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

size_t direct_conv_scratch_floats(const ConvShape& s) { return size_t(taps) * s.oh() * s.ow(); }

// Per sample: what each tap sends back, back (9, oh*ow) = w^T (9, oc) . dy
// (oc, oh*ow), over the output pixels as one flat run that 8 output
// channels at a time stream through (the 9 sums of a vector stay in
// registers meanwhile); then each tap's part added into dx at its shift.
void direct_conv_backward_data(float* dx, const float* dy, const float* w, const ConvShape& s, float* scratch) {
    const int oh = s.oh(), ow = s.ow(), pixels = oh * ow;
    constexpr int block = 8;  // output channels per pass over back
    float* back = scratch;
    for (int i = 0; i < s.n; ++i) {
        const float* dyi = dy + size_t(i) * s.oc * pixels;
        for (int o0 = 0; o0 < s.oc; o0 += block) {
            const int count = std::min(block, s.oc - o0);
            int p = 0;
            for (; p + lanes <= pixels; p += lanes) {
                V sum[taps];
                for (int t = 0; t < taps; ++t) sum[t] = o0 == 0 ? V{} : load(back + t * pixels + p);
                for (int o = o0; o < o0 + count; ++o) {
                    const V g = load(dyi + size_t(o) * pixels + p);
                    for (int t = 0; t < taps; ++t) sum[t] += splat(w[o * taps + t]) * g;
                }
                for (int t = 0; t < taps; ++t) store(back + t * pixels + p, sum[t]);
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
// vector loaded serves them all; dy is read plane by plane. (Each channel's
// sums are the same, in the same order, for any Block.)
template <int Block>
void weight_sums(float* dw, float* db, const float* dy, const float* x, const ConvShape& s, int o0) {
    const int oh = s.oh(), ow = s.ow(), pixels = oh * ow;
    V acc[Block][taps] = {}, acc_b[Block] = {};
    for (int i = 0; i < s.n; ++i) {
        const float* xi = x + size_t(i) * s.h * s.w;
        const float* dyo = dy + (size_t(i) * s.oc + o0) * pixels;
        for (int oy = 0; oy < oh; ++oy)
            for_each_vector(ow, [&](int ox, int first_new) {
                V g[Block];
                for (int b = 0; b < Block; ++b) {
                    g[b] = keep_from(load(dyo + size_t(b) * pixels + oy * ow + ox), first_new);
                    acc_b[b] += g[b];
                }
                for (int t = 0; t < taps; ++t) {
                    const V in = load(xi + (oy + t / 3) * s.w + ox + t % 3);
                    for (int b = 0; b < Block; ++b) acc[b][t] += g[b] * in;
                }
            });
    }
    for (int b = 0; b < Block; ++b) {
        for (int t = 0; t < taps; ++t) dw[(o0 + b) * taps + t] += sum_lanes(acc[b][t]);
        db[o0 + b] += sum_lanes(acc_b[b]);
    }
}

void direct_conv_backward_weight(float* dw, float* db, const float* dy, const float* x, const ConvShape& s) {
    int o = 0;
    for (; o + 2 <= s.oc; o += 2) weight_sums<2>(dw, db, dy, x, s, o);
    if (o < s.oc) weight_sums<1>(dw, db, dy, x, s, o);
}

}  // namespace dpt::cpu
