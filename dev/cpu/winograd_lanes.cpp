// LeNet's conv2 (20 -> 50 channels, 5x5, 13x13 -> 9x9) as Winograd's
// F(3x3, 5x5) with the batch in the vector lanes: the first version of the
// trainer's kernels/cpu/winograd_lanes.cpp (forward and data gradient, the
// filters transformed in double), and the weight gradient as the
// transform's adjoint, which the trainer does not take (it is slower than
// the direct sums). Each against the trainer's direct sums in the lanes
// (kernels/cpu/conv_lanes.cpp: lanes_conv_*), and the trainer's conv2d_*.
//
// The 9x9 outputs are 3 x 3 tiles of 3 x 3, each from a 7x7 input patch:
//   y_t[o] = A^T [ sum_c U[o][c] (.) V_t[c] ] A,  V = B^T d B,  U = G g G^T,
// 49 products per tile and channel pair where the direct sums take 225:
// 4.6 times fewer, for the price of the transforms (V: 20 channels x 9
// tiles a group of 16 samples; y: 50 x 9). The products run as 49
// independent sums over the 20 input channels, each a register tile of 5
// output channels x 3 tiles, the transformed filters broadcast. Every
// transform is the same arithmetic on 16 samples at once: one vector
// operation a term, the zero coefficients left out when compiled.
//
// The matrices are Toom-Cook's at the points 0, 1, -1, 2, -2, 1/2 and
// infinity (derived exactly; each row of B^T scaled to the smallest
// integers, G the other way): the 1/2 and the 2s amplify rounding, and the
// program prints how far the result is from the direct sums'.
//   usage: build/dev/cpu/winograd_lanes [SAMPLES]     (default 32: a CPU device's chunk)
// Exit status: 1 when the two disagree by more than 1e-4 of the largest value.
#include <algorithm>
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
using cpu::detail::lane_sum, cpu::detail::lanes, cpu::detail::load, cpu::detail::splat, cpu::detail::store,
    cpu::detail::vf;

namespace {

constexpr int K = 5, M = 3, N = M + K - 1;  // F(3x3, 5x5): 7x7 patches
constexpr double AT[M][N] = {{1, 1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0.5, 0}, {0, 1, 1, 4, 4, 0.25, 1}};
constexpr double G[N][K] = {{1.0 / 4, 0, 0, 0, 0},
                            {1.0 / 6, 1.0 / 6, 1.0 / 6, 1.0 / 6, 1.0 / 6},
                            {1.0 / 18, -1.0 / 18, 1.0 / 18, -1.0 / 18, 1.0 / 18},
                            {1.0 / 72, 1.0 / 36, 1.0 / 18, 1.0 / 9, 2.0 / 9},
                            {1.0 / 120, -1.0 / 60, 1.0 / 30, -1.0 / 15, 2.0 / 15},
                            {32.0 / 45, 16.0 / 45, 8.0 / 45, 4.0 / 45, 2.0 / 45},
                            {0, 0, 0, 0, 1.0 / 2}};
constexpr float BT[N][N] = {{4, -8, -5, 10, 1, -2, 0},  {0, -4, 4, 9, -1, -2, 0}, {0, -4, 12, -7, -3, 2, 0},
                            {0, 2, -3, -4, 3, 2, 0},    {0, 2, -5, 0, 5, -2, 0},  {0, 4, 0, -5, 0, 1, 0},
                            {0, -4, 8, 5, -10, -1, 2}};
// Their transposes, for the data gradient: the adjoint of each map.
template <int R, int C, class T>
constexpr auto transposed(const T (&m)[R][C]) {
    struct {
        T a[C][R];
    } t{};
    for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) t.a[j][i] = m[i][j];
    return t;
}
constexpr auto A = transposed<M, N>(AT);
constexpr auto B = transposed<N, N>(BT);
constexpr int tiles_side = 3, tiles = tiles_side * tiles_side;  // 9x9 outputs
constexpr int xis = N * N;                                      // the transformed tile's elements
constexpr int OB = 5, TB = 3;  // the forward products' register tile: output channels x tiles
constexpr int CB = 5;          // the data gradient's: input channels x TB tiles
constexpr int WO = 4;          // the weight gradient's: output channels x CB input channels

