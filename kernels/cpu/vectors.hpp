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

// The sums of `lanes` vectors' lanes at once, as one vector (lane i: v[i]'s
// sum): pairs of vectors halved into one, their halves side by side, and
// again, until each segment is one lane; two two-vector shuffles and an add
// a pair, 2 shuffles a sum where lane_sum takes 4.
// A halving's lane L: segments of S/2 lanes, the first `lanes / S` from a,
// the rest from b, each the lower (or upper) half of a segment of S.
constexpr size_t halving_lane(size_t S, size_t L, bool upper) {
    const size_t half = S / 2, segment = L / half, per_vector = lanes / S;
    return (segment < per_vector ? 0 : lanes) + segment % per_vector * S + (upper ? half : 0) + L % half;
}
template <size_t S, size_t... L>
inline vf halving(vf a, vf b, std::index_sequence<L...>) {
    return __builtin_shufflevector(a, b, halving_lane(S, L, false)...) +
           __builtin_shufflevector(a, b, halving_lane(S, L, true)...);
}
template <size_t S = lanes, size_t Count = lanes>
inline vf lane_sums(vf* v) {
#pragma GCC unroll 8
    for (size_t j = 0; j < Count / 2; ++j) v[j] = halving<S>(v[2 * j], v[2 * j + 1], std::make_index_sequence<lanes>{});
    if constexpr (S > 2) return lane_sums<S / 2, Count / 2>(v);
    else return v[0];
}

// A lanes x lanes block transposed in registers: at each stage rows i and
// i + h (bit h of i clear) swap their off-diagonal h x h blocks; after the
// stages h = lanes / 2, ..., 2, 1 element (i, j) has moved to (j, i).
template <int H, size_t... J>
inline void swap_blocks(vf& a, vf& b, std::index_sequence<J...>) {
    const vf top = __builtin_shufflevector(a, b, ((J & H) ? J - H + lanes : J)...);
    const vf bottom = __builtin_shufflevector(a, b, ((J & H) ? J + lanes : J + H)...);
    a = top;
    b = bottom;
}
template <int H = lanes / 2>
[[gnu::always_inline]] inline void transpose(vf (&r)[lanes]) {
#pragma GCC unroll 16
    for (int i = 0; i < lanes; ++i)
        if ((i & H) == 0) swap_blocks<H>(r[i], r[i + H], std::make_index_sequence<lanes>{});
    if constexpr (H > 1) transpose<H / 2>(r);
}

}  // namespace dpt::cpu::detail
