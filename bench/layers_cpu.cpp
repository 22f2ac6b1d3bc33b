// Where a CPU device's training step goes, layer by layer: each layer's
// forward, weight gradient and data gradient, their time, FLOPs and the
// bytes they must move at least, and the share of the core's FMA peak each
// reached (the peak measured in the same run, on every core used). With
// --devices 2, two devices train at once, each on its own thread with half
// the batch, as `dptrain --cpus 2` runs them: a layer that slows down when
// both run is one that shares something (cache, memory bandwidth).
//
// The step is the trainer's own: Model::train over the CPU kernel set, in
// chunks of cpu_chunk_samples as a CPU device runs it, with a kernel set
// that notes the time at each layer the walk reaches (model.hpp:
// mark_layer). Not counted: splitting the batch, the allreduce and the
// update (--breakdown times those).
//   usage: build/bench/layers_cpu [lenet|resnet18] [--batch N] [--devices D] [--steps S]
#include <algorithm>
#include <array>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cpu/kernels.hpp"
#include "cpu/winograd.hpp"
#include "devices/device.hpp"
#include "devices/pages.hpp"
#include "fma_peak.hpp"
#include "model/models.hpp"

using namespace dpt;

namespace {

using clock_type = std::chrono::steady_clock;

// The parts of a layer's work, as the rows show them.
enum Part { forward, weight, data, parts };
constexpr const char* part_names[parts] = {"forward", "weight grad", "data grad"};

// The CPU kernel set, timing what it runs: the walk says which layer it is
// at (at_layer), a convolution's and a dense layer's backward say when
// their weight gradient is done and the data gradient starts. Seconds go
// to (layer, part); the loss is the row after the last layer.
class TimedKernels : public cpu::KernelSet {
   public:
    explicit TimedKernels(size_t layers) : seconds_(layers + 1) {}

    void at_layer(size_t layer, bool backward) { switch_to(layer, backward ? data : forward); }
    void at_loss() { switch_to(seconds_.size() - 1, forward); }
    template <class Done>
    void backward_conv(const ConvBackward& b, Done&& weight_done) {
        switch_to(layer_, weight);
        cpu::KernelSet::backward_conv(b, [&] {
            weight_done();
            switch_to(layer_, data);
        });
    }
    void backward_dense(const DenseBackward& b) {
        switch_to(layer_, weight);
        cpu::KernelSet::backward_dense(b, [&] { switch_to(layer_, data); });
    }
    void start() { since_ = clock_type::now(); }
    void stop() { switch_to(layer_, part_); }
    void clear() { std::fill(seconds_.begin(), seconds_.end(), std::array<double, parts>{}); }
    const std::vector<std::array<double, parts>>& seconds() const { return seconds_; }

   private:
    void switch_to(size_t layer, Part part) {
        const auto now = clock_type::now();
        seconds_[layer_][part_] += std::chrono::duration<double>(now - since_).count();
        since_ = now, layer_ = layer, part_ = part;
    }
    std::vector<std::array<double, parts>> seconds_;
    size_t layer_ = 0;
    Part part_ = forward;
    clock_type::time_point since_{};
};

// One device's replica: parameters, gradients, its part of the batch and
// the activations of a chunk, as a CPU device holds them.
struct Replica {
    const Model& model;
    int part, chunk;
    std::vector<float> params, grads, x;
    std::vector<int32_t> labels;
    PageFloats memory;  // as a CPU device holds its activations
    Activations act;
    TimedKernels kernels;
    double peak = 0;  // GFLOP/s of this device's core, measured

    Replica(const Model& m, int part_samples, unsigned seed)
        : model(m),
          part(part_samples),
          chunk(m.batch_norms() > 0 ? part_samples : std::min(part_samples, cpu_chunk_samples)),
          params(m.param_count()),
          grads(m.gradient_floats()),
          x(size_t(part_samples) * m.input().size()),
          labels(size_t(part_samples)),
          memory(m.activation_floats(chunk, m.scratch_floats<cpu::KernelSet>(chunk))),
          kernels(m.layer_count()) {
        const size_t scratch = m.scratch_floats<cpu::KernelSet>(chunk);
        act = m.carve(memory.data(), chunk, scratch);
        unsigned state = seed;
        const auto next = [&] { return (state = state * 1664525u + 1013904223u) >> 8; };
        for (float& v : params) v = float(next() % 2001) / 20000.0f - 0.05f;  // within +-0.05
        for (const ParamTensor& t : m.tensors())  // batch norm's gamma and running variance at one
            if (t.role == InitRole::gamma || t.role == InitRole::running_var)
                std::fill_n(params.begin() + std::ptrdiff_t(t.offset), t.size, 1.0f);
        for (float& v : x) v = float(next() % 1001) / 1000.0f;
        for (int32_t& l : labels) l = int32_t(next() % unsigned(m.classes()));
    }

