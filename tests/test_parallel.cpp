// split_and_load, the naive allreduce, and the two promises of data
// parallelism: replicas stay bit-identical, and N devices follow the
// 1-device trajectory.
#include <catch2/catch.hpp>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <new>
#include <set>
#include <cstring>

#include "devices/kinds.hpp"
#include "parallel/device_factory.hpp"
#include "model/lenet.hpp"
#include "parallel/parallel.hpp"
#include "base/rng.hpp"
#include "replicas.hpp"
#include "synthetic.hpp"
#include "testing.hpp"
#include "twin_device.hpp"
#include "run/cli.hpp"
#include "run/settings.hpp"
#include "run/trainer.hpp"

using namespace dpt;

namespace {

const Allreduce& naive() { return allreduce_named("naive"); }
using testing::Run;
}  // namespace

TEST_CASE("part_of splits a batch into contiguous parts, the first B % N one larger", "[parallel]") {
    SECTION("divisible") {
        for (int i = 0; i < 4; ++i) CHECK(part_of(512, 4, i).count == 128);
        CHECK(part_of(512, 4, 3).first == 384);
    }
    SECTION("not divisible: 10 over 4 is 3, 3, 2, 2") {
        const int expected_first[] = {0, 3, 6, 8}, expected_count[] = {3, 3, 2, 2};
        for (int i = 0; i < 4; ++i) {
            CHECK(part_of(10, 4, i).first == expected_first[i]);
            CHECK(part_of(10, 4, i).count == expected_count[i]);
        }
    }
    SECTION("a short last batch with fewer samples than devices leaves some parts empty") {
        CHECK(part_of(2, 3, 0).count == 1);
        CHECK(part_of(2, 3, 1).count == 1);
        CHECK(part_of(2, 3, 2).count == 0);
    }
    SECTION("parts tile the batch for any B and N") {
        for (int n = 1; n <= 7; ++n)
            for (int b = 0; b <= 40; ++b) {
                int next = 0;
                for (int i = 0; i < n; ++i) {
                    CAPTURE(n, b, i);
                    REQUIRE(part_of(b, n, i).first == next);
                    next += part_of(b, n, i).count;
                }
                REQUIRE(next == b);
            }
    }
}

TEST_CASE("split_and_load puts part i of the batch, in order, on device i", "[parallel]") {
    const int n = GENERATE(1, 2, 3), batch = GENERATE(6, 7);
    CAPTURE(n, batch);
    Run run(n, batch, 40);
    const std::vector<uint32_t> order = epoch_order(40, 3, 1);
    for (Device* d : run.devices) d->set_order(order.data(), order.size());
    const size_t first = 12;
    split_and_load(run.devices, first, even_parts(batch, n));

    std::vector<float> images(size_t(batch) * 784);
    std::vector<int32_t> labels(static_cast<size_t>(batch));
    for (int i = 0; i < n; ++i) {
        const Part part = part_of(batch, n, i);
        REQUIRE(run.devices[size_t(i)]->read_input(images, labels) == part.count);
        for (int j = 0; j < part.count; ++j) {
            const uint32_t sample = order[first + size_t(part.first + j)];
            CAPTURE(i, j, sample);
            // Pixels arrive scaled to [0, 1]; scaled back they name the sample.
            CHECK(std::lround(images[size_t(j) * 784] * 255.0f) == long(sample % 256));
            CHECK(std::lround(images[size_t(j) * 784 + 783] * 255.0f) == long(sample % 256));
            CHECK(labels[size_t(j)] == int32_t(sample % 10));
        }
    }
}

