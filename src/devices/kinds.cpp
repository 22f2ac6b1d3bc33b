#include "devices/kinds.hpp"

#include <stdexcept>

#include "devices/gpu.hpp"

namespace dpt {

namespace {

Presence gpus_present() {
    const GpuInventory gpus = probe_gpus();
    return {gpus.count(), gpus.why_none};
}

std::string gpu_banner(int count, const std::string& note) {
    return "devices: " + describe_gpu_replicas(count) + "; each replica has its own stream and memory" + note + "\n";
}

std::string cpu_banner(int count, const std::string& note) {
    const int cores = usable_cores();  // this process's
    const auto plural = [](int n, const char* what) { return std::to_string(n) + " " + what + (n == 1 ? "" : "s"); };
    std::string text = "devices: " + plural(count, "CPU device") + ", one worker thread per device, " +
                       plural(cores, "usable core") + note + "\n";
    if (count > cores)
        text += "note: " + std::to_string(count) + " devices share " + std::to_string(cores) +
                " cores, so they cannot all compute at once\n";
    return text;
}

std::vector<DeviceKindInfo>& rows() {
    static std::vector<DeviceKindInfo> kinds{
        {DeviceKind::gpu, "cuda", {"gpu", "cuda"}, "gpus", "GPU replica", "GPU replicas", "GPU", false, gpus_present,
         [](const ReplicaSetup& setup, std::span<const size_t> staging, std::span<const int> ordinals,
            std::shared_ptr<SharedHostMemory> shared) { return make_gpu_devices(setup, staging, ordinals, shared); },
         record_graph, make_shared_host_memory, gpu_banner,
         "N GPU replicas (more than the GPUs present share them round-robin)"},
        {DeviceKind::cpu, "cpu", {"cpu"}, "cpus", "CPU device", "CPU devices", "", true, [] { return Presence{-1, {}}; },
         [](const ReplicaSetup& setup, std::span<const size_t> staging, std::span<const int>,
            std::shared_ptr<SharedHostMemory> shared) { return make_cpu_devices(setup, staging, shared); },
         nullptr, nullptr, cpu_banner, "N CPU devices, one worker thread (one core) each", cpu_chunk_samples},
    };
    return kinds;
}

}  // namespace

const std::vector<DeviceKindInfo>& device_kinds() { return rows(); }

void add_device_kind(DeviceKindInfo row) {
    for (const DeviceKindInfo& known : rows())
        if (known.kind == row.kind || std::string_view(known.name) == row.name)
            throw std::logic_error(std::string("a second device kind named ") + row.name);
    rows().push_back(std::move(row));
}

const DeviceKindInfo& kind_info(DeviceKind kind) {
    for (const DeviceKindInfo& row : device_kinds())
        if (row.kind == kind) return row;
    throw std::logic_error("a DeviceKind without its row in devices/kinds.cpp");
}

const DeviceKindInfo& kind_made_on_demand() {
    for (const DeviceKindInfo& row : device_kinds())
        if (row.probe().unlimited()) return row;
    throw std::logic_error("devices/kinds.cpp has no kind made on demand");
}

std::string count_help(const DeviceKindInfo& row) {
    return row.count_help ? row.count_help : std::string("N ") + row.many;
}

std::string describe(const DeviceChoice& choice) {
    std::string text;
    for (const DeviceKindInfo& row : device_kinds())
        if (const int n = choice.count(row.kind); n > 0)
            text.append(text.empty() ? "" : " and ").append(std::to_string(n)).append(" ").append(n == 1 ? row.one : row.many);
    return text;
}

std::string kind_names(const DeviceChoice& choice) {
    std::string text;
    for (const DeviceKindInfo& row : device_kinds())
        if (choice.count(row.kind) > 0) text.append(text.empty() ? "" : "+").append(row.name);
    return text;
}

// device.hpp: a GPU replica's kind is "cuda" in files and metrics.
const char* to_string(DeviceKind kind) { return kind_info(kind).name; }

}  // namespace dpt
