// The FP32 peak of one core, measured (fma_peak.hpp). scripts/bench_cpu.sh
// builds it with -O2 -march=native (or CPU_ARCH) -ffp-contract=fast and runs one copy per
// core, so the epoch times it prints can be read against what the cores can
// do at most.
//   usage: fma_peak [SECONDS]        prints "GFLOP/s <figure>", the best 0.1 s within SECONDS
#include <cstdio>
#include <cstdlib>

#include "fma_peak.hpp"

int main(int argc, char** argv) {
    std::printf("GFLOP/s %.1f\n", dpt::bench::fma_peak_gflops(argc > 1 ? std::atof(argv[1]) : 1.0));
}
