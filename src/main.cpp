// dptrain: data-parallel LeNet training, and the subcommands that show how
// it works (compare, inspect, demo, drift, devices, bench-allreduce,
// simulate). Exit status: 0 success, 2 bad command line or bad input data,
// 1 any other failure (divergence included), 130 / 143 stopped by SIGINT /
// SIGTERM.
//
// Under mpirun every process runs this (cluster.hpp): bad input on any rank
// is agreed on and exits 2 on every rank, rank 0 saying it; a failure on one
// rank alone ends the whole job, since the others would wait for it forever.
#include <csignal>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <system_error>

#include "run/cli.hpp"
#include "parallel/cluster.hpp"
#include "commands/compare.hpp"
#include "base/errors.hpp"
#include "commands/subcommands.hpp"
#include "run/trainer.hpp"

namespace {

int run(int argc, char** argv, dpt::Cluster& cluster) {
    const auto is = [&](const char* subcommand) { return argc > 1 && std::strcmp(argv[1], subcommand) == 0; };
    for (const char* subcommand : {"compare", "inspect", "demo", "devices", "drift", "bench-allreduce", "simulate"})
        if (is(subcommand) && cluster.size() > 1)
            throw dpt::InputError(std::string("dptrain ") + subcommand + " runs as one process; under mpirun only "
                                  "training runs (dptrain [options])");
    if (is("compare")) return dpt::run_compare(argc - 1, argv + 1);
    if (is("inspect")) return dpt::run_inspect(argc - 1, argv + 1);
    if (is("demo")) return dpt::run_demo(argc - 1, argv + 1);
    if (is("devices")) return dpt::run_devices(argc - 1, argv + 1);
    if (is("drift")) return dpt::run_drift(argc - 1, argv + 1);
    if (is("bench-allreduce")) return dpt::run_bench_allreduce(argc - 1, argv + 1);
    if (is("simulate")) return dpt::run_simulate(argc - 1, argv + 1);
    std::optional<dpt::TrainRequest> run;
    cluster.all_or_none([&] { run = dpt::parse_command_line(argc, argv, cluster.size()); }, "reading the command line");
    return run ? dpt::train(run->settings, run->start, cluster).exit_status : 0;
}

}  // namespace

int main(int argc, char** argv) {
    // A closed stdout (`dptrain ... | head -1`) is a write error the run
    // reports after saving its checkpoint, not a silent death by SIGPIPE.
    std::signal(SIGPIPE, SIG_IGN);
    std::unique_ptr<dpt::Cluster> cluster;
    try {
        cluster = dpt::join_cluster();
    } catch (const dpt::InputError& e) {
        if (dpt::launched_as().rank == 0) std::fprintf(stderr, "dptrain: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "dptrain: error: %s\n", e.what());
        return 1;
    }
    // Rank 0 speaks for the run; the others keep stdout quiet.
    if (!cluster->leader() && !std::freopen("/dev/null", "w", stdout)) return 1;
    const bool several = cluster->size() > 1;
    try {
        return run(argc, argv, *cluster);
    } catch (const dpt::InputError& e) {  // agreed on by every rank
        if (cluster->leader()) std::fprintf(stderr, "dptrain: %s\n", e.what());
        return 2;
    } catch (const dpt::EveryRankError& e) {
        if (cluster->leader()) std::fprintf(stderr, "dptrain: error: %s\n", e.what());
        return 1;
    } catch (const std::system_error& e) {
        // std::thread's EAGAIN: the user's limit on threads (ulimit -u) or the machine's.
        const std::string what = e.code() == std::errc::resource_unavailable_try_again
                                     ? "cannot start another thread (" + std::string(std::strerror(EAGAIN)) +
                                           "): this machine's limit on threads (ulimit -u) is reached; use fewer devices"
                                     : e.what();
        std::fprintf(stderr, "dptrain: %s%serror: %s\n", several ? cluster->who().c_str() : "", several ? ": " : "",
                     what.c_str());
        if (several) cluster->abort(1);
        return 1;
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "dptrain: %s%serror: out of memory (lower --batch, or --limit-train and --limit-test)\n",
                     several ? cluster->who().c_str() : "", several ? ": " : "");
        if (several) cluster->abort(1);
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "dptrain: %s%serror: %s\n", several ? cluster->who().c_str() : "", several ? ": " : "",
                     e.what());
        if (several) cluster->abort(1);
        return 1;
    }
}
