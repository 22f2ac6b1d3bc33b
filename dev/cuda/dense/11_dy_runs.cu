// A dense layer's weight and data gradients in one launch (FP32) with the
// weight gradient's left operand, dy^T, read down dy's columns.
//
// Against the trainer's (kernels/cuda/dense.cu: the launch of both
// products, tiles.cuh's gemm_pair, where ColumnsOf works out each element
// of dy^T's row from its row and sample): each of a thread's loads of dy^T
// falls in its row of the tile, dy's column (dev/cuda/gemm/core.cuh: a left
// operand's rows as runs), read as RowsOf reads B: a pointer's add and a
// load. The same elements, the same sums, the same bits. For
// dense_backward, and dense_backward_pool where the pooling's windows do
// not overlap (LeNet's dense1, whose data gradient is stored through the
// pooling and the ReLU before it); --tf32 and the rest hand the shape to
// the trainer. The products' loaders and epilogues are the trainer's,
// copied.
//
// Measured: not yet timed on a GPU.
#include "dev.hpp"
#include "gemm/core.cuh"
// (after them: pool.cuh takes the CUDA runtime as included)
#include "cuda/pool.cuh"

DEV_REPLACES(dense_backward)
DEV_REPLACES(dense_backward_pool)

namespace {

using namespace dpt;
using namespace dpt::cuda;

// (kernels/cuda/dense.cu's loaders and epilogues.)
struct RowMajor {  // M (rows, k) stored row-major: consecutive addresses along k
    const float* p;
    int k;
    static constexpr bool k_fast = true;
    using Fixed = const float*;
    using Step = int;
    __device__ Fixed fixed(int i) const { return p + size_t(i) * k; }
    __device__ Step step(int kk) const { return kk; }
    __device__ float load(Fixed row, Step kk) const { return row[kk]; }
};
// Rows kk, kk + stride, ... (N of them) of a column of a matrix stored
// row-major, `pitch` floats a row, from `column` (its element in row 0); 0
// from row k_end on. Each next element is a pointer's add and a load, where
// an element by its row and column is a multiply, an add and a load.
template <int N, int stride>
__device__ void load_down(const float* column, size_t pitch, int kk, int k_end, float* out) {
    const float* at = column + size_t(kk) * pitch;
#pragma unroll
    for (int l = 0; l < N; ++l, at += size_t(stride) * pitch) out[l] = kk + l * stride < k_end ? *at : 0.0f;
}

// Read down a column (tiles.cuh: SplitsColumns).
struct RowsOf {  // M (k, cols) stored row-major: along the columns
    const float* p;
    int cols;
    static constexpr bool k_fast = false;
    using Column = const float*;  // M's column j, from row 0
    __device__ Column column(int j) const { return p + j; }
    template <int N, int stride>
    __device__ void load_run(Column c, int kk, int k_end, float* out) const {
        load_down<N, stride>(c, size_t(cols), kk, k_end, out);
    }
};
struct RowsAndOnes {  // [M | 1] (k, cols + 1): M as RowsOf, then a column of ones
    const float* p;
    int cols;
    static constexpr bool k_fast = false;
    struct Column {
        const float* at;  // M's column j, from row 0 (unread in the ones column)
        bool ones;
    };
    __device__ Column column(int j) const { return {p + min(j, cols - 1), j >= cols}; }
    template <int N, int stride>
    __device__ void load_run(Column c, int kk, int k_end, float* out) const {
        const float* at = c.at + size_t(kk) * cols;
#pragma unroll
        for (int l = 0; l < N; ++l, at += size_t(stride) * cols)
            out[l] = kk + l * stride < k_end ? (c.ones ? 1.0f : *at) : 0.0f;
    }
};

// M^T (rows, k) of M (k, rows) stored row-major, as the trainer's ColumnsOf
// reads it, each of a thread's loads read down its row of M^T (M's column),
// as RowsOf reads B.
struct ColumnsOfByRuns {
    const float* p;
    int rows;
    static constexpr bool k_fast = false;
    using Column = const float*;  // M's column i, from row 0
    __device__ Column column(int i) const { return p + i; }
    template <int N, int stride>
    __device__ void load_run(Column c, int kk, int k_end, float* out) const {
        load_down<N, stride>(c, size_t(rows), kk, k_end, out);
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
// The pooling before a dense layer (dense_backward_pool), whose windows
// do not overlap (k <= stride): k x k, stride apart, oh x ow of them on a
// plane of h x w.
struct PoolWindows {
    int k, stride, h, w, oh, ow;
};
// dx (n, in) of a dense layer whose input x is the flattened pooling of a
// ReLU's output y (n, planes, h, w), stored through the pooling's and the
// ReLU's backward: dx[i, j], the gradient of pooled value j, goes to the
// taps of its window of y as pool2d_backward_relu sends it (all to the
// first maximal tap, or a k*k-th to each), and nothing where y <= 0. Each
// window also writes the zeros of the pixels no window covers in its cell
// (stride x stride, the last row and column of cells to the plane's edge):
// the cells tile the plane, so every value of grad_y is written, once.
// Not inlined: a call from each of a thread's results keeps the kernels
// that store through it small (inlined at each of them, its loops made
// nvcc's build of dense.cu for sm_90 take 102 s instead of 59 s).
__device__ DPT_NOINLINE void store_through_pool(float* grad_y, const float* y, const float* x, int in, PoolKind kind,
                                                PoolWindows p, int i, int j, float v) {
    const int area = p.oh * p.ow;
    const size_t pooled = size_t(i) * in + j, plane = pooled / area;
    const int at = int(pooled - plane * area), oy = at / p.ow, ox = at - oy * p.ow;
    const size_t base = plane * p.h * p.w + size_t(oy) * p.stride * p.w + ox * p.stride;
    const int rows = oy == p.oh - 1 ? p.h - oy * p.stride : p.stride;
    const int cols = ox == p.ow - 1 ? p.w - ox * p.stride : p.stride;
    const float* win = y + base;
    const int first = kind == PoolKind::max ? first_max_tap(win, p.w, p.k, x[pooled]) : -1;
    const float share = 1.0f / float(p.k * p.k);
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) {
            const int tap = r * p.w + c;
            float grad = 0.0f;  // as pool_backward sums (0 + -0 is 0)
            if (r < p.k && c < p.k) {
                if (kind == PoolKind::avg) grad += v * share;
                else if (tap == first) grad += v;
            }
            grad_y[base + tap] = win[tap] > 0.0f ? grad : 0.0f;
        }
}
struct StoreThroughPool {
    float* grad_y;
    const float* y;
    const float* x;
    int in;
    PoolKind kind;
    PoolWindows p;
    __device__ void operator()(int, int i, int j, float v) const {
        store_through_pool(grad_y, y, x, in, kind, p, i, j, v);
    }
};
// [dw | db] += dy^T . [x | 1], dy^T by runs, and the data gradient pd, in one launch.
template <class Store>
void both(float* dw, float* db, const float* dy, const float* x, int n, int in, int out,
          const tiled::Product<RowMajor, RowsOf, Store>& pd, Workspace ws, cudaStream_t stream) {
    const tiled::Product<ColumnsOfByRuns, RowsAndOnes, StoreWeightsAndBias> with_bias{
        out, in + 1, n, {dy, out}, {x, in}, {dw, db, in}};
    dev::core::gemm_pair(with_bias, pd, ws, stream);
}

}  // namespace

namespace DEV_NAMESPACE {

void dense_backward(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w, int n, int in,
                    int out, Workspace ws, cudaStream_t stream, Math math) {
    if (math != Math::fp32 || !dx || n <= 0)
        return TRAINER(dense_backward)(dx, dw, db, dy, x, w, n, in, out, ws, stream, math);
    both(dw, db, dy, x, n, in, out, tiled::Product<RowMajor, RowsOf, tiled::StoreMatrix>{n, in, out, {dy, out},
                                                                                        {w, in}, {dx, in, false}},
         ws, stream);
}

void dense_backward_pool(float* grad_y, float* dx, float* dw, float* db, const float* dy, const float* x,
                         const float* w, int n, int in, int out, const float* y, PoolKind kind, const PoolShape& ps,
                         Workspace ws, cudaStream_t stream, Math math) {
    if (math != Math::fp32 || !windows_apart(ps) || n <= 0 || ps.n != n || size_t(in) * size_t(n) != ps.out_size())
        return TRAINER(dense_backward_pool)(grad_y, dx, dw, db, dy, x, w, n, in, out, y, kind, ps, ws, stream, math);
    const PoolWindows windows{ps.k, ps.stride, ps.h, ps.w, ps.oh(), ps.ow()};
    both(dw, db, dy, x, n, in, out,
         tiled::Product<RowMajor, RowsOf, StoreThroughPool>{n, in, out, {dy, out}, {w, in},
                                                             {grad_y, y, x, in, kind, windows}},
         ws, stream);
}

}  // namespace DEV_NAMESPACE

DEV_VERSION("dense/11_dy_runs",
            "a dense layer's weight and data gradients in one launch (FP32) with dy^T read down dy's columns, a "
            "pointer's add and a load, where the trainer's works out each element's address from its row and sample "
            "(dense_backward, and dense_backward_pool through a pooling of windows apart: LeNet's dense1): the same "
            "bits",
            "not yet timed", l.dense_backward = &DEV_NAMESPACE::dense_backward;
            l.dense_backward_pool = &DEV_NAMESPACE::dense_backward_pool)
