// tiled::gemm, the tiled shared-memory SGEMM that the convolutions and the
// dense layers run on. It reads its operands through small loader objects,
// a(i, kk) and b(kk, j), and hands each result to an epilogue,
// out(split, i, j, value). Loaders let the convolutions run as *implicit*
// GEMMs: the unfolded (im2col) matrix is never written out, its elements are
// computed from the image as the tiles are loaded. Epilogues let a layer add
// its bias, apply ReLU and write NCHW in the same pass. (Launch settings and
// block_sum, shared by every kernel, are in launch.cuh.)
//
// Tiles: a block computes a tile of C of 32, 64 or 128 rows by 128 columns
// (chosen per product by its m), 8 columns of A and rows of B at a time,
// double-buffered in shared memory; each thread keeps 8 x 8 (4 x 8) results
// in registers. A loader declares k_fast when its consecutive addresses run
// along k, so the tile is loaded with consecutive threads stepping along k
// (coalesced reads) rather than along the rows.
//
// A long k with few tiles (the weight gradients: k is the batch's pixels)
// is split over blockIdx.z; each split hands its partial sum to the epilogue
// with its split index, and the caller adds the partials in a fixed order.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "check.hpp"
#include "launch.cuh"
#include "shapes.hpp"
#include "splits.hpp"

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#include <mma.h>
#define DPTRAIN_TENSOR_CORES 1  // TF32 warp matrix operations (compute capability 8.0 and later)
#endif

