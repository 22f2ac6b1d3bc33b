// LeNet's conv2 (20 -> 50 channels, 5x5, 13x13 -> 9x9) with the batch in
// the vector lanes: 16 samples share each AVX-512 vector, one to a lane, so
// that every sum is a plain fused multiply-add of whole vectors and the
// images need no unfolding. conv.cpp hands these shapes over: for LeNet's
// conv2, the weight gradient (its forward and data gradient, in whole 3x3
// tiles, take Winograd's F(3x3, 5x5) in the same lanes: winograd_lanes.cpp);
// for 5x5 shapes that do not tile so, all three. CUDA twin:
// kernels/cuda/conv_*.cu, as for every convolution.
//
// As an implicit GEMM (conv.cpp) this layer gathers its unfolded images
// into the GEMM's panels first, and each float gathered feeds only 50
// multiply-adds: gathering cost about as much as the products, and the
// three passes reached 50% to 55% of the FMA peak (build/bench/layers_cpu).
// Here each pass keeps a tile of sums in registers (the sizes with AVX2's
// 16 registers of 8 floats in brackets):
//  - forward: y[oc][oy][ox] for 5 [2] output channels x 3 pixels of a row; for
//    each input channel and kernel row the 7 input vectors under the tile
//    are loaded once and serve all 5 kernel columns, each weight one
//    broadcast for 3 multiply-adds;
//  - data gradient: dx[c][iy][ix] for 4 [2] input channels x 5 [3] pixels of a row,
//    summing dy[oc][iy-ki][ix-kj] * w[oc][c][ki][kj] over the taps that
//    land inside dy: the 4 pixels at each end of a row have their own
//    tiles that leave the others out when compiled, so no product is of a
//    zero border (a bordered forward convolution would do twice the work);
//  - weight gradient: dw[oc][c][ki][kj] for 4 [2] output channels x the 5
//    kernel columns, each a vector of per-lane sums over the pixels, its
//    lanes added up once a group of 16 samples. (Summing over 2 groups
//    before adding the lanes up was slower: the pair's images outgrow L1.)
// The images arrive and leave in NCHW: each group of 16 samples is
// transposed into [plane][16 samples] (and back) 16 x 16 floats at a time
// in registers, a few percent of the products' time.
//
// With AVX2 the data gradient alone runs here: the implicit GEMM's forward
// and weight gradient are as fast or faster there (dev/cpu/README.md).
//
// Every sum is over the same products as the implicit GEMM's, in another
// order: the results agree to rounding (tests/test_winograd.cpp).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "conv_lanes.hpp"
#include "gemm_driver.hpp"

