// The GPU side of a build without CUDA (-Dcuda=disabled): there are no GPUs,
// and the reason says how to get them. The CUDA build uses gpu_device.cpp.
#include <stdexcept>

#include "devices/gpu.hpp"

namespace dpt {

GpuInventory probe_gpus() {
    return {{}, "this dptrain was built without CUDA (meson -Dcuda=disabled, or no nvcc when it was built)"};
}

std::vector<std::unique_ptr<Device>> make_gpu_devices(const ReplicaSetup&, std::span<const size_t>,
                                                      std::span<const int>, std::shared_ptr<SharedHostMemory>) {
    throw std::logic_error("make_gpu_devices: built without CUDA");
}

std::shared_ptr<SharedHostMemory> make_shared_host_memory() {
    throw std::logic_error("make_shared_host_memory: built without CUDA");
}

std::vector<GpuProperties> gpu_properties() { return {}; }
bool gpus_emulated() { return false; }
std::vector<std::vector<bool>> gpu_peer_matrix() { return {}; }
double gpu_copy_bandwidth(int, int, size_t) { throw std::logic_error("gpu_copy_bandwidth: built without CUDA"); }

std::string describe_gpu_replicas(int) { return "no GPUs in this build"; }

std::unique_ptr<Recording> record_graph(std::span<Device* const>, const std::function<void()>&, std::string& why) {
    why = "built without CUDA";
    return nullptr;
}

std::string nccl_refusal(int, std::span<const int>) {
    return "NCCL sums GPU replicas, and this dptrain was built without CUDA";
}
std::string nccl_status() { return "not in a build without CUDA"; }
void nccl_sum(std::span<Device* const>, Range) { throw std::logic_error("nccl_sum: built without CUDA"); }
std::string gpu_place(Device&, const std::string&) { throw std::logic_error("gpu_place: built without CUDA"); }
std::function<void(Device&, Range)> nccl_across(const ProcessGroup&, Device&) {
    throw std::logic_error("nccl_across: built without CUDA");
}

}  // namespace dpt
