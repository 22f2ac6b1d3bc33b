// --overlap: the buckets, the allreduce of a buffer range by range, and
// training whose allreduce runs beside backward, which must give the same
// bits as training without.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>

#include "base/numbers.hpp"
#include "parallel/parallel.hpp"
#include "replicas.hpp"
#include "testing.hpp"
#include "run/trainer.hpp"

using namespace dpt;
using testing::Run;

namespace {

size_t weight_offset(const char* layer) { return lenet::model().tensor(std::string(layer) + ".weight").offset; }

}  // namespace

TEST_CASE("overlap_buckets cuts LeNet's gradients at layers, last layers first", "[overlap]") {
    const Model& lenet = lenet::model();
    const size_t all = lenet.param_count();
    const size_t conv2 = weight_offset("conv2"), dense1 = weight_offset("dense1"), dense2 = weight_offset("dense2");
    SECTION("0 KB: one bucket per layer") {
        const std::vector<Range> want{{dense2, all - dense2}, {dense1, dense2 - dense1}, {conv2, dense1 - conv2}, {0, conv2}};
        CHECK(overlap_buckets(lenet, 0) == want);
    }
    SECTION("64 KB: dense2 (5 KB) is too small alone, so it goes with dense1; conv2 is 98 KB; conv1 is left") {
        const std::vector<Range> want{{dense1, all - dense1}, {conv2, dense1 - conv2}, {0, conv2}};
        CHECK(overlap_buckets(lenet, 64) == want);
    }
    SECTION("more than the whole buffer: one bucket") {
        CHECK(overlap_buckets(lenet, 1 << 20) == std::vector<Range>{{0, all}});
    }
    SECTION("any size: the buckets tile the buffer from the end, each but the last at least that size") {
        const int kb = GENERATE(1, 5, 6, 100, 101, 410, 411, 415, 416);  // about the layers' sizes in KB
        CAPTURE(kb);
        const std::vector<Range> buckets = overlap_buckets(lenet, kb);
        size_t end = all;
        for (size_t b = 0; b < buckets.size(); ++b) {
            CAPTURE(b);
            CHECK(buckets[b].end() == end);
            CHECK(buckets[b].count > 0);
            if (b + 1 < buckets.size()) CHECK(buckets[b].count * sizeof(float) >= size_t(kb) * bytes_per_kb);
            end = buckets[b].first;
        }
        CHECK(end == 0);
    }
}

TEST_CASE("allreducing a buffer range by range gives the bits of allreducing it at once", "[overlap]") {
    const std::string name = GENERATE(from_range(allreduce_names_for(DeviceChoice::of(DeviceKind::cpu, 2))));
    const int n = GENERATE(1, 2, 3, 4, 5);
    CAPTURE(name, n);
    const Allreduce& algorithm = allreduce_named(name);
    const size_t all = lenet::model().param_count();
    // Random floats, so that another summation order would show; ranges
    // smaller than n, of one float, and not aligned to the ring's chunks.
    std::vector<std::vector<float>> grads;
    for (int i = 0; i < n; ++i) grads.push_back(testing::random_vector(all, 300 + uint64_t(i)));
    const auto reduce = [&](const std::vector<Range>& ranges) {
        Run run(n, 8, 16, false, 0, &algorithm);
        for (int i = 0; i < n; ++i) run.devices[size_t(i)]->write_grads(grads[size_t(i)]);
        for (const Range& r : ranges) algorithm.run_range(run.devices, all, r, false);
        std::vector<std::vector<float>> out(size_t(n), std::vector<float>(all, 0.0f));
        for (int i = 0; i < n; ++i) run.devices[size_t(i)]->read_grads(out[size_t(i)]);
        return out;
    };
    const auto whole = reduce({{0, all}});
    const std::vector<size_t> cuts{all, all - 1, all - 3, all / 2 + 1, 1003, 1000, 4, 3, 1, 0};
    std::vector<Range> pieces;
    for (size_t k = 0; k + 1 < cuts.size(); ++k) pieces.push_back({cuts[k + 1], cuts[k] - cuts[k + 1]});
    const auto piecewise = reduce(pieces);
    for (int i = 0; i < n; ++i) {
        CAPTURE(i);
        CHECK(std::memcmp(whole[size_t(i)].data(), piecewise[size_t(i)].data(), all * sizeof(float)) == 0);
        CHECK(std::memcmp(whole[0].data(), piecewise[size_t(i)].data(), all * sizeof(float)) == 0);
    }
}

