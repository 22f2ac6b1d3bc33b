// A device holds one replica of the model (flat parameter and gradient buffers,
// activations, a copy of the data set or access to it) and a *stream*: work
// is queued by the host and runs in order on the device, while the host goes
// on queuing. That is the CUDA model, and CPU devices follow it too (one
// worker thread each), so a training step (train_step in parallel.cpp) is
// the same code for both: the host queues the steps of an epoch and
// synchronises at the end, as the tutorial's `nd.waitall()`.
//
// Ordering *between* devices uses marks (CUDA: events): a.mark() queues a
// point on a's stream; b.wait_for(a) makes b's stream wait until a's stream
// has passed the mark most recently queued on a.
//
// Kinds: CPU devices (cpu_device.cpp) and GPU replicas (gpu_device.cpp),
// one row each in kinds.hpp; parallel/device_factory.hpp makes a run's.
#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/dataset.hpp"
#include "model/lenet.hpp"
#include "model/model.hpp"
#include "shapes.hpp"

namespace dpt {

// A GPU replica's kind is "cuda" in files and metrics (checkpoints, --metrics,
// compare's results), as those have always written it.
enum class DeviceKind { cpu, gpu };
const char* to_string(DeviceKind kind);

// Where a device's time goes during a step (--breakdown). Each device keeps
// a timeline cut by phase marks queued on its stream: the time from one mark
// to the next counts toward the first mark's phase. What wait and allreduce
// cover depends on the allreduce algorithm, which says so (allreduce.hpp).
enum class Phase : uint8_t {
    load,       // split_and_load: gathering the part's samples
    compute,    // forward and backward (a trace: forward, up to the loss)
    wait,       // inside the allreduce, waiting for a peer to be ready
    allreduce,  // inside the allreduce, moving and summing gradients
    update,     // the SGD update and the divergence watch
    idle,       // after the epoch's last mark
    // With --overlap the allreduce runs on a second stream (Device::await_bucket):
    exposed,    // the update's stream waiting for the allreduce's to finish
    standby,    // the allreduce's stream waiting for backward to finish a bucket
    // Marked only when traced (Device::trace_phases), inside forward_backward:
    backward,   // from the loss back to the first layer's gradients
    // Inside the allreduce, the device copying gradients from or into a peer
    // (its other time there is the sums and waiting for them):
    copy,
};
inline constexpr int phase_count = 10;
// The phase a span's time counts toward: --breakdown, --metrics and
// compare time forward and backward as one (compute), and the allreduce's
// copies and sums as one (allreduce); a trace shows them apart.
inline Phase timed_as(Phase phase) {
    return phase == Phase::backward ? Phase::compute : phase == Phase::copy ? Phase::allreduce : phase;
}
using PhaseTimes = std::array<double, phase_count>;  // seconds, indexed by Phase

// Each phase's name, the one spelling that --breakdown, the trace, compare
// and scripts/plot.py use (tests/test_vocabulary.py holds them to it). A
// trace names compute "forward": there backward is a span of its own.
inline const char* phase_name(Phase phase) {
    switch (phase) {
        case Phase::load: return "split_and_load";
        case Phase::compute: return "forward+backward";
        case Phase::wait: return "waiting for peers";
        case Phase::allreduce: return "allreduce";
        case Phase::update: return "SGD update";
        case Phase::idle: return "idle";
        case Phase::exposed: return "waiting for the allreduce";
        case Phase::standby: return "waiting for a bucket";
        case Phase::backward: return "backward";
        case Phase::copy: return "copy between devices";
    }
    return "?";
}

// The phases of the allreduce's stream; the others are the main stream's.
// Without --overlap the two are one stream.
inline bool on_allreduce_stream(Phase phase) {
    return phase == Phase::wait || phase == Phase::allreduce || phase == Phase::copy || phase == Phase::standby;
}

// --trace: one stretch of a stream in one phase, from one phase mark to the
// next, in seconds since the trace's origin (a host clock reading: CPU
// devices read that clock, GPUs place their events against one recorded
// at the origin). Stream 0 is the main one, 1 the allreduce's (--overlap).
struct PhaseSpan {
    Phase phase;
    uint8_t stream;
    double start, end;
};

// What a kind of device can do: what the trainer asks, instead of its kind.
struct Capabilities {
    // Its queued work can be recorded once and replayed as one launch (CUDA graphs).
    bool records_graphs = false;
    // The host paces it: throttle() keeps the host within a step or two of
    // its stream, so work queued is work nearly done (a progress bar shows
    // steps done; a run of several processes can stop at an agreed step).
    bool host_paced = false;
};

// Work queued on several devices that record graphs (Capabilities), recorded
// once and replayed (on GPUs a CUDA graph): one launch instead of a launch per kernel and copy. The recorded
// work reads the same device buffers on every replay (their contents may
// change in between, e.g. the epoch's sample order).
class Recording {
   public:
    virtual ~Recording() = default;
    // Queues the recorded work again, ordered after everything queued so far
    // on every device, and before anything queued later. Phase marks made
    // while recording (begin_phase) are part of the work: each replay marks
    // them again, and the next take of phase times or spans reads them.
    virtual void replay() = 0;
};

// One device of a run: its kind, and which of that kind's devices it is
// (--devices gpu:1: CUDA device 1). `any` where the command line did not
// say (--gpus N): the kind places it when the devices are made.
struct DevicePlace {
    static constexpr int any = -1;
    DeviceKind kind;
    int ordinal = any;
    bool operator==(const DevicePlace&) const = default;
};

// The devices of a run, in order: the kinds in the order of devices/kinds.hpp's
// table (GPU replicas first, then CPU devices), so device 0, where the naive
// allreduce sums, is a GPU whenever there is one.
struct DeviceChoice {
    std::vector<DevicePlace> places;
    // n devices of one kind, each placed by the kind.
    static DeviceChoice of(DeviceKind kind, int n) {
        return DeviceChoice{std::vector<DevicePlace>(size_t(n), DevicePlace{kind})};
    }
    // These followed by n devices of `kind`, placed by the kind (a kind after
    // the last one here in the table's order).
    DeviceChoice then(DeviceKind kind, int n) const {
        DeviceChoice more = *this;
        more.places.insert(more.places.end(), size_t(n), DevicePlace{kind});
        return more;
    }
    int count() const { return int(places.size()); }
    int count(DeviceKind kind) const {
        return int(std::count_if(places.begin(), places.end(), [&](const DevicePlace& p) { return p.kind == kind; }));
    }
    // The places of `kind`'s devices, in order; empty when it placed none itself.
    std::vector<int> ordinals(DeviceKind kind) const {
        std::vector<int> given;
        for (const DevicePlace& p : places)
            if (p.kind == kind && p.ordinal != DevicePlace::any) given.push_back(p.ordinal);
        return given;
    }
    bool mixed() const { return !places.empty() && places.back().kind != places.front().kind; }
    DeviceKind kind() const { return places.empty() ? DeviceKind::cpu : places.front().kind; }  // the first device's
    // As many devices of each kind as `other`, wherever they are placed.
    bool same_counts(const DeviceChoice& other) const {
        return std::equal(places.begin(), places.end(), other.places.begin(), other.places.end(),
                          [](const DevicePlace& a, const DevicePlace& b) { return a.kind == b.kind; });
    }
    bool operator==(const DeviceChoice&) const = default;
};

// "2 CPU devices", "1 GPU replica and 2 CPU devices".
std::string describe(const DeviceChoice& choice);

// Host memory every GPU can read and write (CUDA: pinned and mapped), for
// what a mixed run's GPU replicas reach on CPU devices: their gradient
// buffers and mark counts. Blocks live as long as this object; every device
// of the run holds it, so none outlives another's copies.
class SharedHostMemory {
   public:
    virtual ~SharedHostMemory() = default;
    virtual void* allocate(size_t bytes) = 0;  // zeroed, aligned for any type
};

// Where a device's stream counts the marks it has passed, in host memory
// (so that a device of the other kind can wait on it), and how many have
// been queued so far.
struct HostMarks {
    const std::atomic<uint64_t>* passed = nullptr;  // null: not counted (a GPU outside a mixed run)
    uint64_t queued = 0;
};

// Sums a range of gradients over the processes of a multi-process run, in
// place, on the host (cluster.hpp: the Cluster is one). Every process makes
// the same calls in the same order; each call returns when the sum is there.
class ProcessSum {
   public:
    virtual ~ProcessSum() = default;
    virtual void sum(float* data, size_t count) = 0;
};

// What every replica of a run is built from.
struct ReplicaSetup {
    const Dataset* train = nullptr;  // must outlive the devices
    const Dataset* test = nullptr;
    int capacity = 0;                // most samples one part can hold: ceil(B / N)
    PoolKind pool = PoolKind::avg;
    // Floats of the gradient buffer: 0 is the model's (Model::gradient_floats);
    // dptrain bench-allreduce asks for more, to time large messages.
    size_t gradient_floats = 0;
    // --overlap: the buckets backward hands to the allreduce, in the order
    // it finishes them (the last layers' first; parallel.hpp:
    // overlap_buckets). Empty: one stream, the allreduce after backward.
    std::vector<Range> buckets{};
    const Model* model = &lenet::model();
    BatchNormMode bn = BatchNormMode::local;  // --bn: ignored by a model without batch norm
    // A multi-process run: device 0 sums gradients across the processes
    // (Device::sum_across; a GPU keeps pinned host memory for it).
    bool across_processes = false;
    // --tf32: the conv and dense products on the GPUs' tensor cores; CPU
    // devices round the operands the same way (shapes.hpp: Math).
    Math math = Math::fp32;

