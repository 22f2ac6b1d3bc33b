// A model is a list of layers. Everything else is computed from the list,
// once, when the Model is made: the parameter tensors with their names,
// shapes, offsets in the flat buffer and init roles; each layer's shapes;
// the activation buffers and their sizes. A training pass and an evaluation
// walk the list over a kernel set (the CPU kernels, or the CUDA launchers
// bound to a stream), so every backend runs the same sequence of kernels.
//
// Parameters and gradients of a replica each live in one flat float buffer
// (what the allreduce moves, checkpoints store and replicas compare); the
// tensors are views at the offsets computed here: the trained tensors in
// list order (weight before bias, gamma before beta), then batch norm's
// running statistics, which SGD leaves alone.
//
// Branches (ResNet's shortcuts): a layer may read the output of any earlier
// layer (`from`), and an add layer adds an earlier layer's output to the one
// before it. Where two layers read one buffer, backward adds their input
// gradients (the first to run writes, the next accumulates).
//
// Fusions the walk makes: a ReLU right after a conv, dense, batch norm or
// add layer is done in that layer's forward (bias+ReLU epilogue, the
// normalisation's, the add's; evaluation's too) and its backward is folded
// into the backward of a pooling or dense layer that follows (that layer's
// input is the ReLU's output, which masks the gradient), else of the batch
// norm or add before it (masks_relu_after); a pooling layer
// after a conv and its ReLU is done in the conv's forward too
// (conv2d_forward_relu_pool: one kernel on a GPU where the filter bank is
// small, the plain calls on the CPU), and when that conv is the first layer
// its weight gradient reads the pooling's gradient through the pooling
// (ConvBackward::pool); a dense layer after a pooling of a ReLU's output
// (through a flatten) does that pooling's backward and the ReLU's in its
// own (DenseBackward::pool_before: on a GPU, in the epilogue of its data
// gradient's product where the windows do not overlap); and where the kernel
// set offers it (a GPU's), a last dense layer runs with the loss (LastDense).
// A layer's backward is one call to the kernel set (kernels/backward.hpp),
// which picks the kernels by the shapes it is handed.
// ReLU and add work in place, in the buffer of the layer before. The first
// layer computes no gradient for the input.
//
// Batch norm across devices (--bn): each replica normalises with the
// statistics of its own part (local), or of the whole batch (sync): then the
// training pass runs in stages, and between two stages the host allreduces
// a batch norm's per-channel sums (sync_ranges). Either way a replica's
// forward writes its part's sums of x and x^2 into the gradient slots of
// the running statistics, the allreduce sums them with the gradients, and
// the update moves every replica's running statistics by the whole batch's
// (update_running): replicas stay identical and match one device's.
//
// To add a layer kind: a LayerKind, its planning in model.cpp (shapes,
// tensors), and its case in forward_layer() and backward_layer() below.
#pragma once
#include <algorithm>
#include <array>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backward.hpp"
#include "shapes.hpp"