namespace dpt::cuda::tiled {

// The tile by which splits_for counts a product's tiles (64 x 64: a
// function of the shape alone, whatever tile the product then runs on).
constexpr int BM = 64, BN = 64;
// Enough blocks to fill an H100's 132 multiprocessors about twice. A fixed
// number, not the device's, so every GPU splits (and rounds) the same way.
constexpr int target_blocks = 256;

// Where a block stands in its product's grid of tiles: column x and row y
// of tiles, split z along k. A product launched alone takes it from
// blockIdx; each of two products launched together (gemm_pair) from its
// share of blockIdx.x.
struct TileAt {
    int x, y, z;
    __device__ static TileAt of_block() { return {int(blockIdx.x), int(blockIdx.y), int(blockIdx.z)}; }
};

// A tile of BM x BN results a block, chosen per product by its m (32, 64 or
// 128 rows; 128 columns), BK = 8 of k at a time. Each thread keeps TM x TN
// results (8 x 8; 4 x 8 for 32-row tiles) in registers, in groups of 4 rows
// (columns) half a tile apart, and reads them from shared memory 4 floats at
// a time (LDS.128): a group's 4 floats are consecutive, and 8 threads that
// share a load phase read 128 consecutive bytes, so no bank conflicts. The
// next k-step's elements are fetched from global memory into registers
// before the products of this one, and stored to the other of two shared
// buffers after them (double buffering: one barrier a step).
template <int BM_, int BN_, int TM_, int TN_, int BK_ = 8>
struct Tile {
    static constexpr int BM = BM_, BN = BN_, TM = TM_, TN = TN_, BK = BK_;
    static constexpr int threads = (BM / TM) * (BN / TN);
};
using Tile128 = Tile<128, 128, 8, 8>;  // 256 threads
using Tile64 = Tile<64, 128, 8, 8>;    // 128 threads
using Tile32 = Tile<32, 128, 4, 8>;    // 128 threads

// f(tile) for the tile of `rows` rows.
template <class F>
void with_tile(int rows, F&& f) {
    if (rows == 32) f(Tile32{});
    else if (rows == 64) f(Tile64{});
    else f(Tile128{});
}

// A right operand may split reading an element into what depends on its
// column alone, worked out once per thread before the k loop (`column(j)`,
// returning a `Column`), and a run of elements down that column
// (`load_run<N, stride>(column, k, k_end, out)`: rows k, k + stride, ...).
// The tiles use that where each thread's loads all fall in one column;
// other operands are read as b(k, j).
template <class L, class = void>
struct SplitsColumns : std::false_type {};
template <class L>
struct SplitsColumns<L, std::void_t<typename L::Column>> : std::true_type {};

// A right operand may need a table in shared memory that its loads read
// (conv_forward.cu: UnfoldByTaps): `prepare()`, run by every thread of the block
// before the first load, writes it, and a barrier follows.
template <class L, class = void>
struct PreparesTable : std::false_type {};
template <class L>
struct PreparesTable<L, std::void_t<decltype(&L::prepare)>> : std::true_type {};

// An operand read along k may split reading an element into what depends
// on its row of A (column of B) alone (`fixed(index)`, returning a `Fixed`,
// once per thread before the k loop), what depends on k alone (`step(k)`,
// a `Step`, once a k-step), and the rest (`load(fixed, step)`). The tiles
// uses that where all of a thread's loads of the operand fall at one k.
template <class L, class = void>
struct SplitsAlongK : std::false_type {};
template <class L>
struct SplitsAlongK<L, std::void_t<typename L::Step>> : std::true_type {};

// Four consecutive floats of shared memory, 16-byte aligned, as one load.
__device__ inline void read4(float* to, const float* from) {
#ifdef DPTRAIN_CUDA_EMULATION
    for (int q = 0; q < 4; ++q) to[q] = from[q];
#else
    const float4 v = *reinterpret_cast<const float4*>(from);
    to[0] = v.x, to[1] = v.y, to[2] = v.z, to[3] = v.w;
#endif
}

// Row r of a thread's TM (or column c of its TN): groups of 4, the groups
// `extent / (T / 4)` apart; `slot` is the thread's place along that side.
template <int T, int extent>
__device__ constexpr int spread_index(int slot, int r) {
    return (r / 4) * (extent / (T / 4)) + slot * 4 + r % 4;
}

// Where load l of thread t of a tile falls in an operand's tile of
// `side` x BK: its place along the side (index) and along k (kk).
// Consecutive threads step along k where the loader's addresses run along k
// (k_fast), so that a warp's global loads are runs; else along the side.
__host__ __device__ constexpr void operand_place(bool k_fast, int side, int BK, int threads, int t, int l, int& index,
                                                 int& kk) {
    const int e = t + l * threads;
    index = k_fast ? e / BK : e % side, kk = k_fast ? e % BK : e / side;
}

// A thread's fixed parts of an operand (SplitsAlongK), one a load.
template <class L, int N>
struct FixedParts {
    typename L::Fixed at[N];
};

// One operand of a tile: A(index, k) when `is_a`, else
// B(k, index); `side` is the tile's extent along index (BM or BN). Where
// each of a thread's loads falls (consecutive threads step along k where
// the loader's addresses run along k), a k-step's loads into registers, and
// the registers into the tile's shared memory.
template <bool is_a, class L, int side, int BK, int threads>
struct Operand {
    static constexpr int loads = side * BK / threads;
    // All of a thread's loads at one k (SplitsAlongK): their fixed parts, once.
    static constexpr bool split = L::k_fast && threads % BK == 0 && SplitsAlongK<L>::value;
    using Fixed = typename std::conditional<split, FixedParts<L, loads>, char>::type;

