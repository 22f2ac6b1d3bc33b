// What nvcc gives CUDA code for free, for the emulated GPU: the runtime API
// (cuda_runtime_api.h) and the vocabulary of device code (device_code.hpp).
#pragma once

#include "cuda_runtime_api.h"
#include "device_code.hpp"
