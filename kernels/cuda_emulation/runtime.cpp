// The emulated GPU's CUDA runtime (cuda_runtime_api.h): devices, memory,
// streams, events, host functions, peer copies, stream capture and graphs,
// on the CPU. What it models, each because a real bug would hide behind it:
//
//  - Streams: each an in-order queue with a host thread of its own, so that
//    the streams of one device, and of every device, run at the same time and
//    only events order them. cudaStreamWaitEvent waits for the record that
//    is current when it is called, not for later ones.
//  - Memory: cudaMalloc's memory comes poisoned (every byte 0xFF: NaN as a
//    float), every copy and fill is checked against the allocation it
//    touches and the direction it claims, and a misuse fails the call with a
//    message on stderr that says what and where.
//  - Capture and graphs: what CUDA refuses while a stream captures is
//    refused here (synchronising, allocating, a fork not joined back), and a
//    graph's nodes replay in a random order that respects their
//    dependencies, so a missing dependency changes results. An event
//    recorded with cudaEventRecordExternal is a node of the graph, recorded
//    again by each launch where the node runs (timing inside a graph).
//  - Errors: a kernel whose block's threads do not all reach a barrier, or
//    a fault injected by DPTRAIN_EMULATED_FAULT, is a sticky error of its
//    device, as an illegal address is on a GPU: every later call about that
//    device returns it, and its queued work no longer runs.
//
// Settings, from the environment: DPTRAIN_EMULATED_GPUS (how many, default
// 2), DPTRAIN_EMULATED_SEED (the block, thread and graph orders; default 1),
// DPTRAIN_EMULATED_FAULT=D:S (GPU D's first kernel of training step S:
// the first kernel it runs after its S-1'th SGD update),
// DPTRAIN_EMULATED_LAUNCH_LOG=FILE (a line for each kernel, copy, fill and
// host function as it is queued or captured: what scripts/kernel_figures.py
// counts a training step's kernels and graph nodes from).
#include <link.h>
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "block.hpp"
#include "device_code.hpp"

using Clock = std::chrono::steady_clock;

namespace dpt::cuda_emulation {

size_t static_tls_bytes() {
    size_t bytes = 0;
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* sum) {
            for (int i = 0; i < info->dlpi_phnum; ++i)
                if (info->dlpi_phdr[i].p_type == PT_TLS) *static_cast<size_t*>(sum) += info->dlpi_phdr[i].p_memsz;
            return 0;
        },
        &bytes);
    return bytes;
}

namespace {

// Every kernel's __shared__ memory is thread-local (device_code.hpp), so each
// thread holds all of them (7.5 MB today, and more with each
// kernel added), and glibc takes a thread's static TLS out of its stack: of
// the default 8 MB, 0.2 MB would be left, which a stream thread under
// ThreadSanitizer overran. Threads started from here on (streams, CPU
// devices' workers, a test's) get the default stack besides their TLS.
const bool stacks_sized = [] {
    pthread_attr_t attr;
    size_t stack = 0;
    if (pthread_getattr_default_np(&attr) != 0) return false;
    pthread_attr_getstacksize(&attr, &stack);
    if (rlimit limit{}; stack == 0 && getrlimit(RLIMIT_STACK, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
        stack = limit.rlim_cur;
    stack = std::max<size_t>(stack, size_t(8) << 20) + static_tls_bytes();
    const bool set = pthread_attr_setstacksize(&attr, stack) == 0 && pthread_setattr_default_np(&attr) == 0;
    pthread_attr_destroy(&attr);
    return set;
}();

constexpr size_t memory_per_device = size_t(16) << 30;  // what cudaMemGetInfo and the properties say

void say(const std::string& what) { std::fprintf(stderr, "emulated CUDA: %s\n", what.c_str()); }

std::string address(const void* p) {
    char text[32];
    std::snprintf(text, sizeof text, "%p", p);
    return text;
}

int env_int(const char* name, int fallback) {
    const char* text = std::getenv(name);
    if (!text || !*text) return fallback;
    char* end = nullptr;
    const long v = std::strtol(text, &end, 10);
    if (*end != '\0' || v < 0 || v > 64) {
        say(std::string(name) + "=" + text + " is not a count from 0 to 64; taking " + std::to_string(fallback));
        return fallback;
    }
    return int(v);
}

// The compute capability the GPUs report: DPTRAIN_EMULATED_CAPABILITY
// ("7.0"; an H100's 9.0 by default), so that the refusals of a GPU that a
// build has no code for, or no TF32 tensor cores, can be tried.
std::pair<int, int> capability() {
    static const std::pair<int, int> value = [] {
        const char* text = std::getenv("DPTRAIN_EMULATED_CAPABILITY");
        if (!text || !*text) return std::pair{9, 0};
        int major = 0, minor = 0;
        char end = 0;
        if (std::sscanf(text, "%d.%d%c", &major, &minor, &end) != 2 || major < 1 || major > 99 || minor < 0 ||
            minor > 9) {
            say(std::string("DPTRAIN_EMULATED_CAPABILITY=") + text + " is not MAJOR.MINOR (such as 8.6); taking 9.0");
            return std::pair{9, 0};
        }
        return std::pair{major, minor};
    }();
    return value;
}

}  // namespace

// ---- graphs, as recorded by stream capture ----

struct Node {
    int device;
    std::string what;                  // for messages
    std::function<void()> run;         // a copy, a fill or a host function
    std::shared_ptr<KernelLaunch> kernel;  // or a kernel
    std::vector<size_t> deps;          // nodes that must run first
    cudaEvent_t records = nullptr;     // or a record of this event (cudaEventRecordExternal)
};

}  // namespace dpt::cuda_emulation

struct EmulatedGraph {
    std::vector<dpt::cuda_emulation::Node> nodes;
};
struct EmulatedGraphExec {
    std::shared_ptr<const EmulatedGraph> graph;
    uint64_t launches = 0;
};

namespace dpt::cuda_emulation {

struct Capture {
    EmulatedGraph graph;
    cudaStreamCaptureMode mode;
    std::thread::id thread;
    EmulatedStream* origin;
    std::vector<EmulatedStream*> streams;  // origin first, then those that joined
    std::string invalidated;               // why, when a refused call invalidated it
    std::vector<EmulatedEvent*> events;    // recorded in it: they forget it when it ends
};

}  // namespace dpt::cuda_emulation

// ---- streams ----

struct EmulatedStream {
    int device;
    std::mt19937_64 rng;  // block, thread and graph orders of what runs here

