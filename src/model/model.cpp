#include "model/model.hpp"

#include <stdexcept>

namespace dpt {

namespace {
// conv, pool, dense and batch norm write a buffer of their own; relu,
// flatten and add work in the buffer of the layer before.
bool owns_buffer(LayerKind kind) {
    return kind == LayerKind::conv || kind == LayerKind::pool || kind == LayerKind::dense ||
           kind == LayerKind::batch_norm;
}
}  // namespace

Model::Model(std::string name, Dims input, std::vector<Layer> layers) : name_(std::move(name)), input_(input) {
    const auto fail = [&](size_t i, const std::string& what) {
        throw std::logic_error("model " + name_ + ", layer " + std::to_string(i + 1) + ": " + what);
    };
    // Tensors are named per kind in order: conv1, conv2, ..., dense1, ..., bn1, ...
    int convs = 0, denses = 0;
    const auto add_tensor = [&](const std::string& name, std::vector<int> shape, InitRole role, double fan_in,
                                double fan_out) {
        ParamTensor t{name, std::move(shape), param_count_, 1, role, fan_in, fan_out};
        for (int d : t.shape) t.size *= size_t(d);
        param_count_ += t.size;
        tensors_.push_back(std::move(t));
        return int(tensors_.size()) - 1;
    };
    // The layer that last wrote each buffer: a layer may read an earlier
    // layer's output only while that is still what its buffer holds.
    std::vector<size_t> last_writer;
    const auto source = [&](size_t i, int from) -> const Planned& {
        if (from < 0 || size_t(from) >= i) fail(i, "it must read the output of an earlier layer");
        const Planned& f = plan_[size_t(from)];
        if (last_writer[size_t(f.buffer)] != size_t(from))
            fail(i, "the output of layer " + std::to_string(from + 1) + " was changed in place since");
        return f;
    };
    Dims at = input;
    int buffer = -1;  // the buffer holding the current activations; -1: the input
    for (size_t i = 0; i < layers.size(); ++i) {
        const Layer& l = layers[i];
        Planned p{l, at, at, buffer, buffer};
        switch (l.kind) {
            case LayerKind::conv: {
                if (l.from >= 0) {
                    const Planned& f = source(i, l.from);
                    p.in = f.out;
                    p.input = f.buffer;
                }
                const std::string base = "conv" + std::to_string(++convs);
                const double area = double(l.k) * l.k;
                p.weight = add_tensor(base + ".weight", {l.out, p.in.c, l.k, l.k}, InitRole::weight,
                                      p.in.c * area, l.out * area);
                p.bias = add_tensor(base + ".bias", {l.out}, InitRole::bias, 0, 0);
                const ConvShape s{1, p.in.c, p.in.h, p.in.w, l.out, l.k, l.k, l.stride, l.pad};
                if (s.oh() < 1 || s.ow() < 1) fail(i, "the kernel is larger than its input");
                p.out = {l.out, s.oh(), s.ow()};
                break;
            }
            case LayerKind::pool: {
                const PoolShape s{1, at.c, at.h, at.w, l.k, l.stride};
                if (s.oh() < 1 || s.ow() < 1) fail(i, "the window is larger than its input");
                p.out = {at.c, s.oh(), s.ow()};
                p.relu_before = i > 0 && layers[i - 1].kind == LayerKind::relu;
                // conv -> ReLU -> pool: the convolution's forward pools too.
                if (p.relu_before && plan_[i - 1].fused && layers[i - 2].kind == LayerKind::conv) {
                    plan_[i - 2].pool_after = int(i);
                    p.pooled_by_conv = true;
                    p.backward_by_conv = plan_[i - 2].input < 0;
                }
                break;
            }
            case LayerKind::dense: {
                const std::string base = "dense" + std::to_string(++denses);
                if (i == 0) fail(i, "a dense first layer is not supported (its backward would need no input gradient)");
                p.weight = add_tensor(base + ".weight", {l.out, int(at.size())}, InitRole::weight, double(at.size()), l.out);
                p.bias = add_tensor(base + ".bias", {l.out}, InitRole::bias, 0, 0);
                p.out = {l.out, 1, 1};
                p.relu_before = layers[i - 1].kind == LayerKind::relu;
                // ReLU -> pool -> flatten -> dense: the dense layer's backward
                // does the pooling's and the ReLU's (unless a first conv reads
                // the pooling's gradient: conv2d_backward_weight_pool).
                if (i >= 2 && layers[i - 1].kind == LayerKind::flatten && layers[i - 2].kind == LayerKind::pool) {
                    Planned& pooling = plan_[i - 2];
                    if (pooling.relu_before && !pooling.backward_by_conv) {
                        p.pool_before = int(i - 2);
                        pooling.backward_by_dense = true;
                    }
                }
                break;
            }
            case LayerKind::batch_norm: {
                const std::string base = "bn" + std::to_string(norms_.size() + 1);
                p.weight = add_tensor(base + ".gamma", {at.c}, InitRole::gamma, 0, 0);
                p.bias = add_tensor(base + ".beta", {at.c}, InitRole::beta, 0, 0);
                p.norm = int(norms_.size());
                norms_.push_back(i);
                break;
            }
            case LayerKind::relu:
                if (i == 0) fail(i, "a ReLU cannot be the first layer (it works in place)");
                p.fused = layers[i - 1].kind == LayerKind::conv || layers[i - 1].kind == LayerKind::dense ||
                          layers[i - 1].kind == LayerKind::batch_norm || layers[i - 1].kind == LayerKind::add;
                if (p.fused) plan_.back().relu_after = true;
                break;
            case LayerKind::add: {
                if (i == 0) fail(i, "an add cannot be the first layer (it works in place)");
                const Planned& f = source(i, l.from);
                if (!(f.out == at)) fail(i, "it adds outputs of different shapes");
                if (f.buffer == buffer) fail(i, "it adds a buffer to itself");
                p.other = f.buffer;
                break;
            }
            case LayerKind::flatten:
                p.out = {int(at.size()), 1, 1};
                break;
        }
        if (owns_buffer(l.kind)) {
            buffer = int(buffer_sizes_.size());
            buffer_sizes_.push_back(p.out.size());
            last_writer.push_back(i);
        } else if (buffer >= 0) {
            last_writer[size_t(buffer)] = i;
        }
        p.buffer = buffer;
        plan_.push_back(p);
        at = p.out;
    }
    if (plan_.empty() || plan_.back().layer.kind != LayerKind::dense)
        throw std::logic_error("model " + name_ + ": the last layer must be dense (its outputs are the logits)");
    // A ReLU's backward masks with its output: nothing may change it after.
    for (size_t i = 0; i < plan_.size(); ++i)
        if (plan_[i].layer.kind == LayerKind::relu && last_writer[size_t(plan_[i].buffer)] != i)
            fail(i, "a later layer changes its output in place, which its backward needs");

    // Backward runs the list from the end: the first layer to write a
    // buffer's gradient overwrites it, later ones add to it.
    std::vector<int> writers(buffer_sizes_.size(), 0);  // of each buffer's gradient
    for (size_t i = plan_.size(); i-- > 0;) {
        Planned& p = plan_[i];
        const int target = p.layer.kind == LayerKind::add ? p.other : owns_buffer(p.layer.kind) ? p.input : -1;
        if (target < 0) continue;
        p.accumulate = writers[size_t(target)]++ > 0;
        if (p.accumulate && p.layer.kind == LayerKind::conv) spare_size_ = std::max(spare_size_, p.in.size());
        else if (p.accumulate && p.layer.kind != LayerKind::add)
            fail(i, "only a conv or an add may add to a gradient another layer wrote");
    }

    // After the trained tensors: the running statistics, and the gradient
    // buffer's room for the backward sums.
    trained_count_ = param_count_;
    for (size_t i : norms_) {
        Planned& p = plan_[i];
        const std::string base = "bn" + std::to_string(p.norm + 1);
        p.running = add_tensor(base + ".running_mean", {p.in.c}, InitRole::running_mean, 0, 0);
        add_tensor(base + ".running_var", {p.in.c}, InitRole::running_var, 0, 0);
    }
    gradient_floats_ = param_count_;
    for (size_t i : norms_) {
        plan_[i].sums = gradient_floats_;
        gradient_floats_ += 2 * size_t(plan_[i].in.c);
    }
}

std::vector<Range> Model::sync_ranges(BatchNormMode bn) const {
    std::vector<Range> ranges;
    if (bn != BatchNormMode::sync) return ranges;
    for (size_t i : norms_)  // forward: the statistics, in the running statistics' slots
        ranges.push_back({tensors_[size_t(plan_[i].running)].offset, 2 * size_t(plan_[i].in.c)});
    for (size_t j = norms_.size(); j-- > 0;)  // backward, from the last: the sums
        ranges.push_back({plan_[norms_[j]].sums, 2 * size_t(plan_[norms_[j]].in.c)});
    return ranges;
}

double Model::forward_flops() const {
    double flops = 0;
    for (size_t i = 0; i < plan_.size(); ++i) {
        const Planned& p = plan_[i];
        if (p.layer.kind == LayerKind::conv) flops += 2.0 * double(conv_shape(i, 1).weight_size()) * p.out.h * p.out.w;
        else if (p.layer.kind == LayerKind::dense) flops += 2.0 * double(p.in.size()) * p.layer.out;
    }
    return flops;
}

Model::LayerInfo Model::layer_info(size_t i) const {
    const Planned& p = plan_[i];
    std::string name;
    if (p.weight >= 0) {  // "conv2.weight" -> "conv2"
        name = tensors_[size_t(p.weight)].name;
        name.resize(name.find('.'));
    } else {
        static constexpr const char* kinds[] = {"conv", "relu", "pool", "flatten", "dense", "batch_norm", "add"};
        name = kinds[size_t(p.layer.kind)];
    }
    return {p.layer.kind, name, p.in, p.out, p.input < 0};
}

const ParamTensor& Model::tensor(const std::string& name) const {
    for (const ParamTensor& t : tensors_)
        if (t.name == name) return t;
    assert(false && "no tensor of that name");
    return tensors_.front();
}

ConvShape Model::conv_shape(size_t layer, int n, Math math) const {
    const Planned& p = plan_[layer];
    return {n, p.in.c, p.in.h, p.in.w, p.layer.out, p.layer.k, p.layer.k, p.layer.stride, p.layer.pad, math};
}

PoolShape Model::pool_shape(size_t layer, int n) const {
    const Planned& p = plan_[layer];
    return {n, p.in.c, p.in.h, p.in.w, p.layer.k, p.layer.stride};
}

NormShape Model::norm_shape(size_t layer, int n) const {
    const Planned& p = plan_[layer];
    return {n, p.in.c, p.in.h * p.in.w};
}

std::vector<ConvShape> Model::conv_shapes(int n, Math math) const {
    std::vector<ConvShape> shapes;
    for (size_t i = 0; i < plan_.size(); ++i)
        if (plan_[i].layer.kind == LayerKind::conv) shapes.push_back(conv_shape(i, n, math));
    return shapes;
}

std::vector<DenseShape> Model::dense_shapes(int n, Math math) const {
    std::vector<DenseShape> shapes;
    for (const Planned& p : plan_)
        if (p.layer.kind == LayerKind::dense) shapes.push_back({n, int(p.in.size()), p.layer.out, math});
    return shapes;
}

std::vector<NormShape> Model::norm_shapes(int n) const {
    std::vector<NormShape> shapes;
    for (size_t i : norms_) shapes.push_back(norm_shape(i, n));
    return shapes;
}

std::vector<NormShape> Model::add_shapes(int n) const {
    std::vector<NormShape> shapes;
    for (const Planned& p : plan_)
        if (p.layer.kind == LayerKind::add) shapes.push_back({n, p.out.c, p.out.h * p.out.w});
    return shapes;
}

std::vector<PoolShape> Model::pool_shapes(int n) const {
    std::vector<PoolShape> shapes;
    for (size_t i = 0; i < plan_.size(); ++i)
        if (plan_[i].layer.kind == LayerKind::pool) shapes.push_back(pool_shape(i, n));
    return shapes;
}

std::vector<std::optional<PoolShape>> Model::dense_pools(int n) const {
    std::vector<std::optional<PoolShape>> pools;
    for (const Planned& p : plan_)
        if (p.layer.kind == LayerKind::dense)
            pools.push_back(p.pool_before < 0 ? std::nullopt : std::optional(pool_shape(size_t(p.pool_before), n)));
    return pools;
}

std::optional<ConvShape> Model::first_conv_pooled(int n, Math math) const {
    const Planned& p = plan_.front();
    if (p.layer.kind != LayerKind::conv || p.input >= 0 || p.pool_after < 0) return std::nullopt;
    return conv_shape(0, n, math);
}

const Model::Planned* Model::dense_before_last() const {
    const Planned& last = plan_.back();
    if (plan_.size() < 2 || last.layer.kind != LayerKind::dense || last.relu_after || last.pool_before >= 0 ||
        last.input < 0)
        return nullptr;
    size_t i = plan_.size() - 2;
    while (i > 0 && (plan_[i].layer.kind == LayerKind::flatten ||
                     (plan_[i].layer.kind == LayerKind::relu && plan_[i].fused)))
        --i;
    const Planned& p = plan_[i];
    return p.layer.kind == LayerKind::dense && p.relu_after && p.buffer == last.input ? &p : nullptr;
}

// Layout: input, labels, the outputs in buffer order, their gradients in
// reverse buffer order (the logits' first), the spare gradient, batch
// norm's saved statistics, scratch.
size_t Model::activation_floats(int capacity, size_t scratch) const {
    const size_t n = size_t(capacity);
    size_t total = n * input_.size() + n + n * spare_size_;
    for (size_t s : buffer_sizes_) total += 2 * n * s;
    for (size_t i : norms_) total += 2 * size_t(plan_[i].in.c);
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
    a.spare = take(n * spare_size_);
    for (size_t i : norms_) a.saved.push_back(take(2 * size_t(plan_[i].in.c)));
    a.scratch = take(scratch);
    return a;
}

}  // namespace dpt
