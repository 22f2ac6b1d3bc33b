// Fully connected layer on the GPU: three products on the tiled SGEMM of
// tiles.cuh, with bias (and ReLU) in the forward epilogue. CPU twin:
// kernels/cpu/dense.cpp.
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
void product(int m, int n, int k, A a, B b, Out out, float* scratch, cudaStream_t stream, Math math) {
    if (dense_version >= 2) tiled::gemm_split(m, n, k, a, b, out, scratch, stream, math);
    else tiled::gemm(m, n, k, a, b, out, stream, 1, math);
}

template <bool relu>
void forward(float* y, const float* x, const float* w, const float* b, int n, int in, int out, float* scratch,
             cudaStream_t stream, Math math) {
    // y (n, out) = x (n, in) . w^T (in, out)
    product(n, out, in, RowMajor{x, in}, Transposed{w, in}, StoreBiased<relu>{y, b, out}, scratch, stream, math);
}

}  // namespace

// The three products' scratch, the most any of them needs (they run one
// after another on a stream).
size_t dense_scratch_floats(int n, int in, int out, Math) {
    return std::max({tiled::split_scratch_floats(n, out, in), tiled::split_scratch_floats(out, in, n),
                     tiled::split_scratch_floats(n, in, out)});
}

void dense_forward(float* y, const float* x, const float* w, const float* b, int n, int in, int out, float* scratch,
                   cudaStream_t stream, Math math) {
    forward<false>(y, x, w, b, n, in, out, scratch, stream, math);
}

void dense_forward_relu(float* y, const float* x, const float* w, const float* b, int n, int in, int out,
                        float* scratch, cudaStream_t stream, Math math) {
    forward<true>(y, x, w, b, n, in, out, scratch, stream, math);
}

void dense_backward(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w, int n,
                    int in, int out, float* scratch, cudaStream_t stream, Math math) {
    if (n <= 0) return;  // no samples: nothing to add, and dx has no rows
    // dw (out, in) += dy^T (out, n) . x (n, in)
    product(out, in, n, ColumnsOf{dy, out}, RowsOf{x, in}, tiled::StoreMatrix{dw, in, true}, scratch, stream, math);
    launch::kernel("dense_bias_grad", dense_bias_grad, unsigned(out), launch::threads, stream, db, dy, n, out);
    // dx (n, in) = dy (n, out) . w (out, in)
    if (dx) product(n, in, out, RowMajor{dy, out}, RowsOf{w, in}, tiled::StoreMatrix{dx, in, false}, scratch, stream, math);
}

}  // namespace dpt::cuda
