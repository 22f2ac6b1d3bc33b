// Data parallelism, as in the tutorial: split each batch across the devices,
// let each compute the gradient of its part, sum the gradients (allreduce),
// and apply the same SGD update on every replica.
#pragma once
#include <cstddef>
#include <span>

#include <vector>

#include "parallel/allreduce.hpp"
#include "devices/device.hpp"
#include "model/model.hpp"
#include "parallel/split.hpp"

namespace dpt {

// Part i of a batch of `batch` samples over `devices` devices, split evenly
// (the tutorial's split): contiguous, of batch / devices samples each, the
// first batch % devices parts one more. Other splits: split.hpp.
Part part_of(int batch, int devices, int i);
// All of them (tests, demos: this allocates).
std::vector<Part> even_parts(int batch, int devices);

// The batch is samples [first, first + size) of the epoch's order (host
// side), size being the parts' sum. Queues on device i the load of part i.
// Nothing waits.
void split_and_load(std::span<Device* const> devices, size_t first, std::span<const Part> parts);

// --overlap: the model's gradient buffer cut into buckets at layer
// boundaries, in the order backward finishes them (the last layers' first):
// layers are added to a bucket until it holds at least `bucket_kb` KB, the
// rest (the first layers) making the last bucket. 0 KB: a bucket per layer.
// With --bn local, batch norm's statistics (final after forward) come first.
std::vector<Range> overlap_buckets(const Model& model, int bucket_kb, BatchNormMode bn = BatchNormMode::local);

// What a step does between the devices, the same in every step of a run and
// made once from the model and the settings: the gradient floats the
// allreduce sums after backward, --overlap's buckets (the devices are made
// with the same, ReplicaSetup::buckets) and --bn sync's ranges allreduced
// between the stages of a training pass.
struct StepPlan {
    size_t floats = 0;           // Model::allreduced_floats
    std::vector<Range> buckets;  // empty: one allreduce after backward
    std::vector<Range> syncs;    // Model::sync_ranges; empty: one stage
};
StepPlan plan_step(const Model& model, BatchNormMode bn, std::vector<Range> buckets = {});

// Every device's forward+backward on its loaded part, `batch` samples on
// all devices together; with --bn sync in stages, allreducing batch norm's
// sums between them (plan.syncs). Queued work only.
void compute_gradients(std::span<Device* const> devices, const Allreduce& allreduce, const StepPlan& plan, int batch,
                       bool timed = false);

// Step `step` of an epoch, on the batch of the epoch's order that starts at
// `first`, cut into `parts` (one per device): split_and_load,
// forward+backward everywhere, the allreduce, the divergence watch on device
// 0's summed gradients, update everywhere with lr / (the batch's size).
// With buckets (--overlap) each is allreduced as soon as backward hands it
// over, on the devices' allreduce streams. Queued work only; `timed` adds
// the phase marks of --breakdown. `batch`: the step's samples on all the
// devices of all the processes (0: the parts' end; a multi-process run
// passes only its own devices' parts).
void train_step(std::span<Device* const> devices, const Allreduce& allreduce, const StepPlan& plan, size_t first,
                std::span<const Part> parts, float lr, int32_t step, bool timed = false, int batch = 0);

}  // namespace dpt
