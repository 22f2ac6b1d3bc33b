// GPU replicas as the rest of dptrain sees them: what GPUs there are, N
// replicas on them, and CUDA graphs of queued work. The CUDA backend is
// src/devices/gpu_device.cpp; a build without CUDA (-Dcuda=disabled) links
// src/devices/gpu_none.cpp instead, which reports no GPUs and why.
#pragma once
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "devices/device.hpp"

namespace dpt {

struct GpuInventory {
    std::vector<std::string> names;  // one per visible CUDA device, e.g. "NVIDIA H100 80GB HBM3"
    std::string why_none;            // when there is none: the reason, as a user should read it
    int count() const { return int(names.size()); }
};

// The CUDA devices this process can use (CUDA_VISIBLE_DEVICES applies).
// Never throws: no driver, no device or a CPU-only build is an empty inventory.
GpuInventory probe_gpus();

// Whether this build's GPUs are emulated (-Demulated_gpu=true: the CUDA
// backend run on the CPU, kernels/cuda_emulation/): their times are CPU times.
bool gpus_emulated();

// What `dptrain devices` shows of one GPU.
struct GpuProperties {
    std::string name;
    double memory_gb = 0;          // total device memory, 1e9 bytes
    int major = 0, minor = 0;      // compute capability
    int multiprocessors = 0;
};
std::vector<GpuProperties> gpu_properties();

// peer[a][b]: GPU a can read and write GPU b's memory directly (over NVLink
// or PCIe); where it cannot, the allreduce's copies go through host memory.
std::vector<std::vector<bool>> gpu_peer_matrix();

// Measured copy bandwidth in GB/s, from GPU `from`'s memory to GPU `to`'s
// (the same GPU: a copy within its memory, as between replicas sharing it),
// copying `bytes` at a time with cudaMemcpyPeerAsync as the allreduce does,
// peer access enabled where possible as in training. The median of timed
// copies after a warm-up, timed with CUDA events.
double gpu_copy_bandwidth(int from, int to, size_t bytes);

// N replicas on the visible GPUs: replica i on GPU gpu_ids[i], or with no
// ids on GPU i % (GPUs present), each with its own stream, parameters,
// gradients and activations, and the data set uploaded once per GPU used.
// Enables peer access between GPUs where it exists. Replica i keeps
// staging_floats[i] floats of staging memory for the allreduce. With
// `shared` (a mixed run: CPU devices beside them) the replicas also count
// their marks there, and reach CPU devices' gradients and marks through it.
std::vector<std::unique_ptr<Device>> make_gpu_devices(const ReplicaSetup& setup,
                                                      std::span<const size_t> staging_floats,
                                                      std::span<const int> gpu_ids = {},
                                                      std::shared_ptr<SharedHostMemory> shared = nullptr);

// Pinned host memory that every GPU maps, for a mixed run (device.hpp).
std::shared_ptr<SharedHostMemory> make_shared_host_memory();

// One line on where the replicas are: "4 replicas on 1 physical GPU (NVIDIA
// H100 80GB HBM3)", and how the allreduce's copies travel between GPUs.
std::string describe_gpu_replicas(int count);

// NCCL, loaded at run time (libnccl.so.2; a binary built here runs where it
// is absent). "" when NCCL can sum the gradients of `replicas` replicas on
// the GPUs `gpu_ids` (empty: replica i on GPU i % present), else why not:
// no library, or two replicas on one GPU (NCCL refuses two ranks on a GPU).
std::string nccl_refusal(int replicas, std::span<const int> gpu_ids);
// "NCCL 2.28.9 (libnccl.so.2 from ...)" or why there is none: `dptrain devices`.
std::string nccl_status();
// Queues ncclAllReduce (sum, in place) of `range` of every replica's
// gradient buffer on its allreduce stream, all in one NCCL group. The
// communicators are made once per set of GPUs and kept for the process's life.
void nccl_sum(std::span<Device* const> devices, Range range);

// Where GPU replica `d` is, comparable between the processes of a job: the
// machine's name `host` and the GPU's PCI bus id ("node2, GPU 0000:17:00.0"),
// which CUDA_VISIBLE_DEVICES does not renumber.
std::string gpu_place(Device& d, const std::string& host);
// This process among those of a job, as --across nccl needs it: its rank,
// how many there are, and a text every process gets from rank 0 (its
// Cluster's leader_text).
struct ProcessGroup {
    int rank = 0;
    int size = 1;
    std::function<std::string(const std::string& text)> from_leader;
};
// --across nccl: joins every process's device 0 (`root`, a GPU replica) in
// one NCCL communicator, rank r as NCCL rank r: rank 0 draws the unique id
// and `group` hands it to every process. Every process calls it (NCCL's
// set-up waits for all of them); each must have NCCL and a GPU of its own
// (decide_across checks both first). Returns the sum a root queues:
// ncclAllReduce of a range of its gradients, in place on its allreduce stream.
std::function<void(Device& root, Range range)> nccl_across(const ProcessGroup& group, Device& root);

// Records what `enqueue` queues on `devices` (GPU devices) without running
// it. Never throws: when the capture cannot start, `enqueue` fails midway,
// or CUDA refuses the graph, it returns null with the reason in `why`, no
// stream is left capturing, nothing recorded has run, and the caller can
// queue the work directly.
std::unique_ptr<Recording> record_graph(std::span<Device* const> devices, const std::function<void()>& enqueue,
                                        std::string& why);

}  // namespace dpt