    // Floats of each replica's gradient buffer.
    size_t grad_floats() const { return std::max(model->gradient_floats(), gradient_floats); }
};

class Device {
   public:
    virtual ~Device() = default;
    virtual DeviceKind kind() const = 0;
    virtual Capabilities capabilities() const = 0;
    virtual std::string name() const = 0;  // "cpu:0", "gpu:1" (as --cpus and --gpus name them)
    // Floats in the flat parameter buffer (Model::param_count()).
    virtual size_t param_floats() const = 0;

    // --- Synchronous: each first waits for the device's queued work. ---
    virtual void synchronize() = 0;
    virtual void write_params(std::span<const float> host) = 0;
    virtual void read_params(std::span<float> host) = 0;
    virtual void write_grads(std::span<const float> host) = 0;
    virtual void read_grads(std::span<float> host) = 0;
    // The part last loaded: images (count, 784) in [0, 1] and labels. Returns count.
    virtual int read_input(std::span<float> images, std::span<int32_t> labels) = 0;
    // After forward_backward(): the logits (count, 10) its forward computed for
    // the loaded part (dptrain inspect shows them). Returns count.
    virtual int read_outputs(std::span<float> logits) = 0;
    // Sum of training losses / number of correct test predictions since the last take.
    virtual double take_loss_sum() = 0;
    virtual int64_t take_correct() = 0;
    // The earliest step given to check_gradients() that saw a NaN or an
    // infinity since the last take, or -1.
    virtual int32_t take_first_bad_step() = 0;

