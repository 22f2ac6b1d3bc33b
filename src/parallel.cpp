#include "parallel.hpp"

#include <algorithm>
#include <cassert>

namespace dpt {

Part part_of(int batch, int devices, int i) {
    assert(devices > 0 && i >= 0 && i < devices && batch >= 0);
    const int base = batch / devices, extra = batch % devices;
    return {i * base + std::min(i, extra), base + (i < extra ? 1 : 0)};
}

std::vector<Part> even_parts(int batch, int devices) {
    std::vector<Part> parts;
    for (int i = 0; i < devices; ++i) parts.push_back(part_of(batch, devices, i));
    return parts;
}

void split_and_load(std::span<Device* const> devices, size_t first, std::span<const Part> parts) {
    assert(parts.size() == devices.size());
    for (size_t i = 0; i < devices.size(); ++i) devices[i]->load_train(first + size_t(parts[i].first), parts[i].count);
}

void train_step(std::span<Device* const> devices, const Allreduce& allreduce, size_t first,
                std::span<const Part> parts, float lr, int32_t step, bool timed) {
    const int size = parts.back().first + parts.back().count;
    for (Device* d : devices) mark_phase(*d, Phase::load, timed);
    split_and_load(devices, first, parts);
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
