// `dptrain demo allreduce` and `dptrain demo split`: the two pieces of data
// parallelism on tensors small enough to read, run by the same code as
// training (the allreduce algorithm and split_and_load on real devices), with the
// result checked.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "parallel/allreduce.hpp"
#include "run/cli.hpp"
#include "model/dataset.hpp"
#include "devices/kinds.hpp"
#include "parallel/device_factory.hpp"
#include "parallel/device_options.hpp"
#include "model/lenet.hpp"
#include "base/options.hpp"
#include "parallel/parallel.hpp"
#include "commands/subcommands.hpp"

namespace dpt {
namespace {

struct DemoOptions {
    DeviceChoice devices;
    int size = 2;            // allreduce: the tensor's length
    int rows = 6, cols = 4;  // split: the batch's shape
    std::string split = "even";  // split: --split even or weights
    std::string allreduce = "naive";
};

std::string help() {
    const std::string counts = "[" + count_options("N") + "]";
    return "Usage: dptrain demo allreduce " + counts + " [--size K] [--allreduce NAME]\n"
           "       dptrain demo split " + counts + " [--rows R] [--cols C] [--split even|W,W,...]\n\n"
           "The two steps of data parallelism on small tensors, each device's part printed.\n\n" +
           help_examples({{"dptrain demo allreduce --cpus 4", "4 devices' tensors summed, on every device"},
                          {"dptrain demo split --split 3,1", "a batch cut unevenly, as --split 3,1 cuts it"}}) +
        "  allreduce  device i holds a tensor of K values, all i+1; after the allreduce every\n"
        "             device holds their sum (1 + 2 + ... + N). Default N 2, K 2.\n"
        "  split      a batch of R rows of C values 0, 1, 2, ... is cut into N parts, one per\n"
        "             device, as split_and_load cuts each training batch. Default N 2, R 6, C 4;\n"
        "             --split 3,1 cuts it in proportion to the weights, as training's --split does.\n" +
        help_end("a demo's check failed", false);
}

std::optional<DemoOptions> parse(const std::string& which, int argc, const char* const* argv) {
    cxxopts::Options options("dptrain demo " + which);
    add_count_options(options, "", "N");
    options.add_options()
        ("size", "", cxxopts::value<std::string>(), "K")
        ("rows", "", cxxopts::value<std::string>(), "R")
        ("cols", "", cxxopts::value<std::string>(), "C")
        ("allreduce", "", cxxopts::value<std::string>(), "NAME")
        ("split", "", cxxopts::value<std::string>(), "HOW")
        ("h,help", "");
    const std::optional<cxxopts::ParseResult> parsed = parse_options(options, argc, argv, "dptrain demo", help());
    if (!parsed) return std::nullopt;
    const cxxopts::ParseResult& r = *parsed;
    const auto only_for = [&](const char* name, const char* demo) {
        if (r.count(name) && which != demo)
            throw InputError(std::string("--") + name + " is for dptrain demo " + demo);
    };
    only_for("size", "allreduce");
    only_for("allreduce", "allreduce");
    only_for("rows", "split");
    only_for("cols", "split");
    only_for("split", "split");
    DemoOptions o;
    o.devices = choose_devices(counts_in(r), DeviceChoice::of(DeviceKind::cpu, 2));
    if (r.count("allreduce")) o.allreduce = std::string(allreduce_named(given(r, "allreduce")).info().name);
    if (r.count("size"))
        o.size = parse_number<int>("size", given(r, "size"), 1, 16, "a whole number from 1 to 16 (a tensor to read)");
    if (r.count("rows"))
        o.rows = parse_number<int>("rows", given(r, "rows"), 1, 64, "a whole number from 1 to 64");
    if (r.count("cols"))
        o.cols = parse_number<int>("cols", given(r, "cols"), 1, 16, "a whole number from 1 to 16");
    if (r.count("split")) {
        o.split = given(r, "split");
        if (o.split == "auto")
            throw InputError("--split auto measures training steps; a demo has none: give even or weights such as 3,1");
        parse_split(o.split, o.devices.count(), o.rows);  // checked here, used below
    }
    if (o.rows * o.cols > 256)
        throw InputError("--rows times --cols must be at most 256: the values 0, 1, 2, ... are stored as bytes, "
                         "as pixels are");
    return o;
}

void print_values(const std::string& lead, const float* values, int count) {
    std::printf("%s[", lead.c_str());
    for (int i = 0; i < count; ++i) std::printf("%s%g", i ? ", " : "", double(values[i]));
    std::printf("]");
}

// The allreduce moves whole gradient buffers; the demo's tensor is the first
// K floats of each, the rest zero, so what moves is exactly what training moves.
int demo_allreduce(const DemoOptions& o) {
    const int n = o.devices.count(), k = o.size;
    const Dataset blank = blank_dataset();
    const Allreduce& allreduce = allreduce_named(o.allreduce);
    const std::vector<std::unique_ptr<Device>> owned =
        make_devices(o.devices, {&blank, &blank, 1, PoolKind::avg}, allreduce);
    const std::vector<Device*> devices = pointers(owned);

    std::printf("allreduce over %d %s: device i's tensor holds %d value%s, all equal to i+1\n\n", n,
                kind_info(o.devices.kind()).many, k, k == 1 ? "" : "s");
    std::vector<float> buffer(lenet::model().param_count());
    std::printf("before:\n");
    for (int i = 0; i < n; ++i) {
        std::fill(buffer.begin(), buffer.end(), 0.0f);
        std::fill_n(buffer.begin(), k, float(i + 1));
        devices[size_t(i)]->write_grads(buffer);
        print_values("  " + devices[size_t(i)]->name() + "  ", buffer.data(), k);
        std::printf("\n");
    }
    allreduce.run(devices, lenet::model().param_count(), false);  // read_grads below waits for it
    const float expected = float(n) * float(n + 1) / 2.0f;
    std::printf("\nafter:\n");
    bool right = true;
    for (int i = 0; i < n; ++i) {
        devices[size_t(i)]->read_grads(buffer);
        print_values("  " + devices[size_t(i)]->name() + "  ", buffer.data(), k);
        bool mine = true;
        for (size_t j = 0; j < buffer.size(); ++j) mine = mine && buffer[j] == (j < size_t(k) ? expected : 0.0f);
        std::printf("%s\n", mine ? "" : "  <- wrong");
        right = right && mine;
    }
    std::printf("\nhow (--allreduce %s): %s", o.allreduce.c_str(),
                n == 1 ? "with one device there is nothing to add; the tensor stays as it was.\n"
                       : allreduce.explain(devices, lenet::model().param_count()).c_str());
    if (n > 1)
        std::printf("The tensor above is the first %d value%s of each gradient buffer; the rest are zeros.\n", k,
                    k == 1 ? "" : "s");
    std::printf("check %s: every device holds %g (1 + ... + %d) in each of the %d value%s, and zeros after them\n",
                right ? "ok" : "FAILED", double(expected), n, k, k == 1 ? "" : "s");
    return right ? 0 : 1;
}

// The batch is a data set of R samples of C "pixels" holding 0, 1, 2, ...;
// devices store pixels scaled to [0, 1], so the values read back are shown x255.
int demo_split(const DemoOptions& o) {
    const int n = o.devices.count(), rows = o.rows, cols = o.cols;
    Dataset batch;
    batch.images.resize(size_t(rows) * cols);
    std::iota(batch.images.begin(), batch.images.end(), uint8_t(0));
    batch.labels.resize(size_t(rows));
    for (int r = 0; r < rows; ++r) batch.labels[size_t(r)] = uint8_t(r % 10);
    batch.count = size_t(rows);
    batch.rows = 1;
    batch.cols = cols;
    const SplitChoice split = parse_split(o.split, n, rows);
    const BatchParts batch_parts(split, n, rows, size_t(rows));
    const std::span<const Part> parts = batch_parts.of(rows);
    const int capacity = batch_parts.largest();
    const std::vector<std::unique_ptr<Device>> owned =
        make_devices(o.devices, {&batch, &batch, capacity, PoolKind::avg}, allreduce_named("naive"));
    const std::vector<Device*> devices = pointers(owned);

    std::printf("input: a batch of %d rows of %d values\n", rows, cols);
    for (int r = 0; r < rows; ++r) {
        std::printf("  [");
        for (int c = 0; c < cols; ++c) std::printf("%s%3d", c ? " " : "", batch.images[size_t(r) * cols + c]);
        std::printf("]\n");
    }
    std::vector<uint32_t> order(static_cast<size_t>(rows));
    std::iota(order.begin(), order.end(), 0u);
    for (Device* d : devices) d->set_order(order.data(), order.size());
    split_and_load(devices, 0, parts);

    std::printf("\nsplit_and_load onto %d %s:\n", n, kind_info(o.devices.kind()).many);
    std::vector<float> images(size_t(capacity) * cols);
    std::vector<int32_t> labels(static_cast<size_t>(capacity));
    bool right = true;
    for (int i = 0; i < n; ++i) {
        const Part part = parts[size_t(i)];
        const int got = devices[size_t(i)]->read_input(images, labels);
        std::printf("  %s  %d row%s%s\n", devices[size_t(i)]->name().c_str(), got, got == 1 ? "" : "s",
                    got ? ":" : " (an empty part: the device adds zero gradients)");
        right = right && got == part.count;
        for (int r = 0; r < got; ++r) {
            std::printf("    [");
            for (int c = 0; c < cols; ++c) {
                const float value = images[size_t(r) * cols + c] * 255.0f;
                std::printf("%s%3.0f", c ? " " : "", double(value));
                right = right && std::lround(value) == (part.first + r) * cols + c;
            }
            std::printf("]\n");
        }
    }
    if (split.mode == SplitMode::even) {
        std::printf("\nhow: the parts are contiguous, of %d / %d = %d rows", rows, n, rows / n);
        if (rows % n) std::printf(", the first %d one more", rows % n);
    } else {
        std::printf("\nhow: the parts are contiguous, in proportion to the weights %s in whole rows (the largest "
                    "remainders get the rows left over;\nevery device gets one where there are enough)", o.split.c_str());
    }
    std::printf(" (");
    for (int i = 0; i < n; ++i) std::printf("%s%d", i ? ", " : "", parts[size_t(i)].count);
    std::printf(").\nEach device copies only its own rows. Devices hold pixels scaled to [0, 1]; shown here x255.\n");
    std::printf("check %s: each device holds exactly its contiguous part of the batch\n", right ? "ok" : "FAILED");
    return right ? 0 : 1;
}

}  // namespace

int run_demo(int argc, const char* const* argv) {
    const std::string which = argc > 1 ? argv[1] : "";
    if (which == "--help" || which == "-h") {
        std::fputs(help().c_str(), stdout);
        return 0;
    }
    if (which != "allreduce" && which != "split")
        throw InputError(which.empty() ? std::string("demo needs allreduce or split: the name of a demo (see dptrain demo --help)")
                                       : "demo needs allreduce or split (got '" + which + "'; see dptrain demo --help)");
    const std::optional<DemoOptions> o = parse(which, argc - 1, argv + 1);
    if (!o) return 0;
    return which == "allreduce" ? demo_allreduce(*o) : demo_split(*o);
}

}  // namespace dpt
