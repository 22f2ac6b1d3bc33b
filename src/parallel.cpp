#include "parallel.hpp"

#include <algorithm>
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

void train_step(std::span<Device* const> devices, const Allreduce& allreduce, size_t first, int size, float lr,
                int32_t step, bool timed) {
    for (Device* d : devices) mark_phase(*d, Phase::load, timed);
    split_and_load(devices, first, size);
    for (Device* d : devices) {
        mark_phase(*d, Phase::compute, timed);
        d->forward_backward();
    }
    allreduce.run(devices, devices[0]->param_floats(), timed);
    for (Device* d : devices) mark_phase(*d, Phase::update, timed);
    devices[0]->check_gradients(step);  // after the allreduce: every device's part is in the sum
    const float scale = lr / float(size);
    for (Device* d : devices) d->sgd_update(scale);
}

}  // namespace dpt
