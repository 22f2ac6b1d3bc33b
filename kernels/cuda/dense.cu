// Fully connected layer on the GPU: three products on the tiled SGEMM of
// tiles.cuh, with bias (and ReLU) in the forward epilogue; backward, the
// bias gradient as one more column of the weight gradient's product, and
// the ReLU before the layer applied in the data gradient's epilogue
// (dense_backward_relu), or the pooling and ReLU before it
// (dense_backward_pool). CPU twin: kernels/cpu/dense.cpp.
#include "kernels.hpp"
#include "launch.cuh"
#include "pool.cuh"
#include "tiles.cuh"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace dpt::cuda {
namespace {

// Read along k, an element of these two is an add and a load once each
// thread's row (column) is found (tiles.cuh: SplitsAlongK).
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
struct Transposed {  // M^T (k, cols) of M (cols, k) stored row-major: also along k
    const float* p;
    int k;
    static constexpr bool k_fast = true;
    using Fixed = const float*;
    using Step = int;
    __device__ Fixed fixed(int j) const { return p + size_t(j) * k; }
    __device__ Step step(int kk) const { return kk; }
    __device__ float load(Fixed column, Step kk) const { return column[kk]; }
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

struct ColumnsOf {  // M^T (rows, k) of M (k, rows) stored row-major: along the rows
    const float* p;
    int rows;
    static constexpr bool k_fast = false;
    __device__ float operator()(int i, int kk) const { return p[size_t(kk) * rows + i]; }
};
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

template <bool relu>
struct StoreBiased {  // y (n, out) = value + b, then ReLU
    float* y;
    const float* b;
    int out;
    __device__ static float biased(float v, float bias) {
        v += bias;
        return relu && !(v > 0.0f) ? 0.0f : v;
    }
    __device__ void operator()(int, int i, int o, float v) const { y[size_t(i) * out + o] = biased(v, b[o]); }
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
// db[o] += sum over rows of dy (n, out): one block per column, rows in order.
__global__ void dense_bias_grad(float* db, const float* dy, int n, int out) {
    const int o = blockIdx.x;
    float sum = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) sum += dy[size_t(i) * out + o];
    sum = launch::block_sum(sum);
    if (threadIdx.x == 0) db[o] += sum;
}

// Each product split along k through scratch where that fills the GPU
// better (tiles.cuh: gemm_split).
template <class A, class B, class Out>
void product(int m, int n, int k, A a, B b, Out out, Workspace ws, cudaStream_t stream, Math math) {
    tiled::gemm_split(m, n, k, a, b, out, ws, stream, math);
}

template <bool relu>
void forward(float* y, const float* x, const float* w, const float* b, int n, int in, int out, Workspace ws,
             cudaStream_t stream, Math math) {
    // y (n, out) = x (n, in) . w^T (in, out)
    product(n, out, in, RowMajor{x, in}, Transposed{w, in}, StoreBiased<relu>{y, b, out}, ws, stream, math);
}

// dense_softmax_cross_entropy's scratch: each sample's loss, then each
// group's sums of [dw | db] (and room for as many of dx's columns).
int dense_loss_groups(int n) { return tiled::ceil_div(n, dense_loss_group); }
size_t dense_loss_scratch_floats(int n, int in, int classes) {
    if (!dense_loss_fits(n, in, classes)) return 0;
    return size_t(n) + size_t(dense_loss_groups(n)) * (size_t(classes) * size_t(in + 1) + size_t(in));
}

}  // namespace

// The products' scratch, the most any of them needs: the forward's, or the
// backward's two (the weight gradient's with its column of ones) at once,
// as they run. A layer whose forward the loss after it finishes
// (dense_forward_relu_for_loss) keeps its splits there while the loss's
// scratch follows them: room for a loss of the most classes the loss
// kernel takes.
size_t dense_scratch_floats(int n, int in, int out, Math) {
    return std::max({tiled::split_scratch_floats(n, out, in),
                     tiled::split_scratch_floats(out, in + 1, n) + tiled::split_scratch_floats(n, in, out),
                     dense_loss_scratch_floats(n, in, out),
                     tiled::split_scratch_floats(n, out, in) + dense_loss_scratch_floats(n, out, dense_loss_classes_most)});
}

void dense_forward(float* y, const float* x, const float* w, const float* b, int n, int in, int out, Workspace ws,
                   cudaStream_t stream, Math math) {
    forward<false>(y, x, w, b, n, in, out, ws, stream, math);
}

void dense_forward_relu(float* y, const float* x, const float* w, const float* b, int n, int in, int out,
                        Workspace ws, cudaStream_t stream, Math math) {
    forward<true>(y, x, w, b, n, in, out, ws, stream, math);
}

UnfinishedDense dense_forward_relu_for_loss(float* y, const float* x, const float* w, const float* b, int n, int in,
                                            int out, Workspace ws, cudaStream_t stream, Math math) {
    const int splits = n > 0 && out > 0 ? tiled::splits_to_fill(n, out, in) : 1;
    if (!dense_loss_runs(n, out, 1, math) || splits < 2) {
        forward<true>(y, x, w, b, n, in, out, ws, stream, math);
        return {};
    }
    // y (n, out) = x (n, in) . w^T (in, out), its splits' partial sums left in scratch
    tiled::gemm(n, out, in, RowMajor{x, in}, Transposed{w, in}, tiled::StoreSplit{ws.scratch, size_t(n) * out, out},
                stream, splits, math);
    return {y, ws.scratch, b, splits, n, out};
}

namespace {

template <class A, class B, class Out>
void product(const tiled::Product<A, B, Out>& p, Workspace ws, cudaStream_t stream, Math math) {
    product(p.m, p.n, p.k, p.a, p.b, p.out, ws, stream, math);
}

// The weight gradient's product: [dw | db] (out, in + 1) += dy^T (out, n)
// . [x | 1] (n, in + 1) (FP32; not with --tf32, whose bias would be the sum
// of rounded dy), else dw (out, in) += dy^T (out, n) . x (n, in) with db
// from a kernel of its own (bias_kernel). Alone (run), or with the data gradient's product pd in one
// launch (tiles.cuh: gemm_pair: run_with).
struct WeightGrad {
    float* db;
    const float* dy;
    int n, out;
    tiled::Product<ColumnsOf, RowsAndOnes, StoreWeightsAndBias> with_bias;
    tiled::Product<ColumnsOf, RowsOf, tiled::StoreMatrix> plain;
    bool bias_in_product;

