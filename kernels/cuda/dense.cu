// Fully connected layer on the GPU: three products on the tiled SGEMM of
// tiles.cuh, with bias (and ReLU) in the forward epilogue; backward, the
// bias gradient as one more column of the weight gradient's product, and
// the ReLU before the layer applied in the data gradient's epilogue
// (dense_backward_relu). CPU twin: kernels/cpu/dense.cpp.
#include "kernels.hpp"
#include "launch.cuh"
#include "tiles.cuh"
#include "versions.hpp"

#include <algorithm>

namespace dpt::cuda {
namespace {

struct RowMajor {  // M (rows, k) stored row-major: consecutive addresses along k
    const float* p;
    int k;
    static constexpr bool k_fast = true;
    __device__ float operator()(int i, int kk) const { return p[size_t(i) * k + kk]; }
};
struct Transposed {  // M^T (k, cols) of M (cols, k) stored row-major: also along k
    const float* p;
    int k;
    static constexpr bool k_fast = true;
    __device__ float operator()(int kk, int j) const { return p[size_t(j) * k + kk]; }
};
struct ColumnsOf {  // M^T (rows, k) of M (k, rows) stored row-major: along the rows
    const float* p;
    int rows;
    static constexpr bool k_fast = false;
    __device__ float operator()(int i, int kk) const { return p[size_t(kk) * rows + i]; }
};
struct RowsOf {  // M (k, cols) stored row-major: along the columns
    const float* p;
    int cols;
    static constexpr bool k_fast = false;
    __device__ float operator()(int kk, int j) const { return p[size_t(kk) * cols + j]; }
};
struct RowsAndOnes {  // [M | 1] (k, cols + 1): M as RowsOf, then a column of ones
    const float* p;
    int cols;
    static constexpr bool k_fast = false;
    __device__ float operator()(int kk, int j) const { return j < cols ? p[size_t(kk) * cols + j] : 1.0f; }
};

template <bool relu>
struct StoreBiased {  // y (n, out) = value + b, then ReLU
    float* y;
    const float* b;
    int out;
    __device__ void operator()(int, int i, int o, float v) const {
        v += b[o];
        if (relu) v = v > 0.0f ? v : 0.0f;
        y[size_t(i) * out + o] = v;
    }
};
// dw (out, in) += column j < in of the product; db (out) += its column in,
// the sums of dy against the column of ones (RowsAndOnes).
struct StoreWeightsAndBias {
    float* dw;
    float* db;
    int in;
    __device__ void operator()(int, int o, int j, float v) const {
        float& dst = j < in ? dw[size_t(o) * in + j] : db[o];
        dst += v;
    }
};
// dx (n, in) = value where x > 0, else 0: the gradient through the ReLU
// whose output x is (dense_backward_relu).
struct StoreMasked {
    float* dx;
    const float* x;
    int in;
    __device__ void operator()(int, int i, int j, float v) const {
        const size_t at = size_t(i) * in + j;
        dx[at] = x[at] > 0.0f ? v : 0.0f;
    }
};
// db[o] += sum over rows of dy (n, out): one block per column, rows in order.
__global__ void dense_bias_grad(float* db, const float* dy, int n, int out) {
    const int o = blockIdx.x;
    float sum = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) sum += dy[size_t(i) * out + o];
    sum = launch::block_sum(sum);
    if (threadIdx.x == 0) db[o] += sum;
}

// Version 2 (versions.hpp: "dense") splits each product along k through
// scratch where that fills the GPU better (tiles.cuh: gemm_split).
template <class A, class B, class Out>
void product(int m, int n, int k, A a, B b, Out out, Workspace ws, cudaStream_t stream, Math math) {
    if (dense_version >= 2) tiled::gemm_split(m, n, k, a, b, out, ws, stream, math);
    else tiled::gemm(m, n, k, a, b, out, stream, 1, math);
}

template <bool relu>
void forward(float* y, const float* x, const float* w, const float* b, int n, int in, int out, Workspace ws,
             cudaStream_t stream, Math math) {
    // y (n, out) = x (n, in) . w^T (in, out)
    product(n, out, in, RowMajor{x, in}, Transposed{w, in}, StoreBiased<relu>{y, b, out}, ws, stream, math);
}

}  // namespace

