// The learning rate step by step: constant, or with --warmup a linear rise
// first. The trainer asks it each step; the banner says what it will do.
#pragma once
#include <cstddef>

#include "run/settings.hpp"

namespace dpt {

// Steps of warm-up for epochs of `steps` steps: max(1, round(E * steps))
// with --warmup E > 0, else 0.
size_t warmup_steps(const TrainConfig& c, size_t steps);

// The learning rate of step `step` (0-based) of epoch `epoch` (1-based), an
// epoch having `steps` steps. With --warmup E > 0 (Goyal et al.'s gradual
// warm-up for the linear scaling rule) it rises linearly over the first
// W = max(1, round(E * steps)) steps of the run: lr * k / W at its k-th step
// (1-based), then stays at lr. Without, always lr.
float lr_at(const TrainConfig& c, size_t steps, int epoch, size_t step);

// The first epoch whose steps all run at the full rate (1 without --warmup).
int first_full_rate_epoch(const TrainConfig& c, size_t steps);

}  // namespace dpt
