// `dptrain inspect`: one training step on a small batch, stopped at every
// stage to look at what each replica holds. The tutorial prints these tensors
// and leaves the reader to compare them; here every claim is checked in code
// (bit for bit where the algorithm promises identity) and the run fails when
// one does not hold.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "parallel/allreduce.hpp"
#include "run/cli.hpp"
#include "model/dataset.hpp"
#include "devices/kinds.hpp"
#include "parallel/device_factory.hpp"
#include "parallel/device_options.hpp"
#include "model/models.hpp"
#include "base/options.hpp"
#include "parallel/parallel.hpp"
#include "run/trainer.hpp"  // init_params
#include "commands/subcommands.hpp"

namespace dpt {
namespace {

// What inspect shows of each replica: channel 0 of conv1's weights (or of
// their gradient), kernel rows of kernel columns: 3x3 in both models.
const ParamTensor& shown(const Model& model) { return model.tensor("conv1.weight"); }
constexpr float perturbation = 0.01f;

class Checks {
   public:
    // Prints the claim and whether it held; `detail` says by how much.
    void claim(bool held, const std::string& what, const std::string& detail = "") {
        ++count_;
        if (!held) ++failed_;
        std::printf("   %s %s%s%s\n", held ? "check ok:" : "check FAILED:", what.c_str(), detail.empty() ? "" : " ",
                    detail.c_str());
    }
    int failed() const { return failed_; }
    int count() const { return count_; }

   private:
    int count_ = 0, failed_ = 0;
};

std::string fmt(const char* format, double value) {
    char buf[64];
    std::snprintf(buf, sizeof buf, format, value);
    return buf;
}

void print_row(const char* lead, const float* values, size_t count) {
    std::printf("%s[", lead);
    for (size_t i = 0; i < count; ++i) std::printf("%s%+.4f", i ? " " : "", double(values[i]));
    std::printf("]\n");
}

// Channel 0 of conv1's weights (or their gradient) in a flat parameter buffer, as 3 rows.
void print_channel(const Model& model, const std::string& device, const std::vector<float>& flat) {
    const ParamTensor& t = shown(model);
    const int rows = t.shape[2], cols = t.shape[3];
    for (int r = 0; r < rows; ++r) {
        const std::string lead = "   " + (r == 0 ? device : std::string(device.size(), ' ')) + "  ";
        print_row(lead.c_str(), flat.data() + t.offset + size_t(r * cols), size_t(cols));
    }
}

// The first `count` floats (all: SIZE_MAX) of a and b are the same bits.
bool identical(const std::vector<float>& a, const std::vector<float>& b, size_t count = SIZE_MAX) {
    count = std::min(count, a.size());
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), count * sizeof(float)) == 0;
}

bool all_identical(const std::vector<std::vector<float>>& buffers, size_t count = SIZE_MAX) {
    return std::all_of(buffers.begin(), buffers.end(), [&](const auto& b) { return identical(b, buffers[0], count); });
}

enum class Buffer { params, grads };

// Every device's parameters or gradients, with channel 0 of conv1 shown for each.
std::vector<std::vector<float>> read_and_show(const Model& model, std::span<Device* const> devices, Buffer which) {
    const size_t floats = which == Buffer::params ? model.param_count() : model.gradient_floats();
    std::vector<std::vector<float>> buffers(devices.size(), std::vector<float>(floats));
    for (size_t i = 0; i < devices.size(); ++i) {
        if (which == Buffer::params) devices[i]->read_params(buffers[i]);
        else devices[i]->read_grads(buffers[i]);
        print_channel(model, devices[i]->name(), buffers[i]);
    }
    return buffers;
}

// The largest |a - b| over the first `count` floats, relative to the largest |b|.
double relative_difference(const std::vector<float>& a, const std::vector<float>& b, size_t count) {
    double diff = 0, scale = 0;
    for (size_t i = 0; i < count; ++i) {
        diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
        scale = std::max(scale, std::abs(double(b[i])));
    }
    return scale > 0 ? diff / scale : diff;
}

struct InspectOptions {
    DeviceChoice devices;
    int batch = 0;
    float lr = 0.3f;
    uint64_t seed = 0;
    InitKind init = InitKind::xavier;
    PoolKind pool = PoolKind::avg;
    ModelKind model = ModelKind::lenet;
    BatchNormMode bn = BatchNormMode::local;
    std::string data_dir;
    std::string allreduce = "naive";
    int perturb = -1;  // the device whose replica is nudged, or -1
};

