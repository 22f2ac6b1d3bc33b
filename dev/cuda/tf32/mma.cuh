// What the tensor-core versions of LeNet's conv2 share (tf32/04, 07, 08,
// 09): a warp's 2 x 2 wmma fragments of a block's product, and the shapes
// they take.
#pragma once
#include "cuda/conv.cuh"

namespace dpt::cuda::dev::mma {

using namespace dpt::cuda::conv;

// A warp's 2 x 2 fragments of a block's product (rows m0 to m0 + 32,
// columns n0 to n0 + 32; warps in pairs down the rows), from A in shared
// rows of AS floats and B in rows of BS, on the tensor cores (compute
// capability 8.0 and later; before it they trap, as Tf32Core's do). The
// forward's and the weight gradient's kernels multiply through it.
template <int AS, int BS>
struct MmaWarp {
    int m0, n0;
#ifdef DPTRAIN_TENSOR_CORES
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 8, float> acc[2][2];

    __device__ explicit MmaWarp(int warp) : m0(32 * (warp % 2)), n0(32 * (warp / 2)) {
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int j = 0; j < 2; ++j) nvcuda::wmma::fill_fragment(acc[i][j], 0.0f);
    }
    // Adds the product of A's first 8 * ksteps columns and B's first 8 * ksteps rows.
    template <int ksteps>
    __device__ void multiply(const float* sa, const float* sb) {
        using namespace nvcuda;
#pragma unroll
        for (int ks = 0; ks < ksteps; ++ks) {
            wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fb[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(fa[i], sa + (m0 + 16 * i) * AS + 8 * ks, AS);
#pragma unroll
            for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[j], sb + 8 * ks * BS + n0 + 16 * j, BS);
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
    }
    // Stores the fragments into `to`, rows of BS floats.
    __device__ void store(float* to) const {
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int j = 0; j < 2; ++j)
                nvcuda::wmma::store_matrix_sync(to + (m0 + 16 * i) * BS + n0 + 16 * j, acc[i][j], BS,
                                                nvcuda::wmma::mem_row_major);
    }
#else
    __device__ explicit MmaWarp(int) : m0(0), n0(0) { __trap(); }
    template <int ksteps>
    __device__ void multiply(const float*, const float*) { __trap(); }
    __device__ void store(float*) const { __trap(); }
#endif
};

// Whether s, with --tf32, is the convolution a tensor-core kernel's T takes:
// LeNet's conv2 (T::K x T::K filters, stride 1, no padding, T::H x T::H
// inputs), with at most T::most_c input and T::most_oc output channels.
template <class T>
bool conv2_mma_fits(const ConvShape& s) {
    return s.math == Math::tf32 && s.n > 0 && s.stride == 1 && s.pad == 0 && s.kh == T::K && s.kw == T::K &&
           s.h == T::H && s.w == T::H && s.c >= 1 && s.c <= T::most_c && s.oc >= 1 && s.oc <= T::most_oc;
}

}  // namespace dpt::cuda::dev::mma