    std::mutex m;
    std::condition_variable work, idle;
    std::deque<std::function<void()>> queue;
    uint64_t queued = 0, finished = 0;
    bool stopping = false;
    std::thread worker;

    // While capturing: the capture, and the nodes the next one depends on.
    dpt::cuda_emulation::Capture* capture = nullptr;
    std::vector<size_t> frontier;

    EmulatedStream(int device_, uint64_t seed) : device(device_), rng(seed) {
        worker = std::thread([this] { run(); });
    }
    ~EmulatedStream() {
        {
            std::lock_guard lock(m);
            stopping = true;
        }
        work.notify_all();
        worker.join();
    }

    void push(std::function<void()> op) {
        {
            std::lock_guard lock(m);
            queue.push_back(std::move(op));
            ++queued;
        }
        work.notify_one();
    }
    // Until everything queued before now has run.
    void wait_idle() {
        std::unique_lock lock(m);
        const uint64_t target = queued;
        idle.wait(lock, [&] { return finished >= target; });
    }
    bool is_idle() {
        std::lock_guard lock(m);
        return finished == queued;
    }

   private:
    void run() {
        std::unique_lock lock(m);
        for (;;) {
            work.wait(lock, [&] { return stopping || !queue.empty(); });
            if (queue.empty()) return;
            std::function<void()> op = std::move(queue.front());
            queue.pop_front();
            lock.unlock();
            op();
            lock.lock();
            ++finished;
            idle.notify_all();
        }
    }
};

// ---- events ----

struct EmulatedEvent {
    int device;
    unsigned flags;
    std::mutex m;
    std::condition_variable done;
    uint64_t records = 0;           // issued
    uint64_t completed_upto = 0;    // every record up to this one has completed
    std::set<uint64_t> completed_ahead;  // completed out of order (records on several streams)
    Clock::time_point when{};       // the latest completion
    // Recorded in a capture: the capture and the nodes a wait then depends on.
    dpt::cuda_emulation::Capture* capture = nullptr;
    std::vector<size_t> captured;

    bool completed(uint64_t record) const { return record <= completed_upto || completed_ahead.count(record); }
    void complete(uint64_t record) {
        {
            std::lock_guard lock(m);
            when = Clock::now();
            completed_ahead.insert(record);
            while (completed_ahead.count(completed_upto + 1)) completed_ahead.erase(++completed_upto);
        }
        done.notify_all();
    }
    void wait(uint64_t record) {
        std::unique_lock lock(m);
        done.wait(lock, [&] { return completed(record); });
    }
};

namespace dpt::cuda_emulation {
namespace {

struct Device {
    std::mutex m;
    std::vector<EmulatedStream*> streams;  // every live stream of the device
    std::unique_ptr<EmulatedStream> legacy;  // stream 0
    std::set<int> peers;                    // peer access enabled to these
    size_t allocated = 0;
    uint64_t streams_made = 0;
    std::atomic<int> sticky{cudaSuccess};  // an error that every later call about the device returns
    std::atomic<uint64_t> updates{0};      // SGD kernels run: the training steps done (faults count by them)
};

enum class Place { device, pinned };
struct Allocation {
    size_t bytes;
    Place place;
    int device;  // for Place::device
};

struct Runtime {
    int device_count = env_int("DPTRAIN_EMULATED_GPUS", 2);
    uint64_t seed = uint64_t(env_int("DPTRAIN_EMULATED_SEED", 1));
    int fault_device = -1;
    uint64_t fault_step = 0;
    std::atomic<bool> fault_fired{false};
    std::vector<std::unique_ptr<Device>> devices;

    std::mutex memory_mutex;
    std::map<uintptr_t, Allocation> allocations;

    std::mutex capture_mutex;
    std::vector<Capture*> captures;  // active

