// What the convolution's two sources share: conv.cu (every launcher, and
// the kernels on the FP32 units and the GEMM core) and conv_mma.cu (LeNet's
// conv2 on the tensor cores under --tf32, a kernel for each of its three
// products). The geometry the kernels take, the pooling of staged output
// planes, the adding of a weight gradient's slices, and conv_mma.cu's
// launchers.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "fastdiv.cuh"
#include "kernels.hpp"
#include "launch.cuh"
#include "pool.cuh"
#include "tiles.cuh"

namespace dpt::cuda::conv {

// ConvShape's sizes, precomputed on the host for the device code, with the
// divisions the loaders make by them as multiplies (fastdiv.cuh).
struct Geometry {
    int n, c, h, w, oc, kh, kw, stride, pad, oh, ow;
    FastDiv by_taps, by_kw, by_out_pixels, by_ow, by_in_pixels, by_w, by_h, by_c;
    bool tf32;  // Math::tf32: a direct kernel rounds its operands (conv.cu: direct_math)
    explicit Geometry(const ConvShape& s)
        : n(s.n), c(s.c), h(s.h), w(s.w), oc(s.oc), kh(s.kh), kw(s.kw), stride(s.stride), pad(s.pad),
          oh(s.oh()), ow(s.ow()), by_taps(s.kh * s.kw), by_kw(s.kw), by_out_pixels(s.oh() * s.ow()), by_ow(s.ow()),
          by_in_pixels(s.h * s.w), by_w(s.w), by_h(s.h), by_c(s.c), tf32(s.math == Math::tf32) {}
};

// The pooling after a convolution's ReLU, for the kernels that pool what
// they computed.
struct PoolGeometry {
    int k, stride, oh, ow;
};

// Pools the block's output planes (mine of them from channel first, plane
// floats each, OW wide) from shared memory into pooled_y.
template <PoolKind kind, int OW>
__device__ inline void pool_staged_planes(float* pooled_y, const float* planes, int sample, const Geometry& g,
                                          const PoolGeometry& pg, int first, int mine, int plane) {
    const int windows = pg.oh * pg.ow;
    for (int e = int(threadIdx.x); e < mine * windows; e += int(blockDim.x)) {
        const int o = e / windows, r = e - o * windows, py = r / pg.ow, px = r - py * pg.ow;
        pooled_y[(size_t(sample) * g.oc + first) * windows + e] =
            pooled_window<kind>(planes + o * plane + py * pg.stride * OW + px * pg.stride, OW, pg.k);
    }
}

// dw (oc, taps) += the first taps columns of [dw | db] (oc, taps + 1), and
// db (oc) += its last. Split, the product's partial sums go through
// tiled::StoreSplit, and finish_splits hands their sums here.
struct StoreWeightsAndBias {
    float* dw;
    float* db;
    int taps;
    __device__ void operator()(int, int o, int q, float v) const {
        if (q < taps) dw[size_t(o) * taps + q] += v;
        else db[o] += v;
    }
};
// A weight gradient's slices added into [dw | db] in slice order, as
// finish_splits adds them: a kernel of its own (conv.cu:
// add_weight_slices), or (version 13 of the weight gradient) the layer's
// input gradient's kernel before its own sums
// (input_grad_rows_tiled_finishing, input_grad_mma).
__device__ inline void finish_weight_slices(const UnfinishedWeightGrad& u) {
    const StoreWeightsAndBias out{u.dw, u.db, u.taps};
    const size_t size = size_t(u.oc) * (u.taps + 1);
    for (const size_t e : launch::grid_stride(size)) tiled::finish_split_sum(out, u.scratch, u.slices, size, u.taps + 1, e);
}

// ---- conv_mma.cu: LeNet's conv2 on the tensor cores (--tf32) ----

// tf32 version 4's forward (rows_forward_mma): whether it takes s, and the
// launch (bias, ReLU where relu, and where pooled the ReLU and the pooling
// after it).
bool rows_forward_mma_fits(const ConvShape& s);
void launch_rows_forward_mma(bool relu, bool pooled, PoolKind kind, float* y, float* pooled_y, const float* x,
                             const float* w, const float* b, const ConvShape& s, PoolGeometry pg, cudaStream_t stream);

// tf32 version 7's and 8's input gradient (input_grad_mma), which adds the
// slices of `weight` first where it has any.
bool input_grad_mma_fits(const ConvShape& s);
void launch_input_grad_mma(float* dx, const float* dy, const float* w, const ConvShape& s,
                           const UnfinishedWeightGrad& weight, cudaStream_t stream);

// tf32 version 9's weight gradient (weight_grad_mma), into the rows
// kernels' slices: a kernel of their signature, launched on a grid of
// (slices, weight_grad_mma_chunks(s)) blocks of weight_grad_mma_threads.
using WeightSlicesKernel = void (*)(float* partial, const float* dy, const float* x, Geometry g, int per_slice);
bool weight_grad_mma_fits(const ConvShape& s);
WeightSlicesKernel weight_grad_mma_kernel();
int weight_grad_mma_chunks(const ConvShape& s);
constexpr int weight_grad_mma_threads = 128;

}  // namespace dpt::cuda::conv