std::optional<InspectOptions> parse(int argc, const char* const* argv) {
    cxxopts::Options options("dptrain inspect");
    add_count_options(options, "", "N", "");  // default: 2 CPU devices
    options.add_options()
        ("batch", "the batch: the first B training samples (default 2 per device)", cxxopts::value<std::string>(), "B")
        ("lr", "learning rate of the one SGD step", cxxopts::value<std::string>()->default_value("0.3"), "LR")
        ("seed", "seed of the initial weights", cxxopts::value<std::string>()->default_value("0"), "S")
        ("init", "xavier or normal, as for training", cxxopts::value<std::string>()->default_value("xavier"), "xavier|normal")
        ("pool", "avg or max, as for training", cxxopts::value<std::string>()->default_value("avg"), "avg|max")
        ("model", "the network: " + model_names(), cxxopts::value<std::string>()->default_value("lenet"), "NAME")
        ("bn", "resnet18's batch norm on N devices: local (each device's own part; the checks then show how N devices differ from 1) or sync (the whole batch's)", cxxopts::value<std::string>()->default_value("local"), "local|sync")
        ("data", "directory of the Fashion-MNIST files", cxxopts::value<std::string>(), "DIR")
        ("allreduce", "the allreduce algorithm: " + allreduce_names(), cxxopts::value<std::string>()->default_value("naive"), "NAME")
        ("perturb", "nudge one weight of device D's replica by 0.01 after the replicas are made equal, to see the "
                    "checks catch replicas that have drifted apart", cxxopts::value<std::string>(), "D")
        ("h,help", "show this help");
    const std::string help = "Usage: dptrain inspect [" + count_options("N") + "] [--batch B] [options]\n\n"
        "One data-parallel training step on the first few training samples, stopped at every\n"
        "stage: what each device holds, with each of the algorithm's promises checked.\n\n" +
        help_examples({{"dptrain inspect --cpus 2", "one step on 2 CPU devices, every check"},
                       {"dptrain inspect --cpus 2 --perturb 1", "a replica nudged: the checks that catch it"},
                       {"dptrain inspect --model resnet18", "ResNet-18's step, batch norm included"}}) +
        help_options(options, {""}) + help_end("a check failed", false);
    const std::optional<cxxopts::ParseResult> parsed = parse_options(options, argc, argv, "dptrain inspect", help);
    if (!parsed) return std::nullopt;
    const cxxopts::ParseResult& r = *parsed;
    InspectOptions o;
    o.devices = choose_devices(counts_in(r), DeviceChoice::of(DeviceKind::cpu, 2));
    o.allreduce = std::string(allreduce_named(r["allreduce"].as<std::string>()).info().name);
    const int n = o.devices.count();
    o.batch = r.count("batch") ? parse_number<int>("batch", given(r, "batch"), 1, 4096, "a whole number from 1 to 4096")
                               : 2 * n;
    if (o.batch < n)
        throw InputError("--batch " + std::to_string(o.batch) + " is smaller than the " + std::to_string(n) +
                         " devices: every device needs a sample to show");
    o.lr = parse_number<float>("lr", r["lr"].as<std::string>(), 1e-30f, 1e30f, "a positive number");
    o.seed = parse_number<uint64_t>("seed", r["seed"].as<std::string>(), 0, UINT64_MAX, "a whole number from 0");
    o.init = parse_init(r["init"].as<std::string>());
    o.pool = parse_pool(r["pool"].as<std::string>());
    o.model = parse_model(r["model"].as<std::string>());
    o.bn = parse_batch_norm(r["bn"].as<std::string>());
    o.data_dir = given(r, "data");
    if (r.count("perturb"))
        o.perturb = parse_number<int>("perturb", given(r, "perturb"), 0, n - 1,
                                      ("a device index from 0 to " + std::to_string(n - 1)).c_str());
    return o;
}

}  // namespace

