// The first version of the trainer's kernels/cpu/conv_lanes.cpp (LeNet's
// conv2 with the batch in the vector lanes: 20 -> 50 channels, 5x5, 13x13
// -> 9x9), against the implicit GEMM (conv2d_*_gemm, kernels/cpu/conv.cpp),
// the trainer's conv2d_* (for this shape: Winograd's F(3x3, 5x5) for the
// forward and data gradient, winograd_lanes.cpp; the lanes' direct sums for
// the weight gradient on AVX-512, the implicit GEMM on AVX2) and the lanes'
// kernels themselves on any build: forward, data gradient and weight
// gradient.
//
// The implicit GEMM multiplies the weights (50 x 500) by the unfolded
// images (500 x 81 a sample), gathered into the GEMM's panels first: each
// float gathered feeds only 50 multiply-adds, and gathering costs as much as
// they do. Here 16 samples share a vector instead, one in each lane, so that
// the images need no unfolding: y[oc][oy][ox][lane] += w[oc][c][ki][kj] *
// x[c][oy+ki][ox+kj][lane]. A register tile holds 4 output channels x 5
// output pixels of one output row (20 sums; with AVX2, 8 samples a vector
// and 2 x 3); for each input channel and kernel row the 9 input vectors
// under the tile are loaded once and serve all 5 kernel columns, and each
// weight is one broadcast for 5 FMAs.
//
// The data gradient here is the same kernel: a forward convolution of dy,
// bordered with K-1 zeros, by the weights turned half a turn with their
// two channel axes swapped (50 -> 20 channels, 17x17 -> 13x13): twice the
// products needed. The weight gradient keeps 4 output channels x the 5
// kernel columns of one (input channel, kernel row) in registers, each a
// vector of per-lane partial sums over the output pixels, and adds the
// lanes up once a group of 16 samples, one lane at a time. The trainer's
// version skips the border's products, adds the lanes up once for up to 64
// samples with a halving sum, transposes 16 x 16 floats in registers, and
// takes a 5 x 3 forward tile.
//
// The images come in NCHW and go out so: the program times the kernel alone
// and with the two transpositions (NCHW -> [c][h][w][lanes] and back)
// that a trainer without the layout throughout would pay.
//   usage: build/dev/cpu/conv_lanes [SAMPLES]     (default 32: a CPU device's chunk)
// Exit status: 1 when the two disagree by more than rounding.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "../../bench/fastest.hpp"
#include "../../bench/fma_peak.hpp"
#include "cpu/conv_lanes.hpp"
#include "cpu/kernels.hpp"
#include "cpu/vectors.hpp"

using namespace dpt;

