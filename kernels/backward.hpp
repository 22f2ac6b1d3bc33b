// A layer's backward as the model hands it to a kernel set, one call a
// layer (src/model/model.hpp: Model::backward_layer): what the layer reads
// and writes, and what the model planned around it. The kernel set chooses
// how (which kernels, fused or not, by the shapes it is handed): the CPU's
// (kernels/cpu/kernels.hpp) and the GPU's (kernels/cuda/kernels.hpp), each
// in its KernelSet.
#pragma once
#include "shapes.hpp"

namespace dpt {

// The pooling after a layer and its ReLU, whose backward the layer's own
// does: the pooling's output gradient, the ReLU's output y (the pooling's
// input) and the pooling's output.
struct PoolAfter {
    const float* d_pooled = nullptr;  // null: no such pooling
    const float* y = nullptr;
    const float* pooled = nullptr;
    PoolKind kind = PoolKind::avg;
    PoolShape shape{};
};

// A convolution: dw, db += its weight and bias gradients from dy and x;
// where dx is set, its input gradient from dy and w, written (or, with
// `accumulate`, staged in `spare` and added: another layer reads x too).
// With `pool`, dy is the ReLU's output gradient through that pooling (a
// first layer: no dx), written on the way or read through it.
struct ConvBackward {
    ConvShape s;
    float *dw, *db, *dy;
    const float *x, *w;
    float* dx = nullptr;
    bool accumulate = false;
    float* spare = nullptr;
    PoolAfter pool{};
    float* scratch = nullptr;
};

// A dense layer: dw, db += its weight and bias gradients; dx its input
// gradient (masked by the ReLU before where `relu_before`; with
// `pool_before`, passed on through the pooling of a ReLU's output before
// the layer, into grad_y, the gradient of that ReLU's output y).
struct DenseBackward {
    float *dx, *dw, *db;
    const float *dy, *x, *w;
    int n, in, out;
    bool relu_before = false;
    struct {
        float* grad_y = nullptr;  // null: no pooling before
        const float* y = nullptr;
        PoolKind kind = PoolKind::avg;
        PoolShape shape{};
    } pool_before{};
    float* scratch = nullptr;
};

}  // namespace dpt