    __device__ static void at(int l, int& index, int& kk) {
        operand_place(L::k_fast, side, BK, threads, int(threadIdx.x), l, index, kk);
    }
    __device__ static float element(const L& op, int index, int k) {
        if constexpr (is_a) return op(index, k);
        else return op(k, index);
    }
    __device__ static Fixed fixed(const L& op, int origin) {
        Fixed f{};
        if constexpr (split) {
#pragma unroll
            for (int l = 0; l < loads; ++l) {
                int index, kk;
                at(l, index, kk);
                f.at[l] = op.fixed(origin + index);
            }
        }
        return f;
    }
    // r[l] = load l's element of the k-step at k0; 0 past `limit` or k_end.
    __device__ static void fetch(const L& op, const Fixed& f, float* r, int origin, int limit, int k0, int k_end) {
        if constexpr (split) {  // every load at k0 + threadIdx.x % BK: one step
            const int kk = int(threadIdx.x) % BK;
            const auto step = op.step(k0 + kk);
#pragma unroll
            for (int l = 0; l < loads; ++l) {
                int index, unused;
                at(l, index, unused);
                const bool wanted = origin + index < limit && k0 + kk < k_end;
                r[l] = wanted ? op.load(f.at[l], step) : 0.0f;
            }
        } else {
#pragma unroll
            for (int l = 0; l < loads; ++l) {
                int index, kk;
                at(l, index, kk);
                r[l] = origin + index < limit && k0 + kk < k_end ? element(op, origin + index, k0 + kk) : 0.0f;
            }
        }
    }
    template <int stride>
    __device__ static void stash(const float* r, float (*tile)[stride]) {
#pragma unroll
        for (int l = 0; l < loads; ++l) {
            int index, kk;
            at(l, index, kk);
            tile[kk][index] = r[l];
        }
    }
};

// The FP32 arithmetic on the CUDA cores: each thread's TM x TN results in
// registers, from 4-float shared-memory reads. (Tf32Core pads its rows for
// its fragments.)
template <class T>
struct FmaCore {
    static constexpr int BM = T::BM, BN = T::BN, BK = T::BK, TM = T::TM, TN = T::TN;
    static constexpr int a_stride = BM, b_stride = BN;  // shared-memory rows
    float acc[TM][TN] = {};

    __device__ static void round(float*, int) {}
    __device__ void step(const float (*as)[a_stride], const float (*bs)[b_stride]) {
        const int tx = threadIdx.x % (BN / TN), ty = threadIdx.x / (BN / TN);
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float av[TM], bv[TN];
#pragma unroll
            for (int r = 0; r < TM; r += 4) read4(av + r, &as[kk][spread_index<TM, BM>(ty, r)]);
#pragma unroll
            for (int c = 0; c < TN; c += 4) read4(bv + c, &bs[kk][spread_index<TN, BN>(tx, c)]);
#pragma unroll
            for (int r = 0; r < TM; ++r)
#pragma unroll
                for (int c = 0; c < TN; ++c) acc[r][c] += av[r] * bv[c];
        }
    }
    template <class Out>
    __device__ void finish(const Out& out, int z, int m, int n, int row0, int col0) {
        const int tx = threadIdx.x % (BN / TN), ty = threadIdx.x / (BN / TN);
#pragma unroll
        for (int r = 0; r < TM; ++r)
#pragma unroll
            for (int c = 0; c < TN; ++c) {
                const int i = row0 + spread_index<TM, BM>(ty, r), j = col0 + spread_index<TN, BN>(tx, c);
                if (i < m && j < n) out(z, i, j, acc[r][c]);
            }
    }
};

// v as a product's operand: rounded to the nearest TF32 number, ties away
// from zero (cvt.rna.tf32.f32), where `tf32`; else v itself. (For the
// kernels that take --tf32 on the FP32 units: a product of two TF32
// numbers is exact in FP32.)
__device__ inline float operand(float v, bool tf32) {
    if (!tf32) return v;
#ifdef DPTRAIN_TENSOR_CORES
    return nvcuda::wmma::__float_to_tf32(v);
#else  // (no TF32 before compute capability 8.0; dptrain refuses --tf32 there, as Tf32Core traps)
    __trap();
    return v;
#endif
}

