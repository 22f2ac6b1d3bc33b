// --split: dividing whole samples (apportion), the parts of every batch,
// parsing, that any split gives the even split's update up to rounding, and
// that --slowdown changes the time of a device but not one bit of its work.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "parallel/parallel.hpp"
#include "replicas.hpp"
#include "base/rng.hpp"
#include "parallel/split.hpp"
#include "run/trainer.hpp"

using namespace dpt;
using testing::Run;

namespace {
const Allreduce& naive() { return allreduce_named("naive"); }
}  // namespace

TEST_CASE("apportion divides whole samples by largest remainders", "[split]") {
    using W = std::vector<int64_t>;
    SECTION("equal weights give the tutorial's even parts") {
        for (int n = 1; n <= 7; ++n)
            for (int b = 0; b <= 40; ++b) {
                const std::vector<int> parts = apportion(b, W(size_t(n), 1));
                for (int i = 0; i < n; ++i) {
                    CAPTURE(n, b, i);
                    REQUIRE(parts[size_t(i)] == part_of(b, n, i).count);
                }
            }
    }
    SECTION("weights that sum to the size come back as they are") {
        CHECK(apportion(256, W{192, 64}) == std::vector<int>{192, 64});
        CHECK(apportion(100, W{1, 98, 1}) == std::vector<int>{1, 98, 1});
    }
    SECTION("proportional, remainders to the largest fractions, ties to the lower index") {
        CHECK(apportion(10, W{3, 1}) == std::vector<int>{8, 2});     // 7.5, 2.5: the tie goes to device 0
        CHECK(apportion(10, W{1, 1, 1}) == std::vector<int>{4, 3, 3});
        CHECK(apportion(7, W{5, 2}) == std::vector<int>{5, 2});
        CHECK(apportion(5, W{2, 3}) == std::vector<int>{2, 3});
    }
    SECTION("at_least takes samples from the largest part, where the size allows") {
        CHECK(apportion(10, W{1000, 1}) == std::vector<int>{10, 0});
        CHECK(apportion(10, W{1000, 1}, 1) == std::vector<int>{9, 1});
        CHECK(apportion(1, W{1000, 1}, 1) == std::vector<int>{1, 0});  // not enough to go round
    }
    SECTION("the parts always tile the size") {
        Rng rng(3, 3);
        for (int trial = 0; trial < 500; ++trial) {
            W weights(1 + rng.below(6));
            for (auto& w : weights) w = int64_t(rng.below(1000));
            weights[0] += 1;
            const int size = int(rng.below(600));
            const std::vector<int> parts = apportion(size, weights, 1);
            int sum = 0;
            for (int p : parts) {
                CHECK(p >= 0);
                sum += p;
            }
            REQUIRE(sum == size);
        }
    }
}

TEST_CASE("--split even, weights and auto: parsed, and the parts of every batch", "[split]") {
    CHECK(parse_split("even", 3, 256).mode == SplitMode::even);
    CHECK(parse_split("even", 3, 256).counts.empty());
    const SplitChoice automatic = parse_split("auto", 2, 256);
    CHECK(automatic.mode == SplitMode::automatic);
    CHECK_FALSE(automatic.measured());
    const SplitChoice weights = parse_split("3,1", 2, 256);
    CHECK(weights.mode == SplitMode::weights);
    CHECK(weights.counts == std::vector<int>{192, 64});
    CHECK(parse_split("0.5,0.25,0.25", 3, 100).counts == std::vector<int>{50, 25, 25});
    CHECK(parse_split("1000,1", 2, 64).counts == std::vector<int>{63, 1});  // every device gets a sample
    CHECK_THROWS_WITH(parse_split("3,1", 3, 256), Catch::Contains("--split 3,1 gives 2 shares for 3 devices"));
    CHECK_THROWS_WITH(parse_split("3,0", 2, 256), Catch::Contains("--split must be even, auto, or one positive number"));
    CHECK_THROWS_WITH(parse_split("fast", 2, 256), Catch::Contains("--split must be"));
    CHECK_THROWS_WITH(parse_split("3,,1", 3, 256), Catch::Contains("--split must be"));

    SECTION("even: the tutorial's parts, the short last batch too") {
        const BatchParts parts(SplitChoice{}, 3, 10, 25);  // batches 10, 10, 5
        CHECK(parts.of(10)[0].count == 4);
        CHECK(parts.of(10)[2].first == 7);
        CHECK(parts.of(5)[0].count == 2);
        CHECK(parts.of(5)[2].count == 1);
        CHECK(parts.largest() == 4);
    }
    SECTION("weights: the full batch as given, a short one in proportion") {
        const BatchParts parts(weights, 2, 256, 1000);  // 3 full batches, then 232
        CHECK(parts.of(256)[0].count == 192);
        CHECK(parts.of(256)[1].first == 192);
        CHECK(parts.of(232)[0].count == 174);
        CHECK(parts.of(232)[1].count == 58);
        CHECK(parts.largest() == 192);
    }
    SECTION("auto: speeds to parts") {
        const std::vector<double> speeds{3000.0, 1000.0};
        CHECK(counts_for_speeds(128, speeds) == std::vector<int>{96, 32});
        const std::vector<double> lopsided{1e6, 1.0};
        CHECK(counts_for_speeds(128, lopsided) == std::vector<int>{127, 1});
    }
}