    Runtime() {
        for (int d = 0; d < device_count; ++d) devices.push_back(std::make_unique<Device>());
        if (const char* fault = std::getenv("DPTRAIN_EMULATED_FAULT"); fault && *fault) {
            int d = -1;
            unsigned long long s = 0;
            char extra = 0;
            if (std::sscanf(fault, "%d:%llu%c", &d, &s, &extra) == 2 && d >= 0 && d < device_count && s >= 1) {
                fault_device = d;
                fault_step = s;
            } else {
                say(std::string("DPTRAIN_EMULATED_FAULT=") + fault + " is not D:S (a GPU from 0 to " +
                    std::to_string(device_count - 1) + ", a step from 1); no fault will be made");
            }
        }
    }
    ~Runtime() {
        for (auto& d : devices) d->legacy.reset();  // joins their threads before the rest goes
    }
};

Runtime& rt() {
    static Runtime runtime;
    return runtime;
}

thread_local DPTRAIN_EMULATION_TLS int current_device = 0;
thread_local DPTRAIN_EMULATION_TLS cudaError_t last_error = cudaSuccess;

// Every failing call leaves its error for cudaGetLastError, as CUDA's do.
cudaError_t fail(cudaError_t error) {
    last_error = error;
    return error;
}
cudaError_t fail(cudaError_t error, const std::string& why) {
    say(why);
    return fail(error);
}

bool valid_device(int d) { return d >= 0 && d < rt().device_count; }
Device& device(int d) { return *rt().devices[size_t(d)]; }
// (With DPTRAIN_EMULATED_GPUS=0 there is no device 0 to hold one: none.)
cudaError_t sticky(int d) {
    if (d < 0 || size_t(d) >= rt().devices.size()) return cudaSuccess;
    return cudaError_t(device(d).sticky.load());
}
// What a call about device d returns once its own work is done: the
// device's sticky error (left for cudaGetLastError too), or success.
cudaError_t device_status(int d) {
    if (cudaError_t e = sticky(d); e != cudaSuccess) return fail(e);
    return cudaSuccess;
}

EmulatedStream* resolve(cudaStream_t stream) {
    if (stream) return stream;
    Device& d = device(current_device);
    std::lock_guard lock(d.m);
    if (!d.legacy) d.legacy = std::make_unique<EmulatedStream>(current_device, rt().seed * 1000003u);
    return d.legacy.get();
}

// ---- memory ----

// The allocation that holds p, if any.
const Allocation* find(const void* p, uintptr_t* base) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    auto it = rt().allocations.upper_bound(a);
    if (it == rt().allocations.begin()) return nullptr;
    --it;
    if (a >= it->first + std::max<size_t>(it->second.bytes, 1)) return nullptr;
    *base = it->first;
    return &it->second;
}

std::string describe(const Allocation* a) {
    if (!a) return "host memory that CUDA did not allocate";
    return a->place == Place::device ? "memory of GPU " + std::to_string(a->device) : "pinned host memory";
}

// Whether [p, p + bytes) lies in one allocation in the place `want` says
// (device: on `device`, or any when it is -1; host: not device memory); else
// the reason, for the message.
std::string check_range(const char* call, const char* side, const void* p, size_t bytes, bool want_device,
                        int want_gpu = -1) {
    if (bytes > 0 && !p) return std::string(call) + ": the " + side + " is a null pointer";
    uintptr_t base = 0;
    const Allocation* a = find(p, &base);
    const bool on_device = a && a->place == Place::device;
    if (want_device && !on_device)
        return std::string(call) + ": the " + side + " " + address(p) + " should be GPU memory, but is " + describe(a);
    if (!want_device && on_device)
        return std::string(call) + ": the " + side + " " + address(p) + " should be host memory, but is " + describe(a);
    if (want_device && want_gpu >= 0 && a->device != want_gpu)
        return std::string(call) + ": the " + side + " " + address(p) + " should be on GPU " + std::to_string(want_gpu) +
               ", but is on GPU " + std::to_string(a->device);
    if (a && reinterpret_cast<uintptr_t>(p) + bytes > base + a->bytes)
        return std::string(call) + ": " + std::to_string(bytes) + " bytes at the " + side + " " + address(p) +
               " run past the end of its allocation (" + std::to_string(a->bytes) + " bytes at " +
               address(reinterpret_cast<void*>(base)) + ", " + describe(a) + ")";
    return "";
}

// A copy's places checked against its kind; "" or why not.
std::string check_copy(const char* call, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                       bool* src_pageable, bool* dst_pageable) {
    std::lock_guard lock(rt().memory_mutex);
    uintptr_t base = 0;
    const Allocation* s = find(src, &base);
    const Allocation* d = find(dst, &base);
    *src_pageable = !s;
    *dst_pageable = !d;
    const bool src_device = s && s->place == Place::device, dst_device = d && d->place == Place::device;
    std::string why;
    switch (kind) {
        case cudaMemcpyHostToDevice:
            why = check_range(call, "source", src, bytes, false);
            if (why.empty()) why = check_range(call, "destination", dst, bytes, true);
            break;
        case cudaMemcpyDeviceToHost:
            why = check_range(call, "source", src, bytes, true);
            if (why.empty()) why = check_range(call, "destination", dst, bytes, false);
            break;
        case cudaMemcpyDeviceToDevice:
            why = check_range(call, "source", src, bytes, true);
            if (why.empty()) why = check_range(call, "destination", dst, bytes, true);
            break;
        case cudaMemcpyHostToHost:
        case cudaMemcpyDefault:
            why = check_range(call, "source", src, bytes, src_device);
            if (why.empty()) why = check_range(call, "destination", dst, bytes, dst_device);
            break;
        default:
            why = std::string(call) + ": no such copy kind " + std::to_string(int(kind));
    }
    return why;
}

// ---- capture ----

// A call that CUDA refuses while this thread (cudaStreamCaptureModeThreadLocal),
// or any thread (Global), captures: it fails, and invalidates the capture.
cudaError_t refused_while_capturing(const char* call) {
    std::lock_guard lock(rt().capture_mutex);
    for (Capture* c : rt().captures) {
        const bool applies = c->mode == cudaStreamCaptureModeGlobal ||
                             (c->mode == cudaStreamCaptureModeThreadLocal && c->thread == std::this_thread::get_id());
        if (!applies) continue;
        if (c->invalidated.empty()) c->invalidated = std::string(call) + " was called while a stream was capturing";
        return fail(cudaErrorStreamCaptureUnsupported,
                    std::string(call) + " is not allowed while a stream captures (CUDA refuses it too)");
    }
    return cudaSuccess;
}

// Adds a node to the capture `s` belongs to, after s's frontier.
void add_node(EmulatedStream* s, Node node) {
    Capture& c = *s->capture;
    node.deps = s->frontier;
    c.graph.nodes.push_back(std::move(node));
    s->frontier = {c.graph.nodes.size() - 1};
}

// ---- what runs on a stream ----

// A kernel on device d, unless the device has failed; the injected fault
// fires here.
void run_kernel(int d, const KernelLaunch& k, std::mt19937_64& rng) {
    Device& dev = device(d);
    if (dev.sticky.load() != cudaSuccess) return;
    Runtime& r = rt();
    if (d == r.fault_device && dev.updates.load() + 1 == r.fault_step && !r.fault_fired.exchange(true)) {
        say("GPU " + std::to_string(d) + ": a fault made on purpose (DPTRAIN_EMULATED_FAULT=" + std::to_string(d) + ":" +
            std::to_string(r.fault_step) + ") in kernel " + k.name + ", the first of training step " +
            std::to_string(r.fault_step) + ", as an illegal memory access would");
        dev.sticky = cudaErrorIllegalAddress;
        return;
    }
    const std::string failure = run_blocks(k, rng);
    if (!failure.empty()) {
        say("GPU " + std::to_string(d) + ": " + failure);
        dev.sticky = cudaErrorLaunchFailure;
        return;
    }
    if (std::strncmp(k.name, "sgd", 3) == 0) ++dev.updates;  // "sgd", "sgd_checked": a training step's update
}

// `issued`: for each node that records an event, the record its launch issued.
void run_graph(const EmulatedGraph& graph, uint64_t launch, uint64_t seed, const std::vector<uint64_t>& issued) {
    const std::vector<Node>& nodes = graph.nodes;
    std::mt19937_64 rng(seed ^ (launch * 0x9E3779B97F4A7C15ull));
    // Kahn's algorithm, taking a random ready node each time.
    std::vector<size_t> waiting_on(nodes.size());
    std::vector<std::vector<size_t>> after(nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i) {
        waiting_on[i] = nodes[i].deps.size();
        for (size_t d : nodes[i].deps) after[d].push_back(i);
    }
    std::vector<size_t> ready;
    for (size_t i = 0; i < nodes.size(); ++i)
        if (waiting_on[i] == 0) ready.push_back(i);
    while (!ready.empty()) {
        std::swap(ready[std::uniform_int_distribution<size_t>(0, ready.size() - 1)(rng)], ready.back());
        const size_t i = ready.back();
        ready.pop_back();
        const Node& n = nodes[i];
        if (n.kernel) run_kernel(n.device, *n.kernel, rng);
        else if (n.records) n.records->complete(issued[i]);  // even on a failed device, as a queued record
        else if (sticky(n.device) == cudaSuccess) n.run();
        for (size_t j : after[i])
            if (--waiting_on[j] == 0) ready.push_back(j);
    }
}

// DPTRAIN_EMULATED_LAUNCH_LOG: one tab-separated line for each piece of
// work as it is queued or captured: device, "captured" or "queued", what,
// then for a kernel its grid, its block and its parameters' mangled type.
void log_work(const EmulatedStream* s, const std::string& what, dim3 grid = {0, 0, 0}, dim3 block = {0, 0, 0},
              const char* signature = nullptr) {
    static const char* path = std::getenv("DPTRAIN_EMULATED_LAUNCH_LOG");
    if (!path || !*path) return;
    static std::mutex m;
    static FILE* log = [] {
        FILE* f = std::fopen(path, "w");
        if (!f)
            std::fprintf(stderr, "dptrain: DPTRAIN_EMULATED_LAUNCH_LOG: cannot write %s (%s); no work is logged\n",
                         path, std::strerror(errno));
        return f;
    }();
    std::lock_guard lock(m);
    if (!log) return;
    std::fprintf(log, "%d\t%s\t%s", s->device, s->capture ? "captured" : "queued", what.c_str());
    if (signature)
        std::fprintf(log, "\t%u,%u,%u\t%u,%u,%u\t%s", grid.x, grid.y, grid.z, block.x, block.y, block.z, signature);
    std::fputc('\n', log);
    std::fflush(log);
}

// Queues `op` on s, or adds it to s's capture. `op` does not run once its
// device has failed.
cudaError_t enqueue(EmulatedStream* s, std::string what, std::function<void()> op) {
    if (cudaError_t e = device_status(s->device); e != cudaSuccess) return e;
    log_work(s, what);
    if (s->capture) {
        add_node(s, Node{s->device, std::move(what), std::move(op), nullptr, {}});
        return cudaSuccess;
    }
    s->push([d = s->device, op = std::move(op)] {
        if (sticky(d) == cudaSuccess) op();
    });
    return cudaSuccess;
}

cudaError_t copy_async(const char* call, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                       cudaStream_t stream) {
    bool src_pageable = false, dst_pageable = false;
    if (const std::string why = check_copy(call, dst, src, bytes, kind, &src_pageable, &dst_pageable); !why.empty())
        return fail(kind > cudaMemcpyDefault ? cudaErrorInvalidMemcpyDirection : cudaErrorInvalidValue, why);
    if (bytes == 0) return cudaSuccess;
    EmulatedStream* s = resolve(stream);
    if (s->capture && (src_pageable || dst_pageable))
        return fail(cudaErrorStreamCaptureUnsupported,
                    std::string(call) + ": a copy to or from pageable host memory cannot be captured; use pinned memory");
    if (src_pageable && !s->capture) {
        // As CUDA: the source is staged before the call returns, so the caller may reuse it at once.
        auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + bytes);
        return enqueue(s, call, [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); });
    }
    const cudaError_t e = enqueue(s, call, [dst, src, bytes] { std::memmove(dst, src, bytes); });
    // As CUDA: a copy into pageable host memory has landed when the call returns.
    if (e == cudaSuccess && dst_pageable) s->wait_idle();
    return e == cudaSuccess ? device_status(s->device) : e;
}

