// `dptrain bench-allreduce`: each allreduce algorithm on the chosen devices,
// for message sizes from 4 KB to 64 MB and the model's gradient buffer:
// the time of one allreduce, its algorithm bandwidth (bytes / time) and its
// bus bandwidth (algbw * 2(N-1)/N, the nccl-tests convention: what each
// link carried, comparable across N and algorithms).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <vector>

#include "parallel/allreduce.hpp"
#include "model/dataset.hpp"
#include "devices/kinds.hpp"
#include "parallel/device_factory.hpp"
#include "parallel/device_options.hpp"
#include "model/models.hpp"
#include "base/files.hpp"
#include "base/options.hpp"
#include "commands/subcommands.hpp"
#include "run/report.hpp"

namespace dpt {
namespace {

struct BenchOptions {
    DeviceChoice devices = DeviceChoice::of(DeviceKind::cpu, 2);
    std::vector<std::string> algorithms;  // empty: every one that can run on the devices
    std::vector<size_t> sizes;            // bytes
    std::string out_dir;
};

std::string help() {
    return "Usage: dptrain bench-allreduce [" + count_options("N") + "] [--allreduce LIST] [--sizes LIST] [--out DIR]\n\n"
        "Times each allreduce algorithm on N devices (default: 2 CPU devices) for messages of\n"
        "4 KB to 64 MB and the model's gradient buffer (516.3 KB): the median of 5 timings, each of\n"
        "a run of back-to-back allreduces after a warm-up, divided by their number; algbw is\n"
        "bytes / time and busbw = algbw * 2(N-1)/N (the nccl-tests convention). Every algorithm's\n"
        "sum is checked once per size before it is timed.\n\n" +
        help_examples({{"dptrain bench-allreduce", "every algorithm on 2 CPU devices"},
                       {"dptrain bench-allreduce --gpus 2 --allreduce ring,nccl --out bench", "two on 2 GPUs; bench/ to plot"}}) +
        "  --allreduce LIST  e.g. naive,ring (default: each algorithm that can run on the devices)\n"
        "  --sizes LIST      message sizes in bytes, K (1,000) and M (1,000,000) allowed (default\n"
        "                    4K,16K,64K,256K,1M,4M,16M,64M and the two models' gradients)\n"
        "  --out DIR         also write DIR/bench-allreduce.csv (scripts/plot.py draws busbw against size)\n" +
        help_end("an allreduce's sum was wrong, or the output was not written", false);
}

// "4K", "1M", "516272": bytes (K: 1,000, M: 1,000,000), a whole number of
// floats from 4 bytes to 1 GB.
size_t parse_size(const std::string& text) {
    constexpr size_t most = 1000 * 1000 * 1000;
    const char unit = text.empty() ? '\0' : text.back();
    const size_t scale = unit == 'K' ? 1000 : unit == 'M' ? 1000 * 1000 : 1;
    const std::string digits = scale == 1 ? text : text.substr(0, text.size() - 1);
    const size_t bytes = parse_number<size_t>("sizes", digits, 1, most,
                                              "a list of sizes in bytes such as 4K,1M,516272 (K = 1,000, M = 1,000,000)") * scale;
    if (bytes % sizeof(float) != 0 || bytes > most)
        throw InputError("--sizes: " + text + " is not a whole number of floats up to 1 GB");
    return bytes;
}

// What --out DIR holds (checked before the runs, prepare_out_dir).
constexpr const char* out_files[] = {"bench-allreduce.csv"};

std::optional<BenchOptions> parse(int argc, const char* const* argv) {
    cxxopts::Options options("dptrain bench-allreduce");
    add_count_options(options, "", "N");
    options.add_options()
        ("allreduce", "", cxxopts::value<std::string>(), "LIST")
        ("sizes", "", cxxopts::value<std::string>(), "LIST")
        ("out", "", cxxopts::value<std::string>(), "DIR")
        ("h,help", "");
    const std::optional<cxxopts::ParseResult> parsed =
        parse_options(options, argc, argv, "dptrain bench-allreduce", help());
    if (!parsed) return std::nullopt;
    const cxxopts::ParseResult& r = *parsed;
    BenchOptions o;
    o.devices = choose_devices(counts_in(r), o.devices);
    if (r.count("allreduce"))
        for (const std::string& name : comma_list(given(r, "allreduce")))
            o.algorithms.push_back(std::string(allreduce_named(name).info().name));
    if (r.count("sizes"))
        for (const std::string& size : comma_list(given(r, "sizes"))) o.sizes.push_back(parse_size(size));
    else {
        for (size_t bytes : {4'000, 16'000, 64'000, 256'000, 1'000'000, 4'000'000, 16'000'000, 64'000'000})
            o.sizes.push_back(bytes);
        o.sizes.push_back(gradient_bytes(ModelKind::lenet));
        o.sizes.push_back(gradient_bytes(ModelKind::resnet18));
        std::sort(o.sizes.begin(), o.sizes.end());
    }
    o.out_dir = given(r, "out");
    if (!o.out_dir.empty()) prepare_out_dir(o.out_dir, out_files);
    return o;
}

struct Result {
    std::string algorithm;
    size_t bytes = 0;
    double seconds = 0, algbw = 0, busbw = 0;
    bool correct = false;
};

// One algorithm at one size on `devices`: the sum checked once (device i
// holds i+1 everywhere; every device must end with N(N+1)/2), then zeros (so
// that repeated sums stay finite), a warm-up, and the median of 5 timings of
// `runs` back-to-back allreduces.
Result time_one(const Allreduce& algorithm, std::span<Device* const> devices, size_t bytes, size_t buffer_floats) {
    const size_t floats = bytes / sizeof(float);
    const int n = int(devices.size());
    Result r{std::string(algorithm.info().name), bytes};
    std::vector<float> host(buffer_floats);
    for (int i = 0; i < n; ++i) {
        std::fill(host.begin(), host.end(), float(i + 1));
        devices[size_t(i)]->write_grads(host);
    }
    algorithm.run(devices, floats, false);
    r.correct = true;
    const float want = float(n * (n + 1) / 2);
    for (int i = 0; i < n; ++i) {
        devices[size_t(i)]->read_grads(host);
        r.correct = r.correct && host[0] == want && host[floats - 1] == want &&
                    (floats == buffer_floats || host[floats] == float(i + 1));
    }
    std::fill(host.begin(), host.end(), 0.0f);
    for (Device* d : devices) d->write_grads(host);

    const size_t runs = std::clamp<size_t>((size_t(256) << 20) / (bytes * size_t(n)), 3, 1000);
    for (size_t k = 0; k < std::min<size_t>(runs, 10); ++k) algorithm.run(devices, floats, false);  // warm-up
    for (Device* d : devices) d->synchronize();
    std::vector<double> timings;
    for (int t = 0; t < 5; ++t) {
        const auto start = std::chrono::steady_clock::now();
        for (size_t k = 0; k < runs; ++k) algorithm.run(devices, floats, false);
        for (Device* d : devices) d->synchronize();
        timings.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / double(runs));
    }
    r.seconds = median(timings);
    r.algbw = double(bytes) / r.seconds / 1e9;
    r.busbw = r.algbw * Allreduce::bus_factor(n);
    return r;
}

}  // namespace

