// Fully connected layer on the GPU: three products on the tiled SGEMM of
// tiles.cuh, with bias (and ReLU) in the forward epilogue. CPU twin:
// kernels/cpu/dense.cpp.
#include "kernels.hpp"
#include "launch.cuh"
#include "tiles.cuh"

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

template <bool relu>
void forward(float* y, const float* x, const float* w, const float* b, int n, int in, int out, cudaStream_t stream) {
    // y (n, out) = x (n, in) . w^T (in, out)
    tiled::gemm(n, out, in, RowMajor{x, in}, Transposed{w, in}, StoreBiased<relu>{y, b, out}, stream);
}

}  // namespace

void dense_forward(float* y, const float* x, const float* w, const float* b, int n, int in, int out,
                   cudaStream_t stream) {
    forward<false>(y, x, w, b, n, in, out, stream);
}

void dense_forward_relu(float* y, const float* x, const float* w, const float* b, int n, int in, int out,
                        cudaStream_t stream) {
    forward<true>(y, x, w, b, n, in, out, stream);
}

void dense_backward(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w, int n,
                    int in, int out, cudaStream_t stream) {
    if (n <= 0) return;  // no samples: nothing to add, and dx has no rows
    // dw (out, in) += dy^T (out, n) . x (n, in)
    tiled::gemm(out, in, n, ColumnsOf{dy, out}, RowsOf{x, in}, tiled::StoreMatrix{dw, in, true}, stream);
    launch::kernel("dense_bias_grad", dense_bias_grad, unsigned(out), launch::threads, stream, db, dy, n, out);
    // dx (n, in) = dy (n, out) . w (out, in)
    if (dx) tiled::gemm(n, in, out, RowMajor{dy, out}, RowsOf{w, in}, tiled::StoreMatrix{dx, in, false}, stream);
}

}  // namespace dpt::cuda
