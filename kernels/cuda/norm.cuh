// What norm.cu's kernels share: a layer's channels with their divisions as
// multiplies, the blocks that fill a multiprocessor, and the sums of a
// channel's values, in slices across blocks, in a fixed order.
#pragma once
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "fastdiv.cuh"
#include "kernels.hpp"
#include "launch.cuh"

namespace dpt::cuda::norm {

// NormShape with its divisions as multiplies.
struct Channels {
    NormShape s;
    FastDiv by_hw, by_c;
    explicit Channels(const NormShape& shape) : s(shape), by_hw(shape.hw > 0 ? shape.hw : 1), by_c(shape.c > 0 ? shape.c : 1) {
        if (shape.size() >= (size_t(1) << 31))
            throw std::length_error("batch normalisation over " + std::to_string(shape.size()) +
                                    " values: a launch indexes at most 2^31 (use a smaller batch per device)");
    }
    // The channel of element i (NCHW).
    __device__ int channel_of(int i) const {
        const int plane = by_hw.div(i);
        return by_c.rest(plane, by_c.div(plane));
    }
    // Where value k of channel ch lies (sample by sample, hw at a time).
    __device__ int value_index(int ch, int k) const {
        const int sample = by_hw.div(k), j = by_hw.rest(k, sample);
        return (sample * s.c + ch) * s.hw + j;
    }
};

// Blocks of 256 threads that fill a multiprocessor, for the kernels that
// ask to fit them all (__launch_bounds__, which holds them to 32 registers
// a thread): 8 where it holds 2,048 threads, 4 on sm_75's 1,024, 6 on the
// 1,536 of sm_86 and sm_89 (asked for more than that, ptxas warns and
// ignores the bound).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
constexpr int full_blocks = 4;
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ > 800 && __CUDA_ARCH__ < 900
constexpr int full_blocks = 6;
#else
constexpr int full_blocks = 8;
#endif

// Thread t of a block visits its run's values t, t + 256, ...: loaded
// `ahead` at a time, so that their loads are in flight together, then added
// in that same order (the bits do not depend on `ahead`). Run [first, last)
// of channel ch's values; `load(k)` reads what value k needs, and
// `two(loaded)` gives the two values it adds to the two sums. Two steps, so
// that a `two` that stores comes after all of its batch's loads: a store the
// compiler cannot tell apart from the next load's address holds that load
// back, and the batch's loads go one after another (masked sums that stored
// on the way took 7 times the plain ones' time on an H200). The sums are
// valid in thread 0.
constexpr int ahead = 8;

struct TwoSums {
    double first = 0, second = 0;
};

template <class Load, class Two>
__device__ inline TwoSums run_sums(int first, int last, Load load, Two two) {
    const int step = int(blockDim.x);
    TwoSums s;
    int k = first + int(threadIdx.x);
    for (; k + (ahead - 1) * step < last; k += ahead * step) {
        decltype(load(k)) v[ahead];
#pragma unroll
        for (int u = 0; u < ahead; ++u) v[u] = load(k + u * step);
#pragma unroll
        for (int u = 0; u < ahead; ++u) {
            const TwoSums t = two(v[u]);
            s.first += t.first;
            s.second += t.second;
        }
    }
    for (; k < last; k += step) {
        const TwoSums t = two(load(k));
        s.first += t.first;
        s.second += t.second;
    }
    s.first = launch::block_sum(s.first);
    __syncthreads();  // block_sum's shared memory is used again
    s.second = launch::block_sum(s.second);
    return s;
}

// Slices of each channel's values: at least 1, at most one a
// thread of the block that adds them, and none shorter than
// slice_min_values. A function of the shape alone, so every GPU sums in the
// same order.
constexpr int slice_min_values = 512, target_blocks = 256;
inline int slices_of(const NormShape& s) {
    const long values = long(s.n) * s.hw;
    const long wanted = (target_blocks + s.c - 1) / std::max(s.c, 1);
    return int(std::clamp<long>(std::min(wanted, values / slice_min_values), 1, launch::threads));
}

// Where a launch of the sums keeps its slices' partial sums: `slices` a
// channel, two doubles each, 8-byte aligned in the float scratch.
struct Slices {
    int count = 1, length = 0;  // slices a channel; values a slice (the last may have fewer)
    double* partial = nullptr;  // (channel, slice, 2)
    unsigned* tickets = nullptr;  // one a channel
};

inline Slices slices_for(const NormShape& s, Workspace ws) {
    Slices sl;
    const int values = s.n * s.hw;
    if (ws.tickets && ws.scratch) sl.count = slices_of(s);
    sl.length = (values + sl.count - 1) / sl.count;
    if (sl.count > 1) {
        const auto at = reinterpret_cast<std::uintptr_t>(ws.scratch);
        sl.partial = reinterpret_cast<double*>((at + 7) / 8 * 8);
        sl.tickets = ws.tickets;
    }
    return sl;
}

// Block (ch, slice)'s sums of its run: with one slice they are the
// channel's (true); otherwise stored to scratch, and true in the last block
// of the channel to store its own, which then holds the slices' sums added
// in slice order (thread t loads slice t's; block_sum's fixed tree).
__device__ inline bool channel_sums(TwoSums& s, const Slices& sl, int ch, int slice) {
    if (sl.count == 1) return true;
    double* const channel = sl.partial + 2 * size_t(ch) * sl.count;  // (slice, 2)
    if (threadIdx.x == 0) {
        channel[2 * slice] = s.first;
        channel[2 * slice + 1] = s.second;
    }
    if (!launch::last_to_arrive(&sl.tickets[ch], unsigned(sl.count))) return false;
    TwoSums mine;
    if (int(threadIdx.x) < sl.count) {
        mine.first = __ldcg(&channel[2 * threadIdx.x]);
        mine.second = __ldcg(&channel[2 * threadIdx.x + 1]);
    }
    __syncthreads();  // run_sums' block_sum shared memory is used again
    s.first = launch::block_sum(mine.first);
    __syncthreads();
    s.second = launch::block_sum(mine.second);
    return true;
}

}  // namespace dpt::cuda::norm