TEST_CASE("a run's devices are read and named through the kinds table", "[parallel]") {
    // One row a kind, each name and spelling once.
    std::set<std::string> names, spellings;
    for (const DeviceKindInfo& row : device_kinds()) {
        CHECK(&kind_info(row.kind) == &row);
        CHECK(names.insert(row.name).second);
        for (const char* spelling : row.spellings) CHECK(spellings.insert(spelling).second);
        CHECK(row.make != nullptr);
        const Presence present = row.probe();  // none here: it says why
        CHECK((present.count > 0 || present.unlimited() || !present.why_none.empty()));
        CHECK((row.numbered_in_order == present.unlimited()));
    }
    // CPU devices: made on demand, any order typed, but each number once from 0.
    CHECK(parse_device_list("cpu:1,cpu:0,cpu:2") == DeviceChoice::of(DeviceKind::cpu, 3));
    CHECK_THROWS_WITH(parse_device_list("cpu:0,cpu:2"),
                      Catch::Contains("CPU devices are numbered cpu:0, cpu:1, ... each once (2 CPU devices are cpu:0 to cpu:1)"));
    CHECK_THROWS_WITH(parse_device_list("tpu:0"), Catch::Contains("'tpu:0' is not gpu:I, cuda:I"));
    if (kind_info(DeviceKind::gpu).probe().count == 0)
        CHECK_THROWS_WITH(parse_device_list("cpu:0,gpu:0"), Catch::Contains("train on CPU devices with --cpus N"));

    // A mixed run: the kinds in the table's order, its words from the rows.
    const DeviceChoice mixed = DeviceChoice::of(DeviceKind::gpu, 2).then(DeviceKind::cpu, 1);
    CHECK(mixed.mixed());
    CHECK(mixed.kind() == DeviceKind::gpu);
    CHECK(mixed.count(DeviceKind::gpu) == 2);
    CHECK(mixed.count(DeviceKind::cpu) == 1);
    CHECK(describe(mixed) == "2 GPU replicas and 1 CPU device");
    CHECK(kind_names(mixed) == "cuda+cpu");
    CHECK(kind_names(DeviceChoice::of(DeviceKind::cpu, 2)) == "cpu");
    CHECK_FALSE(DeviceChoice::of(DeviceKind::cpu, 2).mixed());
    // Where each stands is not how many: a resumed run may use other GPUs.
    DeviceChoice placed = mixed;
    placed.places[0].ordinal = 1;
    placed.places[1].ordinal = 1;
    CHECK(placed.ordinals(DeviceKind::gpu) == std::vector<int>{1, 1});
    CHECK(mixed.ordinals(DeviceKind::gpu).empty());
    CHECK(placed.same_counts(mixed));
    CHECK_FALSE(placed == mixed);
    CHECK_FALSE(mixed.same_counts(DeviceChoice::of(DeviceKind::gpu, 3)));
    CHECK_FALSE(mixed.same_counts(DeviceChoice::of(DeviceKind::gpu, 2)));
}

