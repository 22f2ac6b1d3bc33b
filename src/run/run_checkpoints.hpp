// The checkpoints of a run under way (the file format is checkpoint.hpp):
// writing one from device 0's replica, and what to say when a signal stops
// the run.
#pragma once
#include <cstddef>

#include "devices/device.hpp"
#include "run/settings.hpp"

namespace dpt {

// c.checkpoint_path <- the run's settings, position `at` and device's parameters.
void write_run_checkpoint(const TrainConfig& c, const Position& at, Device& device);

// On stderr: which signal stopped the run, where, and how to go on
// (--resume), or that no checkpoint was written and how to get one.
void say_stopped(const TrainConfig& c, int signal, const Position& at, size_t steps);

}  // namespace dpt