// --tf32's arithmetic on the tensor cores, through CUDA's warp matrix API
// (nvcuda::wmma, m16n16k8: FP32 accumulators; the operands rounded to TF32
// as they are stashed in shared memory, once for all the warps that read
// them). The block's warps tile it 32 rows by BN / (warps / (BM / 32))
// columns each, in 16 x 16 fragments. Shared-memory rows are padded by 4
// floats so that a fragment's 8 rows of k start in different banks. A
// warp hands each result fragment to the epilogue through 16 x 16 floats
// of shared memory of its own. On a GPU before compute capability 8.0 the
// kernel traps (the launcher refuses --tf32 there first).
template <class T>
struct Tf32Core {
    static constexpr int BM = T::BM, BN = T::BN, BK = T::BK;
    static constexpr int a_stride = BM + 4, b_stride = BN + 4;
    static constexpr int warps = T::threads / 32, warp_rows = BM / 32, warp_cols = warps / warp_rows;
    static constexpr int WN = BN / warp_cols, FR = 2, FC = WN / 16;  // a warp's 32 x WN: FR x FC fragments
    static_assert(BK == 8 && BM % 32 == 0 && warps % warp_rows == 0 && WN % 16 == 0, "a tile the warps cannot share");
#ifdef DPTRAIN_TENSOR_CORES
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 8, float> acc[FR][FC];

    __device__ Tf32Core() {
#pragma unroll
        for (int r = 0; r < FR; ++r)
#pragma unroll
            for (int c = 0; c < FC; ++c) nvcuda::wmma::fill_fragment(acc[r][c], 0.0f);
    }
    __device__ static void round(float* r, int count) {
        for (int l = 0; l < count; ++l) r[l] = nvcuda::wmma::__float_to_tf32(r[l]);
    }
    __device__ void step(const float (*as)[a_stride], const float (*bs)[b_stride]) {
        using namespace nvcuda;
        const int warp = int(threadIdx.x) / 32, wr = warp / warp_cols, wc = warp % warp_cols;
        wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::col_major> fa[FR];
        wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fb;
#pragma unroll
        for (int r = 0; r < FR; ++r) wmma::load_matrix_sync(fa[r], &as[0][wr * 32 + r * 16], a_stride);
#pragma unroll
        for (int c = 0; c < FC; ++c) {
            wmma::load_matrix_sync(fb, &bs[0][wc * WN + c * 16], b_stride);
#pragma unroll
            for (int r = 0; r < FR; ++r) wmma::mma_sync(acc[r][c], fa[r], fb, acc[r][c]);
        }
    }
    template <class Out>
    __device__ void finish(const Out& out, int z, int m, int n, int row0, int col0) {
        using namespace nvcuda;
        __shared__ __align__(32) float staged[warps][16 * 16];
        const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, wr = warp / warp_cols,
                  wc = warp % warp_cols;
#pragma unroll
        for (int r = 0; r < FR; ++r)
#pragma unroll
            for (int c = 0; c < FC; ++c) {
                wmma::store_matrix_sync(staged[warp], acc[r][c], 16, wmma::mem_row_major);
                __syncwarp();
#pragma unroll
                for (int e = lane; e < 16 * 16; e += 32) {
                    const int i = row0 + wr * 32 + r * 16 + e / 16, j = col0 + wc * WN + c * 16 + e % 16;
                    if (i < m && j < n) out(z, i, j, staged[warp][e]);
                }
                __syncwarp();  // every lane has read the fragment before the next one is stored
            }
    }
#else
    __device__ static void round(float*, int) { __trap(); }
    __device__ void step(const float (*)[a_stride], const float (*)[b_stride]) { __trap(); }
    template <class Out>
    __device__ void finish(const Out&, int, int, int, int, int) { __trap(); }
#endif
};

// The arithmetic as a kernel parameter of no size, so that a launch's
// signature names it (as the tile's does); on the host, which core a
// launcher chose.
template <class Core>
struct Arithmetic {
    using type = Core;
};

// The shared memory a tile stages its operands in, two k-steps of
// each: as[buf][kk][i] = A(row0 + i, k0 + kk), bs[buf][kk][j] = B(k0 + kk, col0 + j).
template <class T, class Core>
struct Staged {
    __align__(32) float as[2][T::BK][Core::a_stride];
    __align__(32) float bs[2][T::BK][Core::b_stride];
};

