// tiles.cuh's GEMM on plain row-major matrices. No layer calls this: the
// layers run tiled::gemm with loaders of their own (conv_*.cu, dense.cu). It
// exists so the GPU tests can check the GEMM on its own, shape by shape,
// against kernels/cpu/gemm.cpp's gemm().
#include "kernels.hpp"
#include "tiles.cuh"

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

}  // namespace

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
