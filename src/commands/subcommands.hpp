// dptrain's classroom subcommands besides compare (compare.hpp). Each takes
// argv[0] as its own name, prints to stdout, returns the exit status (1 when
// a check it makes fails) and throws InputError for a bad command line.
#pragma once

namespace dpt {

// `dptrain inspect`: one step on a small batch, each stage shown and checked.
int run_inspect(int argc, const char* const* argv);

// `dptrain demo allreduce|split`: the two pieces of data parallelism on small tensors.
int run_demo(int argc, const char* const* argv);

// `dptrain drift`: 1 and N devices from the same seed, how their weights drift apart.
int run_drift(int argc, const char* const* argv);

// `dptrain devices`: CPU cores, GPUs, peer access and measured copy speed.
int run_devices(int argc, const char* const* argv);

// `dptrain bench-allreduce`: each allreduce algorithm's time and bandwidth by message size.
int run_bench_allreduce(int argc, const char* const* argv);

// `dptrain simulate`: epoch time, speed-up and efficiency of 1..N devices from an alpha-beta model.
int run_simulate(int argc, const char* const* argv);

}  // namespace dpt
