// The GPU tests of training: GPU replicas against CPU devices over a few
// steps, replicas against each other bit for bit, graphs replayed against
// queued kernels, a recording that fails midway, the other allreduces,
// --overlap, ResNet-18, --tf32's horizons, and several streams at once.
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>

#include "cuda/kernels.hpp"
#include "devices/gpu.hpp"
#include "gpu_checks.hpp"
#include "model/lenet.hpp"
#include "model/resnet.hpp"
#include "parallel/allreduce.hpp"
#include "parallel/device_factory.hpp"
#include "parallel/parallel.hpp"
#include "run/trainer.hpp"
#include "small_resnet.hpp"
#include "synthetic.hpp"

namespace dpt::gpu_test {

namespace {

const Allreduce& naive() { return allreduce_named("naive"); }

struct Trained {
    std::vector<std::vector<float>> params;  // per replica
    double loss_sum = 0.0;
    int64_t correct = 0;
    int32_t first_bad_step = -1;  // the divergence watch
};

struct EpochOptions {
    bool graph = false;  // record the epoch once and replay it, as train() does
    float lr = 0.1f;
    int epochs = 1;      // each with its own sample order
    const char* allreduce = "naive";
    int bucket_kb = -1;  // >= 0: --overlap with buckets of this size
    const Model* model = &lenet::model();
    BatchNormMode bn = BatchNormMode::local;
    size_t samples = 150;  // 150 / 32: a short last batch
    Math math = Math::fp32;  // --tf32: Math::tf32
};

// `epochs` epochs of `count` synthetic samples in batches of `batch` on n
// devices, then the test set evaluated on device 0. The loss sum and the
// divergence watch accumulate over the epochs, as they do over a graph's
// replays in train().
Trained run_epochs(const DeviceChoice& choice, int batch, const EpochOptions& o) {
    const size_t count = o.samples;
    const int n = choice.count();
    const Dataset train = testing::synthetic(count, true), test = testing::synthetic(64, true);
    const ReplicaSetup setup{&train, &test, (batch + n - 1) / n, PoolKind::avg, 0,
                             o.bucket_kb >= 0 ? overlap_buckets(*o.model, o.bucket_kb, o.bn) : std::vector<Range>{},
                             o.model, o.bn, false, o.math};
    const Allreduce& allreduce = allreduce_named(o.allreduce);
    const StepPlan plan = plan_step(*o.model, o.bn, setup.buckets);
    const auto owned = make_devices(choice, setup, allreduce);
    const std::vector<Device*> devices = pointers(owned);
    const auto init = init_params(InitKind::xavier, 4, *o.model);
    for (Device* d : devices) d->write_params(init);
    const auto queue = [&] {
        for (size_t first = 0; first < count; first += size_t(batch))
            train_step(devices, allreduce, plan, first, even_parts(int(std::min<size_t>(batch, count - first)), int(devices.size())), o.lr, int32_t(first / batch));
    };
    std::unique_ptr<Recording> recording;
    if (o.graph) {
        std::string why;
        recording = record_graph(devices, queue, why);
        report(recording != nullptr, "the epoch records as a CUDA graph", why);
        if (!recording) return {};
    }
    for (int epoch = 1; epoch <= o.epochs; ++epoch) {
        // The graph reads the order from device memory: a new order before each replay.
        const auto order = epoch_order(count, 4, epoch);
        for (Device* d : devices) d->set_order(order.data(), order.size());
        if (recording) recording->replay();
        else queue();
        for (Device* d : devices) d->synchronize();  // `order` may go
    }
    Trained t;
    for (Device* d : devices) {
        t.params.emplace_back(o.model->param_count());
        d->read_params(t.params.back());
        t.loss_sum += d->take_loss_sum();
    }
    for (size_t first = 0; first < test.count; first += size_t(setup.capacity))
        devices[0]->evaluate_test(first, int(std::min<size_t>(setup.capacity, test.count - first)));
    t.correct = devices[0]->take_correct();
    t.first_bad_step = devices[0]->take_first_bad_step();
    return t;
}

// run_epochs, each distinct run once: several checks start from the same
// run (naive on 3 replicas is the baseline of the replica checks, of the
// ring's and of --overlap's), which is trained for the first and handed to
// the others. A run is the devices, the batch and every option; no check
// compares a run with itself.
Trained train_epochs(const DeviceChoice& choice, int batch, const EpochOptions& o = {}) {
    static std::map<std::string, Trained> done;
    char options[200];
    std::snprintf(options, sizeof options, " batch %d graph %d lr %a epochs %d %s kb %d model %p bn %d samples %zu math %d",
                  batch, int(o.graph), double(o.lr), o.epochs, o.allreduce, o.bucket_kb, static_cast<const void*>(o.model),
                  int(o.bn), o.samples, int(o.math));
    const std::string key = describe(choice) + options;
    if (const auto it = done.find(key); it != done.end()) return it->second;
    Trained t = run_epochs(choice, batch, o);
    if (!t.params.empty()) done.emplace(key, t);  // (empty: the recording failed, reported)
    return t;
}

Trained train_epochs(DeviceKind kind, int n, int batch, const EpochOptions& o = {}) {
    return train_epochs(DeviceChoice::of(kind, n), batch, o);
}

double largest(const std::vector<float>& v) {
    double m = 0.0;
    for (float x : v) m = std::max(m, double(std::abs(x)));
    return m;
}

// GPU against CPU after an epoch (5 steps). Rounding differs (summation
// order, FMAs): alone it moves every weight by ~1e-7 of the largest. But now
// and then a ReLU input or a max-pool contest within ~1e-7 of a tie is
// decided the other way; that changes one sample's share of the gradient of
// the weights feeding that unit (a conv1 channel's 10, a dense unit's 801),
// ~1e-5 of the largest weight, and later steps spread a smaller echo of it.
// A mean over all weights can be pushed past a tight bound by one such flip,
// so the test bounds how many weights differ by more than 1e-5 of the
// largest: at most 1% (1,290; one flip in dense1 moves 801, and the echoes
// stay under the threshold), and the largest difference within 1e-3. A wrong
// index or a missed tile moves a whole layer's update, ~1e-2 of its weights:
// conv2's and dense1's layers are 20% and 79% of the weights, and conv1's
// 180 weights feed everything after the first step, so each fails both.
void compare_with_cpu(const std::string& what, const std::vector<float>& gpu, const std::vector<float>& cpu,
                      double threshold = 1e-5) {
    const double scale = largest(cpu);
    double worst = 0.0;
    size_t beyond = 0;
    for (size_t i = 0; i < cpu.size(); ++i) {
        const double d = std::isnan(gpu[i]) ? INFINITY : std::abs(double(gpu[i]) - double(cpu[i]));
        worst = std::max(worst, d);
        if (d > threshold * scale) ++beyond;
    }
    const size_t allowed = cpu.size() / 100;
    char detail[200];
    std::snprintf(detail, sizeof detail,
                  "(%zu weights differ by more than %g of the largest, bound %zu; largest %.3g of the largest, "
                  "bound 1e-3)", beyond, threshold, allowed, worst / scale);
    report(beyond <= allowed && worst <= 1e-3 * scale, what, detail);
}

bool same_bits(const Trained& a, const Trained& b) {
    if (a.params.size() != b.params.size()) return false;
    for (size_t i = 0; i < a.params.size(); ++i)
        if (a.params[i].size() != b.params[i].size() ||
            std::memcmp(a.params[i].data(), b.params[i].data(), a.params[i].size() * sizeof(float)) != 0)
            return false;
    return std::memcmp(&a.loss_sum, &b.loss_sum, sizeof a.loss_sum) == 0 && a.correct == b.correct &&
           a.first_bad_step == b.first_bad_step;
}

// Two epochs with two orders, replayed from one recorded graph, against the
// same two epochs queued kernel by kernel: every replica's parameters, the
// loss summed over both replays, the accuracy count and the divergence
// watch, bit for bit (the same kernels in the same order on the same data).
void check_graph_replays(int n, int batch, const std::string& name) {
    // Recorded first: in a fresh process (graph-first) no kernel has run before it.
    const Trained replayed = train_epochs(DeviceKind::gpu, n, batch, {.graph = true, .epochs = 2});
    const Trained queued = train_epochs(DeviceKind::gpu, n, batch, {.epochs = 2});
    if (replayed.params.empty()) return;  // the recording failed, reported
    char detail[160];
    std::snprintf(detail, sizeof detail, "(loss sums %.17g and %.17g)", replayed.loss_sum, queued.loss_sum);
    report(same_bits(replayed, queued),
           name + ": two epochs replayed from one graph, two orders, give the same bits as queued kernels", detail);
}

// A recording whose work fails midway (here: an exception after the first
// step was queued) comes back as null with the reason, leaves no stream
// capturing, and has run nothing: the same devices then train kernel by
// kernel to the same bits as devices that never tried.
void check_failed_recording(int n, int batch) {
    const size_t count = 150;
    const Dataset train = testing::synthetic(count, true), test = testing::synthetic(64, true);
    const auto owned = make_devices(DeviceChoice::of(DeviceKind::gpu, n), {&train, &test, (batch + n - 1) / n, PoolKind::avg}, naive());
    const std::vector<Device*> devices = pointers(owned);
    const StepPlan plan = plan_step(lenet::model(), BatchNormMode::local);
    const auto init = init_params(InitKind::xavier, 4);
    for (Device* d : devices) d->write_params(init);
    const auto order = epoch_order(count, 4, 1);
    for (Device* d : devices) d->set_order(order.data(), order.size());
    std::string why;
    const auto recording = record_graph(devices, [&] {
        train_step(devices, naive(), plan, 0, even_parts(batch, int(devices.size())), 0.1f, 0);
        throw std::runtime_error("stopped on purpose after one step");
    }, why);
    report(recording == nullptr && why.find("on purpose") != std::string::npos,
           "a recording that fails midway returns null and the reason", "(why: " + why + ")");
    for (size_t first = 0; first < count; first += size_t(batch))
        train_step(devices, naive(), plan, first, even_parts(int(std::min<size_t>(batch, count - first)), int(devices.size())), 0.1f, int32_t(first / batch));
    Trained after;
    for (Device* d : devices) {
        after.params.emplace_back(lenet::model().param_count());
        d->read_params(after.params.back());
        after.loss_sum += d->take_loss_sum();
    }
    const Trained fresh = train_epochs(DeviceKind::gpu, n, batch);
    report(after.params == fresh.params && after.loss_sum == fresh.loss_sum,
           std::to_string(n) + " GPU replicas: after the failed recording, queued training gives the bits of fresh devices");
}

// GPU replicas record their work and are not paced by the host; beside a CPU
// device (a mixed run) the devices together record nothing, and say which
// device cannot, so the trainer queues their steps one by one.
void check_capabilities() {
    const Dataset train = testing::synthetic(64, true), test = testing::synthetic(16, true);
    const auto owned = make_devices(DeviceChoice::of(DeviceKind::gpu, 1).then(DeviceKind::cpu, 1), {&train, &test, 8, PoolKind::avg}, naive());
    const std::vector<Device*> devices = pointers(owned);
    const Capabilities gpu = devices[0]->capabilities(), cpu = devices[1]->capabilities();
    report(gpu.records_graphs && !gpu.host_paced && !cpu.records_graphs && cpu.host_paced,
           "a GPU replica records graphs and is not host-paced; a CPU device the other way round");
    std::string why;
    const auto recording = record_work(devices, [] {}, why);
    report(recording == nullptr && why == "cpu:0 does not record its work",
           "record_work over a GPU replica and a CPU device: null, naming the CPU device", "(why: " + why + ")");
}

// A mixed run (--gpus 1 --cpus 2, and two GPU replicas beside one CPU
// device): the GPU waits for the CPU devices' marks in pinned memory and
// copies their gradients; they wait for its mark. Every replica ends with the
// same bits (the allreduce hands every device the same sum, and the update is
// one fused multiply-add on both kinds), and the run trains as CPU devices do.
void test_mixed(int batch) {
    for (const DeviceChoice& choice : {DeviceChoice::of(DeviceKind::gpu, 1).then(DeviceKind::cpu, 2), DeviceChoice::of(DeviceKind::gpu, 2).then(DeviceKind::cpu, 1)}) {
        const std::string name = "mixed, " + describe(choice);
        const Trained mixed = train_epochs(choice, batch);
        if (mixed.params.size() != size_t(choice.count())) {
            report(false, name + ": trained");
            continue;
        }
        for (int i = 1; i < choice.count(); ++i)
            report(std::memcmp(mixed.params[0].data(), mixed.params[size_t(i)].data(),
                               lenet::model().param_count() * sizeof(float)) == 0,
                   name + ": device " + std::to_string(i) + " has the same bits as device 0");
        const Trained cpus = train_epochs(DeviceKind::cpu, choice.count(), batch);
        compare_with_cpu(name + " vs as many CPU devices: parameters after one epoch", mixed.params[0], cpus.params[0]);
        report(mixed.first_bad_step == -1, name + ": the divergence watch stays quiet at lr 0.1");
    }
}

// The ring's peer copies and sum kernel on GPU replicas (several sharing a
// GPU here): every replica the same bits, and naive's parameters up to the
// order of the additions; its graph replays like queued kernels. NCCL where
// it can run (one replica per GPU), against naive.
void test_other_allreduces(int batch) {
    const int present = probe_gpus().count();
    for (int n : {2, 3}) {
        const std::string name = "ring on " + std::to_string(n) + " GPU replicas";
        const Trained naive_run = train_epochs(DeviceKind::gpu, n, batch);
        const Trained ring = train_epochs(DeviceKind::gpu, n, batch, {.allreduce = "ring"});
        for (int i = 1; i < n; ++i)
            report(std::memcmp(ring.params[0].data(), ring.params[size_t(i)].data(),
                               lenet::model().param_count() * sizeof(float)) == 0,
                   name + ": replica " + std::to_string(i) + " has the same bits as replica 0");
        compare(name + " vs naive: parameters after one epoch", ring.params[0], naive_run.params[0], 1e-5);
        const Trained replayed = train_epochs(DeviceKind::gpu, n, batch, {.graph = true, .allreduce = "ring"});
        if (!replayed.params.empty()) report(same_bits(replayed, ring), name + ": a graph replay gives the queued bits");
    }
    const std::string refused = nccl_refusal(present, {});
    if (!refused.empty()) {
        std::printf("note: nccl not checked: %s\n", refused.c_str());
        return;
    }
    const Trained nccl = train_epochs(DeviceKind::gpu, present, batch, {.allreduce = "nccl"});
    const Trained naive_run = train_epochs(DeviceKind::gpu, present, batch);
    compare("nccl on " + std::to_string(present) + " GPU(s) vs naive: parameters after one epoch", nccl.params[0],
            naive_run.params[0], 1e-5);
}

// --overlap on GPU replicas: the allreduce on a second stream of each
// replica, bucket by bucket as backward records their events, gives the bits
// of the allreduce after backward: queued, replayed from a graph (the second
// streams join the capture through those events), and beside CPU devices.
void test_overlap(int batch) {
    for (const char* allreduce : {"naive", "ring"})
        for (int kb : {0, 64}) {
            const std::string name = std::string("--overlap --bucket-kb ") + std::to_string(kb) + " --allreduce " + allreduce +
                                     " on 3 GPU replicas";
            const Trained plain = train_epochs(DeviceKind::gpu, 3, batch, {.allreduce = allreduce});
            const Trained overlapped = train_epochs(DeviceKind::gpu, 3, batch, {.allreduce = allreduce, .bucket_kb = kb});
            report(same_bits(overlapped, plain), name + ": the bits of no overlap");
            const Trained replayed =
                train_epochs(DeviceKind::gpu, 3, batch, {.graph = true, .epochs = 1, .allreduce = allreduce, .bucket_kb = kb});
            if (!replayed.params.empty()) report(same_bits(replayed, plain), name + ": a graph replay gives them too");
        }
    const DeviceChoice mixed = DeviceChoice::of(DeviceKind::gpu, 1).then(DeviceKind::cpu, 2);
    report(same_bits(train_epochs(mixed, batch, {.bucket_kb = 0}), train_epochs(mixed, batch)),
           "--overlap, " + describe(mixed) + ": the bits of no overlap");
}

// The small ResNet (batch norm, branches) on GPU replicas: against CPU
// devices of the same count with --bn local (the same function, rounding
// apart), N against 1 replica with --bn sync, every replica the same bits,
// --overlap and a graph replay the bits of queued kernels.
void test_resnet(int batch) {
    const Model* model = &testing::small_resnet();
    for (int n : {1, 2, 3}) {
        const std::string name = std::to_string(n) + " GPU replica" + (n > 1 ? "s" : "") + " of a small ResNet";
        const Trained gpu = train_epochs(DeviceKind::gpu, n, batch, {.model = model});
        const Trained cpu = train_epochs(DeviceKind::cpu, n, batch, {.model = model});
        for (int i = 1; i < n; ++i)
            report(gpu.params[0] == gpu.params[size_t(i)], name + ", --bn local: replica " + std::to_string(i) +
                                                               " has the same bits as replica 0 (running statistics too)");
        compare_with_cpu(name + ", --bn local vs " + std::to_string(n) + " CPU devices", gpu.params[0], cpu.params[0]);
        const Trained sync = train_epochs(DeviceKind::gpu, n, batch, {.model = model, .bn = BatchNormMode::sync});
        const Trained one = train_epochs(DeviceKind::gpu, 1, batch, {.model = model, .bn = BatchNormMode::sync});
        if (n > 1) compare(name + ", --bn sync vs 1 GPU replica", sync.params[0], one.params[0], 1e-5);
        const Trained replayed = train_epochs(DeviceKind::gpu, n, batch, {.graph = true, .model = model, .bn = BatchNormMode::sync});
        if (!replayed.params.empty()) report(same_bits(replayed, sync), name + ", --bn sync: a graph replay gives the bits of queued kernels");
    }
    for (BatchNormMode bn : {BatchNormMode::local, BatchNormMode::sync})
        report(same_bits(train_epochs(DeviceKind::gpu, 3, batch, {.bucket_kb = 0, .model = model, .bn = bn}),
                         train_epochs(DeviceKind::gpu, 3, batch, {.model = model, .bn = bn})),
               std::string("3 GPU replicas of a small ResNet, --bn ") + (bn == BatchNormMode::sync ? "sync" : "local") +
                   " --overlap: the bits of no overlap");
}

// --tf32: GPU replicas against a CPU device that rounds the same operands,
// over two steps; over an epoch, replicas equal bit for bit, a graph replay
// equal to queued kernels, and the GPU's run apart from its FP32 run (else
// --tf32 would have changed nothing).
// The horizon against the CPU is short because TF32 magnifies rounding: an
// operand that the two sides compute one FP32 ulp apart (another summation
// order; the tensor cores' own accumulation) now and then lies across a TF32
// rounding boundary, and then its products differ by TF32's step, 2^-11 of
// them; after a few steps a ReLU or max-pool input at its kink goes the
// other way and the runs fork. `gpu_tests tf32-horizons` prints the figures
// for 1 to 5 steps. After 2 steps (batch 32) no weight was beyond 1e-5 of the
// largest on an H200 (largest 2.4e-6, loss sums 2.5e-7 apart) nor on the
// emulated GPU (3.1e-6, 2e-7); against an FP32 CPU device (a twin that forgot
// to round) 9,300 of 129,000 weights were, the largest 2.1e-3, and the loss
// sums were 2.5e-6 apart. After 5 steps the H200 was 24,000 weights and
// 3.3e-3 from the rounding twin, too close to the FP32 twin to tell apart.
// Returns 1 replica's --tf32 epoch.
Trained tf32_training(int batch, const Trained& fp32) {
    const EpochOptions tf32{.math = Math::tf32};
    const EpochOptions two_steps{.samples = size_t(2 * batch), .math = Math::tf32};
    const Trained cpu = train_epochs(DeviceKind::cpu, 1, batch, two_steps);
    Trained one;
    for (int n : {1, 2}) {
        const std::string name = std::to_string(n) + " GPU replica" + (n > 1 ? "s" : "") + " --tf32";
        const Trained short_run = train_epochs(DeviceKind::gpu, n, batch, two_steps);
        compare_with_cpu(name + " vs 1 CPU device --tf32: parameters after 2 steps", short_run.params[0],
                         cpu.params[0]);
        report(std::abs(short_run.loss_sum - cpu.loss_sum) <= 1e-6 * std::abs(cpu.loss_sum),
               name + ": the loss sum of 2 steps matches the CPU's to 1e-6",
               std::to_string(short_run.loss_sum) + " vs " + std::to_string(cpu.loss_sum));
        const Trained gpu = train_epochs(DeviceKind::gpu, n, batch, tf32);
        if (n > 1) report(gpu.params[0] == gpu.params[1], name + ": replica 1 has the same bits as replica 0");
        double apart = 0.0;
        for (size_t i = 0; i < fp32.params[0].size(); ++i)
            apart = std::max(apart, std::abs(double(gpu.params[0][i]) - double(fp32.params[0][i])));
        report(apart > 1e-5 * largest(fp32.params[0]), name + ": apart from the FP32 run",
               "largest |diff| " + std::to_string(apart));
        if (n == 1) {
            one = gpu;
            continue;
        }
        const Trained replayed = train_epochs(DeviceKind::gpu, n, batch, {.graph = true, .math = Math::tf32});
        if (!replayed.params.empty()) report(same_bits(replayed, gpu), name + ": a graph replay gives the queued bits");
    }
    return one;
}

void test_tf32_training(int batch, const Trained& fp32) {  // fp32: 1 GPU replica's epoch in FP32
    if (!has_tf32()) return;
    tf32_training(batch, fp32);
}

}  // namespace

// How far --tf32 runs on GPU 0 stray from the CPU's as the horizon grows, 1
// to 5 steps, against a CPU device that rounds to TF32 as the GPU does and
// one in FP32: the figures test_tf32_training's bounds come from
// (`gpu_tests tf32-horizons`; it prints, it checks nothing).
void tf32_horizons(int batch) {
    for (int steps = 1; steps <= 5; ++steps) {
        EpochOptions o{.samples = size_t(steps * batch), .math = Math::tf32};
        const Trained gpu = train_epochs(DeviceKind::gpu, 1, batch, o);
        const Trained cpu = train_epochs(DeviceKind::cpu, 1, batch, o);
        EpochOptions f = o;
        f.math = Math::fp32;
        const Trained cpu32 = train_epochs(DeviceKind::cpu, 1, batch, f);
        for (const auto& [twin, label] : {std::pair{&cpu, "tf32 cpu"}, std::pair{&cpu32, "fp32 cpu"}}) {
            const double scale = largest(twin->params[0]);
            double worst = 0;
            size_t b5 = 0, b4 = 0;
            for (size_t i = 0; i < twin->params[0].size(); ++i) {
                const double d = std::abs(double(gpu.params[0][i]) - double(twin->params[0][i]));
                worst = std::max(worst, d);
                b5 += d > 1e-5 * scale;
                b4 += d > 1e-4 * scale;
            }
            std::printf("horizon %d steps vs %s: beyond 1e-5 %zu, beyond 1e-4 %zu, largest %.3g; loss %.7f vs %.7f (%.2g)\n",
                        steps, label, b5, b4, worst / scale, gpu.loss_sum, twin->loss_sum,
                        std::abs(gpu.loss_sum - twin->loss_sum) / std::abs(twin->loss_sum));
        }
    }
}

void test_replicas() {
    const int batch = 32;
    test_resnet(batch);
    const Trained cpu = train_epochs(DeviceKind::cpu, 1, batch);
    const Trained one = train_epochs(DeviceKind::gpu, 1, batch);
    test_mixed(batch);
    test_other_allreduces(batch);
    test_overlap(batch);
    for (int n : {1, 2, 3}) {
        const std::string name = std::to_string(n) + " GPU replica" + (n > 1 ? "s" : "");
        const Trained gpu = n == 1 ? one : train_epochs(DeviceKind::gpu, n, batch);
        for (int i = 1; i < n; ++i)
            report(std::memcmp(gpu.params[0].data(), gpu.params[size_t(i)].data(),
                               lenet::model().param_count() * sizeof(float)) == 0,
                   name + ": replica " + std::to_string(i) + " has the same bits as replica 0");
        // Each sample's forward and backward is computed the same way
        // whatever the part it is in (a result element never depends on the
        // other samples), so N replicas differ from one only in the order
        // the weight gradients are summed, as CPU devices do (test_parallel).
        if (n > 1) compare(name + " vs 1 GPU replica: parameters after one epoch", gpu.params[0], one.params[0], 1e-5);
        compare_with_cpu(name + " vs 1 CPU device: parameters after one epoch", gpu.params[0], cpu.params[0]);
        report(std::abs(gpu.loss_sum - cpu.loss_sum) <= 1e-5 * std::abs(cpu.loss_sum),
               name + ": the epoch's loss sum matches the CPU's",
               std::to_string(gpu.loss_sum) + " vs " + std::to_string(cpu.loss_sum));
        // Rounding can flip a prediction only where two logits nearly tie.
        report(std::abs(gpu.correct - cpu.correct) <= 1, name + ": test predictions match the CPU's",
               std::to_string(gpu.correct) + " vs " + std::to_string(cpu.correct) + " correct of 64");

        report(gpu.first_bad_step == -1, name + ": the divergence watch stays quiet at lr 0.1");
        // lr 1e9 blows the weights up; the logits overflow within a few steps.
        const Trained cpu_blown = train_epochs(DeviceKind::cpu, n, batch, {.lr = 1e9f});
        const Trained gpu_blown = train_epochs(DeviceKind::gpu, n, batch, {.lr = 1e9f});
        report(gpu_blown.first_bad_step >= 1 && std::abs(gpu_blown.first_bad_step - cpu_blown.first_bad_step) <= 1,
               name + ": at lr 1e9 the divergence watch names the CPU's step (within one)",
               std::to_string(gpu_blown.first_bad_step) + " vs " + std::to_string(cpu_blown.first_bad_step));

        check_graph_replays(n, batch, name);
    }
    check_failed_recording(2, batch);
    check_capabilities();
    test_tf32_training(batch, one);
}

// What crosses streams, in few steps, for ThreadSanitizer on the emulated GPU
// (scripts/test.sh): a wait missing between two streams is then a reported
// race, not only wrong numbers. Replicas on two GPUs with each allreduce,
// queued and replayed; --overlap's second streams; GPUs beside CPU devices.
void test_streams() {
    // Two steps of 8 samples: ThreadSanitizer checks every access the
    // kernels make, some twenty times slower than without it.
    const int batch = 8;
    const EpochOptions few{.samples = 16};
    const auto with = [&](EpochOptions o) {
        o.samples = few.samples;
        return o;
    };
    const Trained naive_run = train_epochs(DeviceKind::gpu, 2, batch, few);
    for (const char* allreduce : {"naive", "ring"}) {
        const std::string name = "2 GPU replicas, " + std::string(allreduce);
        const Trained queued = allreduce == std::string("naive") ? naive_run
                                                                : train_epochs(DeviceKind::gpu, 2, batch, with({.allreduce = allreduce}));
        report(queued.params[0] == queued.params[1], name + ": replica 1 has the same bits as replica 0");
        const Trained replayed = train_epochs(DeviceKind::gpu, 2, batch, with({.graph = true, .allreduce = allreduce}));
        if (!replayed.params.empty()) report(same_bits(replayed, queued), name + ": a graph replay gives the queued bits");
        const Trained overlapped = train_epochs(DeviceKind::gpu, 2, batch, with({.allreduce = allreduce, .bucket_kb = 0}));
        report(same_bits(overlapped, queued), name + " --overlap --bucket-kb 0: the bits of no overlap");
    }
    for (const DeviceChoice& choice : {DeviceChoice::of(DeviceKind::gpu, 1).then(DeviceKind::cpu, 2), DeviceChoice::of(DeviceKind::gpu, 2).then(DeviceKind::cpu, 1)}) {
        const std::string name = "mixed, " + describe(choice);
        const Trained mixed = train_epochs(choice, batch, few);
        for (int i = 1; i < choice.count(); ++i)
            report(mixed.params[0] == mixed.params[size_t(i)], name + ": device " + std::to_string(i) + " has the same bits as device 0");
        report(same_bits(train_epochs(choice, batch, with({.bucket_kb = 0})), mixed), name + " --overlap: the bits of no overlap");
    }
}

// The trainer's order of events in a fresh process: devices made, parameters
// written, and the epoch recorded before any kernel has run, so every kernel
// module loads during the capture. Then the same against queued kernels.
void test_graph_first() { check_graph_replays(2, 32, "2 GPU replicas, graph recorded first"); }

}  // namespace dpt::gpu_test