    // --- Host side, without waiting for the device (GPUs), or briefly (CPU). ---
    // Blocks while more than `steps` SGD updates are queued and unfinished, so
    // that a stop request between steps takes effect within a step or two.
    // CPU devices wait here (their queue could hold the whole epoch); GPUs
    // return at once, since a GPU's launch queue holds only milliseconds of work.
    virtual void throttle(int steps) = 0;

    // --- Asynchronous: queued on the device's stream. ---
    // The epoch's sample order; `order` is host memory that must stay unchanged
    // until the next synchronize().
    virtual void set_order(const uint32_t* order, size_t count) = 0;
    // Input <- training samples order[first : first + count); count may be 0.
    virtual void load_train(size_t first, int count) = 0;
    // Gradients <- sum over the loaded part of d(loss)/d(params); the part's
    // loss is added to the loss sum. An empty part leaves zero gradients.
    // With buckets (--overlap), backward hands each bucket to the
    // allreduce's stream as soon as its gradients are final. With --bn sync
    // the pass runs in stages 0, 1, ... S, S being the number of ranges of
    // Model::sync_ranges(bn) (the step plan's syncs), the host allreducing
    // range s between stage s and s + 1; `batch` is the step's samples on
    // all devices (what the summed statistics count).
    virtual void forward_backward(int stage = 0, int batch = 0) = 0;
    // params -= scale * gradients (the trained ones); batch norm's running
    // statistics move by the step's, summed over `batch` samples.
    virtual void sgd_update(float scale, int batch) = 0;
    // Notes `step` as bad when the gradients hold a NaN or an infinity (the
    // divergence watch; read back with take_first_bad_step()).
    virtual void check_gradients(int32_t step) = 0;
    // Forward over test samples [first, first + count) (count <= capacity),
    // adding the number of correct predictions to the device's count.
    virtual void evaluate_test(size_t first, int count) = 0;

    // --- With --breakdown only. ---
    // Queued: from here on this device's time counts toward `phase`.
    virtual void begin_phase(Phase phase) = 0;
    // Synchronous: the seconds spent in each phase since the last take, from
    // the device's own clock (CPU: steady_clock on the worker; GPU: events).
    virtual PhaseTimes take_phase_times() = 0;
    // --trace: from now on the phase marks also keep their spans, timed from
    // `origin` (synchronous: it waits for the device's queued work).
    virtual void trace_phases(std::chrono::steady_clock::time_point origin) = 0;
    // Synchronous: the spans since the last take (empty unless traced), each
    // stream's in order. The idle phase has none.
    virtual std::vector<PhaseSpan> take_phase_spans() = 0;

    // Synchronous: the share of a core the device's forward+backward got since
    // the last take (its thread's CPU time over the wall time), or -1 where
    // the device cannot measure it (GPUs). Well under 1 on a CPU device means
    // another program took the core, not that the algorithm is slow.
    virtual double take_core_share() { return -1.0; }

