// `dptrain --version` (src/run/version.cpp).
#pragma once

#include <string>

namespace dpt {

// "dptrain 0.1.0", then a line each: CUDA or not, MPI or not, the CPU kernels' target.
std::string version_text();

}  // namespace dpt
