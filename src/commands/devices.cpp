// `dptrain devices`: what this machine offers data parallelism. CPU cores
// (each CPU device is one worker thread), each GPU's properties, which GPU
// pairs copy directly, and the copy speed between every pair, measured at
// two sizes: one gradient buffer (what each of the allreduce's copies moves,
// where latency counts) and 64 MB (the link's bandwidth).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "devices/device.hpp"
#include "base/errors.hpp"
#include "base/options.hpp"
#include "devices/gpu.hpp"
#include "model/models.hpp"
#include "commands/subcommands.hpp"

namespace dpt {
namespace {

constexpr size_t large_bytes = 64'000'000;

std::string cpu_model() {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);)
        if (line.rfind("model name", 0) == 0) {
            const size_t colon = line.find(':');
            if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
        }
    return "unknown model";
}

// Host memory copy bandwidth in GB/s for `bytes` a copy: the median of timed
// copies after a warm-up (a CPU device's allreduce copies with std::copy).
double host_copy_bandwidth(size_t bytes) {
    std::vector<char> src(bytes, 1), dst(bytes, 0);
    const int warm_up = 3, timed = bytes > (size_t(8) << 20) ? 10 : 200;
    std::vector<double> seconds;
    for (int i = 0; i < warm_up + timed; ++i) {
        const auto start = std::chrono::steady_clock::now();
        std::memcpy(dst.data(), src.data(), bytes);
        const auto stop = std::chrono::steady_clock::now();
        src[size_t(i) % bytes] = char(i);  // keeps each copy a fresh one
        if (i >= warm_up) seconds.push_back(std::chrono::duration<double>(stop - start).count());
    }
    std::nth_element(seconds.begin(), seconds.begin() + ptrdiff_t(seconds.size() / 2), seconds.end());
    return double(bytes) / std::max(seconds[seconds.size() / 2], 1e-9) / 1e9;
}

// "  8.1 GB/s at 64 MB; a gradient buffer: LeNet's   25.1 us ( 20.6 GB/s), resnet18's ..."
// from a function measuring GB/s at a size.
template <class Measure>
std::string speeds(Measure&& gbps_at) {
    const double lenet = gbps_at(gradient_bytes(ModelKind::lenet)), resnet = gbps_at(gradient_bytes(ModelKind::resnet18));
    char buf[192];
    std::snprintf(buf, sizeof buf, "%6.1f GB/s at 64 MB; a gradient buffer: lenet's %7.1f us (%5.1f GB/s), "
                  "resnet18's %7.1f us (%5.1f GB/s)", gbps_at(large_bytes),
                  double(gradient_bytes(ModelKind::lenet)) / lenet / 1e3, lenet,
                  double(gradient_bytes(ModelKind::resnet18)) / resnet / 1e3, resnet);
    return buf;
}

}  // namespace

int run_devices(int argc, const char* const* argv) {
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
            std::printf(
                "Usage: dptrain devices\n\n"
                "What this machine offers data parallelism: CPU cores, each GPU's name, memory, compute\n"
                "capability and multiprocessors, which GPU pairs can copy directly (peer access), and the\n"
                "copy speed between every pair, measured for one gradient buffer (what each of the\n"
                "allreduce's copies moves: lenet's %.0f KB, resnet18's %.1f MB) and for 64 MB.\n\n%s%s",
                double(gradient_bytes(ModelKind::lenet)) / 1e3, double(gradient_bytes(ModelKind::resnet18)) / 1e6,
                help_examples({{"dptrain devices", "this machine"},
                               {"DPTRAIN_EMULATED_GPUS=2 dptrain devices", "2 emulated GPUs (an emulated build)"}})
                    .c_str(),
                help_end("an error while probing the devices", false).c_str() + 1);  // (one blank line, not two)
            return 0;
        }
        throw InputError(std::string("dptrain devices takes no arguments (got '") + argv[i] + "')");
    }

    const int cores = usable_cores();
    std::printf("CPU: %s\n", cpu_model().c_str());
    std::printf("  %d usable core%s (%u hardware threads): up to %d CPU device%s can each compute on a core of its own\n",
                cores, cores == 1 ? "" : "s", std::thread::hardware_concurrency(), cores, cores == 1 ? "" : "s");
    std::printf("  host memory copies: %s\n", speeds(host_copy_bandwidth).c_str());
    std::printf("  (a CPU device's allreduce copies are such copies, between the replicas' buffers)\n");

    const GpuInventory inventory = probe_gpus();
    if (inventory.count() == 0) {
        std::printf("\nGPUs: none (%s)\n", inventory.why_none.c_str());
        return 0;
    }
    const std::vector<GpuProperties> gpus = gpu_properties();
    const int n = int(gpus.size());
    if (gpus_emulated())
        std::printf("\nGPUs: %d, emulated: the CUDA backend runs on this machine's CPU (a build with "
                    "-Demulated_gpu=true; DPTRAIN_EMULATED_GPUS sets how many), so its speeds are the CPU's\n", n);
    else
        std::printf("\nGPUs: %d\n", n);
    std::printf("  %-3s %-32s %10s %8s %5s\n", "#", "name", "memory", "compute", "SMs");
    for (int g = 0; g < n; ++g) {
        const GpuProperties& p = gpus[size_t(g)];
        std::printf("  %-3d %-32s %7.1f GB %6d.%d %5d\n", g, p.name.c_str(), p.memory_gb, p.major, p.minor,
                    p.multiprocessors);
    }
    if (n > 1) {
        const std::vector<std::vector<bool>> peer = gpu_peer_matrix();
        std::printf("\npeer access (row copies into column directly; 'no': through host memory)\n     ");
        for (int b = 0; b < n; ++b) std::printf(" %5d", b);
        std::printf("\n");
        for (int a = 0; a < n; ++a) {
            std::printf("  %-3d", a);
            for (int b = 0; b < n; ++b) std::printf(" %5s", a == b ? "-" : peer[size_t(a)][size_t(b)] ? "yes" : "no");
            std::printf("\n");
        }
    }
    std::printf("\ncopy speed, cudaMemcpyPeerAsync as in the allreduce (GPU -> GPU)\n");
    for (int a = 0; a < n; ++a)
        for (int b = 0; b < n; ++b)
            std::printf("  %d -> %d%s: %s\n", a, b, a == b ? " (within the GPU: replicas sharing it)" : "",
                        speeds([&](size_t bytes) { return gpu_copy_bandwidth(a, b, bytes); }).c_str());
    if (n == 1)
        std::printf("(one GPU: --gpus N puts N replicas on it, and their allreduce copies stay in its memory)\n");
    std::printf("\n--allreduce nccl: %s\n", nccl_status().c_str());
    return 0;
}

}  // namespace dpt
