// The CPU convolution kernels on ResNet-18's convolutions, each shape every
// way it has: the implicit GEMM (conv2d_*_gemm), direct sums over a
// one-channel input (conv_direct.cpp) where they fit, and Winograd's
// F(m x m, 3x3) for each tile m that fits (conv2d_* pick the largest). Each
// is first checked to agree with the implicit GEMM, then timed: the fastest
// of 15 runs after a warm-up, for forward, data gradient and weight gradient, at
// one device's part of the tutorial's batch (128 samples). README "Speed"
// quotes it; it is how winograd.cpp's choices were made.
//   usage: build/bench/conv_cpu [SAMPLES]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cpu/conv_direct.hpp"
#include "fastest.hpp"
#include "cpu/kernels.hpp"
#include "cpu/winograd.hpp"

using namespace dpt;

namespace {

using bench::largest_difference, bench::values;

template <class Run>
double fastest_ms(Run run) {
    return bench::fastest_ms(run, 15);
}

struct Times {
    double forward, data, weight;
};

// One shape's tensors; the kernels leave their results in y, dx, dw and db.
struct Tensors {
    std::vector<float> x, w, b, dy, scratch, y, dx, dw, db;
    explicit Tensors(const ConvShape& s)
        : x(values(s.in_size(), 1)), w(values(s.weight_size(), 2)), b(values(size_t(s.oc), 3)),
          dy(values(s.out_size(), 4)), scratch(cpu::conv2d_scratch_floats(s)), y(s.out_size()), dx(s.in_size()),
          dw(s.weight_size()), db(size_t(s.oc)) {}
};

constexpr int direct = -1;  // time_kernels' "tile" for the direct sums

// Times the three kernels of the implicit GEMM (tile 0), of the direct sums
// (tile direct) or of Winograd's F(tile x tile, 3x3).
Times time_kernels(const ConvShape& s, Tensors& t, int tile) {
    float *y = t.y.data(), *dx = t.dx.data(), *dw = t.dw.data(), *db = t.db.data(), *scratch = t.scratch.data();
    const float *x = t.x.data(), *w = t.w.data(), *b = t.b.data(), *dy = t.dy.data();
    return {fastest_ms([&] {
                if (tile == direct) return cpu::direct_conv_forward(y, x, w, b, s);
                if (tile) return cpu::winograd_forward(y, x, w, b, s, scratch, tile);
                cpu::conv2d_forward_gemm(y, x, w, b, s, scratch);
            }),
            fastest_ms([&] {
                if (tile == direct) return cpu::direct_conv_backward_data(dx, dy, w, s, scratch);
                if (tile) return cpu::winograd_backward_data(dx, dy, w, s, scratch, tile);
                cpu::conv2d_backward_data_gemm(dx, dy, w, s, scratch);
            }),
            fastest_ms([&] {  // the weight gradient accumulates: each run starts from zero
                std::fill(t.dw.begin(), t.dw.end(), 0.0f), std::fill(t.db.begin(), t.db.end(), 0.0f);
                if (tile == direct) return cpu::direct_conv_backward_weight(dw, db, dy, x, s);
                if (tile) return cpu::winograd_backward_weight(dw, db, dy, x, s, scratch, tile);
                cpu::conv2d_backward_weight_gemm(dw, db, dy, x, s, scratch);
            })};
}

}  // namespace

int main(int argc, char** argv) {
    const int n = argc > 1 ? std::atoi(argv[1]) : 128;
    if (n < 1) {
        std::fprintf(stderr, "conv_cpu: SAMPLES must be at least 1\n");
        return 2;
    }
    // ResNet-18's convolutions (src/model/resnet.hpp), once each shape.
    const ConvShape shapes[] = {
        {n, 1, 28, 28, 64, 3, 3, 1, 0},     // the stem
        {n, 64, 12, 12, 64, 3, 3, 1, 1},    // residual 64 (x4)
        {n, 64, 12, 12, 128, 3, 3, 2, 1},   // residual 128/2, first conv
        {n, 64, 12, 12, 128, 1, 1, 2, 0},   // its 1x1 shortcut
        {n, 128, 6, 6, 128, 3, 3, 1, 1},    // residual 128 (x3)
        {n, 128, 6, 6, 256, 3, 3, 2, 1},    // residual 256/2, first conv
        {n, 128, 6, 6, 256, 1, 1, 2, 0},    // its 1x1 shortcut
        {n, 256, 3, 3, 256, 3, 3, 1, 1},    // residual 256 (x3)
    };
    std::printf("%-26s %-10s %9s %9s %9s   %s\n", "shape (n c hxw -> oc k/s)", "algorithm", "forward", "data", "weight",
                "ms, fastest of 15; * what conv2d_* take");
    for (const ConvShape& s : shapes) {
        Tensors t(s);
        char name[64];
        std::snprintf(name, sizeof name, "%d %d %dx%d -> %d %dx%d/%d", s.n, s.c, s.h, s.w, s.oc, s.kh, s.kw, s.stride);
        const Times gemm = time_kernels(s, t, 0);
        std::printf("%-26s %-10s %9.2f %9.2f %9.2f\n", name, "gemm", gemm.forward, gemm.data, gemm.weight);
        const auto want_y = t.y, want_dx = t.dx, want_dw = t.dw;
        for (int tile : {direct, 2, 3, 4}) {
            if (tile == direct ? !cpu::direct_conv_fits(s) : !cpu::winograd_tile_fits(s, tile)) continue;
            const Times other = time_kernels(s, t, tile);
            // The two sum in another order: they agree to rounding, a few
            // 1e-7 of the largest value (1e-6 for the larger tiles); a
            // broken transform or tap is off by whole values.
            const double off = std::max({largest_difference(t.y, want_y), largest_difference(t.dx, want_dx),
                                         largest_difference(t.dw, want_dw)});
            char algorithm[32];
            if (tile == direct) {
                std::snprintf(algorithm, sizeof algorithm, "direct*");
            } else {
                const bool taken = tile == cpu::winograd_tile(s);
                std::snprintf(algorithm, sizeof algorithm, "F(%dx%d)%s", tile, tile, taken ? "*" : "");
            }
            std::printf("%-26s %-10s %9.2f %9.2f %9.2f   %.2fx %.2fx %.2fx faster; agrees with gemm to %.1e\n", "",
                        algorithm, other.forward, other.data, other.weight, gemm.forward / other.forward,
                        gemm.data / other.data, gemm.weight / other.weight, off);
            if (off > 1e-4) {
                std::fprintf(stderr, "conv_cpu: %s and gemm disagree on %s (%.1e of the largest value)\n", algorithm,
                             name, off);
                return 1;
            }
        }
    }
}
