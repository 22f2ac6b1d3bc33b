// Devices are chosen and made here, once for every command: one parser for
// --cpus N / --gpus N / --devices LIST with one limit, and one factory that
// gives each device the staging memory the allreduce algorithm asks for.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "parallel/allreduce.hpp"
#include "devices/device.hpp"

namespace dpt {

inline constexpr int max_devices = 1024;

// N as typed for a kind's count option (`option` without dashes: "cpus",
// "gpus"): a whole number from 1 to max_devices, else an InputError naming the option.
int parse_device_count(const std::string& option, const std::string& text);

// Each kind has a count option, its row's `option` (kinds.hpp): --gpus N,
// --cpus N. `GivenText` says what a command line gave one ("" when nothing).
using GivenText = std::function<std::string(const std::string& option)>;

// A count option as given: the kind, the option (without dashes) and its text.
struct KindGiven {
    DeviceKind kind;
    std::string option, text;
};

// The count options given, in the table's order.
std::vector<KindGiven> kinds_given(const GivenText& given);

// The one count option given, or none; an InputError starting with
// `command` ("compare") when several were: a command that takes one kind.
std::optional<KindGiven> one_kind_given(const GivenText& given, const std::string& command);

// Every kind's count option followed by `value`, for usages and messages:
// "--gpus N | --cpus N" (`joiner` " | ").
std::string count_options(const std::string& value, const std::string& joiner = " | ");

// The devices that the count options ask for. Several kinds: a mixed run
// where `mixed_ok` (training), else an InputError. A kind of hardware
// (GPUs) needs some present. None given: `fallback`.
DeviceChoice choose_devices(const GivenText& given, DeviceChoice fallback, bool mixed_ok = false);

// --devices LIST: comma-separated gpu:I (CUDA device I; cuda:I is the same;
// I repeated: replicas sharing that GPU) and cpu:I (CPU devices, numbered
// 0, 1, ... each once), in any order; the run puts the GPUs first. An
// InputError names the item that is wrong.
DeviceChoice parse_device_list(const std::string& text);

// With neither option: every visible GPU, else 1 CPU device; `why` says which and why.
DeviceChoice default_devices(std::string& why);

// An InputError starting with `what` when this machine has none of
// `kind`'s hardware, saying why and which kind runs anywhere instead
// (never for a kind made on demand).
void require_present(DeviceKind kind, const std::string& what);

// The devices of `choice`, every one made from `setup`, each with the
// staging memory that `allreduce` asks for. A mixed choice puts the CPU
// devices' gradients and marks in pinned host memory the GPUs map.
std::vector<std::unique_ptr<Device>> make_devices(const DeviceChoice& choice, const ReplicaSetup& setup,
                                                  const Allreduce& allreduce);

// Records what `enqueue` queues on `devices`, when all of them record graphs
// (Capabilities::records_graphs), without running it. Null, with the reason
// in `why`, where it cannot: the caller then queues the work directly.
std::unique_ptr<Recording> record_work(std::span<Device* const> devices, const std::function<void()>& enqueue,
                                       std::string& why);

// Under mpirun, the processes of one machine take turns over its GPUs:
// local rank l's replica i goes on GPU (l·G + i) mod (GPUs present), unless
// --devices placed them. Returns `choice` with those places.
DeviceChoice placed_on_this_machine(DeviceChoice choice, int processes, int local_rank);

// Plain pointers to the devices, in order: what train_step and the allreduce take.
std::vector<Device*> pointers(const std::vector<std::unique_ptr<Device>>& devices);

}  // namespace dpt