// One block's tile of C (m, n) = A . B, split `at.z` along k.
template <class T, class Core, class A, class B, class Out>
__device__ void gemm_tile(const TileAt& at, int m, int n, int k, int k_per_split, const A& a, const B& b,
                          const Out& out, Staged<T, Core>& staged) {
    constexpr int BM = T::BM, BN = T::BN, BK = T::BK, threads = T::threads;
    static_assert(BM * BK % threads == 0 && BN * BK % threads == 0, "tile not a whole number of loads");
    auto& as = staged.as;
    auto& bs = staged.bs;
    const int row0 = at.y * BM, col0 = at.x * BN;
    const int k_begin = at.z * k_per_split, k_end = min(k, k_begin + k_per_split);

    using OpA = Operand<true, A, BM, BK, threads>;
    using OpB = Operand<false, B, BN, BK, threads>;
    constexpr int a_loads = OpA::loads, b_loads = OpB::loads;
    const typename OpA::Fixed a_fixed = OpA::fixed(a, row0);
    const typename OpB::Fixed b_fixed = OpB::fixed(b, col0);
    // Where each thread's B loads share a column (B not along k, a whole
    // number of threads a row of the tile): that column's half, once.
    constexpr bool one_column = !B::k_fast && threads % BN == 0 && SplitsColumns<B>::value;
    const int my_column = threadIdx.x % BN;
    [[maybe_unused]] const auto column = [&] {
        if constexpr (one_column) return b.column(col0 + my_column);
        else return 0;
    }();
    if constexpr (PreparesTable<B>::value) {
        b.prepare();
        __syncthreads();
    }
    float ra[a_loads], rb[b_loads];
    auto fetch = [&](int k0) {
        OpA::fetch(a, a_fixed, ra, row0, m, k0, k_end);
        if constexpr (one_column) {  // rows threadIdx.x / BN + l * (threads / BN) of the tile
            if (col0 + my_column < n) {
                b.template load_run<b_loads, threads / BN>(column, k0 + int(threadIdx.x) / BN, k_end, rb);
            } else {
#pragma unroll
                for (int l = 0; l < b_loads; ++l) rb[l] = 0.0f;
            }
        } else {
            OpB::fetch(b, b_fixed, rb, col0, n, k0, k_end);
        }
    };
    auto stash = [&](int buf) {
        Core::round(ra, a_loads);
        Core::round(rb, b_loads);
        OpA::stash(ra, as[buf]);
        OpB::stash(rb, bs[buf]);
    };

    Core core;
    if (k_begin < k_end) {
        fetch(k_begin);
        stash(0);
    }
    __syncthreads();
    int buf = 0;
    for (int k0 = k_begin; k0 < k_end; k0 += BK) {
        const bool more = k0 + BK < k_end;
        if (more) fetch(k0 + BK);  // in flight while the products below run
        core.step(as[buf], bs[buf]);
        if (more) stash(buf ^ 1);
        __syncthreads();
        buf ^= 1;
    }
    core.finish(out, at.z, m, n, row0, col0);
}

template <class T, class A, class B, class Out, class Core = FmaCore<T>>
__global__ void __launch_bounds__(T::threads) gemm_kernel(T, Arithmetic<Core>, int m, int n, int k, int k_per_split,
                                                              A a, B b, Out out) {  // (T: the tile, also by value,
                                                                                    // so that a launch's signature
                                                                                    // names it)
    __shared__ Staged<T, Core> staged;
    gemm_tile<T, Core>(TileAt::of_block(), m, n, k, k_per_split, a, b, out, staged);
}

// The length along k of each of `splits` splits: whole BK-wide steps, so
// that only the last one is ragged.
inline int split_length(int k, int splits, int bk) { return ceil_div(ceil_div(k, splits), bk) * bk; }

// The rows of the tile for a product of m rows, given the blocks a
// tile of r rows would take (blocks(r)): the fewest rows that hold m, up to
// 128; fewer when that leaves an H100's 132 multiprocessors without a block
// each. (Every tile sums each result along k in the same order.)
template <class Blocks>
int tile_rows(int m, const Blocks& blocks) {
    if (m <= 32 || blocks(64) < 132) return 32;
    if (m <= 64 || blocks(128) < 132) return 64;
    return 128;
}

