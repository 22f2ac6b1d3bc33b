#include "run/schedule.hpp"

#include <algorithm>
#include <cmath>

namespace dpt {

size_t warmup_steps(const TrainConfig& c, size_t steps) {
    return c.warmup > 0 ? std::max<size_t>(1, size_t(std::llround(c.warmup * double(steps)))) : 0;
}

float lr_at(const TrainConfig& c, size_t steps, int epoch, size_t step) {
    const size_t warmup = warmup_steps(c, steps);
    const size_t k = size_t(epoch - 1) * steps + step + 1;  // the run's k-th step
    return k >= warmup ? c.lr : float(double(c.lr) * double(k) / double(warmup));
}

int first_full_rate_epoch(const TrainConfig& c, size_t steps) {
    const size_t warmup = warmup_steps(c, steps);
    // Epoch e's steps are (e-1)*steps + 1 ..; all at full rate once the first is >= warmup.
    return warmup <= 1 ? 1 : int((warmup - 2) / steps) + 2;
}

}  // namespace dpt