TEST_CASE("a kind added as its own file and row trains beside CPU devices, bit for bit", "[parallel]") {
    testing::add_twin_kind();
    // Its row is read as the others are: --devices, the words, the names in files.
    const DeviceChoice choice = parse_device_list("twin:0,cpu:0,twin:1");
    REQUIRE(choice == DeviceChoice::of(DeviceKind::cpu, 1).then(testing::twin_kind, 2));
    CHECK(describe(choice) == "1 CPU device and 2 twin devices");
    CHECK(kind_names(choice) == "cpu+twin");
    CHECK(to_string(testing::twin_kind) == std::string("twin"));
    CHECK(kind_info(testing::twin_kind).banner(2, "") == "devices: 2 twin devices\n");
    CHECK_THROWS_WITH(parse_device_list("tpu:0"), Catch::Contains("is not gpu:I, cuda:I, cpu:I or twin:I"));
    // The checkpoint's devices line, both ways.
    const RunSetting& devices_row =
        *std::find_if(run_settings().begin(), run_settings().end(), [](const RunSetting& r) { return r.key == "devices"; });
    TrainConfig settings;
    settings.devices = choice;
    const std::string line = devices_row.text(settings);
    CHECK(line == "cpu 1 twin 2");
    TrainConfig read;
    CHECK(devices_row.read(line, read) == nullptr);
    CHECK(read.devices == choice);
    CHECK(devices_row.read("twin 2 cpu 1", read) != nullptr);  // the kinds in the table's order

    // Its count option, --twins N, from its row: in training's command line
    // and in what the subcommands take (--twins N alone, or an error with another).
    CHECK_THAT(count_options("N"), Catch::Equals("--gpus N | --cpus N | --twins N"));
    const char* argv[] = {"dptrain", "--cpus", "1", "--twins", "2"};
    const std::optional<TrainRequest> request = parse_command_line(5, argv);
    REQUIRE(request);
    CHECK(request->settings.devices == choice);
    const auto typed = [](std::string twins, std::string cpus) -> GivenText {
        return [=](const std::string& option) { return option == "twins" ? twins : option == "cpus" ? cpus : ""; };
    };
    CHECK(choose_devices(typed("3", ""), DeviceChoice::of(DeviceKind::cpu, 2)) == DeviceChoice::of(testing::twin_kind, 3));
    CHECK_THROWS_WITH(choose_devices(typed("3", "1"), {}), Catch::Contains("--cpus and --twins cannot be combined here"));
    const std::optional<KindGiven> one = one_kind_given(typed("1,2", ""), "drift");
    REQUIRE(one);
    CHECK(one->kind == testing::twin_kind);
    CHECK(one->text == "1,2");
    CHECK_THROWS_WITH(one_kind_given(typed("1,2", "1,2"), "drift"), Catch::Contains("drift takes one kind of device"));
    CHECK_FALSE(one_kind_given(typed("", ""), "drift"));

    // Made through its row, it trains with CPU devices across kinds
    // (reach(): through host memory) and ends where 3 CPU devices end.
    const int batch = 31;
    std::vector<std::vector<float>> ends;
    for (const DeviceChoice& devices : {choice, DeviceChoice::of(DeviceKind::cpu, 3)}) {
        Run run(devices, batch, 200, true);
        CHECK(run.devices[1]->name() == (devices.mixed() ? "twin:0" : "cpu:1"));
        const auto init = init_params(InitKind::xavier, 1);
        for (Device* d : run.devices) d->write_params(init);
        const std::vector<uint32_t> order = epoch_order(200, 1, 1);
        for (Device* d : run.devices) d->set_order(order.data(), order.size());
        for (int step = 0; step < 4; ++step)
            train_step(run.devices, naive(), run.plan, size_t(step) * batch, even_parts(batch, 3), 0.1f, step);
        for (int i = 1; i < 3; ++i) CHECK(run.params(i) == run.params(0));
        CHECK(run.params(0) != init);
        ends.push_back(run.params(0));
    }
    CHECK(std::memcmp(ends[0].data(), ends[1].data(), ends[0].size() * sizeof(float)) == 0);
}

TEST_CASE("CPU devices are paced by the host and record no graphs: the trainer queues their steps", "[parallel]") {
    Run run(2, 8, 40);
    for (Device* d : run.devices) {
        CHECK(d->capabilities().host_paced);
        CHECK_FALSE(d->capabilities().records_graphs);
    }
    std::string why;
    bool queued = false;
    CHECK(record_work(run.devices, [&] { queued = true; }, why) == nullptr);
    CHECK(why == "cpu:0 does not record its work");
    CHECK_FALSE(queued);  // nothing was run in place of a recording
}

TEST_CASE("allreduce leaves every replica with the exact element-wise sum", "[parallel]") {
    const int n = GENERATE(1, 2, 3, 4);
    CAPTURE(n);
    Run run(n, 8, 16);
    std::vector<std::vector<float>> grads;
    for (int i = 0; i < n; ++i) {
        grads.push_back(testing::random_vector(lenet::model().param_count(), 100 + i));
        run.devices[size_t(i)]->write_grads(grads.back());
    }
    naive().run(run.devices, lenet::model().param_count(), false);
    // The allreduce adds on device 0 in device order; the same order here
    // gives the same float result, bit for bit.
    std::vector<float> expected = grads[0];
    for (int i = 1; i < n; ++i)
        for (size_t j = 0; j < expected.size(); ++j) expected[j] += grads[size_t(i)][j];
    std::vector<float> got(lenet::model().param_count());
    for (int i = 0; i < n; ++i) {
        run.devices[size_t(i)]->read_grads(got);
        CAPTURE(i);
        CHECK(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)) == 0);
    }
}

