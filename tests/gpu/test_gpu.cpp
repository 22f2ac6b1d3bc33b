// GPU tests: every CUDA kernel against its CPU twin, and GPU replicas against
// CPU devices (test_gpu_*.cpp, a source an area; gpu_checks.hpp: what they
// share). Plain C++ with its own main (Catch2 stays out of nvcc's way and
// Debian's v2 has no SKIP): with no usable CUDA device it says why and returns
// 77, which meson reports as SKIP, here and in CI.
//
//   gpu_tests kernels    each launcher vs kernels/cpu on random inputs
//   gpu_tests tf32       the --tf32 launchers alone (a part of `kernels`)
//   gpu_tests replicas   1, 2 and 3 GPU replicas (sharing GPUs round-robin)
//                        vs CPU devices; two epochs replayed from one graph
//                        vs queued kernels; a recording that fails midway
//   gpu_tests graph-first  the trainer's order in a fresh process: the
//                        epoch is recorded as a graph before any kernel has
//                        ever run (kernels load lazily, during the capture)
//   gpu_tests streams    what crosses streams, in few steps (ThreadSanitizer's run)
//   gpu_tests tf32-horizons  how far --tf32 training strays from the CPU's,
//                        1 to 5 steps: it prints figures, it checks nothing
//
// Outputs are poisoned (all bits set: NaN) before every GPU run, so an
// element a kernel forgets to write fails the comparison. Tolerances are
// relative to the largest reference value and stated where they are used.
#include <cstdio>
#include <exception>
#include <string>

#include "devices/gpu.hpp"
#include "gpu_checks.hpp"

using namespace dpt;
using namespace dpt::gpu_test;

int main(int argc, char** argv) {
    const std::string what = argc > 1 ? argv[1] : "all";
    if (what != "kernels" && what != "replicas" && what != "tf32-horizons" && what != "graph-first" &&
        what != "streams" && what != "tf32" && what != "all") {
        std::fprintf(stderr, "usage: gpu_tests [kernels|tf32|replicas|graph-first|streams|tf32-horizons|all]\n");
        return 2;
    }
    const GpuInventory gpus = probe_gpus();
    if (gpus.count() == 0) {
        std::printf("SKIP: %s\n", gpus.why_none.c_str());
        return 77;
    }
    std::printf("GPU 0: %s (%d visible)\n", gpus.names[0].c_str(), gpus.count());
    try {
        if (what == "tf32-horizons") tf32_horizons(32);
        else if (what == "graph-first") test_graph_first();  // must be this process's first GPU work
        else if (what == "streams") test_streams();
        else if (what == "tf32") test_tf32();
        else if (what != "replicas" && what != "tf32-horizons") {
#ifdef DPTRAIN_CUDA_EMULATION
            test_thread_stacks();
#endif
            test_fastdiv();
            test_split_scratch();
            test_layers();
            test_many_splits();
            test_dense_loss();
            test_dense_head();
            test_conv_weight_left();
            test_conv_gathered();
            test_tf32();
            test_pool();
            test_batch_norm();
            test_running_all();
            test_elementwise();
        }
        if (what == "replicas" || what == "all") test_replicas();
    } catch (const std::exception& e) {
        report(false, "no CUDA error", e.what());
    }
    std::printf("%d of %d checks passed\n", checks - failures, checks);
    return failures == 0 ? 0 : 1;
}