// out[i] = sum_j T[i][j] * in[j * stride], j over the nonzero coefficients (fixed when compiled).
template <int Rows, int Cols, class T>
[[gnu::always_inline]] inline void transform(vf* out, int out_stride, const vf* in, int in_stride,
                                             const T (&m)[Rows][Cols]) {
#pragma GCC unroll 8
    for (int i = 0; i < Rows; ++i) {
        vf sum{};
        bool first = true;
#pragma GCC unroll 8
        for (int j = 0; j < Cols; ++j) {
            if (m[i][j] == 0) continue;
            const vf term = m[i][j] == 1 ? in[j * in_stride] : float(m[i][j]) * in[j * in_stride];
            sum = first ? term : sum + term;
            first = false;
        }
        out[i * out_stride] = sum;
    }
}

struct Winograd {
    const ConvShape& s;
    int ocp;                  // oc rounded up to OB
    std::vector<float> u;     // U[xi][c][ocp]
    std::vector<float> xl, yl;  // a group of images and outputs in the lanes
    std::vector<vf> v, m;     // V[xi][c][tile], M[xi][o][tile]

    Winograd(const ConvShape& shape, const std::vector<float>& w)
        : s(shape),
          ocp((shape.oc + OB - 1) / OB * OB),
          u(size_t(xis) * shape.c * ocp, 0.0f),
          xl(size_t(shape.c) * shape.h * shape.w * lanes),
          yl(size_t(shape.oc) * shape.oh() * shape.ow() * lanes),
          v(size_t(xis) * shape.c * tiles),
          m(size_t(xis) * ocp * tiles) {
        for (int o = 0; o < s.oc; ++o)  // U = G g G^T, in double, rounded once
            for (int c = 0; c < s.c; ++c) {
                const float* g = w.data() + (size_t(o) * s.c + c) * K * K;
                double gg[N][K] = {};
                for (int i = 0; i < N; ++i)
                    for (int k = 0; k < K; ++k)
                        for (int j = 0; j < K; ++j) gg[i][k] += G[i][j] * g[j * K + k];
                for (int i = 0; i < N; ++i)
                    for (int k = 0; k < N; ++k) {
                        double sum = 0;
                        for (int j = 0; j < K; ++j) sum += gg[i][j] * G[k][j];
                        u[(size_t(i * N + k) * s.c + c) * ocp + o] = float(sum);
                    }
            }
    }

    // V[xi][c][t] = (B^T d B)[xi] for every input channel and tile of the group in xl.
    void input_transform() {
        for (int c = 0; c < s.c; ++c)
            for (int t = 0; t < tiles; ++t) {
                const int y0 = t / tiles_side * M, x0 = t % tiles_side * M;
                vf d[N][N], bd[N][N], out[N][N];
                for (int i = 0; i < N; ++i)
                    for (int j = 0; j < N; ++j) d[i][j] = load(xl.data() + ((size_t(c) * s.h + y0 + i) * s.w + x0 + j) * lanes);
                for (int j = 0; j < N; ++j) transform(&bd[0][j], N, &d[0][j], N, BT);    // columns: B^T d
                for (int i = 0; i < N; ++i) transform(&out[i][0], 1, &bd[i][0], 1, BT);  // rows: (B^T d) B
                for (int i = 0; i < N; ++i)
                    for (int j = 0; j < N; ++j) v[(size_t(i * N + j) * s.c + c) * tiles + t] = out[i][j];
            }
    }

