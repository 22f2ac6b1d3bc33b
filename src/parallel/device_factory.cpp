#include "parallel/device_factory.hpp"

#include <algorithm>

#include "base/errors.hpp"
#include "devices/gpu.hpp"
#include "base/numbers.hpp"

namespace dpt {

int parse_device_count(const std::string& option, const std::string& text) {
    return parse_number<int>(option, text, 1, max_devices,
                             ("a whole number from 1 to " + std::to_string(max_devices)).c_str());
}

void require_gpus(const std::string& what) {
    const GpuInventory gpus = probe_gpus();
    if (gpus.count() == 0) throw InputError(what + ": " + gpus.why_none + "; train on CPU devices with --cpus N");
}

DeviceChoice choose_devices(const std::string& cpus, const std::string& gpus, DeviceChoice fallback, bool mixed_ok) {
    if (!cpus.empty() && !gpus.empty() && !mixed_ok)
        throw InputError("--cpus and --gpus cannot be combined here: pick one kind (training takes both)");
    if (cpus.empty() && gpus.empty()) return fallback;
    DeviceChoice choice{0, 0, {}};
    if (!gpus.empty()) {
        choice.gpus = parse_device_count("gpus", gpus);
        require_gpus("--gpus " + gpus);
    }
    if (!cpus.empty()) choice.cpus = parse_device_count("cpus", cpus);
    if (choice.count() > max_devices)
        throw InputError("--gpus " + gpus + " --cpus " + cpus + ": at most " + std::to_string(max_devices) +
                         " devices in all");
    return choice;
}

DeviceChoice parse_device_list(const std::string& text) {
    DeviceChoice choice{0, 0, {}};
    std::vector<int> cpu_numbers;
    for (const std::string& item : comma_list(text)) {
        const size_t colon = item.find(':');
        const std::string kind = item.substr(0, colon);
        if (colon == std::string::npos || (kind != "gpu" && kind != "cuda" && kind != "cpu"))
            throw InputError("--devices " + text + ": '" + item + "' is not gpu:I, cuda:I or cpu:I");
        const int number = parse_number<int>("devices", item.substr(colon + 1), 0, max_devices - 1,
                                             ("a device number from 0 after " + kind + ":").c_str());
        if (kind == "cpu") cpu_numbers.push_back(number);
        else choice.gpu_ids.push_back(number);
    }
    std::sort(cpu_numbers.begin(), cpu_numbers.end());
    for (size_t i = 0; i < cpu_numbers.size(); ++i)
        if (cpu_numbers[i] != int(i))
            throw InputError("--devices " + text + ": CPU devices are numbered cpu:0, cpu:1, ... each once (" +
                             std::to_string(cpu_numbers.size()) + " CPU devices are cpu:0 to cpu:" +
                             std::to_string(cpu_numbers.size() - 1) + ")");
    choice.gpus = int(choice.gpu_ids.size());
    choice.cpus = int(cpu_numbers.size());
    if (choice.count() > max_devices)
        throw InputError("--devices " + text + ": at most " + std::to_string(max_devices) + " devices");
    if (choice.gpus > 0) {
        require_gpus("--devices " + text);
        const int present = probe_gpus().count();
        for (int id : choice.gpu_ids)
            if (id >= present)
                throw InputError("--devices " + text + ": there is no gpu:" + std::to_string(id) + " (" +
                                 std::to_string(present) + " GPU" + (present == 1 ? "" : "s") + " visible: gpu:0" +
                                 (present > 1 ? " to gpu:" + std::to_string(present - 1) : "") + ")");
    }
    return choice;
}

std::string describe(const DeviceChoice& choice) {
    const auto count = [](int n, const char* one, const char* many) { return std::to_string(n) + " " + (n == 1 ? one : many); };
    if (choice.gpus == 0) return count(choice.cpus, "CPU device", "CPU devices");
    const std::string gpus = count(choice.gpus, "GPU replica", "GPU replicas");
    return choice.cpus == 0 ? gpus : gpus + " and " + count(choice.cpus, "CPU device", "CPU devices");
}

DeviceChoice default_devices(std::string& why) {
    const GpuInventory gpus = probe_gpus();
    if (gpus.count() > 0) {
        why = "all visible GPUs (choose with --gpus N or --cpus N)";
        return DeviceChoice::of(DeviceKind::gpu, gpus.count());
    }
    why = gpus.why_none + ", so 1 CPU device (choose with --cpus N)";
    return DeviceChoice::of(DeviceKind::cpu, 1);
}

std::vector<std::unique_ptr<Device>> make_devices(const DeviceChoice& choice, const ReplicaSetup& setup,
                                                  const Allreduce& allreduce) {
    const std::string refusal = allreduce.refusal(choice);
    if (!refusal.empty()) throw InputError("--allreduce " + std::string(allreduce.info().name) + ": " + refusal);
    const int n = choice.count();
    std::vector<size_t> staging;
    const size_t floats = setup.grad_floats();
    for (int i = 0; i < n; ++i) staging.push_back(allreduce.staging_floats(i, n, floats));
    if (choice.gpus == 0) return make_cpu_devices(setup, staging);
    if (choice.cpus == 0) return make_gpu_devices(setup, staging, choice.gpu_ids);
    // Mixed: the GPUs first (device 0, where the naive allreduce sums, is a
    // GPU), every device holding the pinned memory the copies between kinds go through.
    const std::shared_ptr<SharedHostMemory> shared = make_shared_host_memory();
    const std::span<const size_t> all(staging);
    std::vector<std::unique_ptr<Device>> devices =
        make_gpu_devices(setup, all.first(size_t(choice.gpus)), choice.gpu_ids, shared);
    for (auto& d : make_cpu_devices(setup, all.subspan(size_t(choice.gpus)), shared)) devices.push_back(std::move(d));
    return devices;
}

std::unique_ptr<Recording> record_work(std::span<Device* const> devices, const std::function<void()>& enqueue,
                                       std::string& why) {
    for (Device* d : devices)
        if (!d->capabilities().records_graphs) {
            why = d->name() + " does not record its work";
            return nullptr;
        }
    return record_graph(devices, enqueue, why);  // the one kind that records: GPU replicas
}

DeviceChoice placed_on_this_machine(DeviceChoice choice, int processes, int local_rank) {
    if (processes > 1 && choice.gpus > 0 && choice.gpu_ids.empty())
        if (const int present = probe_gpus().count(); present > 0)
            for (int i = 0; i < choice.gpus; ++i) choice.gpu_ids.push_back((local_rank * choice.gpus + i) % present);
    return choice;
}

std::vector<Device*> pointers(const std::vector<std::unique_ptr<Device>>& devices) {
    std::vector<Device*> plain;
    for (const auto& d : devices) plain.push_back(d.get());
    return plain;
}

}  // namespace dpt