cudaError_t synchronize_device(int d) {
    Device& dev = device(d);
    std::vector<EmulatedStream*> streams;
    {
        std::lock_guard lock(dev.m);
        streams = dev.streams;
        if (dev.legacy) streams.push_back(dev.legacy.get());
    }
    for (EmulatedStream* s : streams) s->wait_idle();
    return device_status(d);
}

}  // namespace

void launch(const char* name, dim3 grid, dim3 block, cudaStream_t stream, std::function<void()> thread_body,
            const char* signature) {
    const unsigned long long threads = 1ull * block.x * block.y * block.z;
    if (threads == 0 || threads > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
        grid.y > 65535 || grid.z > 65535) {
        fail(cudaErrorInvalidConfiguration, std::string("kernel ") + name + ": grid (" + std::to_string(grid.x) + ", " +
                                                std::to_string(grid.y) + ", " + std::to_string(grid.z) + ") of blocks (" +
                                                std::to_string(block.x) + ", " + std::to_string(block.y) + ", " +
                                                std::to_string(block.z) + ") is not a valid launch");
        return;
    }
    EmulatedStream* s = resolve(stream);
    if (device_status(s->device) != cudaSuccess) return;
    log_work(s, std::string("kernel ") + name, grid, block, signature);
    auto k = std::make_shared<KernelLaunch>(KernelLaunch{name, grid, block, std::move(thread_body)});
    if (s->capture) {
        add_node(s, Node{s->device, std::string("kernel ") + name, nullptr, k, {}});
        return;
    }
    s->push([s, k] { run_kernel(s->device, *k, s->rng); });
}

}  // namespace dpt::cuda_emulation