    // M[xi][o][t] = sum_c U[xi][c][o] * V[xi][c][t]: OB channels x TB tiles at a time.
    void products() {
        for (int xi = 0; xi < xis; ++xi) {
            const float* uxi = u.data() + size_t(xi) * s.c * ocp;
            const vf* vxi = v.data() + size_t(xi) * s.c * tiles;
            vf* mxi = m.data() + size_t(xi) * ocp * tiles;
            for (int o = 0; o < ocp; o += OB)
                for (int t = 0; t < tiles; t += TB) {
                    vf acc[OB][TB] = {};
                    for (int c = 0; c < s.c; ++c) {
                        vf in[TB];
#pragma GCC unroll 4
                        for (int j = 0; j < TB; ++j) in[j] = vxi[c * tiles + t + j];
#pragma GCC unroll 8
                        for (int b = 0; b < OB; ++b) {
                            const vf wv = splat(uxi[c * ocp + o + b]);
#pragma GCC unroll 4
                            for (int j = 0; j < TB; ++j) acc[b][j] += wv * in[j];
                        }
                    }
                    for (int b = 0; b < OB; ++b)
                        for (int j = 0; j < TB; ++j) mxi[(o + b) * tiles + t + j] = acc[b][j];
                }
        }
    }

    // y tile = A^T M A + bias, into yl.
    void output_transform(const float* bias) {
        const int oh = s.oh(), ow = s.ow();
        for (int o = 0; o < s.oc; ++o)
            for (int t = 0; t < tiles; ++t) {
                vf mm[N][N], am[M][N], out[M][M];
                for (int i = 0; i < N; ++i)
                    for (int j = 0; j < N; ++j) mm[i][j] = m[(size_t(i * N + j) * ocp + o) * tiles + t];
                for (int j = 0; j < N; ++j) transform(&am[0][j], N, &mm[0][j], N, AT);  // columns: A^T M
                for (int i = 0; i < M; ++i) transform(&out[i][0], 1, &am[i][0], 1, AT);  // rows: (A^T M) A
                const int y0 = t / tiles_side * M, x0 = t % tiles_side * M;
                const vf b = splat(bias[o]);
                for (int i = 0; i < M; ++i)
                    for (int j = 0; j < M; ++j)
                        store(yl.data() + ((size_t(o) * oh + y0 + i) * ow + x0 + j) * lanes, out[i][j] + b);
            }
    }

    // M[xi][o][t] = (A dy_t A^T)[xi]: the output gradient's tiles of the group in yl, turned back
    // through the forward's last transform.
    void gradient_transform() {
        const int oh = s.oh(), ow = s.ow();
        for (int o = 0; o < s.oc; ++o)
            for (int t = 0; t < tiles; ++t) {
                const int y0 = t / tiles_side * M, x0 = t % tiles_side * M;
                vf g[M][M], ag[N][M], out[N][N];
                for (int i = 0; i < M; ++i)
                    for (int j = 0; j < M; ++j) g[i][j] = load(yl.data() + ((size_t(o) * oh + y0 + i) * ow + x0 + j) * lanes);
                for (int j = 0; j < M; ++j) transform(&ag[0][j], M, &g[0][j], M, A.a);   // columns: A dy
                for (int i = 0; i < N; ++i) transform(&out[i][0], 1, &ag[i][0], 1, A.a);  // rows: (A dy) A^T
                for (int i = 0; i < N; ++i)
                    for (int j = 0; j < N; ++j) m[(size_t(i * N + j) * ocp + o) * tiles + t] = out[i][j];
            }
    }