TEST_CASE("after k training steps all replicas are bit-identical", "[parallel][replicas]") {
    const int n = GENERATE(2, 3);
    const int batch = GENERATE(30, 31);  // 31 is not divisible by 2 or 3
    CAPTURE(n, batch);
    Run run(n, batch, 200, true);
    const auto init = init_params(InitKind::xavier, 1);
    for (Device* d : run.devices) d->write_params(init);
    const std::vector<uint32_t> order = epoch_order(200, 1, 1);
    for (Device* d : run.devices) d->set_order(order.data(), order.size());
    for (int step = 0; step < 5; ++step) train_step(run.devices, naive(), run.plan, size_t(step) * batch, even_parts(batch, int(run.devices.size())), 0.1f, step);
    // And a short batch with fewer samples than devices: empty parts.
    train_step(run.devices, naive(), run.plan, 190, even_parts(n - 1, int(run.devices.size())), 0.1f, 5);

    const auto p0 = run.params(0);
    const bool trained = p0 != init;
    CHECK(trained);
    for (int i = 1; i < n; ++i) {
        const auto pi = run.params(i);
        CAPTURE(i);
        CHECK(std::memcmp(p0.data(), pi.data(), p0.size() * sizeof(float)) == 0);
    }
}

TEST_CASE("replicas are identical to the right thing: one step on N devices is one step on 1", "[parallel][replicas]") {
    // Identity alone holds even for an allreduce that forgot to sum (the
    // broadcast copies device 0's buffer everywhere); such a one updates with
    // device 0's part alone, ~1e-2 of a weight off after one step. One step
    // only: SGD is chaotic, and a ReLU decided the other way at a tie (by the
    // summation order) grows to that size within a few steps (measured: 3
    // devices, batch 31: 7e-9 after 1 step, 6e-5 after 2, 1.3e-3 after 5).
    const int n = GENERATE(2, 3);
    const int batch = GENERATE(30, 31);
    CAPTURE(n, batch);
    const auto init = init_params(InitKind::xavier, 1);
    const std::vector<uint32_t> order = epoch_order(200, 1, 1);
    const auto one_step = [&](int devices) {
        Run run(devices, batch, 200, true);
        for (Device* d : run.devices) d->write_params(init);
        for (Device* d : run.devices) d->set_order(order.data(), order.size());
        train_step(run.devices, naive(), run.plan, 0, even_parts(batch, int(run.devices.size())), 0.1f, 0);
        return run.params(devices - 1);
    };
    const auto single = one_step(1), many = one_step(n);
    double worst = 0.0, moved = 0.0;
    for (size_t k = 0; k < single.size(); ++k) {
        worst = std::max(worst, double(std::abs(many[k] - single[k])));
        moved = std::max(moved, double(std::abs(single[k] - init[k])));
    }
    CAPTURE(worst, moved);
    REQUIRE(moved > 1e-3);
    CHECK(worst <= 1e-5 * moved);  // float summation order only: measured ~1e-8
}

namespace {
// Every allocation of this test program, counted: the hot path must make none.
std::atomic<uint64_t> allocations{0};
}  // namespace

