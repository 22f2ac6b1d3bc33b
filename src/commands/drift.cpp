// `dptrain drift`: why a run on N devices ends with another accuracy than
// the same run on 1. Both start from the same weights and see the same
// batches; N devices sum each batch's gradient in another order, so after
// one step the weights differ by float rounding (~1e-7), and SGD, being
// chaotic, amplifies that step after step. drift runs both side by side and
// prints how the difference grows, then the two test accuracies, and with
// --seeds K the accuracies of K other seeds on 1 device: the spread that the
// N-device result is to be judged against.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "parallel/allreduce.hpp"
#include "run/cli.hpp"
#include "model/dataset.hpp"
#include "base/json.hpp"
#include "devices/kinds.hpp"
#include "parallel/device_factory.hpp"
#include "parallel/device_options.hpp"
#include "model/lenet.hpp"
#include "base/files.hpp"
#include "base/options.hpp"
#include "commands/subcommands.hpp"
#include "run/trainer.hpp"

namespace dpt {
namespace {

struct DriftOptions {
    DeviceKind kind = DeviceKind::cpu;
    int devices = 2;  // N, compared with 1
    TrainConfig train;
    int seeds = 0;
    std::string out_dir;
};

// One step count's comparison of the N-device weights with the 1-device ones.
struct Sample {
    size_t step = 0;
    double max_rel = 0, mean_rel = 0;  // largest |diff| / largest |w|; mean |diff| / mean |w|
};

struct Drift {
    std::vector<Sample> samples;
    double acc_one = 0, acc_many = 0;
    std::vector<double> acc_seeds;  // 1 device, seeds seed+1 .. seed+K
};

std::string help() {
    return "Usage: dptrain drift [" + count_options("1,N") + "] [--epochs E] [--seeds K] [--out DIR] [training options]\n\n"
    "Trains the same model from the same seed on 1 device and on N devices, side by side, with the\n"
    "same global batch and data order, and prints after steps 0, 1, 2, 3, 5, 7, 10, 20, ... how far\n"
    "the N-device weights are from the 1-device ones: the largest difference relative to the\n"
    "largest weight, and the mean difference relative to the mean weight. Then what it measured\n"
    "(that distance, both test accuracies, the accuracies of other seeds on 1 device) and a\n"
    "verdict drawn from those figures alone.\n\n" +
    help_examples({{"dptrain drift", "1 CPU device against 2, one epoch, 2 other seeds"},
                   {"dptrain drift --cpus 1,2 --seeds 5 --out drift", "5 other seeds; drift/ to plot"}}) +
    "  " + count_options("1,N") + "   the two runs (default --cpus 1,2)\n"
    "  --epochs E                how long (default 1)\n"
    "  --seeds K                 also train K other seeds on 1 device: the spread of accuracies\n"
    "                            that the verdict judges N devices' result against (default 2;\n"
    "                            0: no spread, a faster run)\n"
    "  --out DIR                 also write DIR/drift.csv and DIR/drift.json (scripts/plot.py DIR\n"
    "                            draws the growth)\n"
    "  --batch, --lr, --seed, --init, --pool, --data, --limit-train, --limit-test as for training\n" +
    help_end("a run failed: a device's error, a loss that diverged, an output not written", false);
}

// What --out DIR holds (checked before the runs, prepare_out_dir).
constexpr const char* out_files[] = {"drift.csv", "drift.json"};

std::optional<DriftOptions> parse(int argc, const char* const* argv) {
    cxxopts::Options options("dptrain drift");
    add_count_options(options, "", "1,N");
    options.add_options()
        ("epochs", "", cxxopts::value<std::string>()->default_value("1"), "E")
        ("seeds", "", cxxopts::value<std::string>()->default_value("2"), "K")
        ("out", "", cxxopts::value<std::string>(), "DIR")
        ("batch", "", cxxopts::value<std::string>()->default_value("256"), "B")
        ("lr", "", cxxopts::value<std::string>()->default_value("0.3"), "LR")
        ("seed", "", cxxopts::value<std::string>()->default_value("0"), "S")
        ("init", "", cxxopts::value<std::string>()->default_value("xavier"), "I")
        ("pool", "", cxxopts::value<std::string>()->default_value("avg"), "P")
        ("data", "", cxxopts::value<std::string>(), "DIR")
        ("limit-train", "", cxxopts::value<std::string>(), "N")
        ("limit-test", "", cxxopts::value<std::string>(), "N")
        ("h,help", "");
    const std::optional<cxxopts::ParseResult> parsed = parse_options(options, argc, argv, "dptrain drift", help());
    if (!parsed) return std::nullopt;
    const cxxopts::ParseResult& r = *parsed;
    DriftOptions o;
    const KindGiven runs = one_kind_given(counts_in(r), "drift").value_or(KindGiven{DeviceKind::cpu, "cpus", "1,2"});
    const std::string &option = runs.option, &pair = runs.text;
    const size_t comma = pair.find(',');
    if (comma == std::string::npos || pair.substr(0, comma) != "1")
        throw InputError("--" + option + " for drift must be 1,N: the 1-device run and the N-device run (got '" +
                         pair + "')");
    o.devices = parse_device_count(option, pair.substr(comma + 1));
    if (o.devices < 2) throw InputError("--" + option + " 1,N needs N of at least 2 (got '" + pair + "')");
    o.kind = runs.kind;
    require_present(o.kind, "--" + option + " " + pair);
    TrainConfig& c = o.train;
    c.epochs = parse_number<int>("epochs", r["epochs"].as<std::string>(), 1, 1000, "a whole number from 1 to 1000");
    o.seeds = parse_number<int>("seeds", r["seeds"].as<std::string>(), 0, 100, "a whole number from 0 to 100");
    c.batch = parse_number<int>("batch", r["batch"].as<std::string>(), o.devices, 1 << 20,
                                ("a whole number from N = " + std::to_string(o.devices)).c_str());
    c.lr = parse_number<float>("lr", r["lr"].as<std::string>(), 1e-30f, 1e30f, "a positive number");
    c.seed = parse_number<uint64_t>("seed", r["seed"].as<std::string>(), 0, UINT64_MAX - 100, "a whole number from 0");
    c.init = parse_init(r["init"].as<std::string>());
    c.pool = parse_pool(r["pool"].as<std::string>());
    c.data_dir = given(r, "data");
    const auto limit = [&](const char* name) {
        return r.count(name) ? size_t(parse_number<int>(name, given(r, name), 1, 1 << 30, "a whole number of at least 1"))
                             : size_t(0);
    };
    c.limit_train = limit("limit-train");
    c.limit_test = limit("limit-test");
    o.out_dir = given(r, "out");
    if (!o.out_dir.empty()) prepare_out_dir(o.out_dir, out_files);
    return o;
}

// A run's devices, ready to train: n replicas of `kind` with `initial` weights.
struct Replicas {
    std::vector<std::unique_ptr<Device>> owned;
    std::vector<Device*> devices;
    int capacity = 0;
    BatchParts parts;  // even
    StepPlan plan = plan_step(lenet::model(), BatchNormMode::local);
    Replicas(DeviceKind kind, int n, const TrainConfig& c, const FashionMnist& data, const std::vector<float>& initial)
        : parts(SplitChoice{}, n, c.batch, data.train.count) {
        capacity = parts.largest();
        owned = make_devices(DeviceChoice::of(kind, n), {&data.train, &data.test, capacity, c.pool}, allreduce_named(c.allreduce));
        devices = pointers(owned);
        for (Device* d : devices) d->write_params(initial);
    }
};

// Steps 0, 1, 2, 3, 5, 7, 10, 20, 30, 50, 70, 100, ... and the last.
bool sampled(size_t step, size_t last) {
    if (step == 0 || step == last) return true;
    size_t decade = 1;
    while (decade * 10 <= step) decade *= 10;
    for (size_t m : {1, 2, 3, 5, 7})
        if (step == m * decade) return true;
    return false;
}

Sample compare_weights(size_t step, const std::vector<float>& one, const std::vector<float>& many) {
    double largest = 0, diff_max = 0, diff_sum = 0, w_sum = 0;
    for (size_t i = 0; i < one.size(); ++i) {
        const double d = std::abs(double(many[i]) - double(one[i]));
        largest = std::max(largest, std::abs(double(one[i])));
        diff_max = std::max(diff_max, d);
        diff_sum += d;
        w_sum += std::abs(double(one[i]));
    }
    return {step, largest > 0 ? diff_max / largest : diff_max, w_sum > 0 ? diff_sum / w_sum : diff_sum};
}

Drift run(const DriftOptions& o, const FashionMnist& data) {
    const TrainConfig& c = o.train;
    const size_t count = data.train.count, steps = (count + size_t(c.batch) - 1) / size_t(c.batch);
    const size_t total = steps * size_t(c.epochs);
    const std::vector<float> initial = init_params(c.init, c.seed);
    const Allreduce& allreduce = allreduce_named(c.allreduce);
    Replicas one(o.kind, 1, c, data, initial), many(o.kind, o.devices, c, data, initial);
    Drift drift;
    std::vector<float> w_one(initial.size()), w_many(initial.size());
    size_t done = 0;
    // The pair's steps, then each other seed's.
    TaskProgress progress("drift: steps", total * size_t(1 + o.seeds));
    for (int epoch = 1; epoch <= c.epochs; ++epoch) {
        const std::vector<uint32_t> order = epoch_order(count, c.seed, epoch);
        for (Device* d : one.devices) d->set_order(order.data(), order.size());
        for (Device* d : many.devices) d->set_order(order.data(), order.size());
        for (size_t step = 0; step < steps; ++step) {
            if (sampled(done, total)) {
                one.devices[0]->read_params(w_one);  // waits for the steps queued so far
                many.devices[0]->read_params(w_many);
                drift.samples.push_back(compare_weights(done, w_one, w_many));
            }
            // Both queued before either is waited for: on CPU devices they run side by side.
            queue_step(c, one.devices, allreduce, one.plan, one.parts, count, epoch, step, false);
            queue_step(c, many.devices, allreduce, many.plan, many.parts, count, epoch, step, false);
            for (Device* d : one.devices) d->throttle(2);
            for (Device* d : many.devices) d->throttle(2);
            progress.update(++done);
        }
        for (Device* d : one.devices) d->synchronize();  // `order` may go
        for (Device* d : many.devices) d->synchronize();
    }
    one.devices[0]->read_params(w_one);
    many.devices[0]->read_params(w_many);
    drift.samples.push_back(compare_weights(done, w_one, w_many));
    drift.acc_one = test_accuracy(*one.devices[0], data.test.count, one.capacity);
    drift.acc_many = test_accuracy(*many.devices[0], data.test.count, many.capacity);
    for (int k = 1; k <= o.seeds; ++k) {
        TrainConfig other = c;
        other.seed = c.seed + uint64_t(k);
        Replicas r(o.kind, 1, other, data, init_params(other.init, other.seed));
        for (int epoch = 1; epoch <= other.epochs; ++epoch) {
            const std::vector<uint32_t> order = epoch_order(count, other.seed, epoch);
            for (Device* d : r.devices) d->set_order(order.data(), order.size());
            for (size_t step = 0; step < steps; ++step) {
                queue_step(other, r.devices, allreduce, r.plan, r.parts, count, epoch, step, false);
                r.devices[0]->throttle(2);
                progress.update(++done);
            }
            r.devices[0]->synchronize();
        }
        drift.acc_seeds.push_back(test_accuracy(*r.devices[0], data.test.count, r.capacity));
        progress.clear();
        std::printf("  seed %llu on 1 device: test accuracy %.4f\n", (unsigned long long)other.seed,
                    drift.acc_seeds.back());
        std::fflush(stdout);
    }
    return drift;
}

// Below this mean relative distance the weights still differ by little more
// than float rounding (one step leaves ~1e-9); at and above the second, the
// two runs are different networks (two seeds' weights differ by ~1).
constexpr double close_distance = 1e-4, apart_distance = 0.05;

// The three figures drift measured, then what they say, and only that.
void print_verdict(const DriftOptions& o, const Drift& d) {
    const Sample& last = d.samples.back();
    const auto first_step = std::find_if(d.samples.begin(), d.samples.end(), [](const Sample& s) { return s.step > 0; });
    const double one_step = first_step != d.samples.end() ? first_step->mean_rel : 0.0;
    const double apart = std::abs(d.acc_many - d.acc_one);
    std::printf("\nmeasured:\n");
    std::printf("  distance after step %zu: largest |diff| / |w| %.3g, mean |diff| / mean |w| %.3g (after step 1: %.3g)\n",
                last.step, last.max_rel, last.mean_rel, one_step);
    std::printf("  test accuracy: 1 device %.4f, %d devices %.4f, %.4f apart\n", d.acc_one, o.devices, d.acc_many, apart);
    std::vector<double> seeds = d.acc_seeds;
    seeds.push_back(d.acc_one);
    const auto [lo, hi] = std::minmax_element(seeds.begin(), seeds.end());
    if (d.acc_seeds.empty())
        std::printf("  seed-to-seed spread: not measured (--seeds K trains K other seeds on 1 device)\n");
    else
        std::printf("  seed-to-seed spread: 1 device over %zu seeds, %.4f to %.4f (%.4f wide)\n", seeds.size(), *lo, *hi,
                    *hi - *lo);

    std::printf("\nverdict:\n");
    if (last.mean_rel < close_distance)
        std::printf("- the weights are still about as close as float rounding left them: %d devices follow 1 device's "
                    "run so far (a longer run, --epochs, lets the difference grow).\n", o.devices);
    else
        std::printf("- the difference grew from %.3g after one step to %.3g: SGD amplified the rounding of another "
                    "summation order%s.\n", one_step, last.mean_rel,
                    last.mean_rel >= apart_distance ? ", until the two runs are different networks" : "");
    if (!d.acc_seeds.empty()) {
        const double outside = d.acc_many < *lo ? *lo - d.acc_many : d.acc_many > *hi ? d.acc_many - *hi : 0.0;
        if (outside == 0.0)
            std::printf("- the %d-device accuracy lies inside the seeds' spread: it differs from 1 device's no more than "
                        "another seed's does.\n", o.devices);
        else
            std::printf("- the %d-device accuracy lies outside the seeds' spread by %.4f: from %zu seeds this cannot tell "
                        "a cost of %d devices from chance (more --seeds widen the spread, or show it).\n",
                        o.devices, outside, seeds.size(), o.devices);
    } else if (apart < 0.0005) {
        std::printf("- the accuracies agree to the 4th digit.\n");
    } else {
        std::printf("- the accuracies differ by %.4f; without other seeds drift cannot say whether that is more than "
                    "chance (--seeds K).\n", apart);
    }
    std::printf("(N devices add up each batch's gradient in another order, so the first step differs by float "
                "rounding; docs/lesson.md, \"Why 1 and N devices end apart\".)\n");
}

void write_results(const std::string& dir, const DriftOptions& o, const Drift& d) {
    std::string csv = "step,max_rel,mean_rel\n";
    char line[256];
    Json steps = Json::array(), max_rel = Json::array(), mean_rel = Json::array(), seeds = Json::array();
    for (const Sample& s : d.samples) {
        std::snprintf(line, sizeof line, "%zu,%.6g,%.6g\n", s.step, s.max_rel, s.mean_rel);
        csv += line;
        steps.push_back(s.step);
        max_rel.push_back(significant(s.max_rel));
        mean_rel.push_back(significant(s.mean_rel));
    }
    for (double a : d.acc_seeds) seeds.push_back(decimals(a, 4));
    const Json drift = {{"device_kind", to_string(o.kind)},
                        {"devices", {1, o.devices}},
                        {"batch", o.train.batch},
                        {"lr", significant(o.train.lr)},
                        {"seed", o.train.seed},
                        {"steps", steps},
                        {"max_rel", max_rel},
                        {"mean_rel", mean_rel},
                        {"test_acc", {{"one", decimals(d.acc_one, 4)},
                                      {"many", decimals(d.acc_many, 4)},
                                      {"other_seeds", seeds}}}};
    write_text_file(dir + "/drift.csv", csv, "--out");
    write_text_file(dir + "/drift.json", Json{{"drift", drift}}.dump(2) + "\n", "--out");
    std::printf("\nwrote %s/drift.csv and %s/drift.json\n", dir.c_str(), dir.c_str());
}

}  // namespace

int run_drift(int argc, const char* const* argv) {
    const std::optional<DriftOptions> parsed = parse(argc, argv);
    if (!parsed) return 0;
    const DriftOptions& o = *parsed;
    const TrainConfig& c = o.train;
    const std::string dir = find_data_dir(c.data_dir);
    const FashionMnist data = load_fashion_mnist(dir, c.limit_train, c.limit_test);
    if (size_t(c.batch) > data.train.count) throw InputError("--batch " + std::to_string(c.batch) + " is larger than the training set");
    const char* kind = kind_info(o.kind).one;
    std::printf("dptrain drift: 1 %s against %d, the same seed (%llu), batch %d, lr %g, %d epoch%s of %zu samples\n",
                kind, o.devices, (unsigned long long)c.seed, c.batch, double(c.lr), c.epochs,
                c.epochs == 1 ? "" : "s", data.train.count);
    std::printf("training both%s\n", o.seeds > 0 ? (", then " + std::to_string(o.seeds) + " other seed" +
                                                       (o.seeds == 1 ? "" : "s") + " on 1 device").c_str() : "");
    std::fflush(stdout);
    const Drift d = run(o, data);
    std::printf("\n%8s  %22s  %22s\n", "step", "largest |diff| / |w|", "mean |diff| / mean |w|");
    for (const Sample& s : d.samples) std::printf("%8zu  %22.3g  %22.3g\n", s.step, s.max_rel, s.mean_rel);
    print_verdict(o, d);
    if (!o.out_dir.empty()) write_results(o.out_dir, o, d);
    return 0;
}

}  // namespace dpt