namespace dpt {

enum class LayerKind : uint8_t { conv, relu, pool, flatten, dense, batch_norm, add };

struct Layer {
    LayerKind kind;
    int out = 0;     // conv: output channels; dense: outputs
    int k = 0;       // conv: kernel side; pool: window side
    int stride = 1;  // conv, pool
    int pad = 0;     // conv
    // conv: the layer whose output it reads (-1: the one before);
    // add: the layer whose output it adds to the one before's.
    int from = -1;
    std::optional<PoolKind> pool_kind{};  // pool: none leaves it to the run (--pool)
};
inline Layer conv(int channels, int kernel, int stride = 1, int pad = 0) {
    return {LayerKind::conv, channels, kernel, stride, pad};
}
inline Layer conv_from(int from, int channels, int kernel, int stride = 1, int pad = 0) {
    return {LayerKind::conv, channels, kernel, stride, pad, from};
}
inline Layer relu() { return {LayerKind::relu}; }
inline Layer pool(int window, int stride) { return {LayerKind::pool, 0, window, stride}; }
inline Layer pool(PoolKind kind, int window, int stride) { return {LayerKind::pool, 0, window, stride, 0, -1, kind}; }
inline Layer flatten() { return {LayerKind::flatten}; }
inline Layer dense(int outputs) { return {LayerKind::dense, outputs}; }
inline Layer batch_norm() { return {LayerKind::batch_norm}; }
inline Layer add(int from) { return {LayerKind::add, 0, 0, 1, 0, from}; }

// How a tensor starts (trainer.cpp: init_params): weights drawn from the
// seed; biases, batch norm's beta and running mean at zero; gamma and the
// running variance at one.
enum class InitRole : uint8_t { weight, bias, gamma, beta, running_mean, running_var };

struct ParamTensor {
    std::string name;        // "conv1.weight"
    std::vector<int> shape;  // conv (out, in, kh, kw), dense (out, in), bias (out): as PyTorch stores them
    size_t offset = 0;       // in floats, within the flat buffer
    size_t size = 0;
    InitRole role = InitRole::weight;
    double fan_in = 0, fan_out = 0;  // a weight's fans as PyTorch counts them (channels times kernel area)
    bool trained() const { return role != InitRole::running_mean && role != InitRole::running_var; }
};

// Batch norm over several devices (--bn): each device's own part's
// statistics (gluon's default, the tutorial's), or the whole batch's.
enum class BatchNormMode : uint8_t { local, sync };
// gluon's defaults.
inline constexpr float batch_norm_momentum = 0.9f, batch_norm_eps = 1e-5f;

// Floats [first, first + count) of a flat buffer.
struct Range {
    size_t first = 0, count = 0;
    size_t end() const { return first + count; }
    bool operator==(const Range&) const = default;
};

// One sample's (channels, height, width); a flat vector is (n, 1, 1).
struct Dims {
    int c = 1, h = 1, w = 1;
    size_t size() const { return size_t(c) * size_t(h) * size_t(w); }
    bool operator==(const Dims&) const = default;
};

// A replica's activations for up to `capacity` samples, carved out of one
// allocation (Model::carve): the input, the labels, and per buffer the
// output and its gradient. The passes take the input and the logits
// separately, so a CPU device can point them at any chunk of a part.
struct Activations {
    float* x = nullptr;             // (capacity, input) in [0, 1]
    int32_t* labels = nullptr;      // (capacity)
    std::vector<float*> out, grad;  // per buffer: (capacity, its size)
    std::vector<float*> saved;      // per batch norm: (2, c) its mean and 1/std in the last training pass
    float* spare = nullptr;         // an input gradient that is added to another's
    float* scratch = nullptr;       // the conv kernels' working space
    float* logits() const { return out.back(); }
    float* d_logits() const { return grad.back(); }
};

// What a training pass needs besides the tensors.
struct TrainPass {
    PoolKind pool = PoolKind::avg;  // --pool, for pooling layers that leave the kind to the run
    BatchNormMode bn = BatchNormMode::local;
    int batch = 0;  // --bn sync: the step's samples on all devices together
};

// The last layer, where a kernel set runs it with the loss (K::fuses_loss:
// on a GPU, dense_softmax_cross_entropy): a dense layer after a ReLU or
// none, not a pooling. Model::train then hands it to the loss instead of
// running its forward and backward; the loss writes the logits, their
// gradient, x's gradient and adds the layer's weight and bias gradients.
struct LastDense {
    const float *x, *w, *b;  // its input, weights and bias
    float *dx, *dw, *db;     // their gradients (dw and db add)
    int in = 0, classes = 0;
    bool relu_before = false;  // x is a ReLU's output: dx is 0 where x is
    float* scratch = nullptr;
};

// What Model::train calls when a layer's gradients are done, by default.
struct NothingDone {
    void operator()(size_t) const {}
};

class Model {
   public:
    // Plans `layers` over inputs of `input` per sample. A pattern the walk
    // cannot run (a ReLU that modifies a buffer a later layer reads as it
    // was, an add of different shapes, ...) is a logic_error: models are
    // written in code, not typed by users.
    Model(std::string name, Dims input, std::vector<Layer> layers);

