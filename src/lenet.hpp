// LeNet as the tutorial defines it, over one flat parameter buffer:
//   conv 20@3x3 -> ReLU -> 2x2 pool -> conv 50@5x5 -> ReLU -> 2x2 pool
//   -> flatten 800 -> dense 128 -> ReLU -> dense 10 -> softmax cross-entropy
//
// Parameters and gradients of a replica each live in one flat float buffer;
// the tensors below are views at fixed offsets. The allreduce, checkpoints and
// replica comparisons all work on the flat buffer.
//
// The forward and backward passes are written once, as templates over a
// kernel set (the CPU kernels, or the CUDA launchers bound to a stream), so
// every backend runs the same sequence of layers.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "shapes.hpp"

namespace dpt {

struct TensorInfo {
    std::string_view name;
    std::array<int, 4> shape;  // unused trailing dimensions are 0
    int rank;
    size_t offset;             // in floats, within the flat buffer
    constexpr size_t size() const {
        size_t s = 1;
        for (int i = 0; i < rank; ++i) s *= size_t(shape[i]);
        return s;
    }
};

namespace lenet {

inline constexpr int image_side = 28, classes = 10;
inline constexpr int conv1_out = 20, conv1_k = 3;
inline constexpr int conv2_out = 50, conv2_k = 5;
inline constexpr int flat = 800, hidden = 128;

// The parameter tensors, in buffer order. Weights are stored output-major:
// conv (out, in, kh, kw), dense (out, in), as PyTorch stores them.
inline constexpr std::array<TensorInfo, 8> tensors = {{
    {"conv1.weight", {20, 1, 3, 3}, 4, 0},
    {"conv1.bias", {20}, 1, 180},
    {"conv2.weight", {50, 20, 5, 5}, 4, 200},
    {"conv2.bias", {50}, 1, 25200},
    {"dense1.weight", {128, 800}, 2, 25250},
    {"dense1.bias", {128}, 1, 127650},
    {"dense2.weight", {10, 128}, 2, 127778},
    {"dense2.bias", {10}, 1, 129058},
}};
inline constexpr size_t param_count = 129068;

// The offsets above are written out so the layout reads as a table; this
// checks that they tile the buffer exactly.
constexpr bool layout_is_contiguous() {
    size_t next = 0;
    for (const TensorInfo& t : tensors) {
        if (t.offset != next) return false;
        next += t.size();
    }
    return next == param_count;
}
static_assert(layout_is_contiguous(), "LeNet parameter offsets must tile the flat buffer");

// Typed views into a flat parameter (or gradient) buffer.
struct Params {
    float *conv1_w, *conv1_b, *conv2_w, *conv2_b, *dense1_w, *dense1_b, *dense2_w, *dense2_b;
};
inline Params views(float* flat_buffer) {
    float* p = flat_buffer;
    return {p + tensors[0].offset, p + tensors[1].offset, p + tensors[2].offset, p + tensors[3].offset,
            p + tensors[4].offset, p + tensors[5].offset, p + tensors[6].offset, p + tensors[7].offset};
}

// Layer shapes for a part of n samples.
struct Shapes {
    ConvShape conv1, conv2;
    PoolShape pool1, pool2;
};
inline Shapes shapes(int n) {
    Shapes s;
    s.conv1 = {n, 1, image_side, image_side, conv1_out, conv1_k, conv1_k};  // -> 20x26x26
    s.pool1 = {n, conv1_out, s.conv1.oh(), s.conv1.ow()};                   // -> 20x13x13
    s.conv2 = {n, conv1_out, s.pool1.oh(), s.pool1.ow(), conv2_out, conv2_k, conv2_k};  // -> 50x9x9
    s.pool2 = {n, conv2_out, s.conv2.oh(), s.conv2.ow()};                   // -> 50x4x4 = 800
    return s;
}

// A replica's activations and their gradients for up to `capacity` samples,
// carved out of one allocation (sizes from `activation_floats`).
struct Activations {
    float *x;                 // (n, 1, 28, 28) input, scaled to [0, 1]
    int32_t *labels;          // (n)
    float *c1, *p1;           // (n, 20, 26, 26) conv1 after ReLU, (n, 20, 13, 13) pooled
    float *c2, *p2;           // (n, 50, 9, 9) conv2 after ReLU, (n, 800) pooled
    float *h3, *logits;       // (n, 128) dense1 after ReLU, (n, 10)
    float *d_logits, *d_h3, *d_p2, *d_c2, *d_p1, *d_c1;  // gradients, same shapes
    float *scratch;           // the conv kernels' working space (size from the kernel set)
};

// Scratch floats the kernel set K needs for either conv at this capacity.
template <class K>
size_t scratch_floats(int capacity) {
    const Shapes s = shapes(capacity);
    return std::max(K::conv2d_scratch_floats(s.conv1), K::conv2d_scratch_floats(s.conv2));
}

// Sizes of the Activations fields, in the order above (labels counted as floats).
inline std::array<size_t, 15> activation_sizes(int capacity, size_t scratch) {
    const Shapes s = shapes(capacity);
    const size_t n = size_t(capacity);
    return {s.conv1.in_size(), n, s.conv1.out_size(), s.pool1.out_size(), s.conv2.out_size(),
            s.pool2.out_size(), n * hidden, n * classes,
            n * classes, n * hidden, s.pool2.out_size(), s.conv2.out_size(), s.pool1.out_size(),
            s.conv1.out_size(), scratch};
}
inline size_t activation_floats(int capacity, size_t scratch) {
    size_t total = 0;
    for (size_t s : activation_sizes(capacity, scratch)) total += s;
    return total;
}
// Points every field into `memory` (activation_floats(capacity, scratch) floats).
inline Activations carve(float* memory, int capacity, size_t scratch) {
    const auto sz = activation_sizes(capacity, scratch);
    float* p = memory;
    auto take = [&](size_t i) { float* r = p; p += sz[i]; return r; };
    Activations a;
    a.x = take(0);
    a.labels = reinterpret_cast<int32_t*>(take(1));
    a.c1 = take(2); a.p1 = take(3); a.c2 = take(4); a.p2 = take(5); a.h3 = take(6); a.logits = take(7);
    a.d_logits = take(8); a.d_h3 = take(9); a.d_p2 = take(10); a.d_c2 = take(11); a.d_p1 = take(12);
    a.d_c1 = take(13); a.scratch = take(14);
    return a;
}

// Forward pass over a.x[0:n] into a.logits. K is a kernel set: cpu::KernelSet
// or cuda::KernelSet (bound to a stream). ReLU is fused into the layer before
// it (bias+ReLU), and its backward into the pooling backward after it.
template <class K>
void forward(K& k, Activations& a, const Params& p, PoolKind pool, int n) {
    const Shapes s = shapes(n);
    k.conv2d_forward_relu(a.c1, a.x, p.conv1_w, p.conv1_b, s.conv1, a.scratch);
    k.pool2d_forward(a.p1, a.c1, pool, s.pool1);
    k.conv2d_forward_relu(a.c2, a.p1, p.conv2_w, p.conv2_b, s.conv2, a.scratch);
    k.pool2d_forward(a.p2, a.c2, pool, s.pool2);
    k.dense_forward_relu(a.h3, a.p2, p.dense1_w, p.dense1_b, n, flat, hidden);
    k.dense_forward(a.logits, a.h3, p.dense2_w, p.dense2_b, n, hidden, classes);
}

// Backward pass after `forward` and the loss kernel filled a.d_logits:
// accumulates the gradient of the summed loss into g (cleared by the caller).
template <class K>
void backward(K& k, Activations& a, const Params& p, const Params& g, PoolKind pool, int n) {
    const Shapes s = shapes(n);
    k.dense_backward(a.d_h3, g.dense2_w, g.dense2_b, a.d_logits, a.h3, p.dense2_w, n, hidden, classes);
    k.relu_backward(a.d_h3, a.d_h3, a.h3, size_t(n) * hidden);
    k.dense_backward(a.d_p2, g.dense1_w, g.dense1_b, a.d_h3, a.p2, p.dense1_w, n, flat, hidden);
    k.pool2d_backward_relu(a.d_c2, a.d_p2, a.c2, a.p2, pool, s.pool2);
    k.conv2d_backward_weight(g.conv2_w, g.conv2_b, a.d_c2, a.p1, s.conv2, a.scratch);
    k.conv2d_backward_data(a.d_p1, a.d_c2, p.conv2_w, s.conv2, a.scratch);
    k.pool2d_backward_relu(a.d_c1, a.d_p1, a.c1, a.p1, pool, s.pool1);
    // The input needs no gradient: conv1 computes only its weight gradient.
    k.conv2d_backward_weight(g.conv1_w, g.conv1_b, a.d_c1, a.x, s.conv1, a.scratch);
}

}  // namespace lenet
}  // namespace dpt