template <class T, class A, class B, class Out>
void gemm_on_tile(int m, int n, int k, A a, B b, Out out, cudaStream_t stream, int splits, Math math) {
    const int k_per_split = split_length(k, splits, T::BK);
    const dim3 grid(unsigned(ceil_div(n, T::BN)), unsigned(ceil_div(m, T::BM)), unsigned(splits));
    // (The same name for every core: the signature, which names the core, tells them apart.)
    const auto run = [&](auto arithmetic) {
        using Core = typename decltype(arithmetic)::type;
        launch::kernel("gemm_kernel", gemm_kernel<T, A, B, Out, Core>, grid, T::threads, stream, T{},
                       arithmetic, m, n, k, k_per_split, a, b, out);
    };
    if (math == Math::tf32) run(Arithmetic<Tf32Core<T>>{});
    else run(Arithmetic<FmaCore<T>>{});
}

// Splits of k for an (m, n, k) product: enough to reach target_blocks, each
// split at least `min_k` long. Never fewer for a larger k, so scratch sized
// for the largest k suffices for smaller ones.
inline int splits_for(int m, int n, int k, int min_k = 256, int target = target_blocks) {
    const int tiles = ceil_div(m, BM) * ceil_div(n, BN);
    int splits = target / tiles;
    splits = splits < k / min_k ? splits : k / min_k;
    return splits > 1 ? splits : 1;
}

// C (m, n) through `out` = A (m, k) . B (k, n), in `splits` parts along k;
// with Math::tf32 on the tensor cores.
template <class A, class B, class Out>
void gemm(int m, int n, int k, A a, B b, Out out, cudaStream_t stream, int splits = 1, Math math = Math::fp32) {
    if (m <= 0 || n <= 0) return;
    const int rows = tile_rows(m, [&](int r) { return long(ceil_div(m, r)) * ceil_div(n, 128) * splits; });
    with_tile(rows, [&](auto tile) { gemm_on_tile<decltype(tile)>(m, n, k, a, b, out, stream, splits, math); });
}

// ---- A product split along k through scratch, for any epilogue ----
//
// A product with few tiles and a long k (the dense layers: 8 tiles over
// k = 800 for LeNet's dense1 forward) leaves most multiprocessors idle and
// each block waiting on one k-step's loads after another. Split along k,
// the splits' partial sums go to scratch and are added in split order, each
// result's sum handed to the product's own epilogue by a kernel of their
// own, finish_splits.

struct StoreSplit {  // split z's partial sum of C (m, n): scratch[z][i][j]
    float* scratch;
    size_t size;  // m * n
    int n;
    __device__ void operator()(int z, int i, int j, float v) const { scratch[size_t(z) * size + size_t(i) * n + j] = v; }
};

// Result e of a product of size m * n: its splits' partial sums added in
// split order.
__device__ inline float split_sum(const float* scratch, int splits, size_t size, size_t e) {
    float sum = 0.0f;
    for (int z = 0; z < splits; ++z) sum += scratch[size_t(z) * size + e];
    return sum;
}
// The same of C (m, n), handed to `out`.
template <class Out>
__device__ void finish_split_sum(const Out& out, const float* scratch, int splits, size_t size, int n, size_t e) {
    out(0, int(e / unsigned(n)), int(e % unsigned(n)), split_sum(scratch, splits, size, e));
}

template <class Out>
__global__ void finish_splits(Out out, const float* scratch, int splits, int m, int n) {
    const size_t size = size_t(m) * n;
    for (const size_t e : launch::grid_stride(size)) finish_split_sum(out, scratch, splits, size, n, e);
}

// finish_splits' launch: splits partial sums of C (m, n) in scratch, added in order into `out`.
template <class Out>
void add_splits(Out out, const float* scratch, int splits, int m, int n, cudaStream_t stream) {
    launch::kernel("finish_splits", finish_splits<Out>, launch::grid_for(size_t(m) * n), launch::threads, stream, out,
                   scratch, splits, m, n);
}

