// ResNet-18 and batch norm across devices: the model as the tutorial
// defines it, and what --bn local and --bn sync promise over N devices.
// The training tests run a small ResNet with every path of ResNet-18's walk
// (small_resnet.hpp) on CPU devices; the whole ResNet-18 trains in
// tests/test_cli.sh.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <memory>

#include "parallel/parallel.hpp"
#include "replicas.hpp"
#include "model/resnet.hpp"
#include "small_resnet.hpp"
#include "run/trainer.hpp"

using namespace dpt;
using testing::Run;

namespace {

const Allreduce& naive() { return allreduce_named("naive"); }

// `steps` steps of `batch` on a fresh run of n devices from the same start
// (a Run stays where it was made: its devices point at its data).
std::unique_ptr<Run> trained(int n, int batch, int steps, BatchNormMode bn, const Allreduce& allreduce = naive(),
                             std::vector<Range> buckets = {}) {
    const Model& model = testing::small_resnet();
    auto run = std::make_unique<Run>(n, batch, 200, true, 0, &allreduce, buckets, model, bn);
    const auto init = init_params(InitKind::xavier, 3, model);
    for (Device* d : run->devices) d->write_params(init);
    static const std::vector<uint32_t> order = epoch_order(200, 3, 1);
    for (Device* d : run->devices) d->set_order(order.data(), order.size());
    for (int step = 0; step < steps; ++step)
        train_step(run->devices, allreduce, run->plan, size_t(step) * size_t(batch), even_parts(batch, n), 0.1f, step);
    return run;
}

double largest_difference(const std::vector<float>& a, const std::vector<float>& b, size_t first, size_t end) {
    double most = 0;
    for (size_t i = first; i < end; ++i) most = std::max(most, std::abs(double(a[i]) - double(b[i])));
    return most;
}

}  // namespace

TEST_CASE("ResNet-18 is the tutorial's resnet18_28: its tensors, parameters and arithmetic", "[resnet]") {
    const Model& m = resnet::model();
    CHECK(m.classes() == 10);
    CHECK(m.batch_norms() == 13);
    CHECK(m.tensor("bn1.gamma").shape == std::vector<int>{1});                // on the input image
    CHECK(m.tensor("conv1.weight").shape == std::vector<int>{64, 1, 3, 3});   // no padding: 28 -> 26
    CHECK(m.tensor("conv8.weight").shape == std::vector<int>{128, 64, 1, 1}); // residual 128/2's shortcut
    CHECK(m.tensor("conv13.weight").shape == std::vector<int>{256, 128, 1, 1});
    CHECK(m.tensor("conv15.weight").shape == std::vector<int>{256, 256, 3, 3});
    CHECK(m.tensor("dense1.weight").shape == std::vector<int>{10, 256});      // 3x3 avg pool -> 1x1
    // By hand: conv weights + biases, batch norm's gamma and beta, the dense layer.
    const auto conv = [](size_t out, size_t in, size_t k) { return out * in * k * k + out; };
    const size_t convs = conv(64, 1, 3) + 4 * conv(64, 64, 3) + conv(128, 64, 3) + 3 * conv(128, 128, 3) +
                         conv(128, 64, 1) + conv(256, 128, 3) + 3 * conv(256, 256, 3) + conv(256, 128, 1);
    const size_t channels = 1 + 4 * 64 + 4 * 128 + 4 * 256;  // of the 13 batch norms
    CHECK(m.trained_count() == convs + 2 * channels + 256 * 10 + 10);
    CHECK(m.trained_count() == 2777868);
    CHECK(m.param_count() == m.trained_count() + 2 * channels);  // running mean and variance
    CHECK(m.gradient_floats() == m.param_count() + 2 * channels);  // and the backward sums
    // Multiply-adds per sample: output pixels x output channels x taps.
    const auto macs = [](double side, double out, double taps) { return side * side * out * taps; };
    const double expected = macs(26, 64, 9) + 4 * macs(12, 64, 576) + macs(6, 128, 576) + 3 * macs(6, 128, 1152) +
                            macs(6, 128, 64) + macs(3, 256, 1152) + 3 * macs(3, 256, 2304) + macs(3, 256, 128) + 2560;
    CHECK(m.forward_flops() == 2 * expected);
    // The running statistics come after every trained tensor (SGD stops there).
    for (const ParamTensor& t : m.tensors()) CHECK((t.offset < m.trained_count()) == t.trained());
}