    // The data gradient as the adjoint of the forward, tile by tile:
    // dM_o = A dy_t A^T, dV_c = sum_o U[o][c] (.) dM_o, and each patch's
    // B dV B^T added into dx (the 7x7 patches overlap). The products are the
    // forward's, 50 deep instead of 20: 5 input channels x 3 tiles.
    void backward_data(float* dx, const float* dy) {
        const size_t in_planes = size_t(s.c) * s.h * s.w, out_planes = size_t(s.oc) * s.oh() * s.ow();
        std::vector<vf>& dmo = m;  // dM[xi][o][t]
        std::vector<vf>& dmc = v;  // dV[xi][c][t]
        for (int first = 0; first < s.n; first += lanes) {
            const int count = std::min(lanes, s.n - first);
            cpu::lanes_transpose_in(yl.data(), dy + first * out_planes, out_planes, count);
            gradient_transform();
            for (int xi = 0; xi < xis; ++xi) {
                const float* uxi = u.data() + size_t(xi) * s.c * ocp;
                const vf* mxi = dmo.data() + size_t(xi) * ocp * tiles;
                vf* vxi = dmc.data() + size_t(xi) * s.c * tiles;
                for (int c = 0; c < s.c; c += CB)
                    for (int t = 0; t < tiles; t += TB) {
                        vf acc[CB][TB] = {};
                        for (int o = 0; o < s.oc; ++o) {
                            vf in[TB];
#pragma GCC unroll 4
                            for (int j = 0; j < TB; ++j) in[j] = mxi[o * tiles + t + j];
#pragma GCC unroll 8
                            for (int b = 0; b < CB; ++b) {
                                const vf wv = splat(uxi[std::min(c + b, s.c - 1) * ocp + o]);
#pragma GCC unroll 4
                                for (int j = 0; j < TB; ++j) acc[b][j] += wv * in[j];
                            }
                        }
                        for (int b = 0; b < CB && c + b < s.c; ++b)
                            for (int j = 0; j < TB; ++j) vxi[(c + b) * tiles + t + j] = acc[b][j];
                    }
            }
            std::fill(xl.begin(), xl.end(), 0.0f);
            for (int c = 0; c < s.c; ++c)
                for (int t = 0; t < tiles; ++t) {
                    const int y0 = t / tiles_side * M, x0 = t % tiles_side * M;
                    vf dv[N][N], bd[N][N], out[N][N];
                    for (int i = 0; i < N; ++i)
                        for (int j = 0; j < N; ++j) dv[i][j] = dmc[(size_t(i * N + j) * s.c + c) * tiles + t];
                    for (int j = 0; j < N; ++j) transform(&bd[0][j], N, &dv[0][j], N, B.a);   // columns: B dV
                    for (int i = 0; i < N; ++i) transform(&out[i][0], 1, &bd[i][0], 1, B.a);  // rows: (B dV) B^T
                    for (int i = 0; i < N; ++i)
                        for (int j = 0; j < N; ++j) {
                            float* at = xl.data() + ((size_t(c) * s.h + y0 + i) * s.w + x0 + j) * lanes;
                            store(at, load(at) + out[i][j]);
                        }
                }
            cpu::lanes_transpose_out(dx + first * in_planes, xl.data(), in_planes, count);
        }
    }

