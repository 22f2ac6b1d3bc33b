// A model is a list of layers. Everything else is computed from the list,
// once, when the Model is made: the parameter tensors with their names,
// shapes, offsets in the flat buffer and init roles; each layer's shapes;
// the activation buffers and their sizes. Forward and backward walk the
// list over a kernel set (the CPU kernels, or the CUDA launchers bound to a
// stream), so every backend runs the same sequence of kernels.
//
// Parameters and gradients of a replica each live in one flat float buffer
// (what the allreduce moves, checkpoints store and replicas compare); the
// tensors are views at the offsets computed here, in list order, weight
// before bias.
//
// Fusions the walk makes: a ReLU right after a conv or dense layer is done
// in that layer's forward (bias+ReLU epilogue) and its backward is folded
// into a pooling layer's backward when one follows (the pool's input is
// the ReLU's output, which masks the gradient). The first layer computes
// no gradient for the input.
//
// To add a layer kind: a LayerKind, its planning in model.cpp (shapes,
// tensors), and its case in forward() and backward() below.
#pragma once
#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shapes.hpp"

namespace dpt {

enum class LayerKind : uint8_t { conv, relu, pool, flatten, dense };

struct Layer {
    LayerKind kind;
    int out = 0;     // conv: output channels; dense: outputs
    int k = 0;       // conv: kernel side; pool: window side
    int stride = 1;  // conv, pool
    int pad = 0;     // conv
};
inline Layer conv(int channels, int kernel, int stride = 1, int pad = 0) {
    return {LayerKind::conv, channels, kernel, stride, pad};
}
inline Layer relu() { return {LayerKind::relu}; }
inline Layer pool(int window, int stride) { return {LayerKind::pool, 0, window, stride}; }
inline Layer flatten() { return {LayerKind::flatten}; }
inline Layer dense(int outputs) { return {LayerKind::dense, outputs}; }

// How a tensor starts (trainer.cpp: init_params): weights drawn from the
// seed, biases at zero. (Batch norm will add scale, starting at one, and shift.)
enum class InitRole : uint8_t { weight, bias };

struct ParamTensor {
    std::string name;        // "conv1.weight"
    std::vector<int> shape;  // conv (out, in, kh, kw), dense (out, in), bias (out): as PyTorch stores them
    size_t offset = 0;       // in floats, within the flat buffer
    size_t size = 0;
    InitRole role = InitRole::weight;
    double fan_in = 0, fan_out = 0;  // a weight's fans as PyTorch counts them (channels times kernel area)
};

// One sample's (channels, height, width); a flat vector is (n, 1, 1).
struct Dims {
    int c = 1, h = 1, w = 1;
    size_t size() const { return size_t(c) * size_t(h) * size_t(w); }
};

// A replica's activations for up to `capacity` samples, carved out of one
// allocation (Model::carve): the input, the labels, and per buffer the
// output and its gradient. Forward and backward take the input and the
// logits separately, so a CPU device can point them at any chunk of a part.
struct Activations {
    float* x = nullptr;             // (capacity, input) in [0, 1]
    int32_t* labels = nullptr;      // (capacity)
    std::vector<float*> out, grad;  // per buffer: (capacity, its size)
    float* scratch = nullptr;       // the conv kernels' working space
    float* logits() const { return out.back(); }
    float* d_logits() const { return grad.back(); }
};

// What Model::backward calls when a layer's gradients are done, by default.
struct NothingDone {
    void operator()(size_t) const {}
};

class Model {
   public:
    // Plans `layers` over inputs of `input` per sample. A pattern the walk
    // cannot run (a ReLU that follows neither a conv nor a dense layer) is
    // a logic_error: models are written in code, not typed by users.
    Model(std::string name, Dims input, std::vector<Layer> layers);

    const std::string& name() const { return name_; }
    Dims input() const { return input_; }
    int classes() const { return int(plan_.back().out.size()); }
    const std::vector<ParamTensor>& tensors() const { return tensors_; }
    size_t param_count() const { return param_count_; }
    // The tensor called `name` (an assert when there is none).
    const ParamTensor& tensor(const std::string& name) const;

    // Each layer's shapes for a part of n samples.
    ConvShape conv_shape(size_t layer, int n) const;
    PoolShape pool_shape(size_t layer, int n) const;
    std::vector<ConvShape> conv_shapes(int n) const;

    // Scratch floats kernel set K needs for every conv layer at this capacity.
    template <class K>
    size_t scratch_floats(int capacity) const {
        size_t most = 0;
        for (const ConvShape& s : conv_shapes(capacity)) most = std::max(most, K::conv2d_scratch_floats(s));
        return most;
    }
    // Floats of one allocation holding the activations (labels counted as floats).
    size_t activation_floats(int capacity, size_t scratch) const;
    Activations carve(float* memory, int capacity, size_t scratch) const;

