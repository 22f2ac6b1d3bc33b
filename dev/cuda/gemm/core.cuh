// The GEMM core (kernels/cuda/tiles.cuh) with two things a loader may do
// that the trainer's core does not offer, for the versions that change how
// a product loads its operands (conv2d_backward_weight/14,
// conv2d_backward_data/11, dense/11):
// - LoadsIf: a loader read along k in halves (SplitsAlongK) may take the
//   edge's test into its own (`load_if(wanted, fixed, step)`: its element
//   where `wanted`, else 0), so that an element is one predicate and not a
//   branch past the edge around another in the loader;
// - a left operand not along k may read its rows as runs, as a right one
//   reads its columns (SplitsColumns: `column(i)`, A's row i, once a
//   thread, then `load_run` down k), where a thread's loads all fall in one
//   row of the tile, on tiles of at most `run_rows_most` rows where the
//   loader says so.
// Everything else is the trainer's: its tiles, cores, Operand, splits and
// epilogues. gemm() and gemm_pair() here launch as tiled::gemm and
// tiled::gemm_pair do, with this tile loop, as dev_gemm_kernel and
// dev_gemm_pair_kernel (so that a profile tells them from the trainer's).
#pragma once
#include "cuda/tiles.cuh"

namespace dpt::cuda::dev::core {

using namespace dpt::cuda::tiled;

template <class L, class = void>
struct LoadsIf : std::false_type {};
template <class L>
struct LoadsIf<L, std::void_t<decltype(&L::load_if)>> : std::true_type {};

template <class L, class = void>
struct RunRowsMost : std::integral_constant<int, 1 << 30> {};
template <class L>
struct RunRowsMost<L, std::void_t<decltype(L::run_rows_most)>> : std::integral_constant<int, L::run_rows_most> {};

// tiled::Operand, its split loads through load_if where the loader has it.
template <bool is_a, class L, int side, int BK, int threads>
struct OperandIf : Operand<is_a, L, side, BK, threads> {
    using Base = Operand<is_a, L, side, BK, threads>;
    using typename Base::Fixed;
    __device__ static void fetch(const L& op, const Fixed& f, float* r, int origin, int limit, int k0, int k_end) {
        if constexpr (Base::split && LoadsIf<L>::value) {
            const int kk = int(threadIdx.x) % BK;
            const auto step = op.step(k0 + kk);
#pragma unroll
            for (int l = 0; l < Base::loads; ++l) {
                int index, unused;
                Base::at(l, index, unused);
                r[l] = op.load_if(origin + index < limit && k0 + kk < k_end, f.at[l], step);
            }
        } else {
            Base::fetch(op, f, r, origin, limit, k0, k_end);
        }
    }
};

// A thread's loads of a side of the tile down one row of A (column of B):
// that row's half, once, then a run down k each k-step.
template <class L, int side, int threads>
struct OneLine {
    static constexpr int loads = side * 8 / threads;  // (BK = 8: every tile's)
    template <class Line>
    __device__ static void fetch(const L& op, const Line& line, bool inside, int k0, int k_end, float* r) {
        if (inside) {
            op.template load_run<loads, threads / side>(line, k0 + int(threadIdx.x) / side, k_end, r);
        } else {
#pragma unroll
            for (int l = 0; l < loads; ++l) r[l] = 0.0f;
        }
    }
};

// tiled::gemm_tile with OperandIf and A's rows as runs where A offers them.
template <class T, class Core, class A, class B, class Out>
__device__ void gemm_tile(const TileAt& at, int m, int n, int k, int k_per_split, const A& a, const B& b,
                          const Out& out, Staged<T, Core>& staged) {
    constexpr int BM = T::BM, BN = T::BN, BK = T::BK, threads = T::threads;
    static_assert(BK == 8 && BM * BK % threads == 0 && BN * BK % threads == 0, "tile not a whole number of loads");
    auto& as = staged.as;
    auto& bs = staged.bs;
    const int row0 = at.y * BM, col0 = at.x * BN;
    const int k_begin = at.z * k_per_split, k_end = min(k, k_begin + k_per_split);

    using OpA = OperandIf<true, A, BM, BK, threads>;
    using OpB = OperandIf<false, B, BN, BK, threads>;
    constexpr int a_loads = OpA::loads, b_loads = OpB::loads;
    const typename OpA::Fixed a_fixed = OpA::fixed(a, row0);
    const typename OpB::Fixed b_fixed = OpB::fixed(b, col0);
    constexpr bool one_column = !B::k_fast && threads % BN == 0 && SplitsColumns<B>::value;
    constexpr bool one_row = !A::k_fast && threads % BM == 0 && SplitsColumns<A>::value && BM <= RunRowsMost<A>::value;
    const int my_column = threadIdx.x % BN, my_row = threadIdx.x % BM;
    [[maybe_unused]] const auto column = [&] {
        if constexpr (one_column) return b.column(col0 + my_column);
        else return 0;
    }();
    [[maybe_unused]] const auto row = [&] {
        if constexpr (one_row) return a.column(row0 + my_row);
        else return 0;
    }();
    if constexpr (PreparesTable<B>::value) {
        b.prepare();
        __syncthreads();
    }
    float ra[a_loads], rb[b_loads];
    auto fetch = [&](int k0) {
        if constexpr (one_row) OneLine<A, BM, threads>::fetch(a, row, row0 + my_row < m, k0, k_end, ra);
        else OpA::fetch(a, a_fixed, ra, row0, m, k0, k_end);
        if constexpr (one_column) OneLine<B, BN, threads>::fetch(b, column, col0 + my_column < n, k0, k_end, rb);
        else OpB::fetch(b, b_fixed, rb, col0, n, k0, k_end);
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

template <class T, class A, class B, class Out, class Core>
__global__ void __launch_bounds__(T::threads) gemm_kernel(T, Arithmetic<Core>, int m, int n, int k, int k_per_split,
                                                          A a, B b, Out out) {
    __shared__ Staged<T, Core> staged;
    core::gemm_tile<T, Core>(TileAt::of_block(), m, n, k, k_per_split, a, b, out, staged);
}

// tiled::gemm with this tile loop.
template <class A, class B, class Out>
void gemm(int m, int n, int k, A a, B b, Out out, cudaStream_t stream, int splits = 1, Math math = Math::fp32) {
    if (m <= 0 || n <= 0) return;
    const int rows = tile_rows(m, [&](int r) { return long(ceil_div(m, r)) * ceil_div(n, 128) * splits; });
    with_tile(rows, [&](auto tile) {
        using T = decltype(tile);
        const int k_per_split = split_length(k, splits, T::BK);
        const dim3 grid(unsigned(ceil_div(n, T::BN)), unsigned(ceil_div(m, T::BM)), unsigned(splits));
        const auto run = [&](auto arithmetic) {
            using Core = typename decltype(arithmetic)::type;
            launch::kernel("dev_gemm_kernel", core::gemm_kernel<T, A, B, Out, Core>, grid, T::threads, stream, T{},
                           arithmetic, m, n, k, k_per_split, a, b, out);
        };
        if (math == Math::tf32) run(Arithmetic<Tf32Core<T>>{});
        else run(Arithmetic<FmaCore<T>>{});
    });
}

// tiled::gemm_splits with this tile loop.
template <class A, class B, class Out>
void gemm_splits(int m, int n, int k, A a, B b, Out out, float* scratch, int splits, cudaStream_t stream,
                 Math math = Math::fp32) {
    core::gemm(m, n, k, a, b, StoreSplit{scratch, size_t(m) * n, n}, stream, splits, math);
    add_splits(out, scratch, splits, m, n, stream);
}

template <class T, class Core, class P1, class P2>
__global__ void __launch_bounds__(T::threads) gemm_pair_kernel(T, Arithmetic<Core>, P1 p1, P2 p2) {
    __shared__ Staged<T, Core> staged;
    const int block = int(blockIdx.x), first = p1.blocks();
    if (block < first)
        core::gemm_tile<T, Core>(p1.at(block), p1.m, p1.n, p1.k, p1.k_per_split, p1.a, p1.b, p1.out, staged);
    else
        core::gemm_tile<T, Core>(p2.at(block - first), p2.m, p2.n, p2.k, p2.k_per_split, p2.a, p2.b, p2.out, staged);
}

// tiled::gemm_pair in FP32 with this tile loop: the same tile, splits,
// scratch and finishing.
template <class A1, class B1, class Out1, class A2, class B2, class Out2>
void gemm_pair(const Product<A1, B1, Out1>& p1, const Product<A2, B2, Out2>& p2, Workspace ws, cudaStream_t stream) {
    const auto blocks_of = [](int m, int n, int k, int rows) {
        return m > 0 && n > 0 ? long(ceil_div(m, rows)) * ceil_div(n, 128) * splits_to_fill(m, n, k) : 0L;
    };
    const int rows = tile_rows(std::max(p1.m, p2.m), [&](int r) {
        return blocks_of(p1.m, p1.n, p1.k, r) + blocks_of(p2.m, p2.n, p2.k, r);
    });
    with_tile(rows, [&](auto tile) {
        using T = decltype(tile);
        using P1 = PlacedProduct<A1, B1, Out1>;
        using P2 = PlacedProduct<A2, B2, Out2>;
        const P1 q1 = place<T>(p1, ws.scratch);
        const size_t scratch1 = q1.splits > 1 ? size_t(q1.splits) * p1.m * p1.n : 0;
        const P2 q2 = place<T>(p2, ws.scratch + scratch1);
        const unsigned blocks = unsigned(q1.blocks() + q2.blocks());
        if (blocks == 0) return;
        using Core = FmaCore<T>;
        launch::kernel("dev_gemm_pair_kernel", core::gemm_pair_kernel<T, Core, P1, P2>, blocks, T::threads, stream, T{},
                       Arithmetic<Core>{}, q1, q2);
        const size_t size1 = q1.splits > 1 ? size_t(p1.m) * p1.n : 0, size2 = q2.splits > 1 ? size_t(p2.m) * p2.n : 0;
        if (size1 + size2 == 0) return;
        launch::kernel("finish_pair_splits", finish_pair_splits<Out1, Out2>, launch::grid_for(size1 + size2),
                       launch::threads, stream, p1.out, ws.scratch, q1.splits, size1, p1.n, p2.out,
                       ws.scratch + scratch1, q2.splits, size2, p2.n);
    });
}

// The two GEMM launches as function objects with tiled::gemm's arguments,
// all given, for the copied paths that take one (conv2d_backward_weight/
// product.cuh, conv2d_backward_data/columns.cuh): the trainer's, and this
// tile loop's.
struct TrainerGemm {
    template <class A, class B, class Out>
    void operator()(int m, int n, int k, A a, B b, Out out, cudaStream_t stream, int splits, Math math) const {
        tiled::gemm(m, n, k, a, b, out, stream, splits, math);
    }
};
struct DevGemm {
    template <class A, class B, class Out>
    void operator()(int m, int n, int k, A a, B b, Out out, cudaStream_t stream, int splits, Math math) const {
        core::gemm(m, n, k, a, b, out, stream, splits, math);
    }
};

}  // namespace dpt::cuda::dev::core
