// Every allreduce algorithm: the sum of any range on any number of devices,
// the same bits everywhere, and training that matches the naive one's.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>

#include "parallel/cluster.hpp"
#include "base/errors.hpp"
#include "parallel/parallel.hpp"
#include "replicas.hpp"
#include "testing.hpp"
#include "run/trainer.hpp"

using namespace dpt;
using testing::Run;

namespace {

// Writes small whole numbers into every device's gradients (their sum is
// exact in any order, so an allreduce must give exactly it) and returns them.
std::vector<std::vector<float>> write_whole_numbers(Run& run, size_t floats) {
    std::vector<std::vector<float>> grads;
    for (size_t i = 0; i < run.devices.size(); ++i) {
        grads.emplace_back(floats);
        for (size_t j = 0; j < floats; ++j) grads.back()[j] = float(int((j * 7 + i * 13) % 17) - 8);
        run.devices[i]->write_grads(grads.back());
    }
    return grads;
}

// How many of device i's gradients differ from what an allreduce of
// `summed` leaves: `factor` times the devices' sum there, its own elsewhere.
size_t wrong_after_sum(Run& run, const std::vector<std::vector<float>>& grads, size_t i, Range summed,
                       float factor = 1) {
    std::vector<float> got(grads[i].size());
    run.devices[i]->read_grads(got);
    size_t wrong = 0;
    for (size_t j = 0; j < got.size(); ++j) {
        float want = grads[i][j];
        if (j >= summed.first && j < summed.end()) {
            want = 0;
            for (const std::vector<float>& g : grads) want += g[j];
            want *= factor;
        }
        wrong += got[j] != want;
    }
    return wrong;
}

}  // namespace

TEST_CASE("the algorithms that can sum CPU devices' gradients: every one but NCCL's", "[allreduce]") {
    std::vector<std::string> want;
    for (const Allreduce* a : all_allreduces())
        if (a->info().name != "nccl") want.emplace_back(a->info().name);
    CHECK(allreduce_names_for(DeviceChoice::of(DeviceKind::cpu, 2)) == want);
    CHECK(want.size() >= 2);
}

TEST_CASE("every allreduce sums any range exactly, leaves the rest alone, and gives every device the same bits", "[allreduce]") {
    const std::string name = GENERATE(from_range(allreduce_names_for(DeviceChoice::of(DeviceKind::cpu, 2))));
    const int n = GENERATE(1, 2, 3, 4, 5);
    const Allreduce& algorithm = allreduce_named(name);
    const size_t all = lenet::model().param_count();
    for (const size_t floats : {size_t(1), size_t(2), size_t(3), size_t(7), size_t(1000), all}) {
        CAPTURE(name, n, floats);
        Run run(n, 8, 16, false, 0, &algorithm);
        // Beyond `floats`, each device keeps its own.
        const auto grads = write_whole_numbers(run, all);
        algorithm.run(run.devices, floats, false);
        for (int i = 0; i < n; ++i) {
            CAPTURE(i);
            CHECK(wrong_after_sum(run, grads, size_t(i), {0, floats}) == 0);
        }
    }
    SECTION("random floats: every device the same bits, within rounding of the sum") {
        Run run(n, 8, 16, false, 0, &algorithm);
        std::vector<double> exact(all, 0.0);
        for (int i = 0; i < n; ++i) {
            const auto g = testing::random_vector(all, 200 + uint64_t(i));
            for (size_t j = 0; j < all; ++j) exact[j] += g[j];
            run.devices[size_t(i)]->write_grads(g);
        }
        algorithm.run(run.devices, all, false);
        std::vector<float> first(all), got(all);
        run.devices[0]->read_grads(first);
        double worst = 0;
        for (size_t j = 0; j < all; ++j) worst = std::max(worst, std::abs(double(first[j]) - exact[j]));
        CHECK(worst <= 1e-6 * n);  // |values| <= n, float rounding of n additions
        for (int i = 1; i < n; ++i) {
            run.devices[size_t(i)]->read_grads(got);
            CAPTURE(i);
            CHECK(std::memcmp(got.data(), first.data(), all * sizeof(float)) == 0);
        }
    }
}

TEST_CASE("training with each allreduce matches naive's within rounding, replicas identical", "[allreduce]") {
    // Another algorithm adds the same numbers in another order: 5 steps keep
    // that within 1e-5 of the largest weight (measured: ~1e-8), while an
    // algorithm that dropped or doubled a chunk moves weights by ~1e-2.
    const std::string name = GENERATE(as<std::string>{}, "ring");
    const int n = GENERATE(2, 3, 4);
    const int batch = 31;  // parts of unequal size
    CAPTURE(name, n);
    const auto init = init_params(InitKind::xavier, 7);
    const std::vector<uint32_t> order = epoch_order(400, 7, 1);
    const auto train = [&](const Allreduce& algorithm) {
        Run run(n, batch, 400, true, 0, &algorithm);
        for (Device* d : run.devices) d->write_params(init);
        for (Device* d : run.devices) d->set_order(order.data(), order.size());
        const std::vector<Part> parts = even_parts(batch, n);
        for (int step = 0; step < 5; ++step)
            train_step(run.devices, algorithm, run.plan, size_t(step) * batch, parts, 0.1f, step);
        std::vector<std::vector<float>> params;
        for (int i = 0; i < n; ++i) params.push_back(run.params(i));
        return params;
    };
    const auto naive = train(allreduce_named("naive"));
    const auto other = train(allreduce_named(name));
    for (int i = 1; i < n; ++i) {
        CAPTURE(i);
        CHECK(std::memcmp(other[0].data(), other[size_t(i)].data(), other[0].size() * sizeof(float)) == 0);
    }
    double worst = 0, scale = 0, moved = 0;
    for (size_t j = 0; j < naive[0].size(); ++j) {
        worst = std::max(worst, double(std::abs(other[0][j] - naive[0][j])));
        scale = std::max(scale, double(std::abs(naive[0][j])));
        moved = std::max(moved, double(std::abs(naive[0][j] - init[j])));
    }
    CAPTURE(worst, scale, moved);
    REQUIRE(moved > 1e-3);
    CHECK(worst <= 1e-5 * scale);
}