    // Forward pass over x[0:n] into logits (n, classes).
    template <class K>
    void forward(K& k, const Activations& a, const float* params, PoolKind pool, int n, const float* x,
                 float* logits) const;
    // Backward pass after forward() and the loss kernel filled a.d_logits():
    // accumulates the gradient of the summed loss into grads (the caller
    // clears them); x is the input forward() was given. After each layer
    // with parameters it calls done(first): the layers are done from the
    // last, so grads[first:] are then complete (--overlap hands them on).
    template <class K, class Done = NothingDone>
    void backward(K& k, const Activations& a, const float* params, float* grads, PoolKind pool, int n,
                  const float* x, Done&& done = {}) const;

   private:
    struct Planned {
        Layer layer;
        Dims in, out;
        int input = -1;               // the buffer holding this layer's input; -1: x
        int buffer = -1;              // the buffer holding its output (relu, flatten: its input's)
        int weight = -1, bias = -1;   // indices into tensors_
        bool relu_after = false;      // conv, dense: the next layer's ReLU is fused in
        bool relu_before = false;     // pool: its input is a ReLU's output
    };
    const float* input_of(const Planned& p, const Activations& a, const float* x) const {
        return p.input < 0 ? x : a.out[size_t(p.input)];
    }
    float* output_of(const Planned& p, const Activations& a, float* logits) const {
        return p.buffer == int(buffer_sizes_.size()) - 1 ? logits : a.out[size_t(p.buffer)];
    }

    std::string name_;
    Dims input_;
    std::vector<Planned> plan_;
    std::vector<ParamTensor> tensors_;
    size_t param_count_ = 0;
    std::vector<size_t> buffer_sizes_;  // per sample, in buffer order
};

template <class K>
void Model::forward(K& k, const Activations& a, const float* params, PoolKind pool, int n, const float* x,
                    float* logits) const {
    for (size_t i = 0; i < plan_.size(); ++i) {
        const Planned& p = plan_[i];
        const float* in = input_of(p, a, x);
        float* out = output_of(p, a, logits);
        switch (p.layer.kind) {
            case LayerKind::conv: {
                const float *w = params + tensors_[size_t(p.weight)].offset, *b = params + tensors_[size_t(p.bias)].offset;
                if (p.relu_after) k.conv2d_forward_relu(out, in, w, b, conv_shape(i, n), a.scratch);
                else k.conv2d_forward(out, in, w, b, conv_shape(i, n), a.scratch);
                break;
            }
            case LayerKind::dense: {
                const float *w = params + tensors_[size_t(p.weight)].offset, *b = params + tensors_[size_t(p.bias)].offset;
                if (p.relu_after) k.dense_forward_relu(out, in, w, b, n, int(p.in.size()), p.layer.out);
                else k.dense_forward(out, in, w, b, n, int(p.in.size()), p.layer.out);
                break;
            }
            case LayerKind::pool:
                k.pool2d_forward(out, in, pool, pool_shape(i, n));
                break;
            case LayerKind::relu:     // done by the layer before it
            case LayerKind::flatten:  // the same buffer, read as (n, c*h*w)
                break;
        }
    }
}

template <class K, class Done>
void Model::backward(K& k, const Activations& a, const float* params, float* grads, PoolKind pool, int n,
                     const float* x, Done&& done) const {
    for (size_t i = plan_.size(); i-- > 0;) {
        const Planned& p = plan_[i];
        const float* in = input_of(p, a, x);
        float* d_in = p.input < 0 ? nullptr : a.grad[size_t(p.input)];  // the input needs no gradient
        const float* d_out = a.grad[size_t(p.buffer)];
        switch (p.layer.kind) {
            case LayerKind::conv: {
                const ConvShape s = conv_shape(i, n);
                const ParamTensor &w = tensors_[size_t(p.weight)], &b = tensors_[size_t(p.bias)];
                k.conv2d_backward_weight(grads + w.offset, grads + b.offset, d_out, in, s, a.scratch);
                done(w.offset);  // the weight's and bias's gradients are what the allreduce needs
                if (d_in) k.conv2d_backward_data(d_in, d_out, params + w.offset, s, a.scratch);
                break;
            }
            case LayerKind::dense: {
                assert(d_in && "a dense first layer needs a backward without the input's gradient");
                const ParamTensor &w = tensors_[size_t(p.weight)], &b = tensors_[size_t(p.bias)];
                k.dense_backward(d_in, grads + w.offset, grads + b.offset, d_out, in, params + w.offset, n,
                                 int(p.in.size()), p.layer.out);
                done(w.offset);
                break;
            }
            case LayerKind::pool:
                // After a ReLU, the pool's backward applies the ReLU's mask too.
                if (p.relu_before) k.pool2d_backward_relu(d_in, d_out, in, a.out[size_t(p.buffer)], pool, pool_shape(i, n));
                else k.pool2d_backward(d_in, d_out, in, a.out[size_t(p.buffer)], pool, pool_shape(i, n));
                break;
            case LayerKind::relu:
                // Unless a pool after it already did: the mask, in place.
                if (i + 1 == plan_.size() || plan_[i + 1].layer.kind != LayerKind::pool)
                    k.relu_backward(a.grad[size_t(p.buffer)], d_out, a.out[size_t(p.buffer)], size_t(n) * p.out.size());
                break;
            case LayerKind::flatten:
                break;
        }
    }
}

}  // namespace dpt
