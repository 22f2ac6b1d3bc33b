// Error checks for every CUDA runtime call and every kernel launch of the
// CUDA backend. A failure throws (dptrain reports it and exits 1) with the
// call, the file and line, and CUDA's own description of the error.
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
// After each <<<...>>>: a bad launch configuration shows up here, at its launch.
#define CUDA_CHECK_LAUNCH(kernel) ::dpt::cuda::check(cudaGetLastError(), "launch of " kernel, __FILE__, __LINE__)