    // One step's forward and backward over the part, chunk by chunk.
    void step() {
        std::fill(grads.begin(), grads.end(), 0.0f);
        kernels.start();
        for (int first = 0; first < part; first += chunk) {
            const int n = std::min(chunk, part - first);
            model.train(kernels, act, params.data(), grads.data(), TrainPass{PoolKind::avg, BatchNormMode::local, part},
                        n, x.data() + size_t(first) * model.input().size(), act.logits(), 0, [&](const LastDense*) {
                            kernels.at_loss();
                            cpu::softmax_cross_entropy(act.d_logits(), act.logits(), labels.data() + first, n,
                                                       model.classes());
                        });
        }
        kernels.stop();
    }
};

// FLOPs of layer i's part over n samples (multiply-adds count two).
double flops(const Model& m, size_t i, Part part, int n) {
    const Model::LayerInfo l = m.layer_info(i);
    if (part == data && l.reads_input) return 0;
    if (l.kind == LayerKind::conv) {
        const ConvShape s = m.conv_shape(i, n);
        return 2.0 * double(s.weight_size()) * s.oh() * s.ow() * n;
    }
    if (l.kind == LayerKind::dense) return 2.0 * double(l.in.size()) * double(l.out.size()) * n;
    return 0;
}

// Layer i's kind as the summary groups it (the row after the last layer:
// the loss), convolutions by the algorithm the CPU kernels take for their
// shape (n samples; the choice does not depend on n): Winograd's, or the
// others' (implicit GEMM, direct sums, lanes).
std::string kind_of(const Model& m, size_t i, int n) {
    if (i == m.layer_count()) return "loss";
    switch (m.layer_info(i).kind) {
        case LayerKind::conv: return cpu::winograd_fits(m.conv_shape(i, n)) ? "conv, Winograd" : "conv, other";
        case LayerKind::relu: return "relu";
        case LayerKind::pool: return "pool";
        case LayerKind::flatten: return "flatten";
        case LayerKind::dense: return "dense";
        case LayerKind::batch_norm: return "batch norm";
        case LayerKind::add: return "residual add";
    }
    return "other";
}

struct KindTotal {
    std::string kind;
    double ms = 0, flops = 0;
};

// Bytes the part must read and write at least over n samples: its input,
// output (or their gradients) and weights, once each.
double bytes(const Model& m, size_t i, Part part, int n) {
    const Model::LayerInfo l = m.layer_info(i);
    double weights = 0;
    if (l.kind == LayerKind::conv) weights = double(m.conv_shape(i, n).weight_size());
    if (l.kind == LayerKind::dense) weights = double(l.in.size()) * double(l.out.size());
    const double in = double(l.in.size()) * n, out = double(l.out.size()) * n;
    if (part == forward) return 4 * (in + out + weights);
    if (part == weight) return weights > 0 ? 4 * (in + out + weights) : 0;
    return l.reads_input ? 0 : 4 * (in + out + weights);  // data: dy, w, dx (or dy, y, dx)
}

int usage(const char* what) {
    std::fprintf(stderr, "layers_cpu: %s\nusage: layers_cpu [lenet|resnet18] [--batch N] [--devices D] [--steps S]\n",
                 what);
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    ModelKind kind = ModelKind::lenet;
    int batch = 256, devices = 1, steps = 0;
    for (int a = 1; a < argc; ++a) {
        const std::string arg = argv[a];
        const auto number = [&](int& into, int least) {
            if (a + 1 >= argc || (into = std::atoi(argv[++a])) < least) return false;
            return true;
        };
        if (arg == "--batch") { if (!number(batch, 1)) return usage("--batch takes a number of samples"); }
        else if (arg == "--devices") { if (!number(devices, 1)) return usage("--devices takes a count"); }
        else if (arg == "--steps") { if (!number(steps, 1)) return usage("--steps takes a count"); }
        else if (auto found = find_model(arg)) kind = *found;
        else return usage(("unknown argument " + arg).c_str());
    }
    if (batch < devices) return usage("--batch must give every device a sample");
    const Model& model = model_of(kind);
    if (steps == 0) steps = kind == ModelKind::lenet ? 20 : 3;
    constexpr int warmup = 2;

    std::vector<Replica> replicas;
    replicas.reserve(size_t(devices));
    for (int d = 0; d < devices; ++d) replicas.emplace_back(model, batch / devices + (d < batch % devices), unsigned(d + 1));

    // Each device's thread measures its core's peak, then the steps run in
    // lockstep (a barrier per step, as the allreduce makes them), thread 0
    // timing each step.
    std::barrier sync(devices);
    double step_seconds = 0;
    std::vector<std::thread> threads;
    for (int d = 0; d < devices; ++d)
        threads.emplace_back([&, d] {
            Replica& r = replicas[size_t(d)];
            sync.arrive_and_wait();
            r.peak = bench::fma_peak_gflops(0.5);
            for (int s = 0; s < warmup + steps; ++s) {
                sync.arrive_and_wait();
                if (s == warmup) r.kernels.clear();
                const auto t0 = clock_type::now();
                r.step();
                sync.arrive_and_wait();
                if (d == 0 && s >= warmup) step_seconds += std::chrono::duration<double>(clock_type::now() - t0).count();
            }
        });
    for (std::thread& t : threads) t.join();

    double peak = 0;  // the slowest core's: each device is one core
    for (const Replica& r : replicas) peak = peak == 0 ? r.peak : std::min(peak, r.peak);
    const double step_ms = step_seconds / steps * 1e3;
    std::printf("%s, batch %d on %d CPU device%s (%s samples each, chunks of %d), %d steps after %d warm-up\n",
                model.name().c_str(), batch, devices, devices > 1 ? "s" : "",
                devices > 1 ? (std::to_string(replicas.back().part) + "-" + std::to_string(replicas[0].part)).c_str()
                            : std::to_string(batch).c_str(),
                replicas[0].chunk, steps, warmup);
    std::printf("FMA peak %.1f GFLOP/s a core (measured now, the slowest core of %d); forward+backward %.2f ms a step\n\n",
                peak, devices, step_ms);
    std::printf("%-10s %-12s %9s %6s %9s %8s %7s %8s %7s\n", "layer", "part", "ms/step", "share", "MFLOP", "GFLOP/s",
                "% peak", "MB", "FLOP/B");
    // A row per (layer, part) that took time: the mean over the devices,
    // per device (each device does its part of the batch). Every row, shown
    // or not, also goes to its kind's total.
    double total_flops = 0, listed_ms = 0;
    const double shown_ms = 0.0005 * step_ms;  // rows under 0.05% of the step are left out
    const size_t rows = model.layer_count() + 1;
    std::vector<KindTotal> kinds;
    for (size_t i = 0; i < rows; ++i)
        for (int p = 0; p < parts; ++p) {
            double seconds = 0, f = 0, b = 0;
            for (const Replica& r : replicas) {
                seconds += r.kernels.seconds()[i][size_t(p)] / steps / devices;
                if (i < model.layer_count()) {
                    f += flops(model, i, Part(p), r.part) / devices;
                    b += bytes(model, i, Part(p), r.part) / devices;
                }
            }
            const double ms = seconds * 1e3;
            total_flops += f;
            const std::string kind = kind_of(model, i, replicas[0].part);
            auto total = std::find_if(kinds.begin(), kinds.end(), [&](const KindTotal& k) { return k.kind == kind; });
            if (total == kinds.end()) total = kinds.insert(kinds.end(), KindTotal{kind});
            total->ms += ms, total->flops += f;
            if (ms < shown_ms) continue;
            listed_ms += ms;
            const std::string name = i < model.layer_count() ? model.layer_info(i).name : "loss";
            std::printf("%-10s %-12s %9.3f %5.1f%% %9.1f", name.c_str(), part_names[p], ms, 100 * ms / step_ms,
                        f / 1e6);
            if (f > 0) std::printf(" %8.1f %6.1f%%", f / seconds / 1e9, 100 * f / seconds / 1e9 / peak);
            else std::printf(" %8s %7s", "", "");
            std::printf(" %8.2f", b / 1e6);
            if (f > 0) std::printf(" %7.1f", f / b);
            std::printf("\n");
        }
    std::printf("%-23s %9.3f %5.1f%% %9.1f %8.1f %6.1f%%\n", "all (per device)", step_ms, 100.0, total_flops / 1e6,
                total_flops / step_ms / 1e6, 100 * total_flops / step_ms / 1e6 / peak);
    std::printf("(rows under 0.05%% of the step left out: %.3f ms; the step also waits for the slower device)\n",
                step_ms - listed_ms);

    // The same step by kind of layer, most time first.
    std::sort(kinds.begin(), kinds.end(), [](const KindTotal& a, const KindTotal& b) { return a.ms > b.ms; });
    std::printf("\n%-23s %9s %6s %9s %8s %7s\n", "by kind of layer", "ms/step", "share", "MFLOP", "GFLOP/s", "% peak");
    for (const KindTotal& k : kinds) {
        if (k.ms < shown_ms) continue;
        std::printf("%-23s %9.3f %5.1f%% %9.1f", k.kind.c_str(), k.ms, 100 * k.ms / step_ms, k.flops / 1e6);
        if (k.flops > 0)
            std::printf(" %8.1f %6.1f%%", k.flops / k.ms / 1e6, 100 * k.flops / k.ms / 1e6 / peak);
        std::printf("\n");
    }
}
