// tiles.cuh's GEMM on plain row-major matrices. No layer calls this: the
// layers run tiled::gemm with loaders of their own (conv_*.cu, dense.cu). It
// exists so the GPU tests can check the GEMM on its own, shape by shape,
// against kernels/cpu/gemm.cpp's gemm(), and the layout of its shared
// memory (gemm_stash_passes).
#include "kernels.hpp"
#include "tiles.cuh"

#include <algorithm>

namespace dpt::cuda {
namespace {

// op(A) (rows, k) of a row-major matrix: stored (rows, k), or (k, rows) when transposed.
template <bool transposed>
struct RowsByK {
    const float* p;
    int rows, k;
    static constexpr bool k_fast = !transposed;
    __device__ float operator()(int i, int kk) const {
        return transposed ? p[size_t(kk) * rows + i] : p[size_t(i) * k + kk];
    }
};
// op(B) (k, cols): stored (k, cols), or (cols, k) when transposed.
template <bool transposed>
struct KByCols {
    const float* p;
    int k, cols;
    static constexpr bool k_fast = transposed;
    __device__ float operator()(int kk, int j) const {
        return transposed ? p[size_t(j) * k + kk] : p[size_t(kk) * cols + j];
    }
};

template <bool ta, bool tb>
void run(float* c, const float* a, const float* b, int m, int n, int k, bool accumulate, cudaStream_t stream) {
    tiled::gemm(m, n, k, RowsByK<ta>{a, m, k}, KByCols<tb>{b, k, n}, tiled::StoreMatrix{c, n, accumulate}, stream);
}

// gemm_stash_passes on tile T with core Core.
template <class T, class Core>
int stash_passes(bool right, bool k_fast) {
    const int side = right ? T::BN : T::BM, stride = right ? Core::b_stride : Core::a_stride;
    const int loads = side * T::BK / T::threads;
    int most = 0;
    for (int warp = 0; warp < T::threads / 32; ++warp)
        for (int l = 0; l < loads; ++l) {
            int in_bank[32] = {};
            for (int lane = 0; lane < 32; ++lane) {
                int index = 0, kk = 0;
                tiled::operand_place(k_fast, side, T::BK, T::threads, warp * 32 + lane, l, index, kk);
                most = std::max(most, ++in_bank[(kk * stride + index) % 32]);  // (32 distinct addresses)
            }
        }
    return most;
}

}  // namespace

int gemm_stash_passes(int tile_rows, bool right, bool k_fast, int version) {
    int passes = 0;
    tiled::with_tile(tile_rows, [&](auto tile) {
        using T = decltype(tile);
        tiled::with_fma_core<T>(version, [&](auto arithmetic) {
            passes = stash_passes<T, typename decltype(arithmetic)::type>(right, k_fast);
        });
    });
    return passes;
}

void gemm(float* c, const float* a, const float* b, int m, int n, int k, bool trans_a, bool trans_b,
          bool accumulate, cudaStream_t stream) {
    if (trans_a) {
        if (trans_b) run<true, true>(c, a, b, m, n, k, accumulate, stream);
        else run<true, false>(c, a, b, m, n, k, accumulate, stream);
    } else {
        if (trans_b) run<false, true>(c, a, b, m, n, k, accumulate, stream);
        else run<false, false>(c, a, b, m, n, k, accumulate, stream);
    }
}

}  // namespace dpt::cuda