    const std::string& name() const { return name_; }
    Dims input() const { return input_; }
    int classes() const { return int(plan_.back().out.size()); }
    const std::vector<ParamTensor>& tensors() const { return tensors_; }
    // Floats of the flat parameter buffer; the first trained_count() are
    // what SGD updates (the rest: batch norm's running statistics).
    size_t param_count() const { return param_count_; }
    size_t trained_count() const { return trained_count_; }
    // Floats of a replica's gradient buffer: the parameters' (with the
    // running statistics' slots holding the step's sums), then each batch
    // norm's backward sums.
    size_t gradient_floats() const { return gradient_floats_; }
    // The floats the allreduce sums after backward: with --bn sync the
    // statistics were summed during the pass already.
    size_t allreduced_floats(BatchNormMode bn) const {
        return bn == BatchNormMode::sync ? trained_count_ : param_count_;
    }
    int batch_norms() const { return int(norms_.size()); }
    // --bn sync: what the host allreduces between stage s and s + 1 of a
    // training pass (train()), sync_ranges(bn).size() + 1 stages in all.
    std::vector<Range> sync_ranges(BatchNormMode bn) const;
    // FLOPs of one sample's forward pass (multiply-adds count two).
    double forward_flops() const;
    // Layer i as a per-layer profile shows it (bench/layers_cpu.cpp): its
    // tensors' name where it has some ("conv2", "dense1", "bn3"), else its
    // kind ("relu", "pool", "add", "flatten"); its shapes per sample; and
    // whether its input is the model's (then it computes no input gradient).
    struct LayerInfo {
        LayerKind kind;
        std::string name;
        Dims in, out;
        bool reads_input = false;
    };
    size_t layer_count() const { return plan_.size(); }
    LayerInfo layer_info(size_t i) const;
    // The tensor called `name` (an assert when there is none).
    const ParamTensor& tensor(const std::string& name) const;

    // Each layer's shapes for a part of n samples; `math`, the arithmetic
    // of the products (a kernel set's: K::math, set by --tf32).
    ConvShape conv_shape(size_t layer, int n, Math math = Math::fp32) const;
    PoolShape pool_shape(size_t layer, int n) const;
    NormShape norm_shape(size_t layer, int n) const;
    std::vector<ConvShape> conv_shapes(int n, Math math = Math::fp32) const;
    std::vector<DenseShape> dense_shapes(int n, Math math = Math::fp32) const;
    std::vector<NormShape> norm_shapes(int n) const;  // the batch norm layers'
    std::vector<NormShape> add_shapes(int n) const;   // the residual adds' outputs, as (n, c, h x w)
    std::vector<PoolShape> pool_shapes(int n) const;  // the pooling layers'
    // For each dense layer, in dense_shapes' order, the pooling whose
    // backward its own does (dense_backward_pool), or none.
    std::vector<std::optional<PoolShape>> dense_pools(int n) const;
    // The first layer, where it is a convolution of the input that does the
    // pooling after its ReLU too (conv2d_forward_relu_pool on x): its shape,
    // for a device whose kernel may gather the input as it reads it.
    std::optional<ConvShape> first_conv_pooled(int n, Math math = Math::fp32) const;

    // Scratch floats kernel set K needs for every conv, dense and batch norm
    // layer at this capacity, in arithmetic `math` (a smaller part takes no
    // more).
    template <class K>
    size_t scratch_floats(int capacity, Math math = Math::fp32) const {
        size_t most = 0;
        for (const ConvShape& s : conv_shapes(capacity, math)) most = std::max(most, K::conv2d_scratch_floats(s));
        for (const DenseShape& s : dense_shapes(capacity, math))
            most = std::max(most, K::dense_scratch_floats(s.n, s.in, s.out, s.math));
        for (const NormShape& s : norm_shapes(capacity)) most = std::max(most, K::batch_norm_scratch_floats(s));
        return most;
    }
    // Floats of one allocation holding the activations (labels counted as floats).
    size_t activation_floats(int capacity, size_t scratch) const;
    Activations carve(float* memory, int capacity, size_t scratch) const;

