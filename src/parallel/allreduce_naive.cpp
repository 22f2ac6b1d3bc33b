// The tutorial's allreduce: device 0 copies every peer's whole gradient
// buffer into staging of its own, adds them to its own gradients in device
// order, and copies the sum back into every peer's gradient buffer. All the
// traffic goes through device 0, so its cost grows with N.
#include <cstdio>

#include "parallel/allreduce.hpp"

namespace dpt {
namespace {

class Naive final : public Allreduce {
   public:
    const AllreduceInfo& info() const override {
        static constexpr AllreduceInfo info{
            "naive",
            "device 0 gathers every gradient buffer, sums them and sends the sum back",
            "device 0 waiting for a peer's gradients",
            "waiting for peers (the slowest device: load imbalance)",
        };
        return info;
    }

    // 2(n-1) transfers of the whole buffer, one after another, through device 0.
    const CostModel* cost_model() const override {
        static constexpr CostModel model{
            "T = 2(n-1) (m alpha + S/beta)",
            "device 0 takes in and sends back every buffer",
            [](int n, double bytes, int messages, double alpha, double beta) {
                return n <= 1 ? 0.0 : 2.0 * (n - 1) * (messages * alpha + bytes / beta);
            },
        };
        return &model;
    }

    // Device 0 stages the N-1 peers' buffers side by side; the peers need none.
    size_t staging_floats(int device, int devices, size_t floats) const override {
        return device == 0 ? size_t(devices - 1) * floats : 0;
    }

    // Device 0 makes every copy; in a mixed run it is a GPU.
    std::string refusal(const DeviceChoice&) const override { return ""; }

    // Each float is summed as device 0's + device 1's + ... in device order,
    // whatever the range.
    void run_range(std::span<Device* const> devices, size_t, Range range, bool timed) const override {
        Device& root = *devices[0];
        const int n = int(devices.size());
        for (int i = 1; i < n; ++i) devices[i]->mark();  // "my gradients are ready"
        for (int i = 1; i < n; ++i) {
            mark_phase(root, Phase::wait, timed);
            root.wait_for(*devices[i]);
            mark_phase(root, Phase::copy, timed);
            root.copy_from_peer(*devices[i], range.first, range.count, size_t(i - 1) * range.count);
        }
        mark_phase(root, Phase::allreduce, timed);
        root.reduce_staged(range.first, range.count, 0, n - 1);
        // Device 0 pushes the sum into each peer's gradient buffer. A peer's
        // allreduce stream has nothing queued between its mark above and the
        // wait below, so nothing touches that range while device 0 writes it.
        if (n > 1) mark_phase(root, Phase::copy, timed);
        for (int i = 1; i < n; ++i) root.copy_to_peer(*devices[i], range.first, range.count);
        root.mark();  // "the sum is everywhere"
        for (int i = 1; i < n; ++i) {
            mark_phase(*devices[i], Phase::allreduce, timed);  // a peer: waiting for the sum
            devices[i]->wait_for(root);
        }
    }

    std::string explain(std::span<Device* const> devices, size_t floats) const override {
        const int n = int(devices.size());
        char text[600];
        std::snprintf(text, sizeof text,
                      "%s copied each peer's buffer into a staging buffer of its own, added them to its\n"
                      "own in device order, then copied the sum into every peer's buffer: %d cop%s in and %d out,\n"
                      "each of a whole gradient buffer (%zu floats, %.0f KB). All of them go through one\n"
                      "device, so the naive allreduce's cost grows with N.\n",
                      devices[0]->name().c_str(), n - 1, n == 2 ? "y" : "ies", n - 1, floats,
                      double(floats) * sizeof(float) / 1e3);
        return text;
    }
};

}  // namespace

const Allreduce& naive_allreduce() {
    static const Naive naive;
    return naive;
}

}  // namespace dpt
