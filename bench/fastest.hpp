// What the CPU kernel benchmarks share (bench/conv_cpu.cpp, dev/cpu/): fixed
// pseudo-random inputs, how far two results are apart, and the fastest of
// several timed runs.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <vector>

namespace dpt::bench {

// n values in [-1, 1], the same for the same seed on every machine.
inline std::vector<float> values(size_t n, unsigned seed) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = float(((i * 2654435761u + seed * 40503u) >> 8) % 2001) / 1000.0f - 1.0f;
    return v;
}

// The largest |got - want|, as a share of the largest |want|: two orders of
// the same sums agree to a few 1e-7 (more through Winograd's transforms); a
// wrong index is off by whole values.
inline double largest_difference(const std::vector<float>& got, const std::vector<float>& want) {
    double worst = 0.0, scale = 1e-30;
    for (size_t i = 0; i < got.size(); ++i) {
        worst = std::max(worst, double(std::abs(got[i] - want[i])));
        scale = std::max(scale, double(std::abs(want[i])));
    }
    return worst / scale;
}

// Milliseconds: the fastest of `runs` runs after one warm-up run (the
// first touch of the scratch and the outputs).
template <class Run>
double fastest_ms(Run run, int runs) {
    run();
    double best = 1e30;
    for (int i = 0; i < runs; ++i) {
        const auto start = std::chrono::steady_clock::now();
        run();
        best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    return best;
}

}  // namespace dpt::bench