// Every plain and nothrow form, new and delete alike, so that whatever one
// allocates the other frees (AddressSanitizer checks the pairing; the
// aligned forms stay the runtime's, and pair among themselves).
// GCC 12, inlining these into a test's vector code, warns that free() gets
// what operator new returned: it does, since that is malloc's (a false
// positive; AddressSanitizer checks the real pairing).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(size_t bytes) {
    allocations.fetch_add(1, std::memory_order_relaxed);
    if (void* p = std::malloc(bytes ? bytes : 1)) return p;
    throw std::bad_alloc();
}
void* operator new[](size_t bytes) { return operator new(bytes); }
void* operator new(size_t bytes, const std::nothrow_t&) noexcept {
    allocations.fetch_add(1, std::memory_order_relaxed);
    return std::malloc(bytes ? bytes : 1);
}
void* operator new[](size_t bytes, const std::nothrow_t& tag) noexcept { return operator new(bytes, tag); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

TEST_CASE("queuing training steps on CPU devices allocates nothing", "[parallel][replicas]") {
    const int n = GENERATE(1, 2, 3);
    const bool overlap = GENERATE(false, true);
    CAPTURE(n, overlap);
    Run run(n, 32, 400, true, 0, nullptr, overlap ? overlap_buckets(lenet::model(), 0) : std::vector<Range>{});
    const auto init = init_params(InitKind::xavier, 5);
    for (Device* d : run.devices) d->write_params(init);
    const std::vector<uint32_t> order = epoch_order(400, 5, 1);
    for (Device* d : run.devices) d->set_order(order.data(), order.size());
    const std::vector<Part> parts = even_parts(32, n);
    train_step(run.devices, naive(), run.plan, 0, parts, 0.1f, 0);  // warm-up: first touches
    for (Device* d : run.devices) d->synchronize();
    const uint64_t before = allocations.load();
    for (int step = 1; step < 12; ++step) {
        train_step(run.devices, naive(), run.plan, size_t(step) * 32, parts, 0.1f, step, step % 2 == 0);  // with and without phase marks
        for (Device* d : run.devices) d->throttle(2);
    }
    for (Device* d : run.devices) d->synchronize();
    const uint64_t during = allocations.load() - before;
    CHECK(during == 0);
}

TEST_CASE("N devices follow the 1-device trajectory for the same global batch", "[parallel][equivalence]") {
    // 50 over 3 devices: parts of 17, 17, 16. Ten steps: rounding can flip a
    // ReLU whose input sits at its kink, after which the runs fork; on the
    // AVX-512 build one did between steps 15 and 20 (2 devices: 3e-5 of the
    // largest weight after 20 steps, 7e-8 after 15).
    const int batch = 50, steps = 10;
    auto train = [&](int n) {
        Run run(n, batch, 2000, true);
        const auto init = init_params(InitKind::xavier, 2);
        for (Device* d : run.devices) d->write_params(init);
        const std::vector<uint32_t> order = epoch_order(2000, 2, 1);
        for (Device* d : run.devices) d->set_order(order.data(), order.size());
        for (int step = 0; step < steps; ++step) train_step(run.devices, naive(), run.plan, size_t(step) * batch, even_parts(batch, int(run.devices.size())), 0.1f, step);
        return run.params(0);
    };
    const auto one = train(1);
    const auto init = init_params(InitKind::xavier, 2);
    double moved = 0.0, scale = 0.0;
    for (size_t i = 0; i < one.size(); ++i) {
        moved = std::max(moved, double(std::abs(one[i] - init[i])));
        scale = std::max(scale, double(std::abs(one[i])));
    }
    REQUIRE(moved > 1e-3);  // the comparison below means something only if training moved the weights

    const int n = GENERATE(2, 3);
    CAPTURE(n);
    const auto many = train(n);
    double worst = 0.0;
    for (size_t i = 0; i < one.size(); ++i) worst = std::max(worst, double(std::abs(one[i] - many[i])));
    // The only difference is the order in which per-sample gradients are
    // summed (by part, then across devices): each step's gradient differs by
    // float rounding, ~1e-7 relative, and 20 steps of lr 0.1 carry that into
    // the weights without amplifying it much. Measured: ~7e-8 of the largest
    // weight. A device that drops, repeats or mis-scales samples differs by
    // ~1e-2 (a whole part's gradient times lr / B).
    CAPTURE(worst, scale);
    CHECK(worst <= 1e-6 * scale);
}

TEST_CASE("the divergence watch names the first step whose summed gradients are not finite", "[parallel][replicas]") {
    const int n = GENERATE(1, 2), batch = 32;
    CAPTURE(n);
    auto first_bad = [&](float lr, int steps) {
        Run run(n, batch, 400, true);
        const auto init = init_params(InitKind::xavier, 3);
        for (Device* d : run.devices) d->write_params(init);
        const std::vector<uint32_t> order = epoch_order(400, 3, 1);
        for (Device* d : run.devices) d->set_order(order.data(), order.size());
        for (int step = 0; step < steps; ++step) {
            train_step(run.devices, naive(), run.plan, size_t(step) * batch, even_parts(batch, int(run.devices.size())), lr, step);
            for (Device* d : run.devices) d->throttle(1);
        }
        const int32_t bad = run.devices[0]->take_first_bad_step();
        CHECK(run.devices[0]->take_first_bad_step() == -1);  // taking it resets the watch
        return bad;
    };
    CHECK(first_bad(0.1f, 10) == -1);
    // lr 1e9 throws the weights to ~1e9 after one step; the logits overflow and
    // the gradients turn to NaN within a few steps, never at step 0 (the initial
    // weights are finite).
    const int32_t bad = first_bad(1e9f, 10);
    CHECK(bad >= 1);
    CHECK(bad < 10);
    // The watch is per step: the same run stopped just before that step saw nothing.
    CHECK(first_bad(1e9f, bad) == -1);
}

TEST_CASE("--warmup raises the rate linearly over its steps, then holds it", "[parallel][schedule]") {
    TrainConfig c;
    c.lr = 0.6f;
    const size_t steps = 118;  // 60,000 samples at batch 512
    SECTION("no warm-up: every step at lr, the same bits") {
        for (int epoch : {1, 2})
            for (size_t step : {size_t(0), size_t(1), size_t(117)}) CHECK(lr_at(c, steps, epoch, step) == c.lr);
        CHECK(first_full_rate_epoch(c, steps) == 1);
    }
    SECTION("one epoch: lr * k / 118 at the run's k-th step") {
        c.warmup = 1;
        CHECK(lr_at(c, steps, 1, 0) == Approx(0.6 / 118).epsilon(1e-6));
        CHECK(lr_at(c, steps, 1, 58) == Approx(0.6 * 59 / 118).epsilon(1e-6));
        CHECK(lr_at(c, steps, 1, 117) == c.lr);  // the 118th step reaches it
        CHECK(lr_at(c, steps, 2, 0) == c.lr);
        CHECK(first_full_rate_epoch(c, steps) == 2);
    }
    SECTION("fractions of an epoch, and warm-ups that end inside an epoch") {
        c.warmup = 0.5;  // 59 steps
        CHECK(lr_at(c, steps, 1, 0) == Approx(0.6 / 59).epsilon(1e-6));
        CHECK(lr_at(c, steps, 1, 58) == c.lr);
        CHECK(first_full_rate_epoch(c, steps) == 2);  // epoch 1 still has warm-up steps
        c.warmup = 2.5;  // 295 steps: epochs 1, 2 and the start of 3
        CHECK(lr_at(c, steps, 3, 0) == Approx(0.6 * 237 / 295).epsilon(1e-6));
        CHECK(lr_at(c, steps, 3, 58) == c.lr);
        CHECK(first_full_rate_epoch(c, steps) == 4);
        c.warmup = 2;  // 236 steps: exactly two epochs
        CHECK(lr_at(c, steps, 2, 117) == c.lr);
        CHECK(first_full_rate_epoch(c, steps) == 3);
        c.warmup = 0.001;  // rounds to 0 steps: at least one, at the full rate
        CHECK(lr_at(c, steps, 1, 0) == c.lr);
        CHECK(first_full_rate_epoch(c, steps) == 1);
    }
}
