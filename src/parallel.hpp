// Data parallelism, as in the tutorial: split each batch across the devices,
// let each compute the gradient of its part, sum the gradients (allreduce),
// and apply the same SGD update on every replica.
#pragma once
#include <cstddef>
#include <span>

#include "allreduce.hpp"
#include "device.hpp"

namespace dpt {

// Part i of a batch of `batch` samples over `devices` devices: contiguous, of
// batch / devices samples each, the first batch % devices parts one more.
struct Part {
    int first;  // offset within the batch
    int count;
};
Part part_of(int batch, int devices, int i);

// The batch is samples [first, first + size) of the epoch's order (host side).
// Queues on device i the load of part i. Nothing waits.
void split_and_load(std::span<Device* const> devices, size_t first, int size);

// Step `step` of an epoch, on the batch [first, first + size) of the epoch's
// order: split_and_load, forward+backward everywhere, the allreduce, the
// divergence watch on device 0's summed gradients, update everywhere with
// lr / size. Queued work only; `timed` adds the phase marks of --breakdown.
void train_step(std::span<Device* const> devices, const Allreduce& allreduce, size_t first, int size, float lr,
                int32_t step, bool timed = false);

}  // namespace dpt
