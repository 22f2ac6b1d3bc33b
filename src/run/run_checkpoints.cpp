#include "run/run_checkpoints.hpp"

#include <cstdio>
#include <string>
#include <vector>

#include "run/checkpoint.hpp"
#include "base/signals.hpp"

namespace dpt {

void write_run_checkpoint(const TrainConfig& c, const Position& at, Device& device) {
    Checkpoint k{c, at, std::vector<float>(device.param_floats())};
    device.read_params(k.params);
    save_checkpoint(c.checkpoint_path, k);
}

void say_stopped(const TrainConfig& c, int signal, const Position& at, size_t steps) {
    const std::string where = at.step == 0 ? "after epoch " + std::to_string(at.epoch - 1)
                                           : "in epoch " + std::to_string(at.epoch) + " after step " +
                                                 std::to_string(at.step) + " of " + std::to_string(steps);
    if (c.checkpoint_path.empty())
        std::fprintf(stderr,
                     "dptrain: stopped by %s %s; no checkpoint was written (run with --checkpoint FILE to be "
                     "able to resume)\n", signal_name(signal), where.c_str());
    else
        std::fprintf(stderr, "dptrain: stopped by %s %s; checkpoint in %s (continue with: dptrain --resume %s)\n",
                     signal_name(signal), where.c_str(), c.checkpoint_path.c_str(), c.checkpoint_path.c_str());
}

}  // namespace dpt
