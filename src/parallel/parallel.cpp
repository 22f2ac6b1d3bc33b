#include "parallel/parallel.hpp"

#include <algorithm>
#include <cassert>

#include "base/numbers.hpp"

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

std::vector<Range> overlap_buckets(const Model& model, int bucket_kb, BatchNormMode bn) {
    const size_t least = size_t(bucket_kb) * bytes_per_kb / sizeof(float);
    std::vector<Range> buckets;
    // Batch norm's statistics (--bn local) are final after forward: first.
    const size_t floats = model.allreduced_floats(bn), trained = model.trained_count();
    if (floats > trained) buckets.push_back({trained, floats - trained});
    size_t end = trained;  // of the bucket being filled
    const std::vector<ParamTensor>& tensors = model.tensors();
    for (size_t i = tensors.size(); i-- > 0;) {
        // A layer starts at its weight (batch norm: its gamma).
        if (tensors[i].role != InitRole::weight && tensors[i].role != InitRole::gamma) continue;
        const size_t first = tensors[i].offset;
        if (end - first >= least || first == 0) {
            buckets.push_back({first, end - first});
            end = first;
        }
    }
    return buckets;
}

namespace {

// The allreduce of a step with --overlap: bucket after bucket, each device's
// allreduce stream first waits for its backward to hand the bucket over;
// then the main streams wait for the allreduce streams before the update.
void allreduce_overlapped(std::span<Device* const> devices, const Allreduce& allreduce, std::span<const Range> buckets,
                          size_t floats, bool timed) {
    for (const Range& bucket : buckets) {
        for (Device* d : devices) {
            mark_phase(*d, Phase::standby, timed);
            d->await_bucket();
        }
        allreduce.run_range(devices, floats, bucket, timed);
    }
    for (Device* d : devices) {
        mark_phase(*d, Phase::standby, timed);  // the allreduce stream's, till the next step
        mark_phase(*d, Phase::exposed, timed);  // the main stream's
        d->await_allreduce();
    }
}

}  // namespace

StepPlan plan_step(const Model& model, BatchNormMode bn, std::vector<Range> buckets) {
    return {model.allreduced_floats(bn), std::move(buckets), model.sync_ranges(bn)};
}

void compute_gradients(std::span<Device* const> devices, const Allreduce& allreduce, const StepPlan& plan, int batch,
                       bool timed) {
    // --bn sync: between two stages, a batch norm's sums over every part.
    // They lie in the gradient buffer past the allreduced floats (the
    // backward sums end it), so the ring cuts the whole buffer into chunks.
    // With --overlap the sums go on the allreduce streams, which first wait
    // for the stage, and the next stage waits for them.
    const std::span<const Range> syncs = plan.syncs;
    const bool second_stream = !plan.buckets.empty();
    size_t sync_floats = 0;
    for (const Range& r : syncs) sync_floats = std::max(sync_floats, r.end());
    for (size_t stage = 0;; ++stage) {
        for (Device* d : devices) {
            mark_phase(*d, Phase::compute, timed);
            d->forward_backward(int(stage), batch);
        }
        if (stage == syncs.size()) break;
        if (second_stream)
            for (Device* d : devices) {
                mark_phase(*d, Phase::standby, timed);
                d->await_main();
            }
        allreduce.run_range(devices, sync_floats, syncs[stage], timed);
        if (second_stream)
            for (Device* d : devices) {
                mark_phase(*d, Phase::exposed, timed);
                d->await_allreduce();
            }
    }
}

void train_step(std::span<Device* const> devices, const Allreduce& allreduce, const StepPlan& plan, size_t first,
                std::span<const Part> parts, float lr, int32_t step, bool timed, int batch) {
    const int size = batch > 0 ? batch : parts.back().first + parts.back().count;
    for (Device* d : devices) mark_phase(*d, Phase::load, timed);
    split_and_load(devices, first, parts);
    compute_gradients(devices, allreduce, plan, size, timed);
    if (plan.buckets.empty()) allreduce.run(devices, plan.floats, timed);
    else allreduce_overlapped(devices, allreduce, plan.buckets, plan.floats, timed);
    for (Device* d : devices) mark_phase(*d, Phase::update, timed);
    devices[0]->check_gradients(step);  // after the allreduce: every device's part is in the sum
    const float scale = lr / float(size);
    for (Device* d : devices) d->sgd_update(scale, size);
}

}  // namespace dpt
