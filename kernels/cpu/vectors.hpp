// The build's vector of floats, for the CPU kernels written with GCC/Clang
// vector extensions (gemm.cpp, conv_lanes.cpp, winograd_lanes.cpp): built with -O3
// -march=... they compile to the target's vector instructions.
#pragma once
#include <cstddef>
#include <cstring>
#include <utility>

namespace dpt::cpu::detail {

// Floats in one vector register: 16 where the build targets AVX-512, else 8
// (AVX2). (The GEMM's sums are the same either way: each element of C adds
// its products in k order, whatever the tile's width.)
#if defined(__AVX512F__)
constexpr int lanes = 16;
#else
constexpr int lanes = 8;
#endif
using vf = float __attribute__((vector_size(lanes * sizeof(float))));
inline vf load(const float* p) {
    vf v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
inline void store(float* p, vf v) { std::memcpy(p, &v, sizeof v); }
// Every lane = x. (Not vf{} + x: adding +0 is no identity for -0, so the
// compiler would keep a scalar add in the inner loop.)
// (An initializer list: a loop over the lanes would go through memory.)
template <size_t... Lane>
inline vf splat(float x, std::index_sequence<Lane...>) {
    return vf{((void)Lane, x)...};
}
inline vf splat(float x) { return splat(x, std::make_index_sequence<lanes>{}); }

// The sum of v's lanes, halving: lane j adds lane j ^ 8, then j ^ 4, ^ 2, ^ 1.
template <size_t H, size_t... J>
inline float lane_sum(vf v, std::index_sequence<J...> lane) {
    v += __builtin_shufflevector(v, v, (J ^ H)...);
    if constexpr (H > 1) return lane_sum<H / 2>(v, lane);
    else return v[0];
}
inline float lane_sum(vf v) { return lane_sum<lanes / 2>(v, std::make_index_sequence<lanes>{}); }

}  // namespace dpt::cpu::detail
