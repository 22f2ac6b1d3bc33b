// Running a kernel's blocks on the calling host thread (block.cpp), for the
// stream that executes the launch (runtime.cpp).
#pragma once

#include <functional>
#include <random>
#include <string>

#include "cuda_runtime_api.h"

namespace dpt::cuda_emulation {

struct KernelLaunch {
    const char* name;
    dim3 grid, block;
    std::function<void()> thread_body;  // one thread's run of the kernel, its arguments bound
};

// Runs every block of `kernel`, the blocks in an order drawn from `rng` and
// each block's threads as fibers in an order drawn anew between barriers.
// Returns "" or what went wrong (a barrier that not every thread reached).
std::string run_blocks(const KernelLaunch& kernel, std::mt19937_64& rng);

}  // namespace dpt::cuda_emulation
