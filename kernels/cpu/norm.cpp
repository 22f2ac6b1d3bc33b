// Batch normalisation on the CPU (kernels.hpp says what each half computes).
// Per-channel sums accumulate in double, so a channel of 173,056 values
// (ResNet's first layer at batch 256) keeps float precision in its mean and
// variance. CUDA twin: kernels/cuda/norm.cu.
#include <algorithm>
#include <cmath>

#include "kernels.hpp"

namespace dpt::cpu {
namespace {

// Calls f(value index) for every value of channel ch, sample by sample.
template <class F>
void for_channel(const NormShape& s, int ch, F&& f) {
    for (int i = 0; i < s.n; ++i) {
        const size_t first = (size_t(i) * s.c + ch) * s.hw;
        for (size_t j = first; j < first + size_t(s.hw); ++j) f(j);
    }
}

}  // namespace

void batch_norm_stats(float* stats, const float* x, const NormShape& s) {
    for (int ch = 0; ch < s.c; ++ch) {
        double sum = 0, squares = 0;
        for_channel(s, ch, [&](size_t j) {
            sum += x[j];
            squares += double(x[j]) * x[j];
        });
        stats[ch] = float(sum);
        stats[s.c + ch] = float(squares);
    }
}

void batch_norm_forward(float* y, float* saved, const float* x, const float* stats, double count, const float* gamma,
                        const float* beta, float eps, const NormShape& s) {
    for (int ch = 0; ch < s.c; ++ch) {
        const double mean = stats[ch] / count;
        const double var = std::max(0.0, stats[s.c + ch] / count - mean * mean);
        const float m = float(mean), inv_std = float(1.0 / std::sqrt(var + eps));
        saved[ch] = m;
        saved[s.c + ch] = inv_std;
        const float scale = gamma[ch] * inv_std, shift = beta[ch];
        for_channel(s, ch, [&](size_t j) { y[j] = scale * (x[j] - m) + shift; });
    }
}

void batch_norm_backward_sums(float* sums, float* dgamma, float* dbeta, const float* dy, const float* x,
                              const float* saved, const NormShape& s) {
    for (int ch = 0; ch < s.c; ++ch) {
        const float m = saved[ch], inv_std = saved[s.c + ch];
        double sum_dy = 0, sum_dy_xhat = 0;
        for_channel(s, ch, [&](size_t j) {
            sum_dy += dy[j];
            sum_dy_xhat += double(dy[j]) * ((x[j] - m) * inv_std);
        });
        sums[ch] = float(sum_dy);
        sums[s.c + ch] = float(sum_dy_xhat);
        dbeta[ch] += float(sum_dy);
        dgamma[ch] += float(sum_dy_xhat);
    }
}

void batch_norm_backward_data(float* dx, const float* dy, const float* x, const float* saved, const float* sums,
                              double count, const float* gamma, const NormShape& s) {
    for (int ch = 0; ch < s.c; ++ch) {
        const float m = saved[ch], inv_std = saved[s.c + ch];
        const float mean_dy = float(sums[ch] / count), mean_dy_xhat = float(sums[s.c + ch] / count);
        const float scale = gamma[ch] * inv_std;
        for_channel(s, ch, [&](size_t j) { dx[j] = scale * (dy[j] - mean_dy - (x[j] - m) * inv_std * mean_dy_xhat); });
    }
}

void batch_norm_inference(float* y, const float* x, const float* running, const float* gamma, const float* beta,
                          float eps, const NormShape& s) {
    for (int ch = 0; ch < s.c; ++ch) {
        const float m = running[ch], scale = gamma[ch] / std::sqrt(running[s.c + ch] + eps), shift = beta[ch];
        for_channel(s, ch, [&](size_t j) { y[j] = scale * (x[j] - m) + shift; });
    }
}

void batch_norm_update_running(float* running, const float* stats, double count, float momentum, int c) {
    for (int ch = 0; ch < c; ++ch) {
        const double mean = stats[ch] / count, var = std::max(0.0, stats[c + ch] / count - mean * mean);
        running[ch] = momentum * running[ch] + (1 - momentum) * float(mean);
        running[c + ch] = momentum * running[c + ch] + (1 - momentum) * float(var);
    }
}

}  // namespace dpt::cpu