    // Evaluation: logits (n, classes) of x[0:n], batch norm with the running
    // statistics.
    template <class K>
    void evaluate(K& k, const Activations& a, const float* params, PoolKind pool, int n, const float* x,
                  float* logits) const;
    // Stage `stage` of a training pass over x[0:n]: forward into logits,
    // then loss(last), which fills a.d_logits() with the gradient of the
    // summed loss (last: the LastDense it runs too, or null), then backward,
    // accumulating the parameters' gradients into grads (the caller clears them). After each layer with parameters it
    // calls done(first): the layers are done from the last, so
    // grads[first:trained_count()) are then complete (--overlap hands them
    // on). Without --bn sync the pass is one stage.
    template <class K, class Loss, class Done = NothingDone>
    void train(K& k, const Activations& a, const float* params, float* grads, const TrainPass& pass, int n,
               const float* x, float* logits, int stage, Loss&& loss, Done&& done = {}) const;
    // The last layer's input where kernel set k runs that layer with the
    // loss and the input is written by a dense layer with its ReLU that runs
    // just before (nothing but the fused ReLU and flattens between): that
    // layer may leave the end of its forward to the loss's kernel
    // (cuda::KernelSet::loss_input). Else null.
    template <class K>
    const float* loss_input_from_dense(const K& k, const Activations& a, int n) const;
    // After the allreduce: every batch norm's running statistics move by the
    // step's, summed in their gradient slots over `batch` samples.
    template <class K>
    void update_running(K& k, float* params, const float* grads, int batch) const;

   private:
    struct Planned {
        Layer layer;
        Dims in, out;
        int input = -1;               // the buffer holding this layer's input; -1: x
        int buffer = -1;              // the buffer holding its output (relu, flatten, add: its input's)
        int other = -1;               // add: the buffer it adds
        int weight = -1, bias = -1;   // indices into tensors_ (batch norm: gamma, beta)
        int running = -1;             // batch norm: its running mean (the variance follows)
        int norm = -1;                // batch norm: its index among them
        size_t sums = 0;              // batch norm: its backward sums' offset in the gradient buffer
        bool relu_after = false;      // conv, dense, batch_norm, add: the next layer's ReLU is fused in
        bool fused = false;           // relu: done by the layer before
        bool relu_before = false;     // pool, dense: its input is a ReLU's output (its backward applies the mask)
        bool accumulate = false;      // conv: adds its input gradient; add: adds the other's
        int pool_after = -1;          // conv: the pooling layer after its ReLU, whose forward it does too
        bool pooled_by_conv = false;  // pool: its forward done by the convolution before
        bool backward_by_conv = false;  // pool: its backward too (that convolution's input is x: it needs no data gradient)
        int pool_before = -1;         // dense: the pooling before it (through a flatten), whose backward it does too
        bool backward_by_dense = false;  // pool: its backward done by the dense layer after it
    };
    // Whether the ReLU at `relu` has its backward mask applied by the layer
    // after it (a pool or dense layer's backward).
    bool masked_by_next(size_t relu) const { return relu + 1 < plan_.size() && plan_[relu + 1].relu_before; }
    // Whether layer i, a batch norm or an add, applies the backward mask of
    // the ReLU after it (in the same call as its own backward), where
    // neither that ReLU's call nor the layer after it does.
    bool masks_relu_after(size_t i) const {
        const LayerKind kind = plan_[i].layer.kind;
        return plan_[i].relu_after && (kind == LayerKind::batch_norm || kind == LayerKind::add) &&
               !masked_by_next(i + 1);
    }
    const float* input_of(const Planned& p, const Activations& a, const float* x) const {
        return p.input < 0 ? x : a.out[size_t(p.input)];
    }
    float* output_of(const Planned& p, const Activations& a, float* logits) const {
        return p.buffer == int(buffer_sizes_.size()) - 1 ? logits : a.out[size_t(p.buffer)];
    }
    // The dense layer with its ReLU that writes the last (dense) layer's
    // input, with nothing but the fused ReLU and flattens between; or null.
    const Planned* dense_before_last() const;
    // The last layer as a LastDense, where kernel set k runs it with the loss.
    template <class K>
    std::optional<LastDense> last_dense(const K& k, const Activations& a, const float* params, float* grads,
                                        int n) const;
    const float* tensor_at(const float* buffer, int t) const { return buffer + tensors_[size_t(t)].offset; }
    float* tensor_at(float* buffer, int t) const { return buffer + tensors_[size_t(t)].offset; }
    // Every layer but batch norm, whose halves train() and evaluate() run.
    template <class K>
    void forward_layer(K& k, size_t i, const Activations& a, const float* params, PoolKind pool, int n,
                       const float* x, float* logits) const;
    template <class K, class Done>
    void backward_layer(K& k, size_t i, const Activations& a, const float* params, float* grads, PoolKind pool,
                        int n, const float* x, Done& done) const;

