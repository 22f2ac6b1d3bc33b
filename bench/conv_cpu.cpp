// The CPU convolution kernels on ResNet-18's convolutions, each shape both
// ways where it has two: Winograd's F(2x2, 3x3) (what conv2d_* pick for 3x3
// convolutions of stride 1 on even maps) and the implicit GEMM
// (conv2d_*_gemm). Each pair is first checked to agree, then timed: the
// fastest of 15 runs after a warm-up, for forward, data gradient and weight
// gradient, at one device's part of the tutorial's batch (128 samples).
// README "Speed" quotes it; it is how winograd.cpp's choices were made.
//   usage: build/bench/conv_cpu [SAMPLES]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cpu/kernels.hpp"
#include "cpu/winograd.hpp"

using namespace dpt;

namespace {

std::vector<float> values(size_t n, unsigned seed) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = float(((i * 2654435761u + seed * 40503u) >> 8) % 2001) / 1000.0f - 1.0f;
    return v;
}

template <class Run>
double fastest_ms(Run run) {
    run();  // warm-up: first touch of the scratch and the outputs
    double best = 1e30;
    for (int i = 0; i < 15; ++i) {
        const auto start = std::chrono::steady_clock::now();
        run();
        best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    return best;
}

double largest_difference(const std::vector<float>& a, const std::vector<float>& b) {
    double worst = 0.0, scale = 1e-30;
    for (size_t i = 0; i < a.size(); ++i) {
        worst = std::max(worst, double(std::abs(a[i] - b[i])));
        scale = std::max(scale, double(std::abs(b[i])));
    }
    return worst / scale;
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

// Times the three kernels of the implicit GEMM, or of what conv2d_* pick.
Times time_kernels(const ConvShape& s, Tensors& t, bool gemm) {
    const auto forward = gemm ? cpu::conv2d_forward_gemm : cpu::conv2d_forward;
    const auto data = gemm ? cpu::conv2d_backward_data_gemm : cpu::conv2d_backward_data;
    const auto weight = gemm ? cpu::conv2d_backward_weight_gemm : cpu::conv2d_backward_weight;
    return {fastest_ms([&] { forward(t.y.data(), t.x.data(), t.w.data(), t.b.data(), s, t.scratch.data()); }),
            fastest_ms([&] { data(t.dx.data(), t.dy.data(), t.w.data(), s, t.scratch.data()); }),
            fastest_ms([&] {  // the weight gradient accumulates: each run starts from zero
                std::fill(t.dw.begin(), t.dw.end(), 0.0f), std::fill(t.db.begin(), t.db.end(), 0.0f);
                weight(t.dw.data(), t.db.data(), t.dy.data(), t.x.data(), s, t.scratch.data());
            })};
}

}  // namespace

int main(int argc, char** argv) {
    const int n = argc > 1 ? std::atoi(argv[1]) : 128;
    if (n < 1) {
        std::fprintf(stderr, "conv_cpu: SAMPLES must be at least 1\n");
        return 2;
    }
    // ResNet-18's convolutions (src/resnet.hpp), once each shape.
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
                "ms, fastest of 15");
    for (const ConvShape& s : shapes) {
        Tensors t(s);
        char name[64];
        std::snprintf(name, sizeof name, "%d %d %dx%d -> %d %dx%d/%d", s.n, s.c, s.h, s.w, s.oc, s.kh, s.kw, s.stride);
        const Times gemm = time_kernels(s, t, true);
        std::printf("%-26s %-10s %9.2f %9.2f %9.2f\n", name, "gemm", gemm.forward, gemm.data, gemm.weight);
        if (!cpu::winograd_fits(s)) continue;

        const auto want_y = t.y, want_dx = t.dx, want_dw = t.dw;
        const Times wino = time_kernels(s, t, false);
        // The two sum in another order: they agree to rounding, a few 1e-7 of
        // the largest value; a broken transform is off by whole values.
        const double off = std::max({largest_difference(t.y, want_y), largest_difference(t.dx, want_dx),
                                     largest_difference(t.dw, want_dw)});
        std::printf("%-26s %-10s %9.2f %9.2f %9.2f   %.2fx %.2fx %.2fx faster; agrees with gemm to %.1e of the largest\n",
                    "", "winograd", wino.forward, wino.data, wino.weight, gemm.forward / wino.forward,
                    gemm.data / wino.data, gemm.weight / wino.weight, off);
        if (off > 1e-4) {
            std::fprintf(stderr, "conv_cpu: winograd and gemm disagree on %s (%.1e of the largest value)\n", name, off);
            return 1;
        }
    }
}