int run_inspect(int argc, const char* const* argv) {
    const std::optional<InspectOptions> parsed = parse(argc, argv);
    if (!parsed) return 0;
    const InspectOptions& o = *parsed;
    const int n = o.devices.count(), batch = o.batch;
    const std::string dir = find_data_dir(o.data_dir);
    const FashionMnist data = load_fashion_mnist(dir, size_t(batch), 1);
    if (data.train.count < size_t(batch))
        throw InputError("--batch " + std::to_string(batch) + " is larger than the training set");

    const Model& model = model_of(o.model);
    const int classes = model.classes();
    // With batch norm over parts (--bn local), N devices compute another
    // function than 1 device: the checks of steps 2 and 4 turn around.
    const bool parts_differ = n > 1 && model.batch_norms() > 0 && o.bn == BatchNormMode::local;
    const std::vector<float> initial = init_params(o.init, o.seed, model);
    const Allreduce& allreduce = allreduce_named(o.allreduce);
    const ReplicaSetup setup{&data.train, &data.test, (batch + n - 1) / n, o.pool, 0, {}, &model, o.bn};
    const StepPlan plan = plan_step(model, o.bn);
    const std::vector<std::unique_ptr<Device>> owned = make_devices(o.devices, setup, allreduce);
    const std::vector<Device*> devices = pointers(owned);
    std::vector<uint32_t> order(static_cast<size_t>(batch));
    std::iota(order.begin(), order.end(), 0u);  // the batch is the first B samples, in order

    // The reference: one device of the same kind computing the whole batch.
    const std::vector<std::unique_ptr<Device>> single =
        make_devices(DeviceChoice::of(o.devices.kind(), 1), {&data.train, &data.test, batch, o.pool, 0, {}, &model, o.bn},
                     allreduce);
    Device& one = *single[0];

    const char* kind = kind_info(o.devices.kind()).one;
    std::printf("dptrain inspect: %s on %d %s%s%s; the batch is the first %d training samples; %s init, seed %llu\n",
                model.name().c_str(), n, kind, n == 1 ? "" : "s",
                model.batch_norms() > 0 ? (o.bn == BatchNormMode::sync ? " (--bn sync)" : " (--bn local)") : "", batch,
                o.init == InitKind::xavier ? "xavier" : "normal", (unsigned long long)o.seed);
    Checks checks;

    // 0. Every replica starts from the same parameters (the tutorial's get_params).
    for (Device* d : devices) d->write_params(initial);
    one.write_params(initial);
    if (o.perturb >= 0) {
        std::vector<float> nudged = initial;
        nudged[shown(model).offset] += perturbation;
        devices[size_t(o.perturb)]->write_params(nudged);
        std::printf("(--perturb %d: conv1.weight[0] of %s's replica nudged by %g)\n", o.perturb,
                    devices[size_t(o.perturb)]->name().c_str(), double(perturbation));
    }

    // 1. split_and_load.
    std::printf("\n1. split_and_load: the batch of %d is cut into %d contiguous parts, one per device\n", batch, n);
    for (Device* d : devices) d->set_order(order.data(), order.size());
    one.set_order(order.data(), order.size());
    split_and_load(devices, 0, even_parts(batch, n));
    one.load_train(0, batch);
    const size_t pixels = data.train.pixels();
    std::vector<float> images(size_t(setup.capacity) * pixels);
    std::vector<int32_t> labels(size_t(setup.capacity));
    bool parts_right = true;
    for (int i = 0; i < n; ++i) {
        const Part part = part_of(batch, n, i);
        const int got = devices[size_t(i)]->read_input(images, labels);
        std::printf("   %s  samples %d..%d, labels [", devices[size_t(i)]->name().c_str(), part.first,
                    part.first + part.count - 1);
        for (int s = 0; s < got; ++s) std::printf("%s%d", s ? " " : "", labels[size_t(s)]);
        std::printf("]\n");
        parts_right = parts_right && got == part.count;
        for (int s = 0; s < got && parts_right; ++s) {
            const size_t sample = size_t(part.first + s);
            parts_right = labels[size_t(s)] == data.train.labels[sample];
            for (size_t k = 0; k < pixels && parts_right; ++k)
                parts_right = std::lround(images[size_t(s) * pixels + k] * 255.0f) == data.train.images[sample * pixels + k];
        }
    }
    checks.claim(parts_right, "each device holds exactly its part of the batch, pixels and labels",
                 "(nothing else: a device never sees the other parts)");

    // 2. Forward and backward on each part.
    compute_gradients(devices, allreduce, plan, batch);
    Device* const alone[] = {&one};
    compute_gradients(alone, allreduce, plan, batch);
    std::printf("\n2. the untrained network's outputs (10 logits a sample), each device on its own part\n");
    std::vector<float> logits(size_t(setup.capacity) * classes), whole(size_t(batch) * classes);
    one.read_outputs(whole);
    double logit_diff = 0, logit_scale = 0;
    for (int i = 0; i < n; ++i) {
        const Part part = part_of(batch, n, i);
        const int got = devices[size_t(i)]->read_outputs(logits);
        for (int s = 0; s < got; ++s) {
            const std::string lead = "   " + (s == 0 ? devices[size_t(i)]->name() : std::string(devices[size_t(i)]->name().size(), ' ')) +
                                     "  sample " + std::to_string(part.first + s) + "  ";
            print_row(lead.c_str(), logits.data() + size_t(s) * classes, size_t(classes));
            for (int k = 0; k < classes; ++k) {
                const double mine = logits[size_t(s) * classes + size_t(k)];
                const double ref = whole[size_t(part.first + s) * classes + size_t(k)];
                logit_diff = std::max(logit_diff, std::abs(mine - ref));
                logit_scale = std::max(logit_scale, std::abs(ref));
            }
        }
    }
    // Each sample's forward is computed alone, but kernels may sum in another
    // order for other batch sizes: a tolerance of float rounding, not bit identity.
    if (parts_differ)
        checks.claim(logit_diff > 1e-3 * std::max(logit_scale, 1.0),
                     "each part's outputs differ from one device's for the whole batch by more than rounding",
                     "(largest difference " + fmt("%.2g", logit_diff) +
                         ": with --bn local each device normalises over its own part; --bn sync would match)");
    else
        checks.claim(logit_diff <= 1e-5 * std::max(logit_scale, 1.0),
                     "each part's outputs are the rows of one device's outputs for the whole batch",
                     "(largest difference " + fmt("%.2g", logit_diff) + ")");

    // 3. The parameters: the same on every device.
    std::printf("\n3. channel 0 of conv1's weights (3x3) on each device\n");
    checks.claim(all_identical(read_and_show(model, devices, Buffer::params)), "all " + std::to_string(model.param_count()) + " parameters are identical on every device, bit for bit",
                 "(each replica was given the same initial copy)");

    // 4. The gradients: each device's own.
    std::printf("\n4. the gradient of those weights after forward+backward, each device on its own part\n");
    const std::vector<std::vector<float>> grads = read_and_show(model, devices, Buffer::grads);
    const size_t trained = model.trained_count();  // (the statistics' slots: with --bn sync, the batch's already)
    std::vector<float> sum(model.gradient_floats(), 0.0f), whole_grads(model.gradient_floats());
    for (const std::vector<float>& g : grads)  // in the order device 0 adds them: its own, then 1's, 2's, ...
        for (size_t k = 0; k < sum.size(); ++k) sum[k] += g[k];
    one.read_grads(whole_grads);
    if (n > 1) {
        bool all_differ = true;
        for (int i = 1; i < n; ++i) all_differ = all_differ && !identical(grads[size_t(i)], grads[0]);
        checks.claim(all_differ, "the gradients differ from device to device", "(each saw other samples)");
    }
    const double grad_diff = relative_difference(sum, whole_grads, trained);
    if (parts_differ)
        checks.claim(grad_diff > 1e-3, "their sum differs from the gradient of the whole batch on one device",
                     "(largest difference " + fmt("%.2g", grad_diff) +
                         " of the largest gradient: each part's loss depends on its own batch statistics)");
    else
        checks.claim(grad_diff <= 1e-4, "their sum is the gradient of the whole batch on one device",
                     "(largest difference " + fmt("%.2g", grad_diff) +
                         " of the largest gradient: the loss is a sum over samples, so its gradient is too)");

    // 5. The allreduce.
    std::printf("\n5. the same gradients after the allreduce (%s: %s)\n", o.allreduce.c_str(),
                std::string(allreduce.info().summary).c_str());
    allreduce.run(devices, plan.floats, false);
    const std::vector<std::vector<float>> reduced = read_and_show(model, devices, Buffer::grads);
    // (Past the allreduced floats: each device's own backward sums, of batch norm.)
    checks.claim(all_identical(reduced, plan.floats), "the gradients are identical on every device, bit for bit", "(the algorithm handed every device the same sum)");
    const double sum_diff = relative_difference(reduced[0], sum, trained);
    checks.claim(sum_diff <= 1e-6, "and equal to the sum of the gradients of step 4",
                 "(largest difference " + fmt("%.2g", sum_diff) + " of the largest)");

    // 6. The update.
    const float scale = o.lr / float(batch);
    std::printf("\n6. channel 0 of conv1's weights after the SGD update (w -= %g / %d * summed gradient)\n",
                double(o.lr), batch);
    for (Device* d : devices) d->sgd_update(scale, batch);
    const std::vector<std::vector<float>> params = read_and_show(model, devices, Buffer::params);
    checks.claim(all_identical(params), "the replicas are still identical, bit for bit",
                 "(the same update from the same gradients on the same parameters)");
    double step_error = 0, step_scale = 0;
    for (size_t k = 0; k < trained; ++k) {  // (batch norm's running statistics move by their own rule)
        const double expected = double(initial[k]) - double(scale) * double(reduced[0][k]);
        step_error = std::max(step_error, std::abs(double(params[0][k]) - expected));
        step_scale = std::max(step_scale, std::abs(double(scale) * double(reduced[0][k])));
    }
    checks.claim(step_error <= 1e-6 * std::max(step_scale, 1.0) + 1e-7,
                 "each weight moved by -lr / B times its summed gradient",
                 "(largest error " + fmt("%.2g", step_error) + ")");

    if (checks.failed() == 0)
        std::printf("\ninspect: all %d checks held\n", checks.count());
    else
        std::printf("\ninspect: FAILED, %d of %d checks held%s\n", checks.count() - checks.failed(), checks.count(),
                    o.perturb >= 0 ? " (--perturb: this is what a replica that drifted from the others looks like)" : "");
    return checks.failed() ? 1 : 0;
}

}  // namespace dpt
