// An allreduce algorithm: afterwards every device's gradient buffer holds the
// sum of all the devices' gradients, the same bits on every device. An
// algorithm is built from the ranged primitives of Device (copy a range of a
// peer's gradients into my staging, reduce a range with staged ranges, copy a
// range of mine into a peer's gradients, marks) and only queues work.
//
// To add one: a file allreduce_NAME.cpp that defines a subclass (with its
// cost model, for dptrain simulate) and a function returning it, and one
// line in the table of allreduce.cpp. dptrain simulate, bench-allreduce and
// the tests take every algorithm of the table.
#pragma once
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "devices/device.hpp"

namespace dpt {

// How an algorithm describes itself to the people reading dptrain's output.
struct AllreduceInfo {
    std::string_view name;       // --allreduce NAME
    std::string_view summary;    // a clause: "device 0 gathers every gradient buffer, sums, sends the sum back"
    std::string_view wait_what;  // what --breakdown's "waiting" covers with this algorithm
    std::string_view wait_cost;  // how compare's verdict names time lost there
};

// An algorithm's time in the alpha-beta model of a link (dptrain simulate):
// a transfer costs alpha seconds plus its bytes over beta bytes a second.
struct CostModel {
    std::string_view formula;  // as simulate prints it: "T = 2(n-1) (m alpha + S/beta)"
    std::string_view why;      // a clause: "device 0 takes in and sends back every buffer"
    // Seconds to allreduce `bytes` over n devices, sent as `messages`
    // allreduces (--overlap's buckets) that add up to `bytes`; 0 for one device.
    double (*seconds)(int n, double bytes, int messages, double alpha, double beta);
};

class Allreduce {
   public:
    virtual ~Allreduce() = default;
    virtual const AllreduceInfo& info() const = 0;
    // Its cost model, or null when it has none (NCCL, which picks its own
    // algorithm by message size and link): simulate then leaves it out.
    virtual const CostModel* cost_model() const { return nullptr; }
    // Bus bandwidth over algorithm bandwidth (bytes / time) on n devices:
    // 2(n-1)/n for an allreduce, whichever the algorithm (the nccl-tests
    // convention, comparable with a link's speed; bench-allreduce).
    static double bus_factor(int n) { return n > 1 ? 2.0 * double(n - 1) / double(n) : 0.0; }
    // Floats of staging memory device `device` of `devices` needs for
    // gradient buffers of `floats` floats.
    virtual size_t staging_floats(int device, int devices, size_t floats) const = 0;
    // Queues the allreduce of `range` of every device's gradient buffer, of
    // which the first `floats` floats take part. Each float is summed in the
    // same order whatever the range (parallel.cpp's --overlap allreduces the
    // buffer bucket by bucket and must give the same bits; NCCL, which
    // chooses its own order, is the exception). With `timed`, phase marks
    // (Phase::wait, Phase::allreduce) show where each device's time goes.
    virtual void run_range(std::span<Device* const> devices, size_t floats, Range range, bool timed) const = 0;
    // All of the first `floats` floats.
    void run(std::span<Device* const> devices, size_t floats, bool timed) const {
        run_range(devices, floats, {0, floats}, timed);
    }
    // Why this algorithm cannot sum the gradients of `choice`'s devices, or
    // "" when it can. By default a mixed run is refused: in it a CPU device
    // may not copy a GPU's gradients (device.hpp), only GPUs move what
    // crosses kinds, and an algorithm must arrange its roles so (naive does).
    virtual std::string refusal(const DeviceChoice& choice) const;
    // What run() did on these devices (two or more), for a reader who just
    // watched a small tensor go through it (dptrain demo allreduce).
    virtual std::string explain(std::span<Device* const> devices, size_t floats) const = 0;
};

// The algorithm called `name`, or null.
const Allreduce* find_allreduce(std::string_view name);
// The algorithm called `name`; an InputError naming --allreduce and the
// choices when there is none.
const Allreduce& allreduce_named(std::string_view name);
// "naive" (the names, comma-separated, for help texts and messages).
std::string allreduce_names();
// Every algorithm, in the table's order.
std::vector<const Allreduce*> all_allreduces();
// The names of those that can sum the gradients of `choice`'s devices (no
// refusal), in the table's order: what the tests run on CPU devices.
std::vector<std::string> allreduce_names_for(const DeviceChoice& choice);

// How device 0 of a multi-process run sums a range of its gradients with
// the other processes' device 0s (queued on its allreduce stream).
using RootSum = std::function<void(Device& root, Range range)>;
// A multi-process run's allreduce (cluster.hpp): `within` among this
// process's devices, then device 0's sum summed across the processes by
// `across`, then device 0's total copied to its peers.
std::unique_ptr<Allreduce> across_processes(const Allreduce& within, RootSum across);
// ... where `across` is Device::sum_across with `sum` (MPI, through host memory).
std::unique_ptr<Allreduce> across_processes(const Allreduce& within, ProcessSum& sum);

// Queues begin_phase(phase) on `device` when `timed` (--breakdown).
inline void mark_phase(Device& device, Phase phase, bool timed) {
    if (timed) device.begin_phase(phase);
}

}  // namespace dpt