    WeightGrad(float* dw, float* db, const float* dy, const float* x, int n, int in, int out, Math math)
        : db(db), dy(dy), n(n), out(out),
          with_bias{out, in + 1, n, {dy, out}, {x, in}, {dw, db, in}},
          plain{out, in, n, {dy, out}, {x, in}, {dw, in, true}},
          bias_in_product(math == Math::fp32) {
    }

    void bias_kernel(cudaStream_t stream) const {
        if (!bias_in_product) dense_backward_bias(db, dy, n, out, stream);
    }
    void run(Workspace ws, cudaStream_t stream, Math math) const {
        if (bias_in_product) product(with_bias, ws, stream, math);
        else product(plain, ws, stream, math);
    }
    template <class Store>
    void run_with(const tiled::Product<RowMajor, RowsOf, Store>& pd, Workspace ws, cudaStream_t stream,
                  Math math) const {
        if (math == Math::tf32) tiled::gemm_pair<Math::tf32>(plain, pd, ws, stream);
        else tiled::gemm_pair<Math::fp32>(with_bias, pd, ws, stream);
    }
};

// dw, db and (with_data) the data gradient dx (n, in) = dy (n, out) . w
// (out, in), stored by `store`: the products of dense_backward.
template <class Store>
void backward(float* dw, float* db, const float* dy, const float* x, const float* w, int n, int in, int out,
              bool with_data, Store store, Workspace ws, cudaStream_t stream, Math math) {
    if (n <= 0) return;  // no samples: nothing to add, and dx has no rows
    const WeightGrad wg(dw, db, dy, x, n, in, out, math);
    wg.bias_kernel(stream);
    if (!with_data) return wg.run(ws, stream, math);
    const tiled::Product<RowMajor, RowsOf, Store> pd{n, in, out, {dy, out}, {w, in}, store};
    wg.run_with(pd, ws, stream, math);
}

}  // namespace

void dense_backward(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w, int n,
                    int in, int out, Workspace ws, cudaStream_t stream, Math math) {
    backward(dw, db, dy, x, w, n, in, out, dx != nullptr, tiled::StoreMatrix{dx, in, false}, ws, stream, math);
}

void dense_backward_relu(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w, int n,
                         int in, int out, Workspace ws, cudaStream_t stream, Math math) {
    backward(dw, db, dy, x, w, n, in, out, dx != nullptr, StoreMasked{dx, x, in}, ws, stream, math);
}

void dense_backward_bias(float* db, const float* dy, int n, int out, cudaStream_t stream) {
    if (n > 0 && out > 0)
        launch::kernel("dense_bias_grad", dense_bias_grad, unsigned(out), launch::threads, stream, db, dy, n, out);
}

void dense_backward_pool(float* grad_y, float* dx, float* dw, float* db, const float* dy, const float* x,
                         const float* w, int n, int in, int out, const float* y, PoolKind kind, const PoolShape& ps,
                         Workspace ws, cudaStream_t stream, Math math) {
    if (ps.n != n || size_t(in) * size_t(n) != ps.out_size())
        throw std::invalid_argument("dense_backward_pool: the dense layer's input is not the pooling's output");
    // Where the windows do not overlap: the data gradient's product,
    // writing grad_y, in the weight gradient's launch (only that launch is
    // compiled with this epilogue). Otherwise the pooling keeps its kernel.
    if (windows_apart(ps) && n > 0) {
        const PoolWindows windows{ps.k, ps.stride, ps.h, ps.w, ps.oh(), ps.ow()};
        const tiled::Product<RowMajor, RowsOf, StoreThroughPool> pd{
            n, in, out, {dy, out}, {w, in}, {grad_y, y, x, in, kind, windows}};
        const WeightGrad wg(dw, db, dy, x, n, in, out, math);
        wg.bias_kernel(stream);
        return wg.run_with(pd, ws, stream, math);
    }
    dense_backward(dx, dw, db, dy, x, w, n, in, out, ws, stream, math);
    pool2d_backward_relu(grad_y, dx, y, x, kind, ps, stream);
}

// ---- The last dense layer and the loss, one launch ----
//
// LeNet's last layer is 128 -> 10: at batch 256 each of its three products
// is 0.3 MFLOP, yet as products and the loss it takes 6 kernels, each
// waiting on the one before, most on a few blocks. Here they run in one
// kernel, a block a sample (FP32):
// 1. the logits, a warp a class: its lanes' products over the input, staged
//    in shared memory, added by lane 0 in lane order; then the bias;
// 2. thread 0: the softmax and the loss, and the gradient of the logits,
//    as softmax_xent computes them, for the sample;
// 3. the input's gradient dx = dlogits . w, each column's classes added in
//    order, masked by the ReLU before (relu_before);
// 4. the last block of each group of dense_loss_group samples to get there
//    (an integer ticket a group) sums the group's [dlogits^T . x | column
//    sums] in sample order; the last group to get there adds the groups' in
//    group order into dw and db, and the samples' losses into *loss_sum in
//    softmax_xent's order (thread t: samples t, t + 256, ..., then a fixed
//    tree). Every sum has one order, whatever order the blocks run in.
namespace {

struct DenseLoss {
    float* logits;
    float* dlogits;
    double* loss_sum;
    const int32_t* labels;
    float *dx, *dw, *db;
    const float *x, *w, *b;
    int n, in, classes;
    bool relu_before;
    float* losses;      // scratch: n
    float* group_sums;  // scratch: groups x classes x (in + 1)
    unsigned* tickets;  // groups + 1
    UnfinishedDense before;  // x's layer, where it is left for this kernel to finish
};

// Sample i's x into xs: loaded, or (d.before) finished as finish_splits
// with StoreBiased<true> finishes it (its splits added in split order,
// then the bias and the ReLU) and stored in x on the way (the last blocks'
// sums read it there).
__device__ void dense_loss_input(const DenseLoss& d, int i, float* xs) {
    const UnfinishedDense& u = d.before;
    if (!u.y) {
        const float* x = d.x + size_t(i) * d.in;
        for (int j = int(threadIdx.x); j < d.in; j += launch::threads) xs[j] = x[j];
        return;
    }
    const size_t size = size_t(u.n) * u.out, row = size_t(i) * u.out;
    for (int j = int(threadIdx.x); j < u.out; j += launch::threads) {
        const float v = StoreBiased<true>::biased(tiled::split_sum(u.partial, u.splits, size, row + j), u.b[j]);
        xs[j] = v;
        u.y[row + j] = v;
    }
}

// Steps 1 to 3: the sample's logits, softmax, loss and dlogits, and its
// dx. xs holds the sample's input, z and g its logits and their gradient,
// for the step after.
__device__ void dense_loss_sample(const DenseLoss& d, float* xs, float (*lanes)[32], float* z, float* g) {
    constexpr int warps = launch::threads / 32;
    const int i = int(blockIdx.x), t = int(threadIdx.x), lane = t % 32, warp = t / 32;
    dense_loss_input(d, i, xs);
    __syncthreads();
    for (int c = warp; c < d.classes; c += warps) {
        const float* wc = d.w + size_t(c) * d.in;
        float s = 0.0f;
        for (int j = lane; j < d.in; j += 32) s = fmaf(xs[j], wc[j], s);
        lanes[warp][lane] = s;
        __syncwarp();
        if (lane == 0) {
            float sum = 0.0f;
            for (int l = 0; l < 32; ++l) sum += lanes[warp][l];
            z[c] = sum + d.b[c];
        }
        __syncwarp();
    }
    __syncthreads();
    if (t == 0) {
        float zmax = z[0];
        for (int c = 1; c < d.classes; ++c) zmax = fmaxf(zmax, z[c]);
        float sum = 0.0f;
        for (int c = 0; c < d.classes; ++c) {
            g[c] = expf(z[c] - zmax);
            sum += g[c];
        }
        const float inv = 1.0f / sum;
        for (int c = 0; c < d.classes; ++c) g[c] *= inv;
        const int label = d.labels[i];
        g[label] -= 1.0f;
        d.losses[i] = logf(sum) + zmax - z[label];
        for (int c = 0; c < d.classes; ++c) {
            d.logits[size_t(i) * d.classes + c] = z[c];
            d.dlogits[size_t(i) * d.classes + c] = g[c];
        }
    }
    __syncthreads();
    for (int j = t; j < d.in; j += launch::threads) {
        float s = 0.0f;
        for (int c = 0; c < d.classes; ++c) s = fmaf(g[c], d.w[size_t(c) * d.in + j], s);
        d.dx[size_t(i) * d.in + j] = !d.relu_before || xs[j] > 0.0f ? s : 0.0f;
    }
}

// The batch's loss, in softmax_xent's order, added to *loss_sum (the last
// block of the grid: every sample's loss is stored).
__device__ void dense_loss_total(const DenseLoss& d) {
    double loss = 0.0;
    for (int r = int(threadIdx.x); r < d.n; r += launch::threads) loss += double(__ldcg(d.losses + r));
    loss = launch::block_sum(loss);
    if (threadIdx.x == 0) *d.loss_sum += loss;
}

// Step 4: summed a load or two at a time (each thread 5 of the 1,290
// values of [dw | db], over 16 samples and then 16 groups), the last
// blocks' sums took most of the kernel's time (0.029 ms of an H200 at
// LeNet's batch 256): about 160 loads one after the other, where a block
// waits on each. Here every load of a sum is issued before the sum begins:
// - the last block of each group of dense_loss_wide_group samples stages
//   the group's dlogits in shared memory, and a thread a column of [x | 1]
//   loads the column's 32 values at once, then sums each class's product
//   with it in sample order;
// - the last group's block adds up to 4 of the values of [dw | db] at a
//   time, each over the groups in group order, 8 groups' loads at once.
__global__ void __launch_bounds__(launch::threads) dense_loss_wide(DenseLoss d) {
    constexpr int warps = launch::threads / 32, group_rows = dense_loss_wide_group;
    __shared__ float xs[dense_loss_in_most];
    __shared__ float lanes[warps][32];
    __shared__ float z[dense_loss_classes_most], g[dense_loss_classes_most];
    __shared__ float gs[group_rows][dense_loss_classes_most];  // the group's dlogits
    dense_loss_sample(d, xs, lanes, z, g);
    const int i = int(blockIdx.x), t = int(threadIdx.x);
    const int row = d.in + 1, total = d.classes * row;  // [dw | db]: a row a class, its weights then its bias

    const int group = i / group_rows, first = group * group_rows;
    const int rows = min(d.n - first, group_rows), groups = (d.n + group_rows - 1) / group_rows;
    if (!launch::last_to_arrive(&d.tickets[group], unsigned(rows))) return;
    for (int e = t; e < rows * d.classes; e += launch::threads)
        gs[e / d.classes][e % d.classes] = __ldcg(d.dlogits + size_t(first) * d.classes + e);
    __syncthreads();
    float* sums = d.group_sums + size_t(group) * total;
    for (int j = t; j < row; j += launch::threads) {
        float xr[group_rows];
#pragma unroll
        for (int r = 0; r < group_rows; ++r)
            xr[r] = r >= rows ? 0.0f : j < d.in ? __ldcg(d.x + size_t(first + r) * d.in + j) : 1.0f;
        for (int c = 0; c < d.classes; ++c) {
            float s = 0.0f;
#pragma unroll
            for (int r = 0; r < group_rows; ++r)
                if (r < rows) s = fmaf(gs[r][c], xr[r], s);
            sums[size_t(c) * row + j] = s;
        }
    }

    if (!launch::last_to_arrive(&d.tickets[groups], unsigned(groups))) return;
    constexpr int at_once = 4, groups_at_once = 8;
    for (int e0 = t; e0 < total; e0 += at_once * launch::threads) {
        float s[at_once] = {};
        for (int k0 = 0; k0 < groups; k0 += groups_at_once) {
            float v[at_once][groups_at_once];
#pragma unroll
            for (int a = 0; a < at_once; ++a)
#pragma unroll
                for (int u = 0; u < groups_at_once; ++u) {
                    const int e = e0 + a * launch::threads, k = k0 + u;
                    v[a][u] = e < total && k < groups ? __ldcg(d.group_sums + size_t(k) * total + e) : 0.0f;
                }
#pragma unroll
            for (int a = 0; a < at_once; ++a)
#pragma unroll
                for (int u = 0; u < groups_at_once; ++u)
                    if (k0 + u < groups) s[a] += v[a][u];
        }
#pragma unroll
        for (int a = 0; a < at_once; ++a) {
            const int e = e0 + a * launch::threads;
            if (e >= total) continue;
            const int c = e / row, j = e - c * row;
            if (j < d.in) d.dw[size_t(c) * d.in + j] += s[a];
            else d.db[c] += s[a];
        }
    }
    dense_loss_total(d);
}

}  // namespace

bool dense_loss_fits(int n, int in, int classes) {
    return n > 0 && in > 0 && in <= dense_loss_in_most && classes > 0 && classes <= dense_loss_classes_most &&
           dense_loss_groups(n) < workspace_tickets;
}

bool dense_loss_runs(int n, int in, int classes, Math math) {
    return math == Math::fp32 && dense_loss_fits(n, in, classes);
}

void dense_softmax_cross_entropy(float* logits, float* dlogits, double* loss_sum, const int32_t* labels, float* dx,
                                 float* dw, float* db, const float* x, const float* w, const float* b, int n, int in,
                                 int classes, bool relu_before, Workspace ws, cudaStream_t stream,
                                 const UnfinishedDense& before, Math math) {
    if (!dense_loss_fits(n, in, classes) || !ws.tickets)
        throw std::invalid_argument("dense_softmax_cross_entropy: " + std::to_string(n) + " samples of " +
                                    std::to_string(in) + " inputs and " + std::to_string(classes) +
                                    " classes, or no tickets: beyond what its kernel holds");
    if (before.y && (before.y != x || before.n != n || before.out != in || before.partial != ws.scratch))
        throw std::invalid_argument("dense_softmax_cross_entropy: the unfinished layer before is not the one whose "
                                    "output is x, or its partial sums are not at the start of the scratch");
    if (math != Math::fp32)
        throw std::invalid_argument("dense_softmax_cross_entropy: FP32 alone (--tf32 runs the layer and the loss apart)");
    float* scratch = ws.scratch + before.floats();  // (0 floats when x is ready)
    const DenseLoss d{logits, dlogits,     loss_sum, labels,      dx,         dw,    db, x, w, b, n, in,
                      classes, relu_before, scratch,  scratch + n, ws.tickets, before};
    launch::kernel("dense_loss_wide", dense_loss_wide, unsigned(n), launch::threads, stream, d);
}

}  // namespace dpt::cuda
