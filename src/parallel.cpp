#include "parallel.hpp"

#include <cassert>

namespace dpt {

Part part_of(int batch, int devices, int i) {
    assert(devices > 0 && i >= 0 && i < devices && batch >= 0);
    const int base = batch / devices, extra = batch % devices;
    return {i * base + std::min(i, extra), base + (i < extra ? 1 : 0)};
}

void split_and_load(std::span<Device* const> devices, size_t first, int size) {
    const int n = int(devices.size());
    for (int i = 0; i < n; ++i) {
        const Part part = part_of(size, n, i);
        devices[i]->load_train(first + size_t(part.first), part.count);
    }
}

namespace {

void mark_phase(Device& d, Phase phase, bool timed) {
    if (timed) d.begin_phase(phase);
}

}  // namespace

void allreduce_naive(std::span<Device* const> devices, bool timed) {
    Device& root = *devices[0];
    const int n = int(devices.size());
    for (int i = 1; i < n; ++i) devices[i]->mark();  // "my gradients are ready"
    for (int i = 1; i < n; ++i) {
        mark_phase(root, Phase::wait, timed);
        root.wait_for(*devices[i]);
        mark_phase(root, Phase::allreduce, timed);
        root.copy_grads_from(*devices[i], i - 1);
    }
    root.sum_staged_grads(n - 1);
    // Device 0 pushes the sum into each peer's gradient buffer. A peer's stream
    // has nothing queued between its mark above and the wait below, so nothing
    // on it touches that buffer while device 0 writes it.
    for (int i = 1; i < n; ++i) root.copy_grads_to(*devices[i]);
    root.mark();  // "the sum is everywhere"
    for (int i = 1; i < n; ++i) {
        mark_phase(*devices[i], Phase::allreduce, timed);
        devices[i]->wait_for(root);
    }
}

void train_step(std::span<Device* const> devices, size_t first, int size, float lr, int32_t step, bool timed) {
    for (Device* d : devices) mark_phase(*d, Phase::load, timed);
    split_and_load(devices, first, size);
    for (Device* d : devices) {
        mark_phase(*d, Phase::compute, timed);
        d->forward_backward();
    }
    allreduce_naive(devices, timed);
    for (Device* d : devices) mark_phase(*d, Phase::update, timed);
    devices[0]->check_gradients(step);  // after the allreduce: every device's part is in the sum
    const float scale = lr / float(size);
    for (Device* d : devices) d->sgd_update(scale);
}

}  // namespace dpt