    std::string name_;
    Dims input_;
    std::vector<Planned> plan_;
    std::vector<size_t> norms_;  // the batch norm layers, in list order
    std::vector<ParamTensor> tensors_;
    size_t param_count_ = 0, trained_count_ = 0, gradient_floats_ = 0;
    std::vector<size_t> buffer_sizes_;  // per sample, in buffer order
    size_t spare_size_ = 0;             // per sample
};

// A kernel set that times each layer (bench/layers_cpu.cpp) is told where
// the walk is: layer i's forward, or its backward.
template <class K>
void mark_layer(K& k, size_t i, bool backward) {
    if constexpr (requires { k.at_layer(i, backward); }) k.at_layer(i, backward);
}

template <class K>
void Model::forward_layer(K& k, size_t i, const Activations& a, const float* params, PoolKind pool, int n,
                          const float* x, float* logits) const {
    const Planned& p = plan_[i];
    const float* in = input_of(p, a, x);
    float* out = output_of(p, a, logits);
    switch (p.layer.kind) {
        case LayerKind::conv: {
            const float *w = tensor_at(params, p.weight), *b = tensor_at(params, p.bias);
            if (p.pool_after >= 0) {  // its ReLU, and the pooling after that, in one call
                const Planned& pooling = plan_[size_t(p.pool_after)];
                k.conv2d_forward_relu_pool(out, output_of(pooling, a, logits), in, w, b, conv_shape(i, n, k.math),
                                           pooling.layer.pool_kind.value_or(pool),
                                           pool_shape(size_t(p.pool_after), n), a.scratch);
            } else if (p.relu_after) {
                k.conv2d_forward_relu(out, in, w, b, conv_shape(i, n, k.math), a.scratch);
            } else {
                k.conv2d_forward(out, in, w, b, conv_shape(i, n, k.math), a.scratch);
            }
            break;
        }
        case LayerKind::dense: {
            const float *w = tensor_at(params, p.weight), *b = tensor_at(params, p.bias);
            if (p.relu_after) k.dense_forward_relu(out, in, w, b, n, int(p.in.size()), p.layer.out, a.scratch, k.math);
            else k.dense_forward(out, in, w, b, n, int(p.in.size()), p.layer.out, a.scratch, k.math);
            break;
        }
        case LayerKind::pool:
            if (!p.pooled_by_conv) k.pool2d_forward(out, in, p.layer.pool_kind.value_or(pool), pool_shape(i, n));
            break;
        case LayerKind::relu:  // in place, unless the layer before did it
            if (!p.fused) k.relu_forward(out, out, size_t(n) * p.out.size());
            break;
        case LayerKind::add:  // in place: the layer before's output += the other's (and its ReLU)
            if (p.relu_after) k.add_relu(out, a.out[size_t(p.other)], size_t(n) * p.out.size());
            else k.sum_into(out, a.out[size_t(p.other)], 1, size_t(n) * p.out.size());
            break;
        case LayerKind::flatten:     // the same buffer, read as (n, c*h*w)
        case LayerKind::batch_norm:  // train() and evaluate() run its halves
            break;
    }
}

template <class K, class Done>
void Model::backward_layer(K& k, size_t i, const Activations& a, const float* params, float* grads, PoolKind pool,
                           int n, const float* x, Done& done) const {
    const Planned& p = plan_[i];
    const float* in = input_of(p, a, x);
    float* d_in = p.input < 0 ? nullptr : a.grad[size_t(p.input)];  // the input needs no gradient
    float* d_out = a.grad[size_t(p.buffer)];
    switch (p.layer.kind) {
        case LayerKind::conv: {
            ConvBackward b{conv_shape(i, n, k.math), tensor_at(grads, p.weight), tensor_at(grads, p.bias), d_out, in,
                           tensor_at(params, p.weight)};
            b.dx = d_in;
            b.accumulate = p.accumulate;  // another layer reads this input too: add to its gradient
            b.spare = a.spare;
            if (p.pool_after >= 0 && plan_[size_t(p.pool_after)].backward_by_conv) {  // from the pooling's gradient
                const Planned& pooling = plan_[size_t(p.pool_after)];
                b.pool = {a.grad[size_t(pooling.buffer)], a.out[size_t(p.buffer)], a.out[size_t(pooling.buffer)],
                          pooling.layer.pool_kind.value_or(pool), pool_shape(size_t(p.pool_after), n)};
            }
            b.scratch = a.scratch;
            // The weight's and bias's gradients are what the allreduce needs.
            k.backward_conv(b, [&] { done(tensors_[size_t(p.weight)].offset); });
            break;
        }
        case LayerKind::dense: {
            assert(d_in && "a dense first layer needs a backward without the input's gradient");
            DenseBackward b{d_in, tensor_at(grads, p.weight), tensor_at(grads, p.bias), d_out, in,
                            tensor_at(params, p.weight), n, int(p.in.size()), p.layer.out};
            b.relu_before = p.relu_before;  // the ReLU before: its mask in the same pass
            if (p.pool_before >= 0) {  // through the pooling before and its ReLU, into the gradient of the pooled y
                const size_t pi = size_t(p.pool_before);
                const Planned& pooling = plan_[pi];
                b.pool_before = {a.grad[size_t(pooling.input)], a.out[size_t(pooling.input)],
                                 pooling.layer.pool_kind.value_or(pool), pool_shape(pi, n)};
            }
            b.scratch = a.scratch;
            k.backward_dense(b);
            done(tensors_[size_t(p.weight)].offset);
            break;
        }
        case LayerKind::pool:
            if (p.backward_by_conv || p.backward_by_dense) break;
            // After a ReLU, the pool's backward applies the ReLU's mask too.
            k.backward_pool(d_in, d_out, in, a.out[size_t(p.buffer)], p.layer.pool_kind.value_or(pool),
                            pool_shape(i, n), p.relu_before);
            break;
        case LayerKind::relu:
            // The mask, in place: unless a pool or dense layer after it
            // did it already, or the layer before does it next.
            if (!masked_by_next(i) && !masks_relu_after(i - 1))
                k.relu_backward(d_out, d_out, a.out[size_t(p.buffer)], size_t(n) * p.out.size());
            break;
        case LayerKind::add:  // the layer before's gradient is d_out itself; the other's gets it too
            // (With the ReLU after it, its mask on d_out first.)
            k.backward_add(d_out, a.grad[size_t(p.other)], masks_relu_after(i) ? a.out[size_t(p.buffer)] : nullptr,
                           size_t(n) * p.out.size(), p.accumulate);
            break;
        case LayerKind::flatten:
        case LayerKind::batch_norm:
            break;
    }
}

template <class K>
std::optional<LastDense> Model::last_dense(const K& k, const Activations& a, const float* params, float* grads,
                                           int n) const {
    const Planned& p = plan_.back();
    if (p.layer.kind != LayerKind::dense || p.relu_after || p.pool_before >= 0 || p.input < 0 ||
        !k.fuses_loss(n, int(p.in.size()), p.layer.out))
        return std::nullopt;
    return LastDense{a.out[size_t(p.input)], tensor_at(params, p.weight), tensor_at(params, p.bias),
                     a.grad[size_t(p.input)], tensor_at(grads, p.weight), tensor_at(grads, p.bias),
                     int(p.in.size()), p.layer.out, p.relu_before, a.scratch};
}

template <class K>
const float* Model::loss_input_from_dense(const K& k, const Activations& a, int n) const {
    const Planned& last = plan_.back();
    const Planned* p = dense_before_last();
    if (!p || !k.fuses_loss(n, int(last.in.size()), last.layer.out)) return nullptr;
    return a.out[size_t(p->buffer)];
}

template <class K>
void Model::evaluate(K& k, const Activations& a, const float* params, PoolKind pool, int n, const float* x,
                     float* logits) const {
    for (size_t i = 0; i < plan_.size(); ++i) {
        const Planned& p = plan_[i];
        if (p.layer.kind == LayerKind::batch_norm)
            k.batch_norm_inference(output_of(p, a, logits), input_of(p, a, x), tensor_at(params, p.running),
                                   tensor_at(params, p.weight), tensor_at(params, p.bias), batch_norm_eps,
                                   norm_shape(i, n), p.relu_after);
        else forward_layer(k, i, a, params, pool, n, x, logits);
    }
}

// Every stage walks the whole list and runs the layers that fall in it:
// `passed` counts the sync points behind the walk, and the stage ends at
// the sync point after its last layer.
template <class K, class Loss, class Done>
void Model::train(K& k, const Activations& a, const float* params, float* grads, const TrainPass& pass, int n,
                  const float* x, float* logits, int stage, Loss&& loss, Done&& done) const {
    const bool sync = pass.bn == BatchNormMode::sync;
    const int samples = sync ? pass.batch : n;  // what the statistics are summed over
    int passed = 0;
    const auto reached_end_of_stage = [&] { return sync && ++passed > stage; };
    const std::optional<LastDense> last = last_dense(k, a, params, grads, n);
    const size_t layers = last ? plan_.size() - 1 : plan_.size();  // the ones this walk runs
    for (size_t i = 0; i < layers; ++i) {
        const Planned& p = plan_[i];
        if (p.layer.kind != LayerKind::batch_norm) {
            if (passed != stage) continue;
            mark_layer(k, i, false);
            forward_layer(k, i, a, params, pass.pool, n, x, logits);
            continue;
        }
        const NormShape s = norm_shape(i, n);
        float* stats = tensor_at(grads, p.running);  // this part's sums, then (sync) the batch's
        if (passed == stage) {
            mark_layer(k, i, false);
            k.batch_norm_stats(stats, input_of(p, a, x), s, a.scratch);
        }
        if (reached_end_of_stage()) return;
        if (passed == stage) {
            mark_layer(k, i, false);
            k.batch_norm_forward(output_of(p, a, logits), a.saved[size_t(p.norm)], input_of(p, a, x), stats,
                                 double(samples) * s.hw, tensor_at(params, p.weight), tensor_at(params, p.bias),
                                 batch_norm_eps, s, p.relu_after);
        }
    }
    if (passed == stage) {
        loss(last ? &*last : nullptr);
        if (last) done(tensors_[size_t(plan_.back().weight)].offset);
    }
    for (size_t i = layers; i-- > 0;) {
        const Planned& p = plan_[i];
        if (p.layer.kind != LayerKind::batch_norm) {
            if (passed != stage) continue;
            mark_layer(k, i, true);
            backward_layer(k, i, a, params, grads, pass.pool, n, x, done);
            continue;
        }
        const NormShape s = norm_shape(i, n);
        const float* in = input_of(p, a, x);
        float* d_out = a.grad[size_t(p.buffer)];
        float* sums = grads + p.sums;  // this part's, then (sync) the batch's
        if (passed == stage) {
            mark_layer(k, i, true);
            if (masks_relu_after(i))  // the ReLU after it: its mask on d_out first
                k.batch_norm_backward_sums_relu(sums, tensor_at(grads, p.weight), tensor_at(grads, p.bias), d_out,
                                                a.out[size_t(p.buffer)], in, a.saved[size_t(p.norm)], s, a.scratch);
            else
                k.batch_norm_backward_sums(sums, tensor_at(grads, p.weight), tensor_at(grads, p.bias), d_out, in,
                                           a.saved[size_t(p.norm)], s, a.scratch);
            done(tensors_[size_t(p.weight)].offset);
        }
        if (reached_end_of_stage()) return;
        if (passed != stage) continue;
        mark_layer(k, i, true);
        if (p.input >= 0)
            k.batch_norm_backward_data(a.grad[size_t(p.input)], d_out, in, a.saved[size_t(p.norm)], sums,
                                       double(samples) * s.hw, tensor_at(params, p.weight), s);
    }
}

// The layers' updates handed over running_updates_a_call at a time (a GPU
// may move them all in one launch).
template <class K>
void Model::update_running(K& k, float* params, const float* grads, int batch) const {
    std::array<RunningUpdate, running_updates_a_call> updates;
    int layers = 0;
    for (size_t i : norms_) {
        const Planned& p = plan_[i];
        updates[size_t(layers++)] = {tensor_at(params, p.running), tensor_at(grads, p.running),
                                     double(batch) * p.in.h * p.in.w, p.in.c};
        if (layers == running_updates_a_call) {
            k.batch_norm_update_running_all(updates.data(), layers, batch_norm_momentum);
            layers = 0;
        }
    }
    if (layers > 0) k.batch_norm_update_running_all(updates.data(), layers, batch_norm_momentum);
}

}  // namespace dpt