TEST_CASE("across processes: each algorithm's sum, then device 0's sum across, reaches every device", "[allreduce]") {
    // Three processes whose devices hold the same gradients: the sum across
    // them is 3 times this process's, which the stand-in below computes
    // where MPI would (on device 0's stream, on the host).
    struct Triple final : ProcessSum {
        std::vector<size_t> counts;  // of each call, in order
        void sum(float* data, size_t count) override {
            counts.push_back(count);
            for (size_t i = 0; i < count; ++i) data[i] *= 3;
        }
    };
    const std::string name = GENERATE(from_range(allreduce_names_for(DeviceChoice::of(DeviceKind::cpu, 2))));
    const int n = GENERATE(1, 2, 3, 4);
    CAPTURE(name, n);
    Triple across;
    const std::unique_ptr<Allreduce> algorithm = across_processes(allreduce_named(name), across);
    const size_t all = lenet::model().param_count();
    Run run(n, 8, 16, false, 0, algorithm.get());
    const auto grads = write_whole_numbers(run, all);
    const Range range{1000, 5000};  // a bucket: the rest stays each device's own
    algorithm->run_range(run.devices, all, range, false);
    for (Device* d : run.devices) d->synchronize();
    CHECK(across.counts == std::vector<size_t>{range.count});
    for (int i = 0; i < n; ++i) {
        CAPTURE(i);
        CHECK(wrong_after_sum(run, grads, size_t(i), range, 3) == 0);
    }
}

TEST_CASE("--across auto and nccl: NCCL only where every process has it and a GPU of its own", "[allreduce]") {
    using P = std::vector<std::string>;
    const P two_gpus{"node1, GPU 0000:17:00.0", "node1, GPU 0000:65:00.0"};
    const P same_gpu{"node1, GPU 0000:17:00.0", "node2, GPU 0000:17:00.0", "node1, GPU 0000:17:00.0"};
    const P cpus{"", ""}, have{"", "", ""}, one_lacks{"", "libnccl.so.2: cannot open shared object file"};
    SECTION("mpi and ring stay what they are, even where NCCL could") {
        CHECK(decide_across(AcrossKind::mpi, two_gpus, have).kind == AcrossKind::mpi);
        CHECK(decide_across(AcrossKind::ring, two_gpus, have).kind == AcrossKind::ring);
    }
    SECTION("auto: nccl for GPUs of their own, else mpi and why") {
        const AcrossDecision gpus = decide_across(AcrossKind::automatic, two_gpus, have);
        CHECK(gpus.kind == AcrossKind::nccl);
        CHECK(gpus.why_not_nccl.empty());
        CHECK(decide_across(AcrossKind::automatic, cpus, have).kind == AcrossKind::mpi);
        const AcrossDecision shared = decide_across(AcrossKind::automatic, same_gpu, have);
        CHECK(shared.kind == AcrossKind::mpi);
        // The same bus id on another machine is another GPU: ranks 0 and 2 share one.
        CHECK(shared.why_not_nccl ==
              "ranks 0 and 2 both have their device 0 on node1, GPU 0000:17:00.0, and NCCL refuses two ranks on one GPU");
        const AcrossDecision lacking = decide_across(AcrossKind::automatic, two_gpus, one_lacks);
        CHECK(lacking.kind == AcrossKind::mpi);
        CHECK(lacking.why_not_nccl == "rank 1: libnccl.so.2: cannot open shared object file");
    }
    SECTION("nccl where it cannot be: an InputError naming --across, the reason and the way out") {
        CHECK_THROWS_MATCHES(decide_across(AcrossKind::nccl, same_gpu, have), InputError,
                             Catch::Matchers::Message(
                                 "--across nccl: ranks 0 and 2 both have their device 0 on node1, GPU 0000:17:00.0, "
                                 "and NCCL refuses two ranks on one GPU; give each process a GPU of its own (at most "
                                 "as many processes per machine as GPUs), or --across mpi, which sums through host "
                                 "memory"));
        CHECK_THROWS_WITH(decide_across(AcrossKind::nccl, two_gpus, one_lacks),
                          Catch::Matchers::StartsWith("--across nccl: rank 1: libnccl.so.2"));
        CHECK(decide_across(AcrossKind::nccl, two_gpus, have).kind == AcrossKind::nccl);
    }
    SECTION("--across takes the four names, and says them back") {
        for (const char* name : {"auto", "mpi", "ring", "nccl"}) CHECK(std::string(to_string(parse_across(name))) == name);
        CHECK_THROWS_WITH(parse_across("gloo"), Catch::Matchers::StartsWith("--across must be auto, mpi"));
    }
}