namespace {

constexpr int K = 5;  // kernel size (LeNet's conv2)
// Samples a vector, and the register tile: output channels x output pixels.
// AVX-512: 4 x 5 sums + 9 inputs + a broadcast, 30 of 32 registers; AVX2:
// 2 x 3 sums + 7 inputs + a broadcast, 14 of 16.
using cpu::detail::lanes, cpu::detail::load, cpu::detail::splat, cpu::detail::vf;
constexpr int OCB = lanes == 16 ? 4 : 2, OXT = lanes == 16 ? 5 : 3;

// OCB channels from oc x OXB pixels from ox0 of output row oy.
// x: [c][h][w][lanes]; wt: [c][K][K][ocp] (ocp: oc padded to OCB, zeros);
// y: [oc][oh][ow][lanes].
template <int OXB>
void tile(float* y, const float* x, const float* wt, const ConvShape& s, int ocp, int oc, int oy, int ox0) {
    vf acc[OCB][OXB];
#pragma GCC unroll 8
    for (int o = 0; o < OCB; ++o)
#pragma GCC unroll 8
        for (int j = 0; j < OXB; ++j) acc[o][j] = vf{};
    for (int c = 0; c < s.c; ++c)
        for (int ki = 0; ki < K; ++ki) {
            const float* row = x + ((size_t(c) * s.h + oy + ki) * s.w + ox0) * lanes;
            const float* w = wt + (size_t(c) * K + ki) * K * ocp + oc;
            vf in[OXB + K - 1];
#pragma GCC unroll 16
            for (int i = 0; i < OXB + K - 1; ++i) in[i] = load(row + i * lanes);
#pragma GCC unroll 5
            for (int kj = 0; kj < K; ++kj)
#pragma GCC unroll 8
                for (int o = 0; o < OCB; ++o) {
                    const vf wv = splat(w[kj * ocp + o]);
#pragma GCC unroll 8
                    for (int j = 0; j < OXB; ++j) acc[o][j] += wv * in[j + kj];
                }
        }
    for (int o = 0; o < OCB && oc + o < s.oc; ++o)
        for (int j = 0; j < OXB; ++j)
            std::memcpy(y + ((size_t(oc + o) * s.oh() + oy) * s.ow() + ox0 + j) * lanes, &acc[o][j], sizeof(vf));
}

// One group of `lanes` samples, in the lanes' layout.
void forward_lanes(float* y, const float* x, const float* wt, const ConvShape& s, int ocp) {
    for (int oc = 0; oc < s.oc; oc += OCB)
        for (int oy = 0; oy < s.oh(); ++oy) {
            int ox = 0;
            for (; ox + OXT <= s.ow(); ox += OXT) tile<OXT>(y, x, wt, s, ocp, oc, oy, ox);
            switch (s.ow() - ox) {
                case 4: tile<4>(y, x, wt, s, ocp, oc, oy, ox); break;
                case 3: tile<3>(y, x, wt, s, ocp, oc, oy, ox); break;
                case 2: tile<2>(y, x, wt, s, ocp, oc, oy, ox); break;
                case 1: tile<1>(y, x, wt, s, ocp, oc, oy, ox); break;
                default: break;
            }
        }
}

// dw[oc][c][ki][:] += the sums over the output pixels and lanes of
// dy[oc][oy][ox] * x[c][oy+ki][ox+kj], for OCB channels from oc: OXB
// output pixels of a row at a time, whose OXB + K - 1 inputs are loaded once.
template <int OXB>
inline void weight_pixels(vf (&acc)[OCB][K], const float* dy, const float* row, const ConvShape& s, int oc, int oy,
                          int ox0) {
    const int oh = s.oh(), ow = s.ow();
    vf in[OXB + K - 1];
#pragma GCC unroll 16
    for (int i = 0; i < OXB + K - 1; ++i) in[i] = load(row + (ox0 + i) * lanes);
#pragma GCC unroll 8
    for (int j = 0; j < OXB; ++j)
#pragma GCC unroll 8
        for (int o = 0; o < OCB; ++o) {
            const vf g = oc + o < s.oc ? load(dy + ((size_t(oc + o) * oh + oy) * ow + ox0 + j) * lanes) : vf{};
#pragma GCC unroll 8
            for (int kj = 0; kj < K; ++kj) acc[o][kj] += g * in[j + kj];
        }
}

void weight_tile(float* dw, const float* dy, const float* x, const ConvShape& s, int oc, int c, int ki) {
    vf acc[OCB][K];
#pragma GCC unroll 8
    for (int o = 0; o < OCB; ++o)
#pragma GCC unroll 8
        for (int kj = 0; kj < K; ++kj) acc[o][kj] = vf{};
    for (int oy = 0; oy < s.oh(); ++oy) {
        const float* row = x + ((size_t(c) * s.h + oy + ki) * s.w) * lanes;
        int ox = 0;
        for (; ox + OXT <= s.ow(); ox += OXT) weight_pixels<OXT>(acc, dy, row, s, oc, oy, ox);
        for (; ox < s.ow(); ++ox) weight_pixels<1>(acc, dy, row, s, oc, oy, ox);
    }
    for (int o = 0; o < OCB && oc + o < s.oc; ++o)
        for (int kj = 0; kj < K; ++kj) {
            float sum = 0;
            for (int l = 0; l < lanes; ++l) sum += acc[o][kj][l];
            dw[((size_t(oc + o) * s.c + c) * K + ki) * K + kj] += sum;
        }
}

// One group of `lanes` samples: dw += ..., db += ... (db: the lanes of dy summed).
void weight_lanes(float* dw, float* db, const float* dy, const float* x, const ConvShape& s) {
    for (int oc = 0; oc < s.oc; oc += OCB)
        for (int c = 0; c < s.c; ++c)
            for (int ki = 0; ki < K; ++ki) weight_tile(dw, dy, x, s, oc, c, ki);
    const size_t pixels = size_t(s.oh()) * s.ow();
    for (int o = 0; o < s.oc; ++o) {
        vf sum{};
        for (size_t p = 0; p < pixels; ++p) sum += load(dy + (o * pixels + p) * lanes);
        for (int l = 0; l < lanes; ++l) db[o] += sum[l];
    }
}

// (n, planes) NCHW samples first.. first+lanes <-> [planes][lanes] (missing samples: zeros).
void to_lanes(float* dst, const float* src, size_t planes, int n, int first) {
    for (size_t p = 0; p < planes; ++p)
        for (int l = 0; l < lanes; ++l) dst[p * lanes + l] = first + l < n ? src[size_t(first + l) * planes + p] : 0.0f;
}
void from_lanes(float* dst, const float* src, size_t planes, int n, int first) {
    for (int l = 0; l < lanes && first + l < n; ++l)
        for (size_t p = 0; p < planes; ++p) dst[size_t(first + l) * planes + p] = src[p * lanes + l];
}

// The three passes from NCHW to NCHW, as conv2d_forward,
// conv2d_backward_data and conv2d_backward_weight take and give them.
struct Lanes {
    const ConvShape& s;
    const ConvShape back;  // the data gradient as a forward convolution of dy, bordered
    int ocp, cp;           // oc and c rounded up to OCB
    std::vector<float> wt, wback, xl, yl, dyl, dxl;
    Lanes(const ConvShape& shape, const std::vector<float>& w)
        : s(shape),
          back{shape.n, shape.oc, shape.oh() + 2 * (K - 1), shape.ow() + 2 * (K - 1), shape.c, K, K, 1, 0},
          ocp((shape.oc + OCB - 1) / OCB * OCB),
          cp((shape.c + OCB - 1) / OCB * OCB),
          wt(size_t(shape.c) * K * K * ocp, 0.0f),
          wback(size_t(shape.oc) * K * K * cp, 0.0f),
          xl(size_t(shape.c) * shape.h * shape.w * lanes),
          yl(size_t(shape.oc) * shape.oh() * shape.ow() * lanes),
          dyl(size_t(back.c) * back.h * back.w * lanes, 0.0f),
          dxl(size_t(shape.c) * shape.h * shape.w * lanes) {
        for (int o = 0; o < s.oc; ++o)
            for (int c = 0; c < s.c; ++c)
                for (int k = 0; k < K * K; ++k) {
                    const float v = w[(size_t(o) * s.c + c) * K * K + k];
                    wt[(size_t(c) * K * K + k) * ocp + o] = v;
                    wback[(size_t(o) * K * K + (K * K - 1 - k)) * cp + c] = v;  // turned half a turn
                }
    }
    void forward(float* y, const float* x, const float* b) {
        const size_t in_planes = size_t(s.c) * s.h * s.w, out_planes = size_t(s.oc) * s.oh() * s.ow();
        const size_t pixels = size_t(s.oh()) * s.ow();
        for (int first = 0; first < s.n; first += lanes) {
            to_lanes(xl.data(), x, in_planes, s.n, first);
            forward_lanes(yl.data(), xl.data(), wt.data(), s, ocp);
            from_lanes(y, yl.data(), out_planes, s.n, first);
        }
        for (int i = 0; i < s.n; ++i)
            for (int o = 0; o < s.oc; ++o)
                for (size_t p = 0; p < pixels; ++p) y[(size_t(i) * s.oc + o) * pixels + p] += b[o];
    }
    // dy into the bordered [oc][oh + 8][ow + 8][lanes] (its border stays zero).
    void bordered_dy(const float* dy, int first) {
        const int oh = s.oh(), ow = s.ow();
        for (int o = 0; o < s.oc; ++o)
            for (int oy = 0; oy < oh; ++oy)
                for (int ox = 0; ox < ow; ++ox)
                    for (int l = 0; l < lanes; ++l)
                        dyl[((size_t(o) * back.h + oy + K - 1) * back.w + ox + K - 1) * lanes + l] =
                            first + l < s.n ? dy[((size_t(first + l) * s.oc + o) * oh + oy) * ow + ox] : 0.0f;
    }
    void backward_data(float* dx, const float* dy) {
        const size_t in_planes = size_t(s.c) * s.h * s.w;
        for (int first = 0; first < s.n; first += lanes) {
            bordered_dy(dy, first);
            forward_lanes(dxl.data(), dyl.data(), wback.data(), back, cp);
            from_lanes(dx, dxl.data(), in_planes, s.n, first);
        }
    }
    void backward_weight(float* dw, float* db, const float* dy, const float* x) {
        const size_t in_planes = size_t(s.c) * s.h * s.w, out_planes = size_t(s.oc) * s.oh() * s.ow();
        for (int first = 0; first < s.n; first += lanes) {
            to_lanes(xl.data(), x, in_planes, s.n, first);
            to_lanes(yl.data(), dy, out_planes, s.n, first);
            weight_lanes(dw, db, yl.data(), xl.data(), s);
        }
    }
};

template <class Run>
double fastest_s(Run run) {
    return bench::fastest_ms(run, 50) / 1e3;
}

}  // namespace

