#include "model/models.hpp"

#include "base/errors.hpp"
#include "model/lenet.hpp"
#include "model/resnet.hpp"

namespace dpt {

std::span<const ModelKind> all_models() {
    static constexpr ModelKind kinds[] = {ModelKind::lenet, ModelKind::resnet18};
    return kinds;
}

const Model& model_of(ModelKind kind) { return kind == ModelKind::resnet18 ? resnet::model() : lenet::model(); }

size_t gradient_bytes(ModelKind kind) {
    return model_of(kind).allreduced_floats(BatchNormMode::local) * sizeof(float);
}

const char* to_string(ModelKind kind) { return kind == ModelKind::resnet18 ? "resnet18" : "lenet"; }

std::optional<ModelKind> find_model(std::string_view name) {
    for (ModelKind kind : all_models())
        if (name == to_string(kind)) return kind;
    return std::nullopt;
}

std::string model_names() {
    std::string names;
    for (ModelKind kind : all_models()) {
        if (!names.empty()) names += '|';
        names += to_string(kind);
    }
    return names;
}

ModelKind parse_model(const std::string& text) {
    const std::optional<ModelKind> kind = find_model(text);
    if (!kind) throw InputError("--model must be " + model_names() + " (got '" + text + "')");
    return *kind;
}

const char* to_string(BatchNormMode bn) { return bn == BatchNormMode::sync ? "sync" : "local"; }

BatchNormMode parse_batch_norm(const std::string& text) {
    if (text != "local" && text != "sync") throw InputError("--bn must be local or sync (got '" + text + "')");
    return text == "sync" ? BatchNormMode::sync : BatchNormMode::local;
}

}  // namespace dpt