using namespace dpt::cuda_emulation;

void __nanosleep(unsigned ns) { std::this_thread::sleep_for(std::chrono::nanoseconds(std::max(ns, 1000u))); }

const char* cudaGetErrorName(cudaError_t error) {
    switch (error) {
        case cudaSuccess: return "cudaSuccess";
        case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
        case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
        case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
        case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
        case cudaErrorNoDevice: return "cudaErrorNoDevice";
        case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
        case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
        case cudaErrorNotReady: return "cudaErrorNotReady";
        case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
        case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
        case cudaErrorPeerAccessAlreadyEnabled: return "cudaErrorPeerAccessAlreadyEnabled";
        case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
        case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
        case cudaErrorStreamCaptureUnmatched: return "cudaErrorStreamCaptureUnmatched";
        case cudaErrorStreamCaptureUnjoined: return "cudaErrorStreamCaptureUnjoined";
        case cudaErrorStreamCaptureIsolation: return "cudaErrorStreamCaptureIsolation";
        case cudaErrorStreamCaptureWrongThread: return "cudaErrorStreamCaptureWrongThread";
        default: return "cudaErrorUnknown";
    }
}

const char* cudaGetErrorString(cudaError_t error) {
    switch (error) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
        case cudaErrorNoDevice: return "no CUDA-capable device is detected (DPTRAIN_EMULATED_GPUS=0)";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        case cudaErrorInvalidResourceHandle: return "invalid resource handle";
        case cudaErrorNotReady: return "device not ready";
        case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
        case cudaErrorLaunchFailure: return "unspecified launch failure";
        case cudaErrorPeerAccessAlreadyEnabled: return "peer access is already enabled";
        case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
        case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
        case cudaErrorStreamCaptureUnmatched: return "capture was not initiated in this stream";
        case cudaErrorStreamCaptureUnjoined: return "capturing stream has unjoined work";
        case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
        case cudaErrorStreamCaptureWrongThread: return "attempt to terminate a thread-local capture sequence from another thread";
        default: return "unknown error";
    }
}

cudaError_t cudaGetLastError() {
    const cudaError_t e = last_error;
    last_error = sticky(current_device) != cudaSuccess ? sticky(current_device) : cudaSuccess;
    return e != cudaSuccess ? e : last_error;
}
cudaError_t cudaPeekAtLastError() { return last_error != cudaSuccess ? last_error : sticky(current_device); }

