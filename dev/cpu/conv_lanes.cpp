// Experiment, not yet in the trainer: a convolution with the batch in the
// vector lanes, against the trainer's implicit GEMM (kernels/cpu/conv.cpp)
// on LeNet's conv2 (20 -> 50 channels, 5x5, 13x13 -> 9x9), forward only.
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
// weight is one broadcast for 5 FMAs. Every sum adds its products in (c,
// ki, kj) order, as the GEMM's k does.
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
#include "cpu/kernels.hpp"

using namespace dpt;

namespace {

constexpr int K = 5;  // kernel size (LeNet's conv2)
// Samples a vector, and the register tile: output channels x output pixels.
// AVX-512: 4 x 5 sums + 9 inputs + a broadcast, 30 of 32 registers; AVX2:
// 2 x 3 sums + 7 inputs + a broadcast, 14 of 16.
#if defined(__AVX512F__)
constexpr int lanes = 16, OCB = 4, OXT = 5;
#else
constexpr int lanes = 8, OCB = 2, OXT = 3;
#endif
using vf = float __attribute__((vector_size(lanes * sizeof(float))));

inline vf load(const float* p) {
    vf v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
// Every lane = s. (An initializer list: vf{} + s would add -0 + s, a vector add per broadcast.)
template <size_t... Lane>
inline vf splat(float s, std::index_sequence<Lane...>) {
    return vf{((void)Lane, s)...};
}
inline vf splat(float s) { return splat(s, std::make_index_sequence<lanes>{}); }

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

// (n, planes) NCHW samples first.. first+lanes <-> [planes][lanes] (missing samples: zeros).
void to_lanes(float* dst, const float* src, size_t planes, int n, int first) {
    for (size_t p = 0; p < planes; ++p)
        for (int l = 0; l < lanes; ++l) dst[p * lanes + l] = first + l < n ? src[size_t(first + l) * planes + p] : 0.0f;
}
void from_lanes(float* dst, const float* src, size_t planes, int n, int first) {
    for (int l = 0; l < lanes && first + l < n; ++l)
        for (size_t p = 0; p < planes; ++p) dst[size_t(first + l) * planes + p] = src[p * lanes + l];
}

// The whole forward from NCHW to NCHW, with the bias: what conv2d_forward does.
struct LanesForward {
    const ConvShape& s;
    int ocp;
    std::vector<float> wt, xl, yl;
    LanesForward(const ConvShape& shape, const std::vector<float>& w)
        : s(shape), ocp((shape.oc + OCB - 1) / OCB * OCB), wt(size_t(shape.c) * K * K * ocp, 0.0f),
          xl(size_t(shape.c) * shape.h * shape.w * lanes), yl(size_t(shape.oc) * shape.oh() * shape.ow() * lanes) {
        for (int o = 0; o < s.oc; ++o)
            for (int c = 0; c < s.c; ++c)
                for (int k = 0; k < K * K; ++k) wt[(size_t(c) * K * K + k) * ocp + o] = w[(size_t(o) * s.c + c) * K * K + k];
    }
    void operator()(float* y, const float* x, const float* b) {
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
                             b = bench::values(size_t(s.oc), 3);
    std::vector<float> want(s.out_size()), got(s.out_size()), scratch(cpu::conv2d_scratch_floats(s));
    LanesForward lanes_forward(s, w);

    cpu::conv2d_forward(want.data(), x.data(), w.data(), b.data(), s, scratch.data());
    lanes_forward(got.data(), x.data(), b.data());
    double worst = 0, scale = 1e-30;
    for (size_t i = 0; i < got.size(); ++i) {
        worst = std::max(worst, double(std::abs(got[i] - want[i])));
        scale = std::max(scale, double(std::abs(want[i])));
    }
    // The same products summed in another grouping: rounding, a few 1e-7
    // of the largest value; a wrong tap or lane is off by whole values.
    std::printf("conv2 forward, %d samples: the lanes' result agrees with conv2d_forward to %.1e of the largest value\n",
                n, worst / scale);
    if (worst / scale > 1e-5) return 1;

    const double flops = 2.0 * double(s.out_size()) * s.c * K * K;
    const double peak = bench::fma_peak_gflops(1.0);
    const double trainer = fastest_s([&] { cpu::conv2d_forward(want.data(), x.data(), w.data(), b.data(), s, scratch.data()); });
    const double whole = fastest_s([&] { lanes_forward(got.data(), x.data(), b.data()); });
    const double kernel = fastest_s([&] {
        for (int first = 0; first < s.n; first += lanes)
            forward_lanes(lanes_forward.yl.data(), lanes_forward.xl.data(), lanes_forward.wt.data(), s, lanes_forward.ocp);
    });
    const auto row = [&](const char* what, double seconds) {
        std::printf("  %-44s %8.3f ms %7.1f GFLOP/s %5.1f%% of peak\n", what, seconds * 1e3, flops / seconds / 1e9,
                    100.0 * flops / seconds / 1e9 / peak);
    };
    std::printf("fastest of 50 after a warm-up; FMA peak %.1f GFLOP/s (this core, measured now)\n", peak);
    row("conv2d_forward (the trainer's implicit GEMM)", trainer);
    row("lanes: transpose in, kernel, transpose out", whole);
    row("lanes: the kernel alone", kernel);
    return 0;
}