TEST_CASE("--bn sync: N devices follow one device's trajectory", "[resnet]") {
    // Summed per-channel statistics make N parts normalise as one batch, so
    // N devices differ from 1 by float summation order only. Without the
    // forward sums the parts' means differ by ~0.1 (measured), without the
    // backward sums the data gradients do: either is far above 1e-5.
    const int n = GENERATE(2, 3);
    const int batch = GENERATE(12, 13);
    CAPTURE(n, batch);
    const std::vector<float> expected = trained(1, batch, 5, BatchNormMode::sync)->params(0);
    const std::vector<float> got = trained(n, batch, 5, BatchNormMode::sync)->params(0);
    CHECK(got != trained(1, batch, 0, BatchNormMode::sync)->params(0));  // it trained
    CHECK(largest_difference(got, expected, 0, expected.size()) <= 1e-5);
}

TEST_CASE("--bn local: replicas stay identical, and N devices differ from one by more than rounding", "[resnet]") {
    const int n = GENERATE(2, 3);
    CAPTURE(n);
    const Model& model = testing::small_resnet();
    const std::unique_ptr<Run> many = trained(n, 13, 5, BatchNormMode::local);
    // A short batch with fewer samples than devices: an empty part.
    train_step(many->devices, naive(), many->plan, 190, even_parts(n - 1, n), 0.1f, 5);
    const std::vector<float> p0 = many->params(0);
    for (int i = 1; i < n; ++i) {
        CAPTURE(i);
        const std::vector<float> pi = many->params(i);
        CHECK(std::memcmp(p0.data(), pi.data(), p0.size() * sizeof(float)) == 0);  // running statistics too
    }
    // One step: each part normalised with its own statistics moves the
    // weights elsewhere than one device does with the whole batch's...
    const std::vector<float> a = trained(1, 13, 1, BatchNormMode::local)->params(0);
    const std::vector<float> b = trained(n, 13, 1, BatchNormMode::local)->params(0);
    CHECK(largest_difference(a, b, 0, model.trained_count()) > 1e-4);
    // ...but the running statistics are the whole batch's on every device:
    // bn1 normalises the raw images, the same on both sides, and its
    // running mean and variance come from the parts' summed sums.
    const ParamTensor& mean = model.tensor("bn1.running_mean");
    CHECK(largest_difference(a, b, mean.offset, mean.offset + 2) <= 1e-6);
    CHECK(std::abs(a[mean.offset]) > 1e-3);  // (it moved)
}

TEST_CASE("the running statistics follow gluon's rule over the whole batch", "[resnet]") {
    // After one step from mean 0, var 1 with momentum 0.9: 0.1 * the batch's
    // mean, 0.9 + 0.1 * its biased variance, here of bn1's input (the pixels).
    const int batch = 13;
    const std::unique_ptr<Run> run = trained(2, batch, 1, BatchNormMode::local);
    const std::vector<uint32_t> order = epoch_order(200, 3, 1);
    double sum = 0, squares = 0;
    for (int s = 0; s < batch; ++s)
        for (size_t p = 0; p < 784; ++p) {
            const double v = run->train.images[size_t(order[size_t(s)]) * 784 + p] / 255.0;
            sum += v;
            squares += v * v;
        }
    const double count = batch * 784.0, mean = sum / count, var = squares / count - mean * mean;
    const std::vector<float> p = run->params(1);
    const ParamTensor& running = testing::small_resnet().tensor("bn1.running_mean");
    CHECK(p[running.offset] == Approx(0.1 * mean).epsilon(1e-5));
    CHECK(p[running.offset + 1] == Approx(0.9 + 0.1 * var).epsilon(1e-5));
}

TEST_CASE("--overlap with batch norm: the same parameters bit for bit", "[resnet]") {
    // --bn local: the statistics (final after forward) go in the first
    // bucket. --bn sync: the sums between stages go on the allreduce
    // streams too, which wait for each stage (Device::await_main).
    const BatchNormMode bn = GENERATE(BatchNormMode::local, BatchNormMode::sync);
    const std::string name = GENERATE(from_range(allreduce_names_for(DeviceChoice::of(DeviceKind::cpu, 2))));
    CAPTURE(int(bn), name);
    const Allreduce& allreduce = allreduce_named(name);
    const std::vector<Range> buckets = overlap_buckets(testing::small_resnet(), 0, bn);
    const Model& model = testing::small_resnet();
    // The buckets tile what the allreduce sums, from the end.
    CHECK(buckets.front().end() == model.allreduced_floats(bn));
    CHECK(buckets.back().first == 0);
    for (size_t i = 1; i < buckets.size(); ++i) CHECK(buckets[i].end() == buckets[i - 1].first);
    if (bn == BatchNormMode::local) CHECK(buckets.front().first == model.trained_count());
    const std::vector<float> a = trained(3, 13, 4, bn, allreduce)->params(2);
    const std::vector<float> b = trained(3, 13, 4, bn, allreduce, buckets)->params(2);
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}
