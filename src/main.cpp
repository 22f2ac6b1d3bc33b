// dptrain: data-parallel LeNet training, and the subcommands that show how
// it works (compare, inspect, demo, drift, devices, bench-allreduce,
// simulate). Exit status: 0 success, 2 bad command line or bad input data,
// 1 any other failure (divergence included), 130 / 143 stopped by SIGINT /
// SIGTERM.
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>

#include "cli.hpp"
#include "compare.hpp"
#include "errors.hpp"
#include "subcommands.hpp"
#include "trainer.hpp"

int main(int argc, char** argv) {
    try {
        const auto is = [&](const char* subcommand) { return argc > 1 && std::strcmp(argv[1], subcommand) == 0; };
        if (is("compare")) return dpt::run_compare(argc - 1, argv + 1);
        if (is("inspect")) return dpt::run_inspect(argc - 1, argv + 1);
        if (is("demo")) return dpt::run_demo(argc - 1, argv + 1);
        if (is("devices")) return dpt::run_devices(argc - 1, argv + 1);
        if (is("drift")) return dpt::run_drift(argc - 1, argv + 1);
        if (is("bench-allreduce")) return dpt::run_bench_allreduce(argc - 1, argv + 1);
        if (is("simulate")) return dpt::run_simulate(argc - 1, argv + 1);
        const auto config = dpt::parse_command_line(argc, argv);
        return config ? dpt::train(*config).exit_status : 0;
    } catch (const dpt::InputError& e) {
        std::fprintf(stderr, "dptrain: %s\n", e.what());
        return 2;
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "dptrain: error: out of memory (lower --batch, or --limit-train and --limit-test)\n");
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "dptrain: error: %s\n", e.what());
        return 1;
    }
}
