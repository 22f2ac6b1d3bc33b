// dptrain simulate's model: its formulas against cases worked by hand.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "parallel/allreduce.hpp"
#include "base/errors.hpp"
#include "commands/simulate.hpp"

using namespace dpt;
using Catch::Detail::Approx;

TEST_CASE("the alpha-beta allreduce costs", "[simulate]") {
    const Link link{"custom", 10.0, 5.0};  // 1e10 bytes/s, 5e-6 s a transfer
    // naive, 4 devices, 1 MB: 2*3 transfers of (5e-6 + 1e6/1e10) s
    CHECK(modeled_allreduce_s("naive", 4, 1e6, 1, link) == Approx(6 * (5e-6 + 1e-4)));
    // ring: each of the 6 steps moves a quarter of it
    CHECK(modeled_allreduce_s("ring", 4, 1e6, 1, link) == Approx(6 * (5e-6 + 2.5e-5)));
    // in 3 buckets: 3 latencies a step, the same bytes
    CHECK(modeled_allreduce_s("naive", 4, 1e6, 3, link) == Approx(6 * (1.5e-5 + 1e-4)));
    CHECK(modeled_allreduce_s("ring", 1, 1e6, 1, link) == 0);
    CHECK(modeled_allreduce_s("naive", 2, 0, 1, Link{"custom", 1.0, 0.0}) == 0);
}

TEST_CASE("simulate predicts each registered algorithm that carries a cost model, and only those", "[simulate]") {
    std::set<std::string> modelled, unmodelled;
    for (const Allreduce* a : all_allreduces())
        (a->cost_model() ? modelled : unmodelled).emplace(a->info().name);
    REQUIRE(modelled.size() >= 2);
    SimulationInput in;
    in.batch = 8;
    in.samples = 80;
    in.max_devices = 2;
    in.compute_s = {0.010, 0.006};
    in.gradient_bytes = 1e6;
    in.link = {"custom", 10.0, 5.0};
    std::set<std::string> simulated;
    for (const SimulatedRun& r : simulate(in))
        if (r.devices > 1) simulated.insert(r.algorithm);
    CHECK(simulated == modelled);
    for (const std::string& name : unmodelled)  // NCCL picks its own algorithm: no model to name
        CHECK_THROWS_AS(modeled_allreduce_s(name, 4, 1e6, 1, in.link), InputError);
    // Bus bandwidth's factor, the same for every allreduce: 2(n-1)/n.
    CHECK(Allreduce::bus_factor(1) == 0);
    CHECK(Allreduce::bus_factor(2) == 1.0);
    CHECK(Allreduce::bus_factor(4) == 1.5);
}

TEST_CASE("simulate's rows: compute, allreduce, overlap, steps, speed-up", "[simulate]") {
    SimulationInput in;
    in.batch = 8;
    in.samples = 80;  // 10 steps
    in.max_devices = 2;
    in.compute_s = {0.010, 0.006};
    in.update_s = 0.001;
    in.gradient_bytes = 1e6;
    in.buckets = 2;
    in.link = {"custom", 10.0, 5.0};
    SECTION("each device its own hardware, backward over the whole part") {
        const std::vector<SimulatedRun> runs = simulate(in);
        REQUIRE(runs.size() == 5);  // one device; naive and ring, each without and with overlap
        CHECK(runs[0].devices == 1);
        CHECK(runs[0].epoch_s == Approx(10 * 0.011));
        const SimulatedRun& naive = runs[1];
        CHECK((naive.algorithm == "naive" && !naive.overlap));
        CHECK(naive.allreduce_s == Approx(2 * (5e-6 + 1e-4)));
        CHECK(naive.exposed_s == Approx(naive.allreduce_s));
        CHECK(naive.epoch_s == Approx(10 * (0.006 + 0.001 + 2.1e-4)));
        CHECK(naive.speedup == Approx(0.11 / 0.0721));
        CHECK(naive.efficiency == Approx(0.11 / 0.0721 / 2));
        const SimulatedRun& overlapped = runs[2];
        CHECK((overlapped.algorithm == "naive" && overlapped.overlap));
        CHECK(overlapped.allreduce_s == Approx(2 * (2 * 5e-6 + 1e-4)));  // 2 buckets: 2 latencies
        CHECK(overlapped.exposed_s == 0);  // well within backward's 2/3 of 6 ms
        CHECK(overlapped.epoch_s == Approx(10 * 0.007));
        CHECK(runs[3].algorithm == "ring");
        CHECK(runs[3].allreduce_s == Approx(2 * (5e-6 + 5e-5)));
    }
    SECTION("a slow link: overlap hides only backward's share of the pass") {
        in.link = {"custom", 0.1, 0.0};  // 1 MB takes 10 ms a transfer
        in.pass_samples = 2;             // of a part of 4
        const std::vector<SimulatedRun> runs = simulate(in);
        const double t = 2 * 1e6 / 1e8, window = 2.0 / 3.0 * 0.006 * 2 / 4;
        CHECK(runs[2].exposed_s == Approx(t - window));
        CHECK(runs[2].step_s == Approx(0.006 + 0.001 + t - window));
    }
    SECTION("two devices on one core compute at half speed; a short last step counts as a whole one") {
        in.cores = 1;
        in.samples = 81;  // 11 steps
        const std::vector<SimulatedRun> runs = simulate(in);
        CHECK(runs[0].epoch_s == Approx(11 * 0.011));
        CHECK(runs[1].compute_s == Approx(0.012));
        CHECK(runs[1].epoch_s == Approx(11 * (0.012 + 0.001 + 2.1e-4)));
    }
}
