#include "device_factory.hpp"

#include "errors.hpp"
#include "gpu.hpp"
#include "lenet.hpp"
#include "numbers.hpp"

namespace dpt {

int parse_device_count(const std::string& option, const std::string& text) {
    return parse_number<int>(option, text, 1, max_devices,
                             ("a whole number from 1 to " + std::to_string(max_devices)).c_str());
}

void require_gpus(const std::string& what) {
    const GpuInventory gpus = probe_gpus();
    if (gpus.count() == 0) throw InputError(what + ": " + gpus.why_none + "; train on CPU devices with --cpus N");
}

DeviceChoice choose_devices(const std::string& cpus, const std::string& gpus, DeviceChoice fallback) {
    if (!cpus.empty() && !gpus.empty()) throw InputError("--cpus and --gpus cannot be combined: pick one kind");
    if (!gpus.empty()) {
        const int n = parse_device_count("gpus", gpus);
        require_gpus("--gpus " + gpus);
        return {DeviceKind::gpu, n};
    }
    if (!cpus.empty()) return {DeviceKind::cpu, parse_device_count("cpus", cpus)};
    return fallback;
}

DeviceChoice default_devices(std::string& why) {
    const GpuInventory gpus = probe_gpus();
    if (gpus.count() > 0) {
        why = "all visible GPUs (choose with --gpus N or --cpus N)";
        return {DeviceKind::gpu, gpus.count()};
    }
    why = gpus.why_none + ", so 1 CPU device (choose with --cpus N)";
    return {DeviceKind::cpu, 1};
}

std::vector<std::unique_ptr<Device>> make_devices(const DeviceChoice& choice, const ReplicaSetup& setup,
                                                  const Allreduce& allreduce) {
    std::vector<size_t> staging;
    for (int i = 0; i < choice.count; ++i) staging.push_back(allreduce.staging_floats(i, choice.count, lenet::model().param_count()));
    return choice.kind == DeviceKind::gpu ? make_gpu_devices(setup, staging) : make_cpu_devices(setup, staging);
}

std::vector<Device*> pointers(const std::vector<std::unique_ptr<Device>>& devices) {
    std::vector<Device*> plain;
    for (const auto& d : devices) plain.push_back(d.get());
    return plain;
}

}  // namespace dpt
