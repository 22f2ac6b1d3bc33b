// The trainer's loss kernel (kernels/cuda/dense.cu: dense_loss_wide) under
// --tf32, for tf32/05 and tf32/10 (which include this after
// DEV_REPLACES(dense_loss_runs) and DEV_REPLACES(dense_softmax_cross_entropy)): each product's operands rounded to TF32
// as it reads them, the bias's gradient summed from dlogits as they are, on
// the FP32 units (a product of two TF32 numbers is exact in FP32).
#pragma once
#include <stdexcept>
#include <string>

#include "cuda/kernels.hpp"
#include "cuda/launch.cuh"
#include "cuda/tiles.cuh"
#include "dev.hpp"

namespace dpt::cuda::dev::loss {

using tiled::operand;

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
    float* group_sums;  // scratch: groups x classes x (in + 1), then (db_before) groups x in
    unsigned* tickets;  // groups + 1
    float* db_before;   // (tf32/10) the bias gradient of the layer whose output x is, += dx's column sums; or null
};

// Steps 1 to 3: the sample's logits, softmax, loss and dlogits, and its
// dx. xs holds the sample's input, z and g its logits and their gradient,
// for the step after.
static __device__ void dense_loss_sample(const DenseLoss& d, float* xs, float (*lanes)[32], float* z, float* g) {
    constexpr int warps = launch::threads / 32;
    const int i = int(blockIdx.x), t = int(threadIdx.x), lane = t % 32, warp = t / 32;
    const float* x = d.x + size_t(i) * d.in;
    for (int j = t; j < d.in; j += launch::threads) xs[j] = operand(x[j], true);
    __syncthreads();
    for (int c = warp; c < d.classes; c += warps) {
        const float* wc = d.w + size_t(c) * d.in;
        float s = 0.0f;
        for (int j = lane; j < d.in; j += 32) s = fmaf(xs[j], operand(wc[j], true), s);
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
        for (int c = 0; c < d.classes; ++c) s = fmaf(operand(g[c], true), operand(d.w[size_t(c) * d.in + j], true), s);
        d.dx[size_t(i) * d.in + j] = !d.relu_before || xs[j] > 0.0f ? s : 0.0f;
    }
}

// The batch's loss, in softmax_xent's order, added to *loss_sum (the last
// block of the grid: every sample's loss is stored).
static __device__ void dense_loss_total(const DenseLoss& d) {
    double loss = 0.0;
    for (int r = int(threadIdx.x); r < d.n; r += launch::threads) loss += double(__ldcg(d.losses + r));
    loss = launch::block_sum(loss);
    if (threadIdx.x == 0) *d.loss_sum += loss;
}

// Step 4 as the trainer's dense_loss_wide sums it (kernels/cuda/dense.cu),
// the weights' products on rounded operands. With db_before (tf32/10), also
// the bias gradient of the dense layer whose output x is, from dx as it is
// (as [dw | db] is from dlogits): each group's column sums of dx in sample
// order, then the groups' in group order.
static __global__ void __launch_bounds__(launch::threads) dense_loss_wide_tf32(DenseLoss d) {
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
    float* bias_sums = d.group_sums + size_t(groups) * total;  // (db_before) after every group's [dw | db]
    if (d.db_before)
        for (int j = t; j < d.in; j += launch::threads) {
            const float* column = d.dx + size_t(first) * d.in + j;
            float s = 0.0f;
            for (int r = 0; r < rows; ++r) s += __ldcg(column + size_t(r) * d.in);
            bias_sums[size_t(group) * d.in + j] = s;
        }
    for (int e = t; e < rows * d.classes; e += launch::threads)
        gs[e / d.classes][e % d.classes] = __ldcg(d.dlogits + size_t(first) * d.classes + e);
    __syncthreads();
    float* sums = d.group_sums + size_t(group) * total;
    for (int j = t; j < row; j += launch::threads) {
        float xr[group_rows];
#pragma unroll
        for (int r = 0; r < group_rows; ++r)
            xr[r] = r >= rows ? 0.0f : j < d.in ? operand(__ldcg(d.x + size_t(first + r) * d.in + j), true) : 1.0f;
        for (int c = 0; c < d.classes; ++c) {
            float s = 0.0f;
#pragma unroll
            for (int r = 0; r < group_rows; ++r)
                if (r < rows) s = fmaf(operand(gs[r][c], j < d.in), xr[r], s);
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
    if (d.db_before)
        for (int j = t; j < d.in; j += launch::threads) {
            float s = 0.0f;
            for (int k = 0; k < groups; ++k) s += __ldcg(bias_sums + size_t(k) * d.in + j);
            d.db_before[j] += s;
        }
    dense_loss_total(d);
}

// dense_softmax_cross_entropy under --tf32 by dense_loss_wide_tf32, and
// (db_before, where not null) the bias gradient of the layer before.
inline void dense_loss_tf32(float* logits, float* dlogits, double* loss_sum, const int32_t* labels, float* dx,
                            float* dw, float* db, const float* x, const float* w, const float* b, int n, int in,
                            int classes, bool relu_before, Workspace ws, cudaStream_t stream,
                            const UnfinishedDense& before, float* db_before) {
    // (Under --tf32 the trainer's dense_forward_relu_for_loss finishes the layer before: nothing is left.)
    if (!dense_loss_fits(n, in, classes) || !ws.tickets || before.y)
        throw std::invalid_argument("dense_softmax_cross_entropy (tf32/): " + std::to_string(n) + " samples of " +
                                    std::to_string(in) + " inputs and " + std::to_string(classes) +
                                    " classes, no tickets, or a layer left unfinished: beyond its kernel");
    const DenseLoss d{logits, dlogits, loss_sum, labels, dx, dw, db, x, w, b, n, in, classes, relu_before,
                      ws.scratch, ws.scratch + n, ws.tickets, db_before};
    launch::kernel("dense_loss_wide_tf32", dense_loss_wide_tf32, unsigned(n), launch::threads, stream, d);
}

// The two launchers both versions put in place of the trainer's: under
// --tf32 the loss runs with the layer (dense_loss_tf32); in FP32, the
// trainer's.
inline bool runs_or_trainer(int n, int in, int classes, Math math) {
    return math == Math::tf32 ? dense_loss_fits(n, in, classes) : TRAINER(dense_loss_runs)(n, in, classes, math);
}
inline void loss_or_trainer(float* logits, float* dlogits, double* loss_sum, const int32_t* labels, float* dx,
                            float* dw, float* db, const float* x, const float* w, const float* b, int n, int in,
                            int classes, bool relu_before, Workspace ws, cudaStream_t stream,
                            const UnfinishedDense& before, Math math) {
    if (math != Math::tf32)
        return TRAINER(dense_softmax_cross_entropy)(logits, dlogits, loss_sum, labels, dx, dw, db, x, w, b, n, in,
                                                    classes, relu_before, ws, stream, before, math);
    dense_loss_tf32(logits, dlogits, loss_sum, labels, dx, dw, db, x, w, b, n, in, classes, relu_before, ws, stream,
                    before, nullptr);
}

}  // namespace dpt::cuda::dev::loss