    // The weight gradient as the adjoint too: dU[xi][o][c] = the sum over
    // tiles and lanes of dM_o[xi] * V_c[xi], then dw = G^T dU G. The products
    // keep 4 output x 5 input channels of per-lane sums in registers over a
    // group's 9 tiles, then add their lanes up: one lane sum a product's 9
    // multiply-adds.
    void backward_weight(float* dw, const float* dy, const float* x) {
        const size_t in_planes = size_t(s.c) * s.h * s.w, out_planes = size_t(s.oc) * s.oh() * s.ow();
        std::vector<double> du(size_t(xis) * s.oc * s.c, 0.0);
        for (int first = 0; first < s.n; first += lanes) {
            const int count = std::min(lanes, s.n - first);
            cpu::lanes_transpose_in(xl.data(), x + first * in_planes, in_planes, count);
            input_transform();
            cpu::lanes_transpose_in(yl.data(), dy + first * out_planes, out_planes, count);
            gradient_transform();
            for (int xi = 0; xi < xis; ++xi) {
                const vf* mxi = m.data() + size_t(xi) * ocp * tiles;
                const vf* vxi = v.data() + size_t(xi) * s.c * tiles;
                for (int o = 0; o < s.oc; o += WO)
                    for (int c = 0; c < s.c; c += CB) {
                        vf acc[WO][CB] = {};
                        for (int t = 0; t < tiles; ++t) {
                            vf in[CB];
#pragma GCC unroll 8
                            for (int b = 0; b < CB; ++b) in[b] = vxi[std::min(c + b, s.c - 1) * tiles + t];
#pragma GCC unroll 8
                            for (int a = 0; a < WO; ++a) {
                                const vf gm = mxi[std::min(o + a, s.oc - 1) * tiles + t];
#pragma GCC unroll 8
                                for (int b = 0; b < CB; ++b) acc[a][b] += gm * in[b];
                            }
                        }
                        for (int a = 0; a < WO && o + a < s.oc; ++a)
                            for (int b = 0; b < CB && c + b < s.c; ++b)
                                du[(size_t(xi) * s.oc + o + a) * s.c + c + b] += lane_sum(acc[a][b]);
                    }
            }
        }
        for (int o = 0; o < s.oc; ++o)  // dw += G^T dU G
            for (int c = 0; c < s.c; ++c)
                for (int ka = 0; ka < K; ++ka)
                    for (int kb = 0; kb < K; ++kb) {
                        double sum = 0;
                        for (int i = 0; i < N; ++i)
                            for (int j = 0; j < N; ++j)
                                sum += G[i][ka] * du[(size_t(i * N + j) * s.oc + o) * s.c + c] * G[j][kb];
                        dw[(size_t(o) * s.c + c) * K * K + ka * K + kb] += float(sum);
                    }
    }

    void forward(float* y, const float* x, const float* bias) {
        const size_t in_planes = size_t(s.c) * s.h * s.w, out_planes = size_t(s.oc) * s.oh() * s.ow();
        for (int first = 0; first < s.n; first += lanes) {
            const int count = std::min(lanes, s.n - first);
            cpu::lanes_transpose_in(xl.data(), x + first * in_planes, in_planes, count);
            input_transform();
            products();
            output_transform(bias);
            cpu::lanes_transpose_out(y + first * out_planes, yl.data(), out_planes, count);
        }
    }
};

}  // namespace

