// The small kernels of a training step on the CPU: loading samples, ReLU,
// softmax cross-entropy, the SGD update and the allreduce's sum.
// CUDA twin: kernels/cuda/elementwise.cu.
#include <cmath>
#include <cstring>

#include <algorithm>

#include "kernels.hpp"

namespace dpt::cpu {

void round_to_tf32(float* dst, const float* src, size_t count) {
    for (size_t i = 0; i < count; ++i) {
        uint32_t u;
        std::memcpy(&u, src + i, 4);
        if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
        std::memcpy(dst + i, &u, 4);
    }
}

void gather_samples(float* x, int32_t* labels_out, const uint8_t* images,
                    const uint8_t* labels, const uint32_t* index, int count,
                    int pixels) {
    constexpr float scale = 1.0f / 255.0f;
    for (int i = 0; i < count; ++i) {
        const uint8_t* src = images + size_t(index[i]) * pixels;
        for (int p = 0; p < pixels; ++p) x[size_t(i) * pixels + p] = float(src[p]) * scale;
        labels_out[i] = labels[index[i]];
    }
}

void relu_forward(float* y, const float* x, size_t count) {
    for (size_t i = 0; i < count; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void relu_backward(float* dx, const float* dy, const float* y, size_t count) {
    for (size_t i = 0; i < count; ++i) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

double softmax_cross_entropy(float* dlogits, const float* logits,
                             const int32_t* labels, int n, int classes) {
    double loss_sum = 0.0;
    for (int i = 0; i < n; ++i) {
        const float* z = logits + size_t(i) * classes;
        float* g = dlogits + size_t(i) * classes;
        float zmax = z[0];
        for (int j = 1; j < classes; ++j) zmax = std::fmax(zmax, z[j]);
        float sum = 0.0f;
        for (int j = 0; j < classes; ++j) {
            g[j] = std::exp(z[j] - zmax);
            sum += g[j];
        }
        const float inv = 1.0f / sum;
        for (int j = 0; j < classes; ++j) g[j] *= inv;
        g[labels[i]] -= 1.0f;
        loss_sum += double(std::log(sum) + zmax - z[labels[i]]);
    }
    return loss_sum;
}

int64_t count_correct(const float* logits, const int32_t* labels, int n, int classes) {
    int64_t correct = 0;
    for (int i = 0; i < n; ++i) {
        const float* z = logits + size_t(i) * classes;
        int best = 0;
        for (int j = 1; j < classes; ++j)
            if (z[j] > z[best]) best = j;
        correct += best == labels[i];
    }
    return correct;
}

// One rounding, as the CUDA twin's __fmaf_rn: a mixed run's CPU and GPU
// replicas must update to the same bits.
void sgd_update(float* params, const float* grads, float scale, size_t count) {
    for (size_t i = 0; i < count; ++i) params[i] = std::fma(-scale, grads[i], params[i]);
}

void sum_into(float* acc, const float* staged, int parts, size_t count) {
    for (int p = 0; p < parts; ++p) {
        const float* part = staged + size_t(p) * count;
        for (size_t i = 0; i < count; ++i) acc[i] += part[i];
    }
}

void copy(float* dst, const float* src, size_t count) { std::copy_n(src, count, dst); }

void add_relu(float* acc, const float* other, size_t count) {
    for (size_t i = 0; i < count; ++i) {
        const float v = acc[i] + other[i];
        acc[i] = v > 0.0f ? v : 0.0f;
    }
}

void add_relu_backward(float* dy, float* d_other, const float* y, size_t count, bool accumulate) {
    for (size_t i = 0; i < count; ++i) {
        const float d = y[i] > 0.0f ? dy[i] : 0.0f;
        dy[i] = d;
        d_other[i] = accumulate ? d_other[i] + d : d;
    }
}

void note_nonfinite(int32_t* first_bad, const float* x, size_t count, int32_t step) {
    // Exponent bits all ones: an infinity or a NaN. Integer compares, so no
    // floating-point mode (fast-math included) can hide a NaN.
    bool bad = false;
    for (size_t i = 0; i < count; ++i) {
        uint32_t bits;
        std::memcpy(&bits, x + i, sizeof bits);
        bad |= (bits & 0x7f800000u) == 0x7f800000u;
    }
    if (bad && step < *first_bad) *first_bad = step;
}

}  // namespace dpt::cpu
