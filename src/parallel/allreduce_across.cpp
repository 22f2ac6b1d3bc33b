// A multi-process run's allreduce (cluster.hpp): the algorithm the run chose
// sums the gradients of this process's devices, then device 0 sums that
// across the processes (--across: through host memory by MPI, or GPU to GPU
// by NCCL), then hands the total to its peers. Every device of every process
// ends with the same bits.
#include "parallel/allreduce.hpp"
#include "parallel/cluster.hpp"
#include "devices/gpu.hpp"

#include <utility>

namespace dpt {
namespace {

class AcrossProcesses final : public Allreduce {
   public:
    AcrossProcesses(const Allreduce& within, RootSum across) : within_(within), across_(std::move(across)) {}

    const AllreduceInfo& info() const override { return within_.info(); }
    const CostModel* cost_model() const override { return within_.cost_model(); }
    size_t staging_floats(int device, int devices, size_t floats) const override {
        return within_.staging_floats(device, devices, floats);
    }
    std::string refusal(const DeviceChoice& choice) const override { return within_.refusal(choice); }
    std::string explain(std::span<Device* const> devices, size_t floats) const override {
        return within_.explain(devices, floats);
    }

    void run_range(std::span<Device* const> devices, size_t floats, Range range, bool timed) const override {
        within_.run_range(devices, floats, range, timed);
        Device& root = *devices[0];
        const size_t n = devices.size();
        // Device 0 takes the process's sum once every peer is done with the
        // range (a ring's last copies into a peer are queued on another peer).
        for (size_t i = 1; i < n; ++i) devices[i]->mark();
        for (size_t i = 1; i < n; ++i) {
            mark_phase(root, Phase::wait, timed);
            root.wait_for(*devices[i]);
        }
        mark_phase(root, Phase::allreduce, timed);
        across_(root, range);
        if (n > 1) mark_phase(root, Phase::copy, timed);
        for (size_t i = 1; i < n; ++i) root.copy_to_peer(*devices[i], range.first, range.count);
        root.mark();
        for (size_t i = 1; i < n; ++i) {
            mark_phase(*devices[i], Phase::allreduce, timed);
            devices[i]->wait_for(root);
        }
    }

   private:
    const Allreduce& within_;
    RootSum across_;
};

}  // namespace

std::unique_ptr<Allreduce> across_processes(const Allreduce& within, RootSum across) {
    return std::make_unique<AcrossProcesses>(within, std::move(across));
}

std::unique_ptr<Allreduce> across_processes(const Allreduce& within, ProcessSum& sum) {
    return across_processes(within, [&sum](Device& root, Range range) { root.sum_across(sum, range); });
}

std::unique_ptr<Allreduce> sum_across_processes(AcrossKind& across, Cluster& cluster, const Allreduce& within,
                                                Device& root, std::string& note) {
    if (across == AcrossKind::automatic || across == AcrossKind::nccl) {
        const bool gpu = root.kind() == DeviceKind::gpu;
        const std::vector<std::string> places =
            cluster.all_gather_text(gpu ? gpu_place(root, cluster.host()) : "", "the GPUs' places");
        const std::vector<std::string> missing =
            cluster.all_gather_text(gpu ? nccl_refusal(1, {}) : "", "whether every process has NCCL");
        AcrossDecision decided;
        cluster.all_or_none([&] { decided = decide_across(across, places, missing); }, "--across");
        across = decided.kind;
        if (across == AcrossKind::nccl) {
            const ProcessGroup group{cluster.rank(), cluster.size(), [&cluster](const std::string& text) {
                                         return cluster.leader_text(text, "NCCL's unique id");
                                     }};
            return across_processes(within, nccl_across(group, root));
        }
        if (gpu)
            note = "note: the processes sum through host memory with MPI_Allreduce, not NCCL: " +
                   decided.why_not_nccl + " (--across auto)";
    }
    return across_processes(within, cluster);
}

}  // namespace dpt
