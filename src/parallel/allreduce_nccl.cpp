// NCCL's allreduce, the production baseline: ncclAllReduce on every GPU
// replica's stream, in one group. NCCL picks its own algorithm (rings or
// trees over NVLink, PCIe or the network) and its own kernels; dptrain only
// hands it the gradient buffers. The library is loaded at run time
// (gpu_nccl.cpp), so the same binary runs where it is absent and
// `--allreduce nccl` then says why.
#include "parallel/allreduce.hpp"
#include "devices/gpu.hpp"

namespace dpt {
namespace {

class Nccl final : public Allreduce {
   public:
    const AllreduceInfo& info() const override {
        static constexpr AllreduceInfo info{
            "nccl",
            "NCCL's ncclAllReduce on every replica's stream (its own rings or trees, its own kernels)",
            "nothing: NCCL's waits are inside its allreduce",
            "NCCL's allreduce",
        };
        return info;
    }

    size_t staging_floats(int, int, size_t) const override { return 0; }  // NCCL keeps its own buffers

    std::string refusal(const DeviceChoice& choice) const override {
        if (choice.count(DeviceKind::cpu) > 0) return "NCCL sums GPU replicas only (give --gpus N, or another --allreduce)";
        return nccl_refusal(choice.count(DeviceKind::gpu), choice.ordinals(DeviceKind::gpu));
    }

    // NCCL picks its summation order by message size, so an --overlap
    // bucket's sums may differ from the whole buffer's in the last bits.
    void run_range(std::span<Device* const> devices, size_t, Range range, bool timed) const override {
        if (devices.size() == 1) return;
        for (Device* d : devices) mark_phase(*d, Phase::allreduce, timed);
        nccl_sum(devices, range);
    }

    std::string explain(std::span<Device* const>, size_t floats) const override {
        return "NCCL summed the " + std::to_string(floats) + " floats of every replica in place, with one\n"
               "ncclAllReduce per replica in one group; how (ring or tree, which links) is NCCL's choice.\n";
    }
};

}  // namespace

const Allreduce& nccl_allreduce() {
    static const Nccl nccl;
    return nccl;
}

}  // namespace dpt