namespace dpt::cpu {
namespace {

using detail::lanes;  // samples a vector
using detail::lane_sum, detail::load, detail::splat, detail::store, detail::transpose, detail::vf;
constexpr int K = 5;  // the filter's side
constexpr int taps = K * K;

size_t in_planes(const ConvShape& s) { return size_t(s.c) * s.h * s.w; }
size_t out_planes(const ConvShape& s) { return size_t(s.oc) * s.oh() * s.ow(); }

// scratch from its first cache line: a group's images in the lanes, then
// their outputs (or output gradients).
struct Buffers {
    float *in, *out;
    Buffers(const ConvShape& s, float* scratch) {
        const auto at = reinterpret_cast<std::uintptr_t>(scratch);
        in = scratch + (64 - at % 64) % 64 / sizeof(float);
        out = in + in_planes(s) * lanes;
    }
};

// ---- forward: 5 output channels x 3 pixels of a row ----
constexpr int fw_oc = lanes == 16 ? 5 : 2, fw_px = 3;  // (AVX2: for dev/cpu's measurement)

template <int PX>
[[gnu::always_inline]] inline void forward_tile(float* yl, const float* xl, const float* w, const float* b,
                                                const ConvShape& s, int oc, int oy, int ox, bool relu) {
    const int oh = s.oh(), ow = s.ow();
    const float* wo[fw_oc];  // each channel's filters; past s.oc the last again (its sums are not stored)
#pragma GCC unroll 8
    for (int o = 0; o < fw_oc; ++o) wo[o] = w + size_t(std::min(oc + o, s.oc - 1)) * s.c * taps;
    vf acc[fw_oc][PX] = {};
    for (int c = 0; c < s.c; ++c)
        for (int ki = 0; ki < K; ++ki) {
            const float* row = xl + ((size_t(c) * s.h + oy + ki) * s.w + ox) * lanes;
            vf in[PX + K - 1];
#pragma GCC unroll 16
            for (int i = 0; i < PX + K - 1; ++i) in[i] = load(row + i * lanes);
            const int tap = (c * K + ki) * K;
#pragma GCC unroll 8
            for (int kj = 0; kj < K; ++kj)
#pragma GCC unroll 8
                for (int o = 0; o < fw_oc; ++o) {
                    const vf wv = splat(wo[o][tap + kj]);
#pragma GCC unroll 8
                    for (int j = 0; j < PX; ++j) acc[o][j] += wv * in[j + kj];
                }
        }
    for (int o = 0; o < fw_oc && oc + o < s.oc; ++o) {
        const vf bias = splat(b[oc + o]);
        for (int j = 0; j < PX; ++j) {
            vf v = acc[o][j] + bias;
            if (relu) v = v > 0.0f ? v : vf{};  // relu_forward's test: NaN gives 0
            store(yl + ((size_t(oc + o) * oh + oy) * ow + ox + j) * lanes, v);
        }
    }
}

// ---- data gradient: 4 input channels x 5 pixels of a row ----
constexpr int bd_c = lanes == 16 ? 4 : 2, bd_px = lanes == 16 ? 5 : 3;

// Where a tile of the data gradient lies in its row: the first K - 1
// pixels, whose taps kj > j fall left of dy; the last K - 1 (from ix =
// ow), whose taps kj <= j fall right of it; or between, where all land.
enum class Edge { left, inside, right };

template <Edge E>
constexpr bool lands(int j, int kj) {
    return E == Edge::left ? kj <= j : E == Edge::right ? kj > j : true;
}

template <int PX, Edge E>
[[gnu::always_inline]] inline void data_tile(float* dxl, const float* dyl, const float* w, const ConvShape& s, int c0,
                                             int iy, int ix) {
    const int oh = s.oh(), ow = s.ow();
    const float* wc[bd_c];  // each input channel's filters in w's first output channel; past s.c the last again
#pragma GCC unroll 8
    for (int c = 0; c < bd_c; ++c) wc[c] = w + size_t(std::min(c0 + c, s.c - 1)) * taps;
    const size_t filters = size_t(s.c) * taps;  // from one output channel's filters to the next's
    vf acc[bd_c][PX] = {};
    const int ki_first = std::max(0, iy - oh + 1), ki_last = std::min(K - 1, iy);
    for (int o = 0; o < s.oc; ++o)
        for (int ki = ki_first; ki <= ki_last; ++ki) {
            // in[i]: dy[o][iy - ki][ix - (K - 1) + i], loaded where a product uses it.
            const float* row = dyl + (size_t(o) * oh + iy - ki) * ow * lanes;
            vf in[PX + K - 1];
#pragma GCC unroll 16
            for (int i = 0; i < PX + K - 1; ++i)
                if (E == Edge::inside || (E == Edge::left ? i >= K - 1 : i < K - 1))
                    in[i] = load(row + (ix - (K - 1) + i) * lanes);
#pragma GCC unroll 8
            for (int kj = 0; kj < K; ++kj)
#pragma GCC unroll 8
                for (int c = 0; c < bd_c; ++c) {
                    const vf wv = splat(wc[c][o * filters + ki * K + kj]);
#pragma GCC unroll 8
                    for (int j = 0; j < PX; ++j)
                        if (lands<E>(j, kj)) acc[c][j] += wv * in[j - kj + K - 1];
                }
        }
    for (int c = 0; c < bd_c && c0 + c < s.c; ++c)
        for (int j = 0; j < PX; ++j) store(dxl + ((size_t(c0 + c) * s.h + iy) * s.w + ix + j) * lanes, acc[c][j]);
}

// ---- weight gradient: 4 output channels x the 5 kernel columns ----
constexpr int wg_oc = lanes == 16 ? 4 : 2, wg_px = lanes == 16 ? 5 : 2;

// acc[o][kj] += dy[o][ox + j] * x[ox + j + kj] over PX pixels from ox of
// one output row (dy[o]: channel oc + o's row; x: the input row under it).
template <int PX>
[[gnu::always_inline]] inline void weight_pixels(vf (&acc)[wg_oc][K], const float* const (&dy)[wg_oc],
                                                 const float* x, int ox) {
    vf in[PX + K - 1];
#pragma GCC unroll 16
    for (int i = 0; i < PX + K - 1; ++i) in[i] = load(x + (ox + i) * lanes);
#pragma GCC unroll 8
    for (int j = 0; j < PX; ++j)
#pragma GCC unroll 8
        for (int o = 0; o < wg_oc; ++o) {
            const vf g = load(dy[o] + (ox + j) * lanes);
#pragma GCC unroll 8
            for (int kj = 0; kj < K; ++kj) acc[o][kj] += g * in[j + kj];
        }
}

// dw[oc..oc+3][c][ki][:] += the sums over one group's pixels and lanes.
void weight_tile(float* dw, const float* dyl, const float* xl, const ConvShape& s, int oc, int c, int ki) {
    const int oh = s.oh(), ow = s.ow();
    vf acc[wg_oc][K] = {};
    for (int oy = 0; oy < oh; ++oy) {
        const float* x = xl + (size_t(c) * s.h + oy + ki) * s.w * lanes;
        const float* dy[wg_oc];  // past s.oc the last channel again (its sums are not stored)
#pragma GCC unroll 8
        for (int o = 0; o < wg_oc; ++o) dy[o] = dyl + (size_t(std::min(oc + o, s.oc - 1)) * oh + oy) * ow * lanes;
        int ox = 0;
        for (; ox + wg_px <= ow; ox += wg_px) weight_pixels<wg_px>(acc, dy, x, ox);
        for (; ox < ow; ++ox) weight_pixels<1>(acc, dy, x, ox);
    }
    for (int o = 0; o < wg_oc && oc + o < s.oc; ++o)
        for (int kj = 0; kj < K; ++kj) dw[(size_t(oc + o) * s.c + c) * taps + ki * K + kj] += lane_sum(acc[o][kj]);
}

}  // namespace

// dst [planes][lanes] = count samples' planes from src (count, planes); lanes past count are zeros.
void lanes_transpose_in(float* dst, const float* src, size_t planes, int count, size_t stride) {
    if (stride == 0) stride = planes;
    size_t p = 0;
    for (; p + lanes <= planes; p += lanes) {
        vf r[lanes];
#pragma GCC unroll 16
        for (int l = 0; l < lanes; ++l) r[l] = l < count ? load(src + l * stride + p) : vf{};
        transpose(r);
#pragma GCC unroll 16
        for (int i = 0; i < lanes; ++i) store(dst + (p + i) * lanes, r[i]);
    }
    for (; p < planes; ++p)
        for (int l = 0; l < lanes; ++l) dst[p * lanes + l] = l < count ? src[l * stride + p] : 0.0f;
}

// dst (count, planes) = the first count lanes of src [planes][lanes].
void lanes_transpose_out(float* dst, const float* src, size_t planes, int count) {
    size_t p = 0;
    for (; p + lanes <= planes; p += lanes) {
        vf r[lanes];
#pragma GCC unroll 16
        for (int i = 0; i < lanes; ++i) r[i] = load(src + (p + i) * lanes);
        transpose(r);
        for (int l = 0; l < count; ++l) store(dst + l * planes + p, r[l]);
    }
    for (; p < planes; ++p)
        for (int l = 0; l < count; ++l) dst[l * planes + p] = src[p * lanes + l];
}

bool lanes_conv_fits(const ConvShape& s, [[maybe_unused]] ConvPass pass) {  // (unused without AVX2)
#if defined(__AVX512F__) || defined(__AVX2__)
    const bool vectors_suit = lanes == 16 || pass == ConvPass::data;
#else
    const bool vectors_suit = false;
#endif
    return vectors_suit && s.kh == K && s.kw == K && s.stride == 1 && s.pad == 0 && s.ow() >= K - 1 && s.oh() >= 1;
}

size_t lanes_conv_scratch_floats(const ConvShape& s) {
    return (in_planes(s) + out_planes(s)) * lanes + 64 / sizeof(float);
}

void lanes_conv_forward(float* y, const float* x, const float* w, const float* b, const ConvShape& s,
                        float* scratch, bool relu) {
    const Buffers buf(s, scratch);
    const int oh = s.oh(), ow = s.ow();
    for (int first = 0; first < s.n; first += lanes) {
        const int count = std::min(lanes, s.n - first);
        lanes_transpose_in(buf.in, x + first * in_planes(s), in_planes(s), count);
        for (int oc = 0; oc < s.oc; oc += fw_oc)
            for (int oy = 0; oy < oh; ++oy) {
                int ox = 0;
                for (; ox + fw_px <= ow; ox += fw_px) forward_tile<fw_px>(buf.out, buf.in, w, b, s, oc, oy, ox, relu);
                switch (ow - ox) {
                    case 2: forward_tile<2>(buf.out, buf.in, w, b, s, oc, oy, ox, relu); break;
                    case 1: forward_tile<1>(buf.out, buf.in, w, b, s, oc, oy, ox, relu); break;
                    default: break;
                }
            }
        lanes_transpose_out(y + first * out_planes(s), buf.out, out_planes(s), count);
    }
}

void lanes_conv_backward_data(float* dx, const float* dy, const float* w, const ConvShape& s, float* scratch) {
    const Buffers buf(s, scratch);  // dx's lanes in buf.in, dy's in buf.out
    const int ow = s.ow();
    for (int first = 0; first < s.n; first += lanes) {
        const int count = std::min(lanes, s.n - first);
        lanes_transpose_in(buf.out, dy + first * out_planes(s), out_planes(s), count);
        for (int c0 = 0; c0 < s.c; c0 += bd_c)
            for (int iy = 0; iy < s.h; ++iy) {
                data_tile<K - 1, Edge::left>(buf.in, buf.out, w, s, c0, iy, 0);
                int ix = K - 1;
                for (; ix + bd_px <= ow; ix += bd_px) data_tile<bd_px, Edge::inside>(buf.in, buf.out, w, s, c0, iy, ix);
                switch (ow - ix) {
                    case 4: data_tile<4, Edge::inside>(buf.in, buf.out, w, s, c0, iy, ix); break;
                    case 3: data_tile<3, Edge::inside>(buf.in, buf.out, w, s, c0, iy, ix); break;
                    case 2: data_tile<2, Edge::inside>(buf.in, buf.out, w, s, c0, iy, ix); break;
                    case 1: data_tile<1, Edge::inside>(buf.in, buf.out, w, s, c0, iy, ix); break;
                    default: break;
                }
                data_tile<K - 1, Edge::right>(buf.in, buf.out, w, s, c0, iy, ow);
            }
        lanes_transpose_out(dx + first * in_planes(s), buf.in, in_planes(s), count);
    }
}

void lanes_conv_backward_weight(float* dw, float* db, const float* dy, const float* x, const ConvShape& s,
                                float* scratch) {
    const Buffers buf(s, scratch);
    const size_t pixels = size_t(s.oh()) * s.ow();
    for (int first = 0; first < s.n; first += lanes) {
        const int count = std::min(lanes, s.n - first);
        lanes_transpose_in(buf.in, x + first * in_planes(s), in_planes(s), count);
        lanes_transpose_in(buf.out, dy + first * out_planes(s), out_planes(s), count);
        for (int oc = 0; oc < s.oc; oc += wg_oc)
            for (int c = 0; c < s.c; ++c)
                for (int ki = 0; ki < K; ++ki) weight_tile(dw, buf.out, buf.in, s, oc, c, ki);
        for (int o = 0; o < s.oc; ++o) {
            vf sum{};
            for (size_t p = 0; p < pixels; ++p) sum += load(buf.out + (o * pixels + p) * lanes);
            db[o] += lane_sum(sum);
        }
    }
}

}  // namespace dpt::cpu
