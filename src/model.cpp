#include "model.hpp"

#include <stdexcept>

namespace dpt {

Model::Model(std::string name, Dims input, std::vector<Layer> layers) : name_(std::move(name)), input_(input) {
    const auto fail = [&](size_t i, const std::string& what) {
        throw std::logic_error("model " + name_ + ", layer " + std::to_string(i + 1) + ": " + what);
    };
    // Tensors are named per kind in order: conv1, conv2, ..., dense1, ...
    int convs = 0, denses = 0;
    const auto add_tensor = [&](const std::string& name, std::vector<int> shape, InitRole role, double fan_in,
                                double fan_out) {
        ParamTensor t{name, std::move(shape), param_count_, 1, role, fan_in, fan_out};
        for (int d : t.shape) t.size *= size_t(d);
        param_count_ += t.size;
        tensors_.push_back(std::move(t));
        return int(tensors_.size()) - 1;
    };
    Dims at = input;
    int buffer = -1;  // the buffer holding the current activations; -1: the input
    for (size_t i = 0; i < layers.size(); ++i) {
        const Layer& l = layers[i];
        Planned p{l, at, at, buffer, buffer};
        switch (l.kind) {
            case LayerKind::conv: {
                const std::string base = "conv" + std::to_string(++convs);
                const double area = double(l.k) * l.k;
                p.weight = add_tensor(base + ".weight", {l.out, at.c, l.k, l.k}, InitRole::weight, at.c * area, l.out * area);
                p.bias = add_tensor(base + ".bias", {l.out}, InitRole::bias, 0, 0);
                const ConvShape s{1, at.c, at.h, at.w, l.out, l.k, l.k, l.stride, l.pad};
                if (s.oh() < 1 || s.ow() < 1) fail(i, "the kernel is larger than its input");
                p.out = {l.out, s.oh(), s.ow()};
                break;
            }
            case LayerKind::pool: {
                const PoolShape s{1, at.c, at.h, at.w, l.k, l.stride};
                if (s.oh() < 1 || s.ow() < 1) fail(i, "the window is larger than its input");
                p.out = {at.c, s.oh(), s.ow()};
                p.relu_before = i > 0 && layers[i - 1].kind == LayerKind::relu;
                break;
            }
            case LayerKind::dense: {
                const std::string base = "dense" + std::to_string(++denses);
                if (i == 0) fail(i, "a dense first layer is not supported (its backward would need no input gradient)");
                p.weight = add_tensor(base + ".weight", {l.out, int(at.size())}, InitRole::weight, double(at.size()), l.out);
                p.bias = add_tensor(base + ".bias", {l.out}, InitRole::bias, 0, 0);
                p.out = {l.out, 1, 1};
                break;
            }
            case LayerKind::relu:
                if (i == 0 || (layers[i - 1].kind != LayerKind::conv && layers[i - 1].kind != LayerKind::dense))
                    fail(i, "a ReLU must follow a conv or dense layer (it is fused into that layer's forward)");
                plan_.back().relu_after = true;
                break;
            case LayerKind::flatten:
                p.out = {int(at.size()), 1, 1};
                break;
        }
        // conv, pool and dense write a buffer of their own; relu and flatten
        // work in the buffer of the layer before.
        if (l.kind == LayerKind::conv || l.kind == LayerKind::pool || l.kind == LayerKind::dense) {
            buffer = int(buffer_sizes_.size());
            buffer_sizes_.push_back(p.out.size());
        }
        p.buffer = buffer;
        plan_.push_back(p);
        at = p.out;
    }
    if (plan_.empty() || plan_.back().layer.kind != LayerKind::dense)
        throw std::logic_error("model " + name_ + ": the last layer must be dense (its outputs are the logits)");
}

const ParamTensor& Model::tensor(const std::string& name) const {
    for (const ParamTensor& t : tensors_)
        if (t.name == name) return t;
    assert(false && "no tensor of that name");
    return tensors_.front();
}

ConvShape Model::conv_shape(size_t layer, int n) const {
    const Planned& p = plan_[layer];
    return {n, p.in.c, p.in.h, p.in.w, p.layer.out, p.layer.k, p.layer.k, p.layer.stride, p.layer.pad};
}

PoolShape Model::pool_shape(size_t layer, int n) const {
    const Planned& p = plan_[layer];
    return {n, p.in.c, p.in.h, p.in.w, p.layer.k, p.layer.stride};
}

std::vector<ConvShape> Model::conv_shapes(int n) const {
    std::vector<ConvShape> shapes;
    for (size_t i = 0; i < plan_.size(); ++i)
        if (plan_[i].layer.kind == LayerKind::conv) shapes.push_back(conv_shape(i, n));
    return shapes;
}

// Layout: input, labels, the outputs in buffer order, their gradients in
// reverse buffer order (the logits' first), scratch.
size_t Model::activation_floats(int capacity, size_t scratch) const {
    const size_t n = size_t(capacity);
    size_t total = n * input_.size() + n;
    for (size_t s : buffer_sizes_) total += 2 * n * s;
    return total + scratch;
}

Activations Model::carve(float* memory, int capacity, size_t scratch) const {
    const size_t n = size_t(capacity), buffers = buffer_sizes_.size();
    float* p = memory;
    const auto take = [&](size_t floats) {
        float* r = p;
        p += floats;
        return r;
    };
    Activations a;
    a.x = take(n * input_.size());
    a.labels = reinterpret_cast<int32_t*>(take(n));
    a.out.resize(buffers);
    a.grad.resize(buffers);
    for (size_t b = 0; b < buffers; ++b) a.out[b] = take(n * buffer_sizes_[b]);
    for (size_t b = buffers; b-- > 0;) a.grad[b] = take(n * buffer_sizes_[b]);
    a.scratch = take(scratch);
    return a;
}

}  // namespace dpt
