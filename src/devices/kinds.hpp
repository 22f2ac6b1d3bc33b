// The kinds of device, one row each: what the rest of dptrain knows of a
// kind is here. The command line's --devices KIND:I and --cpus/--gpus, the
// banner's words, the name in checkpoints and metrics, how many the machine
// has, and how to make them are read from a kind's row; what a device can
// do is its Capabilities (device.hpp).
//
// A new kind is its own file (a class implementing Device and a function
// that makes N of them), a value of DeviceKind (device.hpp), its row in
// kinds.cpp and its line in src/meson.build. Between kinds, a device waits
// for the other's marks and copies its gradients through host memory
// (Device::host_marks, host_grads), so the new kind meets the others there.
#pragma once
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "devices/device.hpp"

namespace dpt {

// How many devices of a kind this machine can give a run.
struct Presence {
    int count = 0;         // -1: as many as asked (devices the host makes, such as CPU devices)
    std::string why_none;  // when count is 0: the reason, as a user should read it
    bool unlimited() const { return count < 0; }
};

// Makes one kind's devices of a run. `staging[i]` is device i's staging
// memory (in floats) for the allreduce; `ordinals[i]` where it stands
// (DevicePlace::ordinal, already resolved: never `any`); `shared` is null
// unless the run holds more than one kind.
using MakeDevices = std::vector<std::unique_ptr<Device>> (*)(const ReplicaSetup& setup,
                                                             std::span<const size_t> staging,
                                                             std::span<const int> ordinals,
                                                             std::shared_ptr<SharedHostMemory> shared);

struct DeviceKindInfo {
    DeviceKind kind;
    const char* name;                     // in checkpoints, --metrics and compare: "cpu", "cuda"
    std::vector<const char*> spellings;   // --devices KIND:I ("gpu" and "cuda" are one kind)
    const char* option;                   // the count option without dashes: "gpus"
    const char* one;                      // "GPU replica"
    const char* many;                     // "GPU replicas"
    const char* hardware;                 // what is present on the machine: "GPU" ("" for a kind made on demand)
    // Made on demand, numbered 0, 1, ... each once (CPU devices), rather than
    // placed on hardware that is present, several to a unit if asked (GPUs).
    bool numbered_in_order;
    Presence (*probe)();
    MakeDevices make;
    // Records what `enqueue` queues on devices of this kind as one piece of
    // work to replay (device.hpp's Recording), or null with the reason in
    // `why`. Null for a kind whose Capabilities say it records no graphs.
    std::unique_ptr<Recording> (*record)(std::span<Device* const> devices, const std::function<void()>& enqueue,
                                         std::string& why) = nullptr;
    // Host memory that this kind's devices map (CUDA: pinned), for a run
    // with devices of several kinds; null where the kind reads host memory
    // as it is (CPU devices). The run's first kind that has one makes it.
    std::shared_ptr<SharedHostMemory> (*host_memory)() = nullptr;
    // The banner's lines on a run of `count` devices of this kind alone,
    // "devices: ..." (ending in `note`) and any warning, each with its newline.
    std::string (*banner)(int count, const std::string& note) = nullptr;
    // What N devices of the kind are, after its count option: "N CPU devices,
    // one worker thread (one core) each". Null: "N " and `many`.
    const char* count_help = nullptr;
    // A device runs forward and backward over at most this many samples at a
    // time, for a model without batch norm (0: its whole part at once), as
    // `dptrain simulate` models it.
    int pass_samples = 0;
};

// Every kind, in the order a run puts its devices: GPU replicas first, so
// that device 0 (where the naive allreduce sums) is a GPU whenever there is one.
const std::vector<DeviceKindInfo>& device_kinds();
// A kind built outside src/ (the tests' twin kind, tests/twin_device.hpp)
// adds its row here, after the others, before any run.
void add_device_kind(DeviceKindInfo row);
const DeviceKindInfo& kind_info(DeviceKind kind);
// The first kind made on demand (Presence::unlimited: CPU devices), which
// any machine can run and which stands in where another kind is missing.
const DeviceKindInfo& kind_made_on_demand();
// "N CPU devices, one worker thread (one core) each": `row`'s count_help, or "N " and its `many`.
std::string count_help(const DeviceKindInfo& row);

// The kinds of a run's devices, as files name them: "cpu", "cuda", "cuda+cpu".
std::string kind_names(const DeviceChoice& choice);

}  // namespace dpt
