// Batch normalisation on the CPU (kernels.hpp says what each half computes).
// Per-channel sums accumulate in double, so a channel of 173,056 values
// (ResNet's first layer at batch 256) keeps float precision in its mean and
// variance; in 8 interleaved partial sums (`Sums`), so that the additions
// are 8 independent chains a vector instruction each, not one chain that
// waits for every addition before it: several times faster on ResNet's
// 12x12 maps, a little slower on its 3x3 maps, runs of 9 values
// (docs/performance.md has the figures).
// CUDA twin: kernels/cuda/norm.cu.
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

// v, or with `relu` relu_forward's value of it (elementwise.cpp): a ReLU
// fused after the layer.
inline float relu_if(bool relu, float v) { return relu && !(v > 0.0f) ? 0.0f : v; }

// Two per-channel sums, value j of a sample's run into partial sum j % 8.
struct Sums {
    static constexpr int parts = 8;
    double first[parts] = {}, second[parts] = {};

    // Adds f(j) and g(j) for j < count (a sample's run of a channel).
    template <class F, class G>
    void add(int count, F&& f, G&& g) {
        int j = 0;
        for (; j + parts <= count; j += parts)
            for (int l = 0; l < parts; ++l) {
                first[l] += f(j + l);
                second[l] += g(j + l);
            }
        for (int l = 0; j < count; ++j, ++l) {
            first[l] += f(j);
            second[l] += g(j);
        }
    }
    static double total(const double* part) {
        double sum = 0;
        for (int l = 0; l < parts; ++l) sum += part[l];
        return sum;
    }
};

// Calls sums.add over every sample's run of channel ch: f and g take the
// value's index in the tensor.
template <class F, class G>
Sums channel_sums(const NormShape& s, int ch, F&& f, G&& g) {
    Sums sums;
    for (int i = 0; i < s.n; ++i) {
        const size_t first = (size_t(i) * s.c + ch) * s.hw;
        sums.add(s.hw, [&](int j) { return f(first + j); }, [&](int j) { return g(first + j); });
    }
    return sums;
}

// Channel ch's backward sums (batch_norm_backward_sums).
void backward_channel_sums(float* sums, float* dgamma, float* dbeta, const float* dy, const float* x,
                           const float* saved, const NormShape& s, int ch) {
    const float m = saved[ch], inv_std = saved[s.c + ch];
    const Sums parts = channel_sums(
        s, ch, [&](size_t j) { return double(dy[j]); },
        [&](size_t j) { return double(dy[j]) * ((x[j] - m) * inv_std); });
    const double sum_dy = Sums::total(parts.first), sum_dy_xhat = Sums::total(parts.second);
    sums[ch] = float(sum_dy);
    sums[s.c + ch] = float(sum_dy_xhat);
    dbeta[ch] += float(sum_dy);
    dgamma[ch] += float(sum_dy_xhat);
}

}  // namespace

void batch_norm_stats(float* stats, const float* x, const NormShape& s) {
    for (int ch = 0; ch < s.c; ++ch) {
        const Sums sums = channel_sums(
            s, ch, [&](size_t j) { return double(x[j]); }, [&](size_t j) { return double(x[j]) * x[j]; });
        stats[ch] = float(Sums::total(sums.first));
        stats[s.c + ch] = float(Sums::total(sums.second));
    }
}

void batch_norm_forward(float* y, float* saved, const float* x, const float* stats, double count, const float* gamma,
                        const float* beta, float eps, const NormShape& s, bool relu) {
    for (int ch = 0; ch < s.c; ++ch) {
        const double mean = stats[ch] / count;
        const double var = std::max(0.0, stats[s.c + ch] / count - mean * mean);
        const float m = float(mean), inv_std = float(1.0 / std::sqrt(var + eps));
        saved[ch] = m;
        saved[s.c + ch] = inv_std;
        const float scale = gamma[ch] * inv_std, shift = beta[ch];
        for_channel(s, ch, [&](size_t j) { y[j] = relu_if(relu, scale * (x[j] - m) + shift); });
    }
}

void batch_norm_backward_sums(float* sums, float* dgamma, float* dbeta, const float* dy, const float* x,
                              const float* saved, const NormShape& s) {
    for (int ch = 0; ch < s.c; ++ch) backward_channel_sums(sums, dgamma, dbeta, dy, x, saved, s, ch);
}

void batch_norm_backward_sums_relu(float* sums, float* dgamma, float* dbeta, float* dy, const float* relu_y,
                                   const float* x, const float* saved, const NormShape& s) {
    for (int ch = 0; ch < s.c; ++ch) {  // the channel masked while it is in cache, then summed
        for_channel(s, ch, [&](size_t j) { dy[j] = relu_y[j] > 0.0f ? dy[j] : 0.0f; });  // as relu_backward
        backward_channel_sums(sums, dgamma, dbeta, dy, x, saved, s, ch);
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
                          float eps, const NormShape& s, bool relu) {
    for (int ch = 0; ch < s.c; ++ch) {
        const float m = running[ch], scale = gamma[ch] / std::sqrt(running[s.c + ch] + eps), shift = beta[ch];
        for_channel(s, ch, [&](size_t j) { y[j] = relu_if(relu, scale * (x[j] - m) + shift); });
    }
}

// One rounding a multiply-add, spelled out, as the CUDA twin's: the running
// statistics are parameters, the same bits on a mixed run's CPU and GPU
// replicas (this file is compiled with -ffp-contract=fast, the emulated
// GPU's kernels without contraction, nvcc's with its own).
void batch_norm_update_running(float* running, const float* stats, double count, float momentum, int c) {
    for (int ch = 0; ch < c; ++ch) {
        const double mean = stats[ch] / count, var = std::max(0.0, std::fma(-mean, mean, stats[c + ch] / count));
        running[ch] = std::fma(momentum, running[ch], (1 - momentum) * float(mean));
        running[c + ch] = std::fma(momentum, running[c + ch], (1 - momentum) * float(var));
    }
}

}  // namespace dpt::cpu
