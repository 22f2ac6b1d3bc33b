// NCCL, loaded at run time: dptrain declares the handful of functions it
// calls (their C ABI is stable across NCCL 2.x) and looks them up in
// libnccl.so.2 with dlopen, so a binary built with CUDA still runs where
// NCCL is absent, and `--allreduce nccl` then says why instead of failing to
// start. The library is searched for as the dynamic loader does
// (LD_LIBRARY_PATH, the system's directories), then in the CUDA toolkit.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/check.hpp"
#include "devices/gpu.hpp"
#include "devices/gpu_internal.hpp"

namespace dpt {
namespace {

// From nccl.h (NCCL 2.x): opaque communicators, int-sized enums, a unique
// id of 128 bytes passed by value.
using ncclComm_t = struct ncclComm*;
struct ncclUniqueId {
    char internal[128];
};
using ncclResult_t = int;
constexpr int nccl_success = 0, nccl_float32 = 7, nccl_sum_op = 0;

struct NcclLibrary {
    std::string why_none;  // empty when loaded
    std::string where;
    int version = 0;
    ncclResult_t (*version_of)(int*) = nullptr;
    const char* (*error_string)(ncclResult_t) = nullptr;
    ncclResult_t (*comm_init_all)(ncclComm_t*, int, const int*) = nullptr;
    ncclResult_t (*get_unique_id)(ncclUniqueId*) = nullptr;
    ncclResult_t (*comm_init_rank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
    ncclResult_t (*group_start)() = nullptr;
    ncclResult_t (*group_end)() = nullptr;
    ncclResult_t (*all_reduce)(const void*, void*, size_t, int, int, ncclComm_t, cudaStream_t) = nullptr;
};

template <class F>
bool find(void* handle, const char* name, F& f) {
    f = reinterpret_cast<F>(dlsym(handle, name));
    return f != nullptr;
}

NcclLibrary load() {
    NcclLibrary lib;
#ifdef DPTRAIN_CUDA_EMULATION
    // NCCL drives real GPUs through the CUDA driver; the emulated GPUs'
    // memory is host memory it knows nothing of.
    lib.why_none = "NCCL needs real GPUs, and these are emulated (a build with -Demulated_gpu=true): use --allreduce naive or ring";
    return lib;
#endif
    void* handle = nullptr;
    std::string first_error;
    for (const char* path : {"libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2", "/usr/local/cuda/lib/libnccl.so.2"}) {
        handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (handle) {
            lib.where = path;
            break;
        }
        if (first_error.empty()) first_error = dlerror();
    }
    if (!handle) {
        lib.why_none = "NCCL is not installed here (" + first_error +
                       "); install it, or put the directory of a libnccl.so.2 in LD_LIBRARY_PATH (PyTorch's "
                       "wheels bring one, in site-packages/nvidia/nccl/lib)";
        return lib;
    }
    if (!find(handle, "ncclGetVersion", lib.version_of) || !find(handle, "ncclGetErrorString", lib.error_string) ||
        !find(handle, "ncclCommInitAll", lib.comm_init_all) || !find(handle, "ncclGetUniqueId", lib.get_unique_id) ||
        !find(handle, "ncclCommInitRank", lib.comm_init_rank) || !find(handle, "ncclGroupStart", lib.group_start) ||
        !find(handle, "ncclGroupEnd", lib.group_end) || !find(handle, "ncclAllReduce", lib.all_reduce)) {
        lib.why_none = lib.where + " lacks the NCCL 2 functions dptrain calls (" + dlerror() + ")";
        return lib;
    }
    if (lib.version_of(&lib.version) != nccl_success || lib.version < 20000)
        lib.why_none = lib.where + " is not NCCL 2 (version " + std::to_string(lib.version) + ")";
    return lib;
}

const NcclLibrary& library() {
    static const NcclLibrary lib = load();
    return lib;
}

void check(ncclResult_t result, const char* what) {
    if (result != nccl_success)
        throw std::runtime_error(std::string("NCCL: ") + what + " failed: " + library().error_string(result));
}

// One communicator per GPU of each set of GPUs used, made on first use.
const std::vector<ncclComm_t>& communicators(const std::vector<int>& gpus) {
    static std::mutex mutex;
    static std::map<std::vector<int>, std::vector<ncclComm_t>> made;
    std::lock_guard lock(mutex);
    auto [at, fresh] = made.try_emplace(gpus);
    if (fresh) {
        at->second.resize(gpus.size());
        check(library().comm_init_all(at->second.data(), int(gpus.size()), gpus.data()), "ncclCommInitAll");
    }
    return at->second;
}

// Queues ncclAllReduce (sum, in place) of `range` of GPU replica `d`'s
// gradients on its allreduce stream, over `comm`.
void all_reduce_in_place(Device& d, Range range, ncclComm_t comm) {
    CUDA_CHECK(cudaSetDevice(gpu_internal::gpu_of(d)));
    float* grads = gpu_internal::grads_of(d) + range.first;
    check(library().all_reduce(grads, grads, range.count, nccl_float32, nccl_sum_op, comm,
                               gpu_internal::allreduce_stream_of(d)),
          "ncclAllReduce");
}

}  // namespace

std::string nccl_refusal(int replicas, std::span<const int> gpu_ids) {
    const NcclLibrary& lib = library();
    if (!lib.why_none.empty()) return lib.why_none;
    const int present = probe_gpus().count();
    if (present == 0) return probe_gpus().why_none;
    std::vector<int> gpus;
    for (int i = 0; i < replicas; ++i) gpus.push_back(gpu_ids.empty() ? i % present : gpu_ids[size_t(i)]);
    std::sort(gpus.begin(), gpus.end());
    if (std::adjacent_find(gpus.begin(), gpus.end()) != gpus.end())
        return "NCCL refuses two replicas on one GPU (" + std::to_string(replicas) + " replicas, " +
               std::to_string(present) + " GPU" + (present == 1 ? "" : "s") + " present): give at most --gpus " +
               std::to_string(present) + ", or --allreduce naive or ring";
    return "";
}

std::string nccl_status() {
    const NcclLibrary& lib = library();
    if (!lib.why_none.empty()) return lib.why_none;
    const int v = lib.version;  // 22809: 2.28.9
    return "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100) +
           " (" + lib.where + ")";
}

void nccl_sum(std::span<Device* const> devices, Range range) {
    std::vector<int> gpus;
    for (Device* d : devices) gpus.push_back(gpu_internal::gpu_of(*d));
    const std::vector<ncclComm_t>& comms = communicators(gpus);
    const NcclLibrary& lib = library();
    check(lib.group_start(), "ncclGroupStart");
    for (size_t i = 0; i < devices.size(); ++i) all_reduce_in_place(*devices[i], range, comms[i]);
    check(lib.group_end(), "ncclGroupEnd");
}

std::string gpu_place(Device& d, const std::string& host) {
    char bus[32] = {};
    CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, gpu_internal::gpu_of(d)));
    return host + ", GPU " + bus;
}

std::function<void(Device& root, Range range)> nccl_across(const ProcessGroup& group, Device& root) {
    const NcclLibrary& lib = library();
    ncclUniqueId id{};
    if (group.rank == 0) check(lib.get_unique_id(&id), "ncclGetUniqueId");
    const std::string drawn = group.from_leader(std::string(id.internal, sizeof id.internal));
    std::memcpy(id.internal, drawn.data(), sizeof id.internal);
    CUDA_CHECK(cudaSetDevice(gpu_internal::gpu_of(root)));
    ncclComm_t comm = nullptr;  // kept for the process's life, as communicators() keeps its own
    check(lib.comm_init_rank(&comm, group.size, id, group.rank), "ncclCommInitRank");
    return [comm](Device& d, Range range) { all_reduce_in_place(d, range, comm); };
}

}  // namespace dpt