TEST_CASE("an uneven split gives the even split's update up to float rounding", "[split]") {
    // The gradients are sums and the step divides by the whole batch, so
    // where a sample is computed changes only the order of the sums. Five
    // steps at the parts 96 + 32 against 64 + 64 (and 3 devices at 1,1,6),
    // on the trainer's own step.
    const int batch = 128, steps = 5;
    const auto init = init_params(InitKind::xavier, 4);
    const std::vector<uint32_t> order = epoch_order(1000, 4, 1);
    const auto train = [&](int n, const std::vector<Part>& parts) {
        Run run(n, batch, 1000, false, batch);
        for (Device* d : run.devices) d->write_params(init);
        for (Device* d : run.devices) d->set_order(order.data(), order.size());
        for (int step = 0; step < steps; ++step) train_step(run.devices, naive(), run.plan, size_t(step) * batch, parts, 0.1f, step);
        return run.params(n - 1);
    };
    const auto even = train(2, even_parts(batch, 2));
    double moved = 0.0;
    for (size_t k = 0; k < even.size(); ++k) moved = std::max(moved, double(std::abs(even[k] - init[k])));
    REQUIRE(moved > 1e-3);
    const auto parts_of = [](std::vector<int> counts) {
        const BatchParts parts(SplitChoice{SplitMode::weights, counts}, int(counts.size()), batch, size_t(batch));
        return std::vector<Part>(parts.of(batch).begin(), parts.of(batch).end());
    };
    for (const auto& [n, counts] : {std::pair{2, std::vector<int>{96, 32}}, std::pair{3, std::vector<int>{16, 16, 96}}}) {
        const auto uneven = train(n, parts_of(counts));
        double worst = 0.0;
        for (size_t k = 0; k < even.size(); ++k) worst = std::max(worst, double(std::abs(uneven[k] - even[k])));
        CAPTURE(n, worst, moved);
        CHECK(worst <= 1e-5);
        CHECK(uneven != even);  // the order of the sums did change: the comparison means something
    }
}

TEST_CASE("--slowdown repeats a CPU device's compute without changing a bit", "[split]") {
    const int batch = 64;
    const auto init = init_params(InitKind::xavier, 6);
    const std::vector<uint32_t> order = epoch_order(400, 6, 1);
    const auto train = [&](int factor) {
        Run run(2, batch, 400, true);
        CHECK(run.devices[1]->slow_down(factor));
        for (Device* d : run.devices) d->write_params(init);
        for (Device* d : run.devices) d->set_order(order.data(), order.size());
        for (int step = 0; step < 3; ++step) train_step(run.devices, naive(), run.plan, size_t(step) * batch, even_parts(batch, 2), 0.1f, step);
        double loss = 0;
        for (Device* d : run.devices) loss += d->take_loss_sum();
        return std::pair{run.params(0), loss};
    };
    const auto [plain, plain_loss] = train(1);
    const auto [slowed, slowed_loss] = train(3);
    CHECK(std::memcmp(plain.data(), slowed.data(), plain.size() * sizeof(float)) == 0);
    CHECK(plain_loss == slowed_loss);  // counted once, not three times
}

