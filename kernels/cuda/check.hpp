// Error checks for every CUDA runtime call of the CUDA backend (kernel
// launches are checked by launch::kernel, launch.cuh). A failure throws
// (dptrain reports it and exits 1) with the call, the file and line, and
// CUDA's own description of the error.
#pragma once
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace dpt::cuda {

struct CudaError : std::runtime_error {
    cudaError_t code;
    CudaError(cudaError_t c, const std::string& what) : std::runtime_error(what), code(c) {}
};

inline void check(cudaError_t status, const char* call, const char* file, int line) {
    if (status != cudaSuccess)
        throw CudaError(status, std::string("CUDA: ") + call + " failed at " + file + ":" + std::to_string(line) +
                                    ": " + cudaGetErrorString(status));
}

}  // namespace dpt::cuda

#define CUDA_CHECK(call) ::dpt::cuda::check((call), #call, __FILE__, __LINE__)
