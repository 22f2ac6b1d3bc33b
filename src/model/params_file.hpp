// The parameters file of --save / --load: a short text header naming each
// tensor and its shape, then the flat buffer as little-endian float32.
//
//   dptrain-params 1
//   conv1.weight 20 1 3 3
//   ...
//   dense2.bias 10
//   data float32-le 129068
//   <129068 * 4 bytes>
//
// No timestamps or paths: the same parameters give the same bytes.
// README.md shows a ten-line numpy reader.
#pragma once
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/models.hpp"

namespace dpt {

// Writes atomically (base/files.hpp: write_file_atomically).
void save_params(const std::string& path, std::span<const float> params, ModelKind model);

// The model's tensors, one line each: "conv1.weight 20 1 3 3\n" ... Both the
// parameters file and the checkpoint carry them, so a file from another
// model is recognised as such.
std::string tensor_lines(const Model& model);
// The model whose tensor_lines() `text` starts with, if any.
std::optional<ModelKind> model_with_tensors(std::string_view text);

// Reads and checks a file written by save_params for `model`; throws
// InputError naming the file and the problem (another model's file too).
std::vector<float> load_params(const std::string& path, ModelKind model);

}  // namespace dpt
