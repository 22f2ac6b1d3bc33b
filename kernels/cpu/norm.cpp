// Batch normalisation on the CPU (kernels.hpp says what each half computes).
// Per-channel sums accumulate in double, so a channel of 173,056 values
// (ResNet's first layer at batch 256) keeps float precision in its mean and
// variance. A run of a channel (one sample's hw values) is read half a
// vector of floats at a time, widened to a vector of doubles (8 on AVX-512,
// 4 on AVX2) and added into two interleaved vectors of partial sums, so
// that the additions are independent chains of vector instructions; the
// values past the run's last whole half-vector go into scalar sums. (A
// float per step into 8 partial sums ran these sums at half the speed of
// the passes that only read and write floats.)
//
// Every pass walks the tensor in memory order, sample by sample, and each
// sum adds its channel's runs in sample order, as a walk channel by channel
// would (the same bits): the sums of a block of channels are kept at once.
// Channel by channel, every run began on a page of its own (ResNet-18's
// 12x12 maps at 256 samples: 256 runs of 576 bytes, 36 KB apart), which
// the hardware prefetchers do not follow from one run to the next.
// CUDA twin: kernels/cuda/norm.cu.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels.hpp"
#include "vectors.hpp"

namespace dpt::cpu {
namespace {

// Calls f(index of the run's first value, channel) for every run (a
// sample's values of a channel), in memory order. The passes that write a
// value for each value make their channel's constants once a run: walking
// a block of channels at a time instead, with the constants made once a
// block as the sums' walk keeps its Sums, was slower on ResNet-18's 3x3
// maps (a forward 0.21 ms against 0.17 at 256 channels and 256 samples).
template <class F>
void for_runs(const NormShape& s, F&& f) {
    for (int i = 0; i < s.n; ++i)
        for (int ch = 0; ch < s.c; ++ch) f((size_t(i) * s.c + ch) * s.hw, ch);
}

// v, or with `relu` relu_forward's value of it (elementwise.cpp): a ReLU
// fused after the layer.
inline float relu_if(bool relu, float v) { return relu && !(v > 0.0f) ? 0.0f : v; }

constexpr int half = detail::lanes / 2;  // floats a step: as many doubles as a vector holds
typedef float Floats __attribute__((vector_size(half * sizeof(float))));
typedef double Doubles __attribute__((vector_size(half * sizeof(double))));
inline Floats load_half(const float* p) {
    Floats v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
inline void store_half(float* p, Floats v) { std::memcpy(p, &v, sizeof v); }

// Two per-channel sums, of u and of u * v, in double.
struct Sums {
    Doubles first[2] = {}, second[2] = {};  // two chains of whole steps
    double first_left = 0, second_left = 0;  // the values past a run's whole steps

    void add(Floats u, Floats v, int chain) {
        const Doubles wide = __builtin_convertvector(u, Doubles);
        first[chain] += wide;
        second[chain] += wide * __builtin_convertvector(v, Doubles);
    }
    void add(float u, float v) {
        first_left += u;
        second_left += double(u) * v;
    }
    // Adds u[j] and u[j] * v(u[j], j) for j < count: v takes a step's
    // Floats or, past the whole steps, a float.
    template <class V>
    void add_run(const float* u, int count, V&& v) {
        int j = 0;
        for (; j + 2 * half <= count; j += 2 * half) {
            const Floats u0 = load_half(u + j), u1 = load_half(u + j + half);
            add(u0, v(u0, j), 0);
            add(u1, v(u1, j + half), 1);
        }
        if (j + half <= count) {
            const Floats u0 = load_half(u + j);
            add(u0, v(u0, j), 0);
            j += half;
        }
        for (; j < count; ++j) add(u[j], v(u[j], j));
    }
    static double total(const Doubles (&part)[2], double left) {
        double sum = left;
        for (int l = 0; l < half; ++l) sum += part[0][l] + part[1][l];
        return sum;
    }
    double total_first() const { return total(first, first_left); }
    double total_second() const { return total(second, second_left); }
};

// Channels whose sums are kept at once: their Sums on the stack (20 KB
// with AVX-512).
constexpr int channel_block = 64;

// For each block of channels: add(channel ch's sums, ch, the index of its
// run's first value in sample i) for every sample i and channel ch of the
// block, in memory order; then finish(channel ch's sums, ch).
template <class Add, class Finish>
void sum_channels(const NormShape& s, Add&& add, Finish&& finish) {
    for (int first = 0; first < s.c; first += channel_block) {
        const int count = std::min(channel_block, s.c - first);
        Sums sums[channel_block];
        for (int i = 0; i < s.n; ++i)
            for (int k = 0; k < count; ++k) add(sums[k], first + k, (size_t(i) * s.c + first + k) * s.hw);
        for (int k = 0; k < count; ++k) finish(sums[k], first + k);
    }
}

// The backward sums (batch_norm_backward_sums): of dy and of dy times x
// normalised (in float, as batch_norm_backward_data normalises it). With
// relu_y, dy is first masked in place by the ReLU after the layer, as
// relu_backward would, a step at a time.
void backward_sums(float* sums, float* dgamma, float* dbeta, float* dy, const float* relu_y, const float* x,
                   const float* saved, const NormShape& s) {
    sum_channels(
        s,
        [&](Sums& parts, int ch, size_t first) {
            const float m = saved[ch], inv_std = saved[s.c + ch];
            const float* xs = x + first;
            float* d = dy + first;
            if (relu_y) {
                const float* mask = relu_y + first;
                int j = 0;
                for (; j + half <= s.hw; j += half)
                    store_half(d + j, load_half(mask + j) > 0.0f ? load_half(d + j) : Floats{});
                for (; j < s.hw; ++j) d[j] = mask[j] > 0.0f ? d[j] : 0.0f;
            }
            parts.add_run(d, s.hw, [&](auto u, int j) {
                if constexpr (std::is_same_v<decltype(u), float>) return (xs[j] - m) * inv_std;
                else return (load_half(xs + j) - m) * inv_std;
            });
        },
        [&](const Sums& parts, int ch) {
            const double sum_dy = parts.total_first(), sum_dy_xhat = parts.total_second();
            sums[ch] = float(sum_dy);
            sums[s.c + ch] = float(sum_dy_xhat);
            dbeta[ch] += float(sum_dy);
            dgamma[ch] += float(sum_dy_xhat);
        });
}

}  // namespace

void batch_norm_stats(float* stats, const float* x, const NormShape& s) {
    sum_channels(
        s, [&](Sums& sums, int, size_t first) { sums.add_run(x + first, s.hw, [](auto u, int) { return u; }); },
        [&](const Sums& sums, int ch) {
            stats[ch] = float(sums.total_first());
            stats[s.c + ch] = float(sums.total_second());
        });
}

void batch_norm_forward(float* y, float* saved, const float* x, const float* stats, double count, const float* gamma,
                        const float* beta, float eps, const NormShape& s, bool relu) {
    for (int ch = 0; ch < s.c; ++ch) {
        const double mean = stats[ch] / count;
        const double var = std::max(0.0, stats[s.c + ch] / count - mean * mean);
        saved[ch] = float(mean);
        saved[s.c + ch] = float(1.0 / std::sqrt(var + eps));
    }
    for_runs(s, [&](size_t first, int ch) {
        const float m = saved[ch], scale = gamma[ch] * saved[s.c + ch], shift = beta[ch];
        for (size_t j = first; j < first + size_t(s.hw); ++j) y[j] = relu_if(relu, scale * (x[j] - m) + shift);
    });
}

void batch_norm_backward_sums(float* sums, float* dgamma, float* dbeta, const float* dy, const float* x,
                              const float* saved, const NormShape& s) {
    // dy is only read where relu_y is null
    backward_sums(sums, dgamma, dbeta, const_cast<float*>(dy), nullptr, x, saved, s);
}

void batch_norm_backward_sums_relu(float* sums, float* dgamma, float* dbeta, float* dy, const float* relu_y,
                                   const float* x, const float* saved, const NormShape& s) {
    backward_sums(sums, dgamma, dbeta, dy, relu_y, x, saved, s);
}

void batch_norm_backward_data(float* dx, const float* dy, const float* x, const float* saved, const float* sums,
                              double count, const float* gamma, const NormShape& s) {
    for_runs(s, [&](size_t first, int ch) {
        const float m = saved[ch], inv_std = saved[s.c + ch];
        const float mean_dy = float(sums[ch] / count), mean_dy_xhat = float(sums[s.c + ch] / count);
        const float scale = gamma[ch] * inv_std;
        for (size_t j = first; j < first + size_t(s.hw); ++j)
            dx[j] = scale * (dy[j] - mean_dy - (x[j] - m) * inv_std * mean_dy_xhat);
    });
}

void batch_norm_inference(float* y, const float* x, const float* running, const float* gamma, const float* beta,
                          float eps, const NormShape& s, bool relu) {
    for_runs(s, [&](size_t first, int ch) {
        const float m = running[ch], scale = gamma[ch] / std::sqrt(running[s.c + ch] + eps), shift = beta[ch];
        for (size_t j = first; j < first + size_t(s.hw); ++j) y[j] = relu_if(relu, scale * (x[j] - m) + shift);
    });
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
