// The FP32 peak of the core this thread runs on, measured: independent
// chains of vector fused multiply-adds (GCC/Clang vector extensions, the
// width the build targets), enough of them to cover the FMA units' latency.
// Used by fma_peak.cpp (scripts/bench_cpu.sh) and layers_cpu.cpp.
#pragma once
#include <chrono>

namespace dpt::bench {

// GFLOP/s: the best 0.1 s window within `seconds`. (On a shared machine a
// window can lose its core to another program; the peak is the best rate.)
inline double fma_peak_gflops(double seconds) {
#if defined(__AVX512F__)
    constexpr int lanes = 16;
#else
    constexpr int lanes = 8;
#endif
    using vf = float __attribute__((vector_size(lanes * sizeof(float))));
    constexpr int chains = 12;  // >= FMA latency (4) x units (2), with room
    vf acc[chains], mul, add;
    for (int l = 0; l < lanes; ++l) mul[l] = 0.9999999f, add[l] = 1e-7f;
    for (int c = 0; c < chains; ++c) acc[c] = mul * float(c + 1);
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    double best = 0.0;
    while (std::chrono::duration<double>(clock::now() - start).count() < seconds) {
        const auto window = clock::now();
        long rounds = 0;
        double elapsed = 0.0;
        while (elapsed < 0.1) {
            for (int i = 0; i < 10000; ++i)
#pragma GCC unroll 16  // every chain in its own register
                for (int c = 0; c < chains; ++c) acc[c] = acc[c] * mul + add;
            rounds += 10000;
            elapsed = std::chrono::duration<double>(clock::now() - window).count();
        }
        const double rate = double(rounds) * chains * lanes * 2 / elapsed / 1e9;
        if (rate > best) best = rate;
    }
    float sink = 0;  // keeps the chains' results, so the loop is not removed
    for (int c = 0; c < chains; ++c)
        for (int l = 0; l < lanes; ++l) sink += acc[c][l];
    return best + (sink == 12345 ? 1e-9 : 0.0);
}

}  // namespace dpt::bench