int main(int argc, char** argv) {
    const int n = argc > 1 ? std::atoi(argv[1]) : 32;
    if (n < 1) {
        std::fprintf(stderr, "winograd_lanes: SAMPLES must be at least 1\n");
        return 2;
    }
    const ConvShape s{n, 20, 13, 13, 50, K, K, 1, 0};  // LeNet's conv2
    const std::vector<float> x = bench::values(s.in_size(), 1), w = bench::values(s.weight_size(), 2),
                             b = bench::values(size_t(s.oc), 3);
    std::vector<float> want(s.out_size()), got(s.out_size()), scratch(cpu::lanes_conv_scratch_floats(s));
    Winograd winograd(s, w);
    const std::vector<float> dy = bench::values(s.out_size(), 4);
    std::vector<float> want_dx(s.in_size()), got_dx(s.in_size());
    std::vector<float> want_dw(s.weight_size(), 0.0f), got_dw(s.weight_size(), 0.0f), db(size_t(s.oc), 0.0f);
    cpu::lanes_conv_forward(want.data(), x.data(), w.data(), b.data(), s, scratch.data());
    winograd.forward(got.data(), x.data(), b.data());
    cpu::lanes_conv_backward_data(want_dx.data(), dy.data(), w.data(), s, scratch.data());
    winograd.backward_data(got_dx.data(), dy.data());
    cpu::lanes_conv_backward_weight(want_dw.data(), db.data(), dy.data(), x.data(), s, scratch.data());
    winograd.backward_weight(got_dw.data(), dy.data(), x.data());
    // The largest difference, as a share of the largest value: rounding
    // amplified by the transforms' entries (up to 12 in B^T, 4 in A^T) is a
    // few 1e-6; a wrong coefficient or tile offset is off by whole values.
    const auto off = bench::largest_difference;
    const double off_y = off(got, want), off_dx = off(got_dx, want_dx), off_dw = off(got_dw, want_dw);
    std::printf("conv2, %d samples: F(3x3, 5x5) and its adjoints agree with the direct sums to %.1e (forward), "
                "%.1e (data gradient), %.1e (weight gradient) of the largest value\n", n, off_y, off_dx, off_dw);
    if (std::max({off_y, off_dx, off_dw}) > 1e-4) return 1;

    std::vector<float> trainer_scratch(cpu::conv2d_scratch_floats(s));
    const double flops = 2.0 * double(s.out_size()) * s.c * K * K;  // the direct sums' count, for both
    const double peak = bench::fma_peak_gflops(1.0);
    const double direct = bench::fastest_ms([&] {
        cpu::lanes_conv_forward(want.data(), x.data(), w.data(), b.data(), s, scratch.data());
    }, 50);
    const double wino = bench::fastest_ms([&] { winograd.forward(got.data(), x.data(), b.data()); }, 50);
    std::printf("fastest of 50 after a warm-up; FMA peak %.1f GFLOP/s (this core, measured now); the share of it\n"
                "counts the direct sums' FLOPs for both (Winograd's, fewer, pass 100%%)\n", peak);
    const auto row = [&](const char* what, double ms, double against) {
        std::printf("  %-58s %7.3f ms (%5.1f%%)", what, ms, 100.0 * flops / ms / 1e6 / peak);
        if (against > 0) std::printf(": %.2fx", against / ms);
        std::printf("\n");
    };
    row("forward, direct sums (lanes_conv_forward)", direct, 0);
    row("forward, F(3x3, 5x5), first version", wino, direct);
    row("forward, the trainer's (conv2d_forward)", bench::fastest_ms([&] {
        cpu::conv2d_forward(got.data(), x.data(), w.data(), b.data(), s, trainer_scratch.data());
    }, 50), direct);
    const double direct_dx = bench::fastest_ms([&] {
        cpu::lanes_conv_backward_data(want_dx.data(), dy.data(), w.data(), s, scratch.data());
    }, 50);
    const double wino_dx = bench::fastest_ms([&] { winograd.backward_data(got_dx.data(), dy.data()); }, 50);
    row("data gradient, direct sums (lanes_conv_backward_data)", direct_dx, 0);
    row("data gradient, F(3x3, 5x5)'s adjoint, first version", wino_dx, direct_dx);
    row("data gradient, the trainer's (conv2d_backward_data)", bench::fastest_ms([&] {
        cpu::conv2d_backward_data(got_dx.data(), dy.data(), w.data(), s, trainer_scratch.data());
    }, 50), direct_dx);
    float* pdb = db.data();
    const double direct_dw = bench::fastest_ms([&] {
        cpu::lanes_conv_backward_weight(want_dw.data(), pdb, dy.data(), x.data(), s, scratch.data());
    }, 50);
    const double wino_dw = bench::fastest_ms([&] { winograd.backward_weight(got_dw.data(), dy.data(), x.data()); }, 50);
    row("weight gradient, direct sums (lanes_conv_backward_weight)", direct_dw, 0);
    row("weight gradient, F(3x3, 5x5)'s adjoint, first version", wino_dw, direct_dw);
    row("weight gradient, the trainer's (conv2d_backward_weight)", bench::fastest_ms([&] {
        cpu::conv2d_backward_weight(got_dw.data(), pdb, dy.data(), x.data(), s, trainer_scratch.data());
    }, 50), direct_dw);
    return 0;
}