    // --slowdown: from now on forward_backward() computes each part `factor`
    // times over (the same gradients and loss, `factor` times the time): a
    // device that is slower by a known factor, for trying --split on
    // identical devices and for testing it. False where the kind cannot (GPUs).
    virtual bool slow_down(int factor) {
        (void)factor;
        return false;
    }

    // --- Asynchronous: the pieces of an allreduce (allreduce.hpp). ---
    // They are queued on the device's allreduce stream: its stream, or with
    // buckets (--overlap) a second one, so that the allreduce of one bucket
    // runs while backward computes the next. Phase marks of the allreduce's
    // phases (on_allreduce_stream) go there too.
    // Ranges are in floats of the flat gradient buffer; `staged` in floats of
    // this device's staging memory (ReplicaSetup::staging_floats).
    //
    // With buckets (ReplicaSetup::buckets, the step plan's): the allreduce stream waits until backward has finished
    // the next bucket (the k-th call since the device was made waits for
    // the k-th bucket handed over)...
    virtual void await_bucket() = 0;
    // ... and the main stream waits for everything queued so far on the
    // allreduce stream (before the update reads the summed gradients).
    virtual void await_allreduce() = 0;
    // With buckets and --bn sync: the allreduce stream waits for everything
    // queued so far on the main stream (a stage's batch norm sums).
    virtual void await_main() = 0;
    virtual void mark() = 0;
    virtual void wait_for(Device& other) = 0;
    // Across kinds, in a mixed run: the marks this device's stream has passed,
    // counted in host memory; and its gradient buffer where that is host
    // memory (CPU devices; GPUs: null). A GPU replica waits for a CPU device
    // and copies its gradients through these; a CPU device only waits for a
    // GPU (copies between kinds are the GPU's: its copy engine moves them).
    // (reach() below is the rule every kind follows.)
    virtual HostMarks host_marks() = 0;
    virtual float* host_grads() { return nullptr; }
    // Why this device's streams can no longer run (a GPU's sticky error), or
    // empty while they can. A CPU device that waits for a GPU's mark asks
    // it while it waits: the host function that passes the mark never runs
    // on a failed GPU. (A failed CPU device passes every mark at once.)
    // Called from other threads.
    virtual std::string failure() { return {}; }
    // staging[staged : staged + count) <- peer's gradients[first : first + count).
    virtual void copy_from_peer(Device& peer, size_t first, size_t count, size_t staged) = 0;
    // gradients[first : first + count) += each of `slots` staged ranges of
    // `count` floats that follow each other from `staged`, in that order.
    virtual void reduce_staged(size_t first, size_t count, size_t staged, int slots) = 0;
    // peer's gradients[first : first + count) <- this device's gradients there.
    virtual void copy_to_peer(Device& peer, size_t first, size_t count) = 0;
    // gradients[range] <- their sum over the processes of the run, by `sum`
    // on the host (a CPU device's worker calls it on the buffer itself; a
    // GPU copies the range to pinned host memory, calls it from a host
    // function, copies the sum back). Needs ReplicaSetup::across_processes.
    virtual void sum_across(ProcessSum& sum, Range range) = 0;
};

// The one rule for what crosses between two devices, the marks waited for
// and the gradients copied, whatever their kinds: a device reaches a peer
// of its own kind its own way (GPUs: events and peer copies; CPU devices:
// counters and memory); a peer of another kind only through host memory
// that both map (the run's SharedHostMemory): the peer's host_marks() and,
// for a copy, its host_grads(). Where those are null the copy is not this
// device's to make but the peer's (it reaches this device's), and an
// allreduce that needs it otherwise refuses such a run (Allreduce::refusal).
enum class Reach { own_kind, host_memory, none };
// How `self` reaches `peer`'s marks (for a wait) or, with `copy`, its gradients.
inline Reach reach(const Device& self, Device& peer, bool copy) {
    if (peer.kind() == self.kind()) return Reach::own_kind;
    const bool there = copy ? peer.host_grads() != nullptr : peer.host_marks().passed != nullptr;
    return there ? Reach::host_memory : Reach::none;
}

// CPU devices, one worker thread each: device i keeps staging_floats[i]
// floats of staging memory for the allreduce. With `shared` (a mixed run),
// their gradients and mark counts live there, for the GPUs to reach.
// device_factory.hpp makes devices of either kind, asking the algorithm;
// this is its CPU half.
std::vector<std::unique_ptr<Device>> make_cpu_devices(const ReplicaSetup& setup,
                                                      std::span<const size_t> staging_floats,
                                                      std::shared_ptr<SharedHostMemory> shared = nullptr);

// A CPU device runs a part through forward and backward in chunks of this
// many samples (cpu_device.cpp says why); with --overlap it hands buckets
// over during the last chunk's backward.
inline constexpr int cpu_chunk_samples = 32;

// Cores this process may run on.
int usable_cores();

}  // namespace dpt
