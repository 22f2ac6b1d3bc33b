// How a product split along k through scratch (tiles.cuh: gemm_split) is
// split, and the scratch and tickets that takes: host arithmetic alone, so
// that the tests can check it without a GPU.
#pragma once
#include <algorithm>
#include <cstddef>

namespace dpt::cuda {

// Where the launchers that split a product along k keep its partial sums
// (scratch: their *_scratch_floats) and take its tickets. A ticket is an
// unsigned counter a tile of the product: each split's block takes one when
// its partial sums are stored, and the block that takes the last adds them
// up (tiles.cuh: StoreSplitAndFinish) and puts the counter back to 0. So
// the tickets are zero between launches; they start zeroed (a device's are
// filled with zeros when it is made), and one workspace serves one stream.
// No tickets (nullptr): the sums are added by a kernel of their own.
constexpr int workspace_tickets = 4096;
struct Workspace {
    float* scratch = nullptr;
    unsigned* tickets = nullptr;  // workspace_tickets of them, or none
};

}  // namespace dpt::cuda

namespace dpt::cuda::tiled {

inline int ceil_div(long a, long b) { return int((a + b - 1) / b); }

// Splits of k that bring a product's smallest tiles (32 x 128) to about two
// blocks a multiprocessor of an H100, each split at least split_min_k long,
// at most split_most. The same on every GPU, so every GPU rounds alike.
constexpr int split_min_k = 32, split_most = 16;
inline int splits_to_fill(int m, int n, int k) {
    const long tiles = long(ceil_div(m, 32)) * ceil_div(n, 128);
    long splits = std::min<long>((2 * 132 + tiles - 1) / tiles, std::min<long>(k / split_min_k, split_most));
    return int(std::max<long>(splits, 1));
}
// Scratch enough for gemm_split's (m', n, k') product for every m' <= m and
// k' <= k (a batch's last, smaller part included): the most splits any of
// them may take, for m rows. (The splits themselves may be more for a
// smaller m, whose tiles are fewer, so splits_to_fill(m, n, k) would not do.)
inline size_t split_scratch_floats(int m, int n, int k) {
    const int most = std::max(1, std::min(k / split_min_k, split_most));
    return most > 1 ? size_t(most) * size_t(m) * size_t(n) : 0;
}

}  // namespace dpt::cuda::tiled