TEST_CASE("training with --overlap gives the same parameters as without, bit for bit", "[overlap]") {
    const std::string name = GENERATE(from_range(allreduce_names_for(DeviceChoice::of(DeviceKind::cpu, 2))));
    const int n = GENERATE(1, 2, 3);
    const int bucket_kb = GENERATE(0, 64);
    CAPTURE(name, n, bucket_kb);
    const Allreduce& algorithm = allreduce_named(name);
    // 5 full batches of 100 (unequal parts over 3 devices; more than one
    // chunk of a CPU device's backward each, so that a bucket handed over
    // before the last chunk is done would show), then a batch of 2: with 3
    // devices, one gets an empty part and must still hand its buckets over.
    const int batch = 100, count = 5 * batch + 2;
    const auto init = init_params(InitKind::xavier, 11);
    const std::vector<uint32_t> order = epoch_order(count, 11, 1);
    const auto train = [&](std::vector<Range> buckets) {
        Run run(n, batch, count, true, 0, &algorithm, std::move(buckets));
        if (n > 1) run.devices[1]->slow_down(2);  // so the streams' timing differs from run to run
        for (Device* d : run.devices) d->write_params(init);
        for (Device* d : run.devices) d->set_order(order.data(), order.size());
        for (int step = 0; step < 6; ++step) {
            const int size = std::min(batch, count - step * batch);
            train_step(run.devices, algorithm, run.plan, size_t(step) * batch, even_parts(size, n), 0.1f, step, step % 2 == 1);
        }
        std::vector<std::vector<float>> params;
        for (int i = 0; i < n; ++i) params.push_back(run.params(i));
        return params;
    };
    const auto plain = train({});
    const auto overlapped = train(overlap_buckets(lenet::model(), bucket_kb));
    REQUIRE(plain[0] != init);
    for (int i = 0; i < n; ++i) {
        CAPTURE(i);
        CHECK(std::memcmp(plain[0].data(), overlapped[size_t(i)].data(), plain[0].size() * sizeof(float)) == 0);
    }
}

TEST_CASE("--breakdown with --overlap keeps the allreduce stream's time apart from the main stream's", "[overlap]") {
    const int n = 2, batch = 64, steps = 6;
    Run run(n, batch, steps * batch, true, 0, nullptr, overlap_buckets(lenet::model(), 0));
    const auto init = init_params(InitKind::xavier, 4);
    for (Device* d : run.devices) d->write_params(init);
    const std::vector<uint32_t> order = epoch_order(steps * batch, 4, 1);
    for (Device* d : run.devices) d->set_order(order.data(), order.size());
    const auto start = std::chrono::steady_clock::now();
    for (int step = 0; step < steps; ++step)
        train_step(run.devices, allreduce_named("naive"), run.plan, size_t(step) * batch, even_parts(batch, n), 0.1f, step, true);
    for (Device* d : run.devices) d->begin_phase(Phase::idle);
    for (Device* d : run.devices) d->synchronize();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (Device* d : run.devices) {
        const PhaseTimes t = d->take_phase_times();
        const auto at = [&](Phase p) { return t[size_t(p)]; };
        CAPTURE(d->name(), wall, at(Phase::compute), at(Phase::exposed), at(Phase::wait), at(Phase::allreduce));
        // The main stream's phases follow each other: together, at most the wall time.
        CHECK(at(Phase::load) + at(Phase::compute) + at(Phase::exposed) + at(Phase::update) <= wall);
        CHECK(at(Phase::compute) > 0);
        // The allreduce stream's ran beside them: its copies took some time.
        CHECK(at(Phase::allreduce) > 0);
    }
}