int run_bench_allreduce(int argc, const char* const* argv) {
    const std::optional<BenchOptions> parsed = parse(argc, argv);
    if (!parsed) return 0;
    const BenchOptions& o = *parsed;
    std::vector<const Allreduce*> algorithms;
    if (o.algorithms.empty()) {
        for (const Allreduce* a : all_allreduces()) {
            const std::string refusal = a->refusal(o.devices);
            if (refusal.empty()) algorithms.push_back(a);
            else std::printf("note: --allreduce %s skipped: %s\n", std::string(a->info().name).c_str(), refusal.c_str());
        }
    } else {
        for (const std::string& name : o.algorithms) algorithms.push_back(&allreduce_named(name));
    }
    const size_t largest = *std::max_element(o.sizes.begin(), o.sizes.end());
    const size_t buffer_floats = std::max(lenet::model().param_count(), largest / sizeof(float));
    const int n = o.devices.count();

    const Dataset blank = blank_dataset();  // only the gradient buffers matter here
    std::vector<Result> results;
    std::string names;
    TaskProgress progress("bench-allreduce: sizes", algorithms.size() * o.sizes.size());
    progress.update(0);
    for (const Allreduce* algorithm : algorithms) {
        const auto owned = make_devices(o.devices, {&blank, &blank, 1, PoolKind::avg, buffer_floats}, *algorithm);
        const std::vector<Device*> devices = pointers(owned);
        if (names.empty())
            for (Device* d : devices) names += (names.empty() ? "" : ", ") + d->name();
        for (size_t bytes : o.sizes) {
            results.push_back(time_one(*algorithm, devices, bytes, buffer_floats));
            const Result& r = results.back();
            progress.clear();
            std::printf("%-6s %8s  %10.1f us  algbw %7.2f GB/s  busbw %7.2f GB/s%s\n", r.algorithm.c_str(),
                        size_text(bytes).c_str(), r.seconds * 1e6, r.algbw, r.busbw, r.correct ? "" : "  WRONG SUM");
            std::fflush(stdout);
            progress.update(results.size());
        }
    }

    std::printf("\nbench-allreduce on %s (%s): median of 5 timings; busbw = algbw * 2(N-1)/N = algbw * %.2f\n\n",
                describe(o.devices).c_str(), names.c_str(), Allreduce::bus_factor(n));
    std::printf("%10s", "size");
    for (const Allreduce* a : algorithms) std::printf("  %10s us %8s", std::string(a->info().name).c_str(), "busbw");
    std::printf("\n");
    for (size_t bytes : o.sizes) {
        std::printf("%10s", size_text(bytes).c_str());
        for (const Result& r : results)
            if (r.bytes == bytes) std::printf("  %13.1f %8.2f", r.seconds * 1e6, r.busbw);
        std::printf("%s\n", bytes == gradient_bytes(ModelKind::lenet)      ? "   (LeNet's gradients)"
                            : bytes == gradient_bytes(ModelKind::resnet18) ? "   (ResNet-18's gradients)"
                                                                            : "");
    }
    bool all_correct = true;
    for (const Result& r : results) all_correct = all_correct && r.correct;
    std::printf("\ncheck %s: every algorithm left N(N+1)/2 = %d in every summed float on every device, and the rest as it was\n",
                all_correct ? "ok" : "FAILED", n * (n + 1) / 2);

    if (!o.out_dir.empty()) {
        const std::string path = o.out_dir + "/bench-allreduce.csv";
        std::string csv = "device_kind,devices,algorithm,bytes,time_us,algbw_gbps,busbw_gbps\n";
        for (const Result& r : results) {
            char line[256];
            std::snprintf(line, sizeof line, "%s,%d,%s,%zu,%.3f,%.4f,%.4f\n",
                          kind_names(o.devices).c_str(), n, r.algorithm.c_str(),
                          r.bytes, r.seconds * 1e6, r.algbw, r.busbw);
            csv += line;
        }
        write_text_file(path, csv, "--out");
        std::printf("wrote %s\n", path.c_str());
    }
    return all_correct ? 0 : 1;
}

}  // namespace dpt