// A product's epilogue that stores a split's partial sums as StoreSplit
// does where the product is split, else hands each result to `out`.
template <class Out>
struct StoreSplitOr {
    StoreSplit partial;
    Out out;
    bool split = true;  // false: the product is not split
    __device__ void operator()(int z, int i, int j, float v) const {
        if (split) partial(z, i, j, v);
        else out(z, i, j, v);
    }
};

// C (m, n) through `out` = A (m, k) . B (k, n) in `splits` parts along k,
// their partial sums in scratch (splits * m * n floats), added by
// finish_splits. Only finish_splits is compiled with `out`: the product
// stores its partial sums.
template <class A, class B, class Out>
void gemm_splits(int m, int n, int k, A a, B b, Out out, float* scratch, int splits, cudaStream_t stream,
                 Math math = Math::fp32) {
    gemm(m, n, k, a, b, StoreSplit{scratch, size_t(m) * n, n}, stream, splits, math);
    add_splits(out, scratch, splits, m, n, stream);
}

// C (m, n) through `out` = A (m, k) . B (k, n), split along k where that
// fills the GPU better (scratch: split_scratch_floats(m, n, k) floats).
template <class A, class B, class Out>
void gemm_split(int m, int n, int k, A a, B b, Out out, Workspace ws, cudaStream_t stream, Math math = Math::fp32) {
    const int splits = splits_to_fill(m, n, k);
    if (splits == 1 || m <= 0 || n <= 0) gemm(m, n, k, a, b, out, stream, 1, math);
    else gemm_splits(m, n, k, a, b, out, ws.scratch, splits, stream, math);
}

// ---- Two products in one launch ----
//
// Two products that may run at the same time (a layer's weight and data
// gradients, both read from dy) launched as one kernel: the first one's
// blocks, then the second one's, along blockIdx.x, each block working out
// its place in its own product (TileAt). Both take the tile gemm() would
// choose for the two together (every tile sums each result along k in the
// same order, so each product's results are what it alone would give),
// each split along k as gemm_split would split it, with its partial sums in
// its own part of the scratch, added by one kernel after them.

template <class A, class B, class Out>
struct Product {  // C (m, n) through `out` = A (m, k) . B (k, n)
    int m, n, k;
    A a;
    B b;
    Out out;
};

// A product as gemm_pair_kernel runs it: its grid of tiles, and its
// epilogue through its splits' partial sums where it is split.
template <class A, class B, class Out>
struct PlacedProduct {
    int m, n, k, k_per_split, columns, rows, splits;
    A a;
    B b;
    StoreSplitOr<Out> out;
    __host__ __device__ int blocks() const { return columns * rows * splits; }
    __device__ TileAt at(int block) const {
        const int per_split = columns * rows;
        return {block % columns, block % per_split / columns, block / per_split};
    }
};

template <class T, class A, class B, class Out>
PlacedProduct<A, B, Out> place(const Product<A, B, Out>& p, float* scratch) {
    const int splits = p.m > 0 && p.n > 0 ? splits_to_fill(p.m, p.n, p.k) : 1;
    const StoreSplit partial{scratch, size_t(p.m) * p.n, p.n};
    return {p.m,    p.n,    p.k, split_length(p.k, splits, T::BK), ceil_div(p.n, T::BN), ceil_div(p.m, T::BM),
            splits, p.a,    p.b, StoreSplitOr<Out>{partial, p.out, splits > 1}};
}

template <class T, class Core, class P1, class P2>
__global__ void __launch_bounds__(T::threads) gemm_pair_kernel(T, Arithmetic<Core>, P1 p1, P2 p2) {
    __shared__ Staged<T, Core> staged;
    const int block = int(blockIdx.x), first = p1.blocks();
    if (block < first) gemm_tile<T, Core>(p1.at(block), p1.m, p1.n, p1.k, p1.k_per_split, p1.a, p1.b, p1.out, staged);
    else gemm_tile<T, Core>(p2.at(block - first), p2.m, p2.n, p2.k, p2.k_per_split, p2.a, p2.b, p2.out, staged);
}

