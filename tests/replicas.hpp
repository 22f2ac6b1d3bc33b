// A run's CPU devices on synthetic data, for the tests of training steps.
#pragma once
#include <memory>
#include <vector>

#include "parallel/device_factory.hpp"
#include "parallel/parallel.hpp"
#include "model/lenet.hpp"
#include "synthetic.hpp"

namespace dpt::testing {

struct Run {
    Dataset train, test;
    std::vector<std::unique_ptr<Device>> owned;
    std::vector<Device*> devices;
    StepPlan plan;  // what train_step does between them

    // n CPU devices of `model` whose parts hold up to `capacity` samples
    // (0: an even part of `batch`), with the staging memory `allreduce`
    // needs (null: naive), handing these gradient buckets to the allreduce
    // (--overlap).
    Run(int n, int batch, size_t count, bool random_pixels = false, int capacity = 0,
        const Allreduce* allreduce = nullptr, std::vector<Range> buckets = {}, const Model& model = lenet::model(),
        BatchNormMode bn = BatchNormMode::local)
        : train(synthetic(count, random_pixels)), test(synthetic(16, random_pixels)) {
        const int part = capacity > 0 ? capacity : (batch + n - 1) / n;
        plan = plan_step(model, bn, buckets);
        owned = make_devices(DeviceChoice::of(DeviceKind::cpu, n),
                             {&train, &test, part, PoolKind::avg, 0, std::move(buckets), &model, bn},
                             allreduce ? *allreduce : allreduce_named("naive"));
        devices = pointers(owned);
    }
    // The devices of `choice`, of any kinds, each part up to ceil(batch / N)
    // samples, LeNet, the naive allreduce.
    Run(const DeviceChoice& choice, int batch, size_t count, bool random_pixels = false)
        : train(synthetic(count, random_pixels)), test(synthetic(16, random_pixels)) {
        const int n = choice.count(), part = (batch + n - 1) / n;
        plan = plan_step(lenet::model(), BatchNormMode::local, {});
        owned = make_devices(choice, {&train, &test, part, PoolKind::avg}, allreduce_named("naive"));
        devices = pointers(owned);
    }
    std::vector<float> params(int i) {
        std::vector<float> p(devices[size_t(i)]->param_floats());
        devices[size_t(i)]->read_params(p);
        return p;
    }
};

}  // namespace dpt::testing
