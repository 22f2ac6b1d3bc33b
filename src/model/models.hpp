// The models dptrain trains (--model), by name.
#pragma once
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "model/model.hpp"

namespace dpt {

enum class ModelKind : uint8_t { lenet, resnet18 };

// Every model dptrain knows, in --model's order.
std::span<const ModelKind> all_models();
const Model& model_of(ModelKind kind);
// Bytes of the model's gradient buffer as the allreduce moves it (with --bn
// local: the statistics' sums too): what each of its copies moves.
size_t gradient_bytes(ModelKind kind);
// "lenet", "resnet18": as --model, checkpoints and --metrics write it.
const char* to_string(ModelKind kind);
// --model's value; an InputError naming the option otherwise.
ModelKind parse_model(const std::string& text);
std::optional<ModelKind> find_model(std::string_view name);
// "lenet|resnet18"
std::string model_names();

const char* to_string(BatchNormMode bn);  // "local", "sync"
BatchNormMode parse_batch_norm(const std::string& text);

}  // namespace dpt