int main(int argc, char** argv) {
    const int n = argc > 1 ? std::atoi(argv[1]) : 32;
    if (n < 1) {
        std::fprintf(stderr, "conv_lanes: SAMPLES must be at least 1\n");
        return 2;
    }
    const ConvShape s{n, 20, 13, 13, 50, K, K, 1, 0};  // LeNet's conv2
    const std::vector<float> x = bench::values(s.in_size(), 1), w = bench::values(s.weight_size(), 2),
                             b = bench::values(size_t(s.oc), 3), dy = bench::values(s.out_size(), 4);
    std::vector<float> y(s.out_size()), dx(s.in_size()), dw(s.weight_size()), db(size_t(s.oc));
    std::vector<float> y2 = y, dx2 = dx, dw2 = dw, db2 = db, scratch(std::max(cpu::conv2d_scratch_floats(s), cpu::lanes_conv_scratch_floats(s)));
    Lanes lanes_conv(s, w);

    // The same products summed in another grouping: they agree to rounding,
    // a few 1e-7 of the largest value; a wrong tap or lane is off by whole values.
    const auto off = bench::largest_difference;
    cpu::conv2d_forward_gemm(y.data(), x.data(), w.data(), b.data(), s, scratch.data());
    cpu::conv2d_backward_data_gemm(dx.data(), dy.data(), w.data(), s, scratch.data());
    cpu::conv2d_backward_weight_gemm(dw.data(), db.data(), dy.data(), x.data(), s, scratch.data());
    lanes_conv.forward(y2.data(), x.data(), b.data());
    lanes_conv.backward_data(dx2.data(), dy.data());
    lanes_conv.backward_weight(dw2.data(), db2.data(), dy.data(), x.data());
    const double worst = std::max({off(y2, y), off(dx2, dx), off(dw2, dw), off(db2, db)});
    std::printf("conv2, %d samples: the lanes' forward, data and weight gradients agree with conv2d_*_gemm to %.1e, %.1e, "
                "%.1e (bias %.1e) of the largest value\n",
                n, off(y2, y), off(dx2, dx), off(dw2, dw), off(db2, db));
    if (worst > 1e-5) return 1;

    const double flops = 2.0 * double(s.out_size()) * s.c * K * K;  // each pass
    const double peak = bench::fma_peak_gflops(1.0);
    std::printf("fastest of 50 after a warm-up; FMA peak %.1f GFLOP/s (this core, measured now)\n", peak);
    std::printf("  %-44s %19s %19s %19s\n", "", "forward", "data gradient", "weight gradient");
    const auto row = [&](const char* what, double f, double d, double g) {
        std::printf("  %-44s", what);
        for (double seconds : {f, d, g})
            std::printf(" %7.3f ms (%5.1f%%)", seconds * 1e3, 100.0 * flops / seconds / 1e9 / peak);
        std::printf("\n");
    };
    float *py = y.data(), *pdx = dx.data(), *pdw = dw.data(), *pdb = db.data(), *pscratch = scratch.data();
    const float *px = x.data(), *pw = w.data(), *pb = b.data(), *pdy = dy.data();
    row("the implicit GEMM (conv2d_*_gemm)",
        fastest_s([&] { cpu::conv2d_forward_gemm(py, px, pw, pb, s, pscratch); }),
        fastest_s([&] { cpu::conv2d_backward_data_gemm(pdx, pdy, pw, s, pscratch); }),
        fastest_s([&] { cpu::conv2d_backward_weight_gemm(pdw, pdb, pdy, px, s, pscratch); }));
    row("the trainer's (conv2d_*)",
        fastest_s([&] { cpu::conv2d_forward(py, px, pw, pb, s, pscratch); }),
        fastest_s([&] { cpu::conv2d_backward_data(pdx, pdy, pw, s, pscratch); }),
        fastest_s([&] { cpu::conv2d_backward_weight(pdw, pdb, pdy, px, s, pscratch); }));
    row("kernels/cpu/conv_lanes.cpp (lanes_conv_*)",
        fastest_s([&] { cpu::lanes_conv_forward(py, px, pw, pb, s, pscratch); }),
        fastest_s([&] { cpu::lanes_conv_backward_data(pdx, pdy, pw, s, pscratch); }),
        fastest_s([&] { cpu::lanes_conv_backward_weight(pdw, pdb, pdy, px, s, pscratch); }));
    row("first version, NCHW transposed in and out",
        fastest_s([&] { lanes_conv.forward(py, px, pb); }),
        fastest_s([&] { lanes_conv.backward_data(pdx, pdy); }),
        fastest_s([&] { lanes_conv.backward_weight(pdw, pdb, pdy, px); }));
    Lanes& l = lanes_conv;
    const int groups = (s.n + lanes - 1) / lanes;
    row("first version, the kernels alone",
        fastest_s([&] { for (int g = 0; g < groups; ++g) forward_lanes(l.yl.data(), l.xl.data(), l.wt.data(), s, l.ocp); }),
        fastest_s([&] { for (int g = 0; g < groups; ++g) forward_lanes(l.dxl.data(), l.dyl.data(), l.wback.data(), l.back, l.cp); }),
        fastest_s([&] { for (int g = 0; g < groups; ++g) weight_lanes(pdw, pdb, l.yl.data(), l.xl.data(), s); }));
    return 0;
}
