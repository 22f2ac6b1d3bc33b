// The training run behind `dptrain`: load the data, build N replicas with the
// same initial parameters, train epoch by epoch with data parallelism, and
// report time, throughput, loss and test accuracy after each epoch.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "devices/device.hpp"
#include "parallel/allreduce.hpp"
#include "parallel/cluster.hpp"
#include "parallel/parallel.hpp"
#include "run/report.hpp"
#include "run/schedule.hpp"
#include "model/lenet.hpp"
#include "run/settings.hpp"
#include "parallel/split.hpp"

namespace dpt {

// Initial parameters of `model` from the seed: weights N(0, 0.01^2) (the
// tutorial's LeNet) or Xavier-uniform (U(-a, a), a = sqrt(6 / (fan_in +
// fan_out)), as gluon's Xavier()), biases zero; batch norm's gamma and
// running variance one, beta and running mean zero. The same on every platform.
std::vector<float> init_params(InitKind init, uint64_t seed, const Model& model = lenet::model());

// Step `step` of epoch `epoch` of a training set of `count` samples (at
// c.batch a step, cut into `parts`, at the rate lr_at gives), queued on the
// devices' streams; the host does not wait. `timed`: with phase marks.
// Returns the step's parts of these devices.
// In a multi-process run `parts` are those of every process's devices, and
// `devices` this one's, rank `rank`'s (cluster.hpp).
std::span<const Part> queue_step(const TrainConfig& c, std::span<Device* const> devices, const Allreduce& allreduce,
                                 const StepPlan& plan, const BatchParts& parts, size_t count, int epoch, size_t step, bool timed,
                                 int rank = 0);

// Test accuracy of `device`'s replica on the first `test_count` test samples,
// evaluated in chunks of `capacity` (what its buffers hold).
double test_accuracy(Device& device, size_t test_count, int capacity);

// The order of the training samples in epoch `epoch` (1-based): a shuffle
// determined by the seed and the epoch alone, whatever the device count.
std::vector<uint32_t> epoch_order(size_t count, uint64_t seed, int epoch);

struct TrainResult {
    int exit_status = 0;  // 0, or 130 / 143 when SIGINT / SIGTERM stopped the run
    std::vector<EpochReport> epochs;
    SplitChoice split;  // as the run ended: --split auto's measured parts
};

// Runs the whole training, printing to stdout. A stop by SIGINT / SIGTERM
// between two steps writes the checkpoint, when there is one, and returns
// exit status 130 / 143. Throws InputError for bad input (exit 2), other
// exceptions for other failures, divergence included (exit 1).
TrainResult train(const TrainConfig& config);
// The same as one rank of a multi-process run (cluster.hpp): every rank
// calls it with the same settings; rank 0 alone prints and writes files.
// Bad input on any rank throws the same InputError on every rank; a
// divergence, an EveryRankError on every rank.
TrainResult train(const TrainConfig& config, Cluster& cluster);
// A run that starts as `start` says: from a checkpoint (--resume), or with a
// note on why its devices are these, for the banner.
TrainResult train(const TrainConfig& config, const RunStart& start, Cluster& cluster);

}  // namespace dpt
