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
#include <span>
#include <string>
#include <vector>

namespace dpt {

// Writes atomically: a temporary file in the same directory, fsync, rename.
void save_params(const std::string& path, std::span<const float> params);

// Reads and checks a file written by save_params for this model; throws
// InputError naming the file and the problem.
std::vector<float> load_params(const std::string& path);

}  // namespace dpt