cudaError_t cudaGetDeviceCount(int* count) {
    *count = rt().device_count;
    return rt().device_count > 0 ? cudaSuccess : fail(cudaErrorNoDevice);
}
cudaError_t cudaSetDevice(int d) {
    if (!valid_device(d)) return fail(cudaErrorInvalidDevice);
    current_device = d;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int* d) {
    *d = current_device;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int d) {
    if (!valid_device(d)) return fail(cudaErrorInvalidDevice);
    *prop = cudaDeviceProp{};
    std::snprintf(prop->name, sizeof prop->name, "emulated GPU");
    prop->totalGlobalMem = memory_per_device;
    prop->sharedMemPerBlock = 48 * 1024;
    prop->maxThreadsPerBlock = 1024;
    prop->multiProcessorCount = 1;
    const auto [major, minor] = capability();
    prop->major = major;
    prop->minor = minor;
    prop->warpSize = 32;
    prop->pciBusID = d + 1;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char* id, int length, int d) {
    if (!valid_device(d)) return fail(cudaErrorInvalidDevice);
    std::snprintf(id, size_t(length), "emulated:%02x:00.0", d + 1);
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
    if (cudaError_t e = refused_while_capturing("cudaDeviceSynchronize"); e != cudaSuccess) return e;
    return synchronize_device(current_device);
}
cudaError_t cudaDeviceCanAccessPeer(int* can, int d, int peer) {
    if (!valid_device(d) || !valid_device(peer)) return fail(cudaErrorInvalidDevice);
    *can = d != peer;
    return cudaSuccess;
}
cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned) {
    if (!valid_device(peer) || peer == current_device) return fail(cudaErrorInvalidDevice);
    Device& d = device(current_device);
    std::lock_guard lock(d.m);
    if (!d.peers.insert(peer).second) return fail(cudaErrorPeerAccessAlreadyEnabled);
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
    std::lock_guard lock(rt().memory_mutex);
    *total_bytes = memory_per_device;
    *free_bytes = memory_per_device - device(current_device).allocated;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
    *p = nullptr;
    if (cudaError_t e = refused_while_capturing("cudaMalloc"); e != cudaSuccess) return e;
    if (cudaError_t e = sticky(current_device); e != cudaSuccess) return fail(e);
    std::lock_guard lock(rt().memory_mutex);
    Device& d = device(current_device);
    if (bytes > memory_per_device - d.allocated) return fail(cudaErrorMemoryAllocation);
    void* memory = std::aligned_alloc(256, (std::max<size_t>(bytes, 1) + 255) / 256 * 256);
    if (!memory) return fail(cudaErrorMemoryAllocation);
    std::memset(memory, 0xFF, bytes);  // NaN in every float: reading it before writing shows
    rt().allocations[reinterpret_cast<uintptr_t>(memory)] = Allocation{bytes, Place::device, current_device};
    d.allocated += bytes;
    *p = memory;
    return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
    if (!p) return cudaSuccess;
    if (cudaError_t e = refused_while_capturing("cudaFree"); e != cudaSuccess) return e;
    int on = -1;
    {
        std::lock_guard lock(rt().memory_mutex);
        auto it = rt().allocations.find(reinterpret_cast<uintptr_t>(p));
        if (it == rt().allocations.end() || it->second.place != Place::device)
            return fail(cudaErrorInvalidValue, "cudaFree: " + address(p) + " is not the start of GPU memory from cudaMalloc");
        on = it->second.device;
    }
    synchronize_device(on);  // as CUDA: work queued before may still use it
    std::lock_guard lock(rt().memory_mutex);
    auto it = rt().allocations.find(reinterpret_cast<uintptr_t>(p));
    device(on).allocated -= it->second.bytes;
    rt().allocations.erase(it);
    std::free(p);
    return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned) {
    *p = nullptr;
    if (cudaError_t e = refused_while_capturing("cudaHostAlloc"); e != cudaSuccess) return e;
    void* memory = std::aligned_alloc(256, (std::max<size_t>(bytes, 1) + 255) / 256 * 256);
    if (!memory) return fail(cudaErrorMemoryAllocation);
    std::lock_guard lock(rt().memory_mutex);
    rt().allocations[reinterpret_cast<uintptr_t>(memory)] = Allocation{bytes, Place::pinned, -1};
    *p = memory;
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t bytes) { return cudaHostAlloc(p, bytes, cudaHostAllocDefault); }
cudaError_t cudaFreeHost(void* p) {
    if (!p) return cudaSuccess;
    if (cudaError_t e = refused_while_capturing("cudaFreeHost"); e != cudaSuccess) return e;
    std::lock_guard lock(rt().memory_mutex);
    auto it = rt().allocations.find(reinterpret_cast<uintptr_t>(p));
    if (it == rt().allocations.end() || it->second.place != Place::pinned)
        return fail(cudaErrorInvalidValue, "cudaFreeHost: " + address(p) + " is not the start of pinned host memory");
    rt().allocations.erase(it);
    std::free(p);
    return cudaSuccess;
}
cudaError_t cudaHostGetDevicePointer(void** device_p, void* host_p, unsigned) {
    std::lock_guard lock(rt().memory_mutex);
    uintptr_t base = 0;
    const Allocation* a = find(host_p, &base);
    if (!a || a->place != Place::pinned)
        return fail(cudaErrorInvalidValue, "cudaHostGetDevicePointer: " + address(host_p) + " is not pinned host memory");
    *device_p = host_p;  // one address space, as with unified addressing
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
    return copy_async("cudaMemcpyAsync", dst, src, bytes, kind, stream);
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    if (cudaError_t e = refused_while_capturing("cudaMemcpy"); e != cudaSuccess) return e;
    EmulatedStream* s = resolve(nullptr);
    if (cudaError_t e = copy_async("cudaMemcpy", dst, src, bytes, kind, s); e != cudaSuccess) return e;
    s->wait_idle();
    return device_status(s->device);
}
cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t bytes,
                                cudaStream_t stream) {
    if (!valid_device(dst_device) || !valid_device(src_device)) return fail(cudaErrorInvalidDevice);
    {
        std::lock_guard lock(rt().memory_mutex);
        std::string why = check_range("cudaMemcpyPeerAsync", "source", src, bytes, true, src_device);
        if (why.empty()) why = check_range("cudaMemcpyPeerAsync", "destination", dst, bytes, true, dst_device);
        if (!why.empty()) return fail(cudaErrorInvalidValue, why);
    }
    if (bytes == 0) return cudaSuccess;
    return enqueue(resolve(stream), "cudaMemcpyPeerAsync", [dst, src, bytes] { std::memmove(dst, src, bytes); });
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream) {
    {
        std::lock_guard lock(rt().memory_mutex);
        if (std::string why = check_range("cudaMemsetAsync", "destination", p, bytes, true); !why.empty())
            return fail(cudaErrorInvalidValue, why);
    }
    if (bytes == 0) return cudaSuccess;
    return enqueue(resolve(stream), "cudaMemsetAsync", [p, value, bytes] { std::memset(p, value, bytes); });
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) {
    if (cudaError_t e = refused_while_capturing("cudaMemset"); e != cudaSuccess) return e;
    EmulatedStream* s = resolve(nullptr);
    if (cudaError_t e = cudaMemsetAsync(p, value, bytes, s); e != cudaSuccess) return e;
    s->wait_idle();
    return device_status(s->device);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
    Device& d = device(current_device);
    std::lock_guard lock(d.m);
    const uint64_t seed = rt().seed * 1000003u + uint64_t(current_device) * 7919u + ++d.streams_made;
    *stream = new EmulatedStream(current_device, seed);  // (blocking or not: no legacy-stream synchronisation to model)
    d.streams.push_back(*stream);
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    if (!stream) return fail(cudaErrorInvalidResourceHandle);
    if (stream->capture) return fail(cudaErrorStreamCaptureUnsupported, "cudaStreamDestroy: the stream is capturing");
    Device& d = device(stream->device);
    {
        std::lock_guard lock(d.m);
        d.streams.erase(std::remove(d.streams.begin(), d.streams.end(), stream), d.streams.end());
    }
    delete stream;  // after its queued work, as CUDA
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    EmulatedStream* s = resolve(stream);
    if (s->capture) {
        if (s->capture->invalidated.empty()) s->capture->invalidated = "cudaStreamSynchronize on a capturing stream";
        return fail(cudaErrorStreamCaptureUnsupported, "cudaStreamSynchronize: the stream is capturing");
    }
    if (cudaError_t e = refused_while_capturing("cudaStreamSynchronize"); e != cudaSuccess) return e;
    s->wait_idle();
    return device_status(s->device);
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
    EmulatedStream* s = resolve(stream);
    if (s->capture) return fail(cudaErrorStreamCaptureUnsupported);
    if (cudaError_t e = device_status(s->device); e != cudaSuccess) return e;
    return s->is_idle() ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* data) {
    return enqueue(resolve(stream), "host function", [fn, data] { fn(data); });
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
    *event = new EmulatedEvent{};
    (*event)->device = current_device;
    (*event)->flags = flags;
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }
cudaError_t cudaEventDestroy(cudaEvent_t event) {
    if (!event) return fail(cudaErrorInvalidResourceHandle);
    if (Capture* c = event->capture)  // recorded in a capture still going: it must not look back at it
        c->events.erase(std::remove(c->events.begin(), c->events.end(), event), c->events.end());
    // As CUDA: records still queued complete; nothing waits on a destroyed event.
    event->wait(event->records);
    delete event;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    if (!event) return fail(cudaErrorInvalidResourceHandle);
    EmulatedStream* s = resolve(stream);
    if (s->capture) {  // a point in the graph that waits may depend on
        event->capture = s->capture;
        event->captured = s->frontier;
        s->capture->events.push_back(event);
        return cudaSuccess;
    }
    event->capture = nullptr;
    uint64_t record = 0;
    {
        std::lock_guard lock(event->m);
        record = ++event->records;
    }
    // Completes even on a failed device, so that waits on it end: the
    // failure itself is reported by the device's own calls.
    s->push([event, record] { event->complete(record); });
    return device_status(s->device);
}
// External records in a capture are nodes of the graph: each launch records
// the event again where the node runs. Elsewhere, as cudaEventRecord.
cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned flags) {
    if (!event) return fail(cudaErrorInvalidResourceHandle);
    if (flags & ~unsigned(cudaEventRecordExternal)) return fail(cudaErrorInvalidValue, "cudaEventRecordWithFlags: unknown flags");
    EmulatedStream* s = resolve(stream);
    if (!s->capture || !(flags & cudaEventRecordExternal)) return cudaEventRecord(event, stream);
    if (cudaError_t e = device_status(s->device); e != cudaSuccess) return e;
    log_work(s, "event record");
    add_node(s, Node{s->device, "event record", nullptr, nullptr, {}, event});
    return cudaEventRecord(event, stream);  // also a point that waits in the capture may depend on
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
    if (!event) return fail(cudaErrorInvalidResourceHandle);
    EmulatedStream* s = resolve(stream);
    if (event->capture) {
        Capture* c = event->capture;
        if (std::find(c->streams.begin(), c->streams.end(), s) == c->streams.end()) {
            if (s->capture) return fail(cudaErrorStreamCaptureMerge, "cudaStreamWaitEvent: the stream captures into another graph");
            s->capture = c;  // the stream joins the capture (a fork)
            s->frontier.clear();
            c->streams.push_back(s);
        }
        for (size_t n : event->captured)
            if (std::find(s->frontier.begin(), s->frontier.end(), n) == s->frontier.end()) s->frontier.push_back(n);
        return cudaSuccess;
    }
    if (s->capture)
        return fail(cudaErrorStreamCaptureIsolation,
                    "cudaStreamWaitEvent: a capturing stream cannot wait on an event recorded outside the capture");
    uint64_t record = 0;
    {
        std::lock_guard lock(event->m);
        record = event->records;  // the record current now; later ones do not count
    }
    if (record == 0) return cudaSuccess;
    s->push([event, record] { event->wait(record); });
    return device_status(s->device);
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    if (!event) return fail(cudaErrorInvalidResourceHandle);
    if (cudaError_t e = refused_while_capturing("cudaEventSynchronize"); e != cudaSuccess) return e;
    uint64_t record = 0;
    {
        std::lock_guard lock(event->m);
        record = event->records;
    }
    event->wait(record);
    return device_status(event->device);
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
    if (!event) return fail(cudaErrorInvalidResourceHandle);
    std::lock_guard lock(event->m);
    return event->completed(event->records) ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    if (!start || !end || (start->flags & cudaEventDisableTiming) || (end->flags & cudaEventDisableTiming))
        return fail(cudaErrorInvalidResourceHandle);
    std::scoped_lock lock(start->m, end->m);
    if (start->records == 0 || end->records == 0 || !start->completed(start->records) || !end->completed(end->records))
        return fail(cudaErrorNotReady);
    *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
    return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
    EmulatedStream* s = resolve(stream);
    if (!stream) return fail(cudaErrorStreamCaptureUnsupported, "cudaStreamBeginCapture: the legacy stream cannot capture");
    if (s->capture) return fail(cudaErrorIllegalState, "cudaStreamBeginCapture: the stream captures already");
    auto* c = new Capture{EmulatedGraph{}, mode, std::this_thread::get_id(), s, {s}, "", {}};
    s->capture = c;
    s->frontier.clear();
    std::lock_guard lock(rt().capture_mutex);
    rt().captures.push_back(c);
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
    *graph = nullptr;
    EmulatedStream* s = resolve(stream);
    Capture* c = s->capture;
    if (!c) return fail(cudaErrorIllegalState, "cudaStreamEndCapture: the stream is not capturing");
    if (c->origin != s)
        return fail(cudaErrorStreamCaptureUnmatched, "cudaStreamEndCapture: the capture began on another stream");
    if (c->mode != cudaStreamCaptureModeRelaxed && c->thread != std::this_thread::get_id())
        return fail(cudaErrorStreamCaptureWrongThread, "cudaStreamEndCapture: called from another thread than the capture began on");
    // Every stream that joined must have been joined back: its last node an
    // ancestor of the origin's (or the origin's own).
    const std::vector<Node>& nodes = c->graph.nodes;
    std::vector<bool> before_end(nodes.size());
    std::vector<size_t> todo = s->frontier;
    while (!todo.empty()) {
        const size_t n = todo.back();
        todo.pop_back();
        if (before_end[n]) continue;
        before_end[n] = true;
        for (size_t d : nodes[n].deps) todo.push_back(d);
    }
    std::string unjoined;
    for (EmulatedStream* other : c->streams)
        for (size_t n : other->frontier)
            if (other != s && !before_end[n] && unjoined.empty())
                unjoined = "cudaStreamEndCapture: a stream of GPU " + std::to_string(other->device) +
                           " forked from the capture and was not joined back (" + nodes[n].what +
                           " is not followed by the origin stream)";
    for (EmulatedStream* st : c->streams) {
        st->capture = nullptr;
        st->frontier.clear();
    }
    for (EmulatedEvent* e : c->events)
        if (e->capture == c) e->capture = nullptr;
    {
        std::lock_guard lock(rt().capture_mutex);
        rt().captures.erase(std::find(rt().captures.begin(), rt().captures.end(), c));
    }
    std::unique_ptr<Capture> ended(c);
    if (!c->invalidated.empty())
        return fail(cudaErrorStreamCaptureInvalidated, "cudaStreamEndCapture: the capture was invalidated: " + c->invalidated);
    if (!unjoined.empty()) return fail(cudaErrorStreamCaptureUnjoined, unjoined);
    *graph = new EmulatedGraph(std::move(c->graph));
    return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
    EmulatedStream* s = resolve(stream);
    *status = !s->capture                      ? cudaStreamCaptureStatusNone
              : s->capture->invalidated.empty() ? cudaStreamCaptureStatusActive
                                                : cudaStreamCaptureStatusInvalidated;
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
    if (!graph) return fail(cudaErrorInvalidValue);
    *exec = new EmulatedGraphExec{std::make_shared<const EmulatedGraph>(*graph), 0};
    return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
    if (!exec) return fail(cudaErrorInvalidValue);
    EmulatedStream* s = resolve(stream);
    if (s->capture) return fail(cudaErrorStreamCaptureUnsupported, "cudaGraphLaunch: into a capturing stream");
    if (cudaError_t e = device_status(s->device); e != cudaSuccess) return e;
    const uint64_t launch = ++exec->launches;
    // The graph's event records are issued now, as its launch is queued.
    std::vector<uint64_t> issued(exec->graph->nodes.size());
    for (size_t i = 0; i < issued.size(); ++i)
        if (cudaEvent_t e = exec->graph->nodes[i].records) {
            std::lock_guard lock(e->m);
            issued[i] = ++e->records;
        }
    s->push([graph = exec->graph, launch, seed = rt().seed * 7919u + uint64_t(s->device), issued = std::move(issued)] {
        run_graph(*graph, launch, seed, issued);
    });
    return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    delete graph;
    return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    delete exec;  // a launch still queued holds the graph itself
    return cudaSuccess;
}