// The products' scratch, the most any of them needs: the forward's, or the
// backward's two (the weight gradient's with version 3's column of ones)
// at once, as version 4 runs them.
size_t dense_scratch_floats(int n, int in, int out, Math) {
    return std::max(tiled::split_scratch_floats(n, out, in),
                    tiled::split_scratch_floats(out, in + 1, n) + tiled::split_scratch_floats(n, in, out));
}

void dense_forward(float* y, const float* x, const float* w, const float* b, int n, int in, int out, Workspace ws,
                   cudaStream_t stream, Math math) {
    forward<false>(y, x, w, b, n, in, out, ws, stream, math);
}

void dense_forward_relu(float* y, const float* x, const float* w, const float* b, int n, int in, int out,
                        Workspace ws, cudaStream_t stream, Math math) {
    forward<true>(y, x, w, b, n, in, out, ws, stream, math);
}

namespace {

template <class A, class B, class Out>
void product(const tiled::Product<A, B, Out>& p, Workspace ws, cudaStream_t stream, Math math) {
    product(p.m, p.n, p.k, p.a, p.b, p.out, ws, stream, math);
}

template <bool relu_before>
void backward(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w, int n, int in, int out,
              Workspace ws, cudaStream_t stream, Math math) {
    if (n <= 0) return;  // no samples: nothing to add, and dx has no rows
    // [dw | db] (out, in + 1) += dy^T (out, n) . [x | 1] (n, in + 1) (version 3;
    // not with --tf32, whose bias would be the sum of rounded dy), else
    // dw (out, in) += dy^T (out, n) . x (n, in) and a kernel for db.
    const bool bias_in_product = dense_version >= 3 && math == Math::fp32;
    if (!bias_in_product)
        launch::kernel("dense_bias_grad", dense_bias_grad, unsigned(out), launch::threads, stream, db, dy, n, out);
    const auto weights = [&](auto&& then) {
        if (bias_in_product)
            then(tiled::Product<ColumnsOf, RowsAndOnes, StoreWeightsAndBias>{out, in + 1, n, {dy, out}, {x, in}, {dw, db, in}});
        else
            then(tiled::Product<ColumnsOf, RowsOf, tiled::StoreMatrix>{out, in, n, {dy, out}, {x, in}, {dw, in, true}});
    };
    // dx (n, in) = dy (n, out) . w (out, in), masked by the ReLU before
    const auto data = [&](auto&& then) {
        if constexpr (relu_before)
            then(tiled::Product<RowMajor, RowsOf, StoreMasked>{n, in, out, {dy, out}, {w, in}, {dx, x, in}});
        else
            then(tiled::Product<RowMajor, RowsOf, tiled::StoreMatrix>{n, in, out, {dy, out}, {w, in}, {dx, in, false}});
    };
    weights([&](const auto& pw) {
        if (!dx) return product(pw, ws, stream, math);
        data([&](const auto& pd) {
            if (dense_version >= 4) {
                tiled::gemm_pair(pw, pd, ws, stream, math);
            } else {
                product(pw, ws, stream, math);
                product(pd, ws, stream, math);
            }
        });
    });
}

}  // namespace

void dense_backward(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w, int n,
                    int in, int out, Workspace ws, cudaStream_t stream, Math math) {
    backward<false>(dx, dw, db, dy, x, w, n, in, out, ws, stream, math);
}

void dense_backward_relu(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w, int n,
                         int in, int out, Workspace ws, cudaStream_t stream, Math math) {
    backward<true>(dx, dw, db, dy, x, w, n, in, out, ws, stream, math);
}

}  // namespace dpt::cuda