// The splits of two products launched together by gemm_pair, added as finish_splits adds them, both in one launch: the first
// product's results, then the second's (size 0: not split, and stored).
template <class Out1, class Out2>
__global__ void finish_pair_splits(Out1 out1, const float* scratch1, int splits1, size_t size1, int n1, Out2 out2,
                                   const float* scratch2, int splits2, size_t size2, int n2) {
    for (const size_t e : launch::grid_stride(size1 + size2)) {
        if (e < size1) finish_split_sum(out1, scratch1, splits1, size1, n1, e);
        else finish_split_sum(out2, scratch2, splits2, size2, n2, e - size1);
    }
}

template <class T, Math math, class A1, class B1, class Out1, class A2, class B2, class Out2>
void gemm_pair_on_tile(const Product<A1, B1, Out1>& p1, const Product<A2, B2, Out2>& p2, Workspace ws,
                       cudaStream_t stream) {
    using P1 = PlacedProduct<A1, B1, Out1>;
    using P2 = PlacedProduct<A2, B2, Out2>;
    const P1 q1 = place<T>(p1, ws.scratch);
    const size_t scratch1 = q1.splits > 1 ? size_t(q1.splits) * p1.m * p1.n : 0;
    const P2 q2 = place<T>(p2, ws.scratch + scratch1);
    const unsigned blocks = unsigned(q1.blocks() + q2.blocks());
    if (blocks == 0) return;
    // (the same name for every core: the signature, which names the core, tells them apart)
    const auto run = [&](auto arithmetic) {
        using Core = typename decltype(arithmetic)::type;
        launch::kernel("gemm_pair_kernel", gemm_pair_kernel<T, Core, P1, P2>, blocks, T::threads, stream, T{},
                       arithmetic, q1, q2);
    };
    if constexpr (math == Math::tf32) run(Arithmetic<Tf32Core<T>>{});
    else run(Arithmetic<FmaCore<T>>{});
    const size_t size1 = q1.splits > 1 ? size_t(p1.m) * p1.n : 0, size2 = q2.splits > 1 ? size_t(p2.m) * p2.n : 0;
    if (size1 + size2 == 0) return;
    launch::kernel("finish_pair_splits", finish_pair_splits<Out1, Out2>, launch::grid_for(size1 + size2),
                   launch::threads, stream, p1.out, ws.scratch, q1.splits, size1, p1.n, p2.out, ws.scratch + scratch1,
                   q2.splits, size2, p2.n);
}

// p1 and p2 in one launch, in arithmetic `math` (scratch: the two products'
// split_scratch_floats added), their splits added by finish_pair_splits
// after them. Only the arithmetic named is compiled.
template <Math math, class A1, class B1, class Out1, class A2, class B2, class Out2>
void gemm_pair(const Product<A1, B1, Out1>& p1, const Product<A2, B2, Out2>& p2, Workspace ws, cudaStream_t stream) {
    // The tile as gemm() chooses it, for the two products' blocks together.
    const auto blocks_of = [](int m, int n, int k, int rows) {
        return m > 0 && n > 0 ? long(ceil_div(m, rows)) * ceil_div(n, 128) * splits_to_fill(m, n, k) : 0L;
    };
    const int rows = tile_rows(std::max(p1.m, p2.m), [&](int r) {
        return blocks_of(p1.m, p1.n, p1.k, r) + blocks_of(p2.m, p2.n, p2.k, r);
    });
    with_tile(rows, [&](auto tile) { gemm_pair_on_tile<decltype(tile), math>(p1, p2, ws, stream); });
}

// The plain epilogue: C (m, n) row-major = value, or += when accumulating.
struct StoreMatrix {
    float* c;
    int n;
    bool accumulate;
    __device__ void operator()(int, int i, int j, float v) const {
        float& dst = c[size_t(i) * n + j];
        dst = accumulate ? dst + v : v;
    }
};

}  // namespace dpt::cuda::tiled
