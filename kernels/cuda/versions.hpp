// Every version of a CUDA launcher rebuilt for speed stays runnable beside
// the one dptrain trains with, so that bench/kernel_bench can check each
// against the CPU twin and time old against new on one GPU, in one run, and
// bench/kernel_versions.sh can time whole epochs with each.
// Training runs each launcher's default version: the one whose epochs were
// fastest on a GPU, which is not always the latest (a later version may
// launch fewer kernels yet take longer). DPTRAIN_KERNEL_VERSIONS, the tests
// and the benchmarks select others. (C++17: the .cu files include it.)
#pragma once
#include <string_view>
#include <vector>

namespace dpt::cuda {

struct LauncherVersions {
    const char* launcher;                      // as kernels.hpp names it
    std::vector<const char*> versions;  // what version 1, 2, ... is; the last is the latest
    int trained;                        // the default: the version training runs
    int* selected;                      // the version the launcher runs now
};

// The launchers that have versions, each with its list.
const std::vector<LauncherVersions>& launcher_versions();

// Makes `launcher` run `version` (from 1; 0: its default). False when there
// is no such launcher or version. Not thread-safe: before devices are made,
// or in a test or benchmark.
bool select_version(std::string_view launcher, int version);
// Every launcher back to its default.
void select_default_versions();
// How many versions `launcher` has (0: none by that name).
int version_count(std::string_view launcher);

// The selections the launchers read (versions.cu keeps the list above).
extern int gemm_version, gemm_split_version, conv2d_forward_version, conv2d_backward_data_version, conv2d_backward_weight_version,
    dense_version, tf32_version, batch_norm_version, residual_version, pool_version, waves_version;

}  // namespace dpt::cuda
