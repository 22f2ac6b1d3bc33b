// `dptrain simulate`: the alpha-beta model (simulate.hpp) and the command
// that measures its inputs on this machine (or takes them as given), prints
// the prediction for 1..N devices with the formulas it used, and writes it
// as CSV for bench/simulate_check.sh, which compares it with real runs.
#include "commands/simulate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <optional>

#include "parallel/allreduce.hpp"
#include "model/dataset.hpp"
#include "parallel/device_factory.hpp"
#include "parallel/device_options.hpp"
#include "devices/kinds.hpp"
#include "model/models.hpp"
#include "base/files.hpp"
#include "base/json.hpp"
#include "base/options.hpp"
#include "parallel/parallel.hpp"
#include "run/report.hpp"
#include "run/settings.hpp"
#include "commands/subcommands.hpp"
#include "run/trainer.hpp"

namespace dpt {

// PCIe 4.0 x16 carries 32 GB/s each way; peer copies between GPUs reach
// about 80% of it. NVLink 4 (H100 SXM) carries 450 GB/s each way; the same
// 80%. A cudaMemcpyPeerAsync costs some microseconds whatever its size.
// On a real machine, `dptrain devices` measures the copy speed: give it
// with --link custom.
Link link_preset(const std::string& name) {
    if (name == "pcie") return {"pcie", 25.0, 10.0};
    if (name == "nvlink") return {"nvlink", 360.0, 5.0};
    throw InputError("--link must be pcie, nvlink, custom (with --bandwidth and --latency) or measured (got '" + name +
                     "')");
}

double modeled_allreduce_s(std::string_view algorithm, int n, double bytes, int messages, const Link& link) {
    const CostModel* model = allreduce_named(algorithm).cost_model();
    if (!model) throw InputError("--allreduce " + std::string(algorithm) + " has no cost model to simulate");
    return model->seconds(n, bytes, messages, link.latency_us * 1e-6, link.bandwidth_gbps * 1e9);
}

std::vector<std::string> simulated_allreduces() {
    std::vector<std::string> names;
    for (const Allreduce* a : all_allreduces())
        if (a->cost_model()) names.emplace_back(a->info().name);
    return names;
}

std::vector<SimulatedRun> simulate(const SimulationInput& in) {
    const double steps = std::ceil(double(in.samples) / double(in.batch));
    const auto compute = [&](int n) {
        const double stretch = in.cores > 0 ? std::max(1.0, double(n) / double(in.cores)) : 1.0;
        return in.compute_s[size_t(n - 1)] * stretch;
    };
    std::vector<SimulatedRun> runs;
    SimulatedRun one{1, "-", false, compute(1)};
    one.step_s = one.compute_s + in.update_s;
    one.epoch_s = steps * one.step_s;
    runs.push_back(one);
    for (int n = 2; n <= in.max_devices; ++n)
        for (const std::string& algorithm : simulated_allreduces())
            for (const bool overlap : {false, true}) {
                SimulatedRun r{n, algorithm, overlap, compute(n)};
                r.allreduce_s = modeled_allreduce_s(algorithm, n, in.gradient_bytes, overlap ? in.buckets : 1, in.link);
                const int part = (in.batch + n - 1) / n;
                const int pass = in.pass_samples > 0 ? std::min(in.pass_samples, part) : part;
                const double window = backward_share * r.compute_s * pass / part;
                r.exposed_s = overlap ? std::max(0.0, r.allreduce_s - window) : r.allreduce_s;
                r.step_s = r.compute_s + in.update_s + r.exposed_s;
                r.epoch_s = steps * r.step_s;
                r.speedup = one.epoch_s / r.epoch_s;
                r.efficiency = r.speedup / n;
                runs.push_back(r);
            }
    return runs;
}

namespace {

struct SimulateOptions {
    DeviceKind kind = DeviceKind::gpu;  // without --gpus or --cpus: GPUs where one is usable, else CPU devices
    int max_devices = 8;                // without a count: 8 GPUs, or a CPU device per usable core (2 to 8)
    std::string link = "";  // "": pcie for a kind of hardware (GPUs), measured for devices made on demand (CPU devices)
    double bandwidth_gbps = 0, latency_us = 0;
    int batch = 256;
    size_t samples = 60000;
    double sample_us = 0;  // 0: measure
    int cores = -1;        // -1: this machine's for devices made on demand (CPU devices), none for GPUs
    int bucket_kb = default_bucket_kb;
    ModelKind model = ModelKind::lenet;
    std::string out_dir;
    std::string why_cpu;  // without --gpus or --cpus and no GPU here: why not
};

std::string simulated_names() {
    std::string names;
    for (const std::string& name : simulated_allreduces()) names += (names.empty() ? "" : ", ") + name;
    return names;
}

std::string help() {
    return "Usage: dptrain simulate [" + count_options("N") + "] [--link pcie|nvlink|custom|measured] [--bandwidth GB/s]\n"
    "                        [--latency US] [--batch B] [--samples S] [--sample-us US] [--cores K]\n"
    "                        [--bucket-kb KB] [--model NAME] [--out DIR]\n\n"
    "Predicts the epoch time, speed-up and efficiency of 1..N devices (default: 8 GPUs, or on a\n"
    "machine without a usable GPU a CPU device per usable core, 2 to 8) with\n"
    "each allreduce (" + simulated_names() + "), without and with --overlap, from an alpha-beta model of the\n"
    "link (a transfer costs the latency plus its bytes over the bandwidth) and the compute time\n"
    "of one device for each part size: measured here by a few steps on one device of the kind\n"
    "(a CPU device when no GPU is usable), or --sample-us per sample. Prints the formulas it used.\n\n" +
    help_examples({{"dptrain simulate", "1 to 8 GPUs over PCIe, or without GPUs the CPU devices here"},
                   {"dptrain simulate --gpus 4 --link nvlink", "1 to 4 GPUs over NVLink"},
                   {"dptrain simulate --cpus 2", "1 and 2 CPU devices, the link measured here"}}) +
    "  --link NAME       pcie (25 GB/s, 10 us), nvlink (360 GB/s, 5 us), custom (give --bandwidth\n"
    "                    and --latency) or measured (fitted to allreduces timed here on 2 devices);\n"
    "                    default pcie for GPUs, measured for CPU devices\n"
    "  --batch B         global batch (default 256); --samples S an epoch's samples (default 60000)\n"
    "  --sample-us US    compute time of one sample (load, forward, backward) instead of measuring\n"
    "  --cores K         the devices share K processors (default: this machine's cores for CPU\n"
    "                    devices, none for GPUs; 1 for replicas sharing one GPU); 0: no limit\n"
    "  --bucket-kb KB    --overlap's buckets (default " + std::to_string(default_bucket_kb) + ")\n"
    "  --model NAME      lenet (default) or resnet18: its gradients and its compute\n"
    "  --out DIR         also write DIR/simulate.csv and DIR/simulate.json (scripts/plot.py DIR\n"
    "                    draws them, with compare --global-batch --out DIR's measurements)\n" +
    help_end("the measurement failed, or the output was not written", false);
}

// What --out DIR holds (checked before the runs, prepare_out_dir).
constexpr const char* out_files[] = {"simulate.csv", "simulate.json"};

std::optional<SimulateOptions> parse(int argc, const char* const* argv) {
    cxxopts::Options options("dptrain simulate");
    add_count_options(options, "", "N");
    options.add_options()
        ("link", "", cxxopts::value<std::string>(), "NAME")
        ("bandwidth", "", cxxopts::value<std::string>(), "GB/s")
        ("latency", "", cxxopts::value<std::string>(), "US")
        ("batch", "", cxxopts::value<std::string>(), "B")
        ("samples", "", cxxopts::value<std::string>(), "S")
        ("sample-us", "", cxxopts::value<std::string>(), "US")
        ("cores", "", cxxopts::value<std::string>(), "K")
        ("bucket-kb", "", cxxopts::value<std::string>(), "KB")
        ("out", "", cxxopts::value<std::string>(), "DIR")
        ("model", "", cxxopts::value<std::string>(), "NAME")
        ("h,help", "");
    const std::optional<cxxopts::ParseResult> parsed = parse_options(options, argc, argv, "dptrain simulate", help());
    if (!parsed) return std::nullopt;
    const cxxopts::ParseResult& r = *parsed;
    SimulateOptions o;
    if (const std::optional<KindGiven> counted = one_kind_given(counts_in(r), "simulate")) {
        o.kind = counted->kind;
        o.max_devices = parse_device_count(counted->option, counted->text);
    } else if (const Presence gpus = kind_info(DeviceKind::gpu).probe(); gpus.count == 0) {
        // No GPU here: the devices this machine has, one per core it lets
        // this process use (at least 2, to have a speed-up; at most 8).
        o.kind = DeviceKind::cpu;
        o.max_devices = std::clamp(usable_cores(), 2, 8);
        o.why_cpu = gpus.why_none;
    }
    // Devices the host makes (CPU devices) link through its memory: measured; hardware (GPUs): a preset.
    o.link = r.count("link") ? given(r, "link") : kind_info(o.kind).probe().unlimited() ? "measured" : "pcie";
    const bool custom = o.link == "custom";
    if (!custom && o.link != "measured") link_preset(o.link);  // checks the name
    if (custom != (r.count("bandwidth") > 0) || custom != (r.count("latency") > 0))
        throw InputError(custom ? "--link custom needs --bandwidth GB/s and --latency US"
                                : "--bandwidth and --latency go with --link custom");
    if (custom) {
        o.bandwidth_gbps = parse_number<double>("bandwidth", given(r, "bandwidth"), 1e-3, 1e6, "a number of GB/s above 0");
        o.latency_us = parse_number<double>("latency", given(r, "latency"), 0.0, 1e6, "a number of microseconds from 0");
    }
    if (r.count("model")) o.model = parse_model(given(r, "model"));
    if (r.count("batch")) o.batch = parse_number<int>("batch", given(r, "batch"), 1, 1 << 20, "a whole number of at least 1");
    if (o.batch < o.max_devices)
        throw InputError("--batch " + std::to_string(o.batch) + " is smaller than the " + std::to_string(o.max_devices) +
                         " devices: every device needs at least one sample");
    if (r.count("samples"))
        o.samples = parse_number<size_t>("samples", given(r, "samples"), 1, size_t(1) << 40, "a whole number of at least 1");
    if (r.count("sample-us"))
        o.sample_us = parse_number<double>("sample-us", given(r, "sample-us"), 1e-6, 1e9, "a number of microseconds above 0");
    if (r.count("cores")) o.cores = parse_number<int>("cores", given(r, "cores"), 0, 1 << 20, "a whole number from 0");
    if (r.count("bucket-kb"))
        o.bucket_kb = parse_number<int>("bucket-kb", given(r, "bucket-kb"), 0, 1 << 20, "a whole number of KB from 0");
    o.out_dir = given(r, "out");
    if (!o.out_dir.empty()) prepare_out_dir(o.out_dir, out_files);
    return o;
}

// Seconds of `work` (queued on `device`) timed 5 times after a warm-up:
// the median, and the fastest and slowest.
struct Timing {
    double median = 0, fastest = 0, slowest = 0;
};

template <class F>
Timing time_on(Device& device, F&& work) {
    std::vector<double> timings;
    for (int k = 0; k < 6; ++k) {
        const auto start = std::chrono::steady_clock::now();
        work();
        device.synchronize();
        if (k > 0) timings.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    const auto [fastest, slowest] = std::minmax_element(timings.begin(), timings.end());
    return {median(timings), *fastest, *slowest};
}

// ±half the range of a size's timings, relative to their median.
double spread(const Timing& t) { return t.median > 0 ? 0.5 * (t.slowest - t.fastest) / t.median : 0.0; }

// Timings of an idle machine stay within this of their median.
constexpr double max_quiet_spread = 0.15;

// What the measurement saw besides the times.
struct Measured {
    std::vector<Timing> compute;  // per n = 1..max: load + forward + backward of ceil(batch / n)
    double core_share = -1;       // CPU devices: the share of a core the forward+backward got (-1: not known)
};

// One device of `kind`: load + forward + backward of each part size
// ceil(batch / n), n = 1..max, and one update; `progress` counts the timings.
Measured measure_compute(DeviceKind kind, const Model& model, SimulationInput& in, TaskProgress& progress) {
    // A batch of blank samples: a device's order holds at most the data
    // set's count, and the batch is loaded through it.
    const Dataset blank = blank_dataset(size_t(in.batch));
    const auto owned = make_devices(DeviceChoice::of(kind, 1), {&blank, &blank, in.batch, PoolKind::avg, 0, {}, &model},
                                    allreduce_named("naive"));
    Device& d = *owned[0];
    d.write_params(init_params(InitKind::xavier, 0, model));
    std::vector<uint32_t> order(size_t(in.batch));
    std::iota(order.begin(), order.end(), 0u);
    d.set_order(order.data(), order.size());
    d.take_core_share();  // from here
    Measured seen;
    for (int n = 1; n <= in.max_devices; ++n) {
        const int part = (in.batch + n - 1) / n;
        seen.compute.push_back(time_on(d, [&] {
            d.load_train(0, part);
            d.forward_backward(0, part);
        }));
        in.compute_s.push_back(seen.compute.back().median);
        progress.update(size_t(n));
    }
    seen.core_share = d.take_core_share();
    constexpr int updates = 20;
    in.update_s = time_on(d, [&] {
        for (int k = 0; k < updates; ++k) d.sgd_update(0.0f, in.batch);  // scale 0: the parameters stay
    }).median / updates;
    progress.update(size_t(in.max_devices) + 1);
    return seen;
}

// --link measured: the naive allreduce on 2 devices of `kind` at two sizes,
// T = 2 (alpha + S / beta) solved for alpha and beta.
Link measure_link(DeviceKind kind, double gradient_bytes) {
    const Dataset blank = blank_dataset();
    const size_t small = 1000, large = size_t(gradient_bytes / sizeof(float));  // 4 KB and the gradients
    const Allreduce& naive = allreduce_named("naive");
    const auto owned = make_devices(DeviceChoice::of(kind, 2), {&blank, &blank, 1, PoolKind::avg, large}, naive);
    const std::vector<Device*> devices = pointers(owned);
    const auto allreduce_s = [&](size_t floats) {
        constexpr int runs = 50;
        return time_on(*devices[0], [&] {
            for (int k = 0; k < runs; ++k) naive.run(devices, floats, false);
            devices[1]->synchronize();
        }).median / runs;
    };
    const double t_small = allreduce_s(small), t_large = allreduce_s(large);
    const double bytes_small = double(small) * sizeof(float), bytes_large = double(large) * sizeof(float);
    const double beta = 2.0 * (bytes_large - bytes_small) / std::max(t_large - t_small, 1e-12);
    const double alpha = std::max(0.0, t_small / 2.0 - bytes_small / beta);
    return {"measured", beta / 1e9, alpha * 1e6};
}

// What the timings say of the machine: a device that did not get its core,
// or timings that spread, measure another program's load, not the model's
// inputs (compare warns the same way).
void warn_if_measurement_busy(const Measured& seen, const DeviceKindInfo& measured_on) {
    if (seen.core_share >= 0 && seen.core_share < busy_core_share)
        std::printf("\ncareful: the %s measured got only %.0f%% of a core for its forward+backward: another program is "
                    "using this machine, so the compute times and the prediction are not this machine's (run simulate "
                    "on an idle machine)\n",
                    measured_on.one, 100.0 * seen.core_share);
    double widest = 0;
    for (const Timing& t : seen.compute) widest = std::max(widest, spread(t));
    if (widest > max_quiet_spread)
        std::printf("\ncareful: a part size's 5 timings spread by ±%.0f%% around their median (more than ±%.0f%%): the "
                    "machine's speed changed while it was measured, so the compute times are uncertain by as much\n",
                    100.0 * widest, 100.0 * max_quiet_spread);
}

// More devices than the cores they share: each computes n / cores times slower.
bool oversubscribed(const SimulationInput& in, int n) { return in.cores > 0 && n > in.cores; }


void write_results(const std::string& dir, const SimulationInput& in, const Measured& seen, const std::string& model,
                   DeviceKind kind, const std::vector<SimulatedRun>& runs) {
    const std::string csv_path = dir + "/simulate.csv", json_path = dir + "/simulate.json";
    std::string csv = "devices,algorithm,overlap,compute_ms,allreduce_ms,exposed_ms,step_ms,epoch_s,speedup,efficiency,"
                      "oversubscribed\n";
    Json rows = Json::array();
    for (const SimulatedRun& r : runs) {
        char line[256];
        std::snprintf(line, sizeof line, "%d,%s,%d,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%d\n", r.devices, r.algorithm.c_str(),
                      r.overlap ? 1 : 0, r.compute_s * 1e3, r.allreduce_s * 1e3, r.exposed_s * 1e3, r.step_s * 1e3,
                      r.epoch_s, r.speedup, r.efficiency, oversubscribed(in, r.devices) ? 1 : 0);
        csv += line;
        Json row = {{"devices", r.devices},
                    {"algorithm", r.algorithm},
                    {"overlap", r.overlap},
                    {"compute_ms", decimals(r.compute_s * 1e3, 4)},
                    {"allreduce_ms", decimals(r.allreduce_s * 1e3, 4)},
                    {"exposed_ms", decimals(r.exposed_s * 1e3, 4)},
                    {"step_ms", decimals(r.step_s * 1e3, 4)},
                    {"epoch_s", decimals(r.epoch_s, 4)},
                    {"speedup", decimals(r.speedup, 4)},
                    {"efficiency", decimals(r.efficiency, 4)},
                    {"oversubscribed", oversubscribed(in, r.devices)}};
        if (size_t(r.devices) <= seen.compute.size()) {
            const Timing& t = seen.compute[size_t(r.devices - 1)];
            row["compute_timed_ms"] = {decimals(t.fastest * 1e3, 4), decimals(t.slowest * 1e3, 4)};
        }
        rows.push_back(row);
    }
    Json result = {{"model", model},
                   {"device_kind", to_string(kind)},
                   {"batch", in.batch},
                   {"samples", in.samples},
                   {"cores", in.cores},
                   {"link", {{"name", in.link.name},
                             {"bandwidth_gbps", significant(in.link.bandwidth_gbps)},
                             {"latency_us", significant(in.link.latency_us)}}},
                   {"update_ms", decimals(in.update_s * 1e3, 4)},
                   {"runs", rows}};
    if (seen.core_share >= 0) result["core_share"] = decimals(seen.core_share, 3);
    write_text_file(csv_path, csv, "--out");
    write_text_file(json_path, Json{{"simulate", result}}.dump(2) + "\n", "--out");
    std::printf("\nwrote %s and %s\n", csv_path.c_str(), json_path.c_str());
}

}  // namespace

int run_simulate(int argc, const char* const* argv) {
    const std::optional<SimulateOptions> parsed = parse(argc, argv);
    if (!parsed) return 0;
    const SimulateOptions& o = *parsed;
    const Model& model = model_of(o.model);
    SimulationInput in;
    in.batch = o.batch;
    in.samples = o.samples;
    in.max_devices = o.max_devices;
    in.gradient_bytes = double(model.allreduced_floats(BatchNormMode::local) * sizeof(float));
    in.buckets = int(overlap_buckets(model, o.bucket_kb).size());
    // Devices made on demand are threads of this machine, so they share its cores.
    const DeviceKindInfo& row = kind_info(o.kind);
    const Presence present = row.probe();
    in.cores = o.cores >= 0 ? o.cores : present.unlimited() ? usable_cores() : 0;
    // (A model with batch norm runs in one pass: its statistics are the whole part's.)
    in.pass_samples = model.batch_norms() == 0 ? row.pass_samples : 0;
    // The devices as the table names them: "GPU" (hardware), "CPU device" (made on demand).
    const std::string kind_name = *row.hardware ? row.hardware : row.one;

    // Where the compute time comes from: given, or one device of the kind
    // (one made on demand standing in when none is usable, said so).
    const int present_here = present.unlimited() ? 2 : present.count;
    const DeviceKindInfo& measured_on = present_here > 0 ? row : kind_made_on_demand();
    std::string source;
    Measured seen;
    {
        TaskProgress progress("simulate: timings", size_t(o.max_devices) + 2);
        if (o.sample_us > 0) {
            for (int n = 1; n <= o.max_devices; ++n) in.compute_s.push_back(o.sample_us * 1e-6 * ((o.batch + n - 1) / n));
            source = "given: " + std::to_string(o.sample_us) + " us a sample (--sample-us), no update time";
        } else {
            seen = measure_compute(measured_on.kind, model, in, progress);
            source = std::string("measured here on one ") + measured_on.one + ", the median of 5 steps at each part size";
            if (measured_on.kind != o.kind)
                source += std::string(" (no usable ") + kind_name + " here, so a " + measured_on.one +
                          " stands in: give --sample-us for a " + kind_name + "'s)";
        }
        if (o.link == "measured") {
            if (present_here == 0)
                throw InputError(std::string("--link measured times 2 ") + row.many + ", and no " + kind_name +
                                 " is usable here (give --link pcie, nvlink or custom)");
            in.link = measure_link(o.kind, in.gradient_bytes);
        } else {
            in.link = o.link == "custom" ? Link{"custom", o.bandwidth_gbps, o.latency_us} : link_preset(o.link);
        }
        progress.update(size_t(o.max_devices) + 2);
    }
    const std::vector<SimulatedRun> runs = simulate(in);

    const double steps = std::ceil(double(o.samples) / double(o.batch));
    std::printf("simulate: %s, batch %d, %s samples an epoch (%.0f steps), 1 to %d %s%s\n", model.name().c_str(), o.batch,
                with_commas(double(o.samples)).c_str(), steps, o.max_devices, kind_name.c_str(), o.max_devices == 1 ? "" : "s");
    if (!o.why_cpu.empty())
        std::printf("devices: no GPU here (%s), so the CPU devices this machine runs, one per usable core (%d here); "
                    "--gpus N simulates GPUs\n", o.why_cpu.c_str(), usable_cores());
    // Where a measured link's figures come from: 2 units of hardware, or 2 devices sharing one.
    const std::string fitted =
        in.link.name != "measured" ? ""
        : present_here < 2 ? " (fitted to naive allreduces of 4 KB and the gradients on 2 " + std::string(row.many) +
                                 " sharing one " + kind_name + ": copies within its memory, not a link between " +
                                 kind_name + "s)"
                           : " (fitted to naive allreduces of 4 KB and the gradients on 2 devices here)";
    std::printf("link: %s, beta %.2f GB/s a transfer, alpha %.2f us%s\n", in.link.name.c_str(), in.link.bandwidth_gbps,
                in.link.latency_us, fitted.c_str());
    std::printf("compute: %s; update %.3f ms\n", source.c_str(), in.update_s * 1e3);
    std::printf("gradients: S = %s bytes; --overlap: %d bucket%s of at least %d KB; %s\n",
                with_commas(in.gradient_bytes).c_str(), in.buckets, in.buckets == 1 ? "" : "s", o.bucket_kb,
                in.cores > 0 ? ("the devices share " + std::to_string(in.cores) + " core" + (in.cores == 1 ? "" : "s")).c_str()
                             : "each device its own hardware");
    std::printf("\nformulas (m: allreduces a step, 1, or the buckets with --overlap; part = ceil(B/n)):\n");
    for (const Allreduce* a : all_allreduces())
        if (const CostModel* model = a->cost_model())
            std::printf("  %-9s%-38s%s\n", std::string(a->info().name).c_str(), std::string(model->formula).c_str(),
                        std::string(model->why).c_str());
    std::printf("  compute  C(n) = one device's time for a part%s\n"
                "  overlap  exposed = max(0, T - W), W = %.2f C(n) x %s / part (backward's share)\n"
                "  step     C(n) + update + exposed (T without overlap); epoch = steps x step\n"
                "  speedup  epoch(1) / epoch(n); efficiency = speedup / n\n\n",
                in.cores > 0 ? ", x max(1, n / cores)" : "", backward_share,
                in.pass_samples > 0 ? ("min(part, " + std::to_string(in.pass_samples) + ")").c_str() : "part");
    // The compute column's spread: the 5 timings of one device at that part
    // size, as ±half their range around the median ("-" when given).
    std::printf("%7s  %-9s %-7s %11s %7s %12s %11s %9s %9s %8s %10s\n", "devices", "allreduce", "overlap", "compute ms",
                "spread", "allreduce ms", "exposed ms", "step ms", "epoch s", "speedup", "efficiency");
    for (const SimulatedRun& r : runs) {
        const std::string devices = std::to_string(r.devices) + (oversubscribed(in, r.devices) ? "*" : "");
        const std::string spread_text =
            size_t(r.devices) <= seen.compute.size() ? format("±%.0f%%", 100 * spread(seen.compute[size_t(r.devices - 1)])) : "-";
        std::printf("%7s  %-9s %-7s %11.3f %7s %12.3f %11.3f %9.3f %9.2f %7.2fx %9.0f%%\n", devices.c_str(),
                    r.algorithm.c_str(), r.devices == 1 ? "-" : r.overlap ? "yes" : "no", r.compute_s * 1e3,
                    spread_text.c_str(), r.allreduce_s * 1e3, r.exposed_s * 1e3, r.step_s * 1e3, r.epoch_s, r.speedup,
                    100 * r.efficiency);
    }
    if (in.cores > 0 && o.max_devices > in.cores)
        std::printf("\n*: oversubscribed, more %s than the %d core%s they share: each computes n / %d times slower, "
                    "so the speed-up stops growing\n", row.many, in.cores, in.cores == 1 ? "" : "s", in.cores);
    warn_if_measurement_busy(seen, measured_on);
    if (!o.out_dir.empty()) write_results(o.out_dir, in, seen, model.name(), o.kind, runs);
    return 0;
}

}  // namespace dpt
