// Batch normalisation on the GPU. CPU twin: kernels/cpu/norm.cpp (the same
// halves; kernels/cpu/kernels.hpp says what each computes). The per-channel
// sums are one block a channel, accumulated in double in a fixed order, so
// a run gives the same bits every time; the element-wise halves take each
// channel's mean and 1/std from `saved`.
//
// Indices are ints split by multiplication (fastdiv.cuh); a layer of 2^31
// values or more is refused. 64-bit division, which size_t indices cost, is
// a long subroutine on a GPU: on an H100 the sums over ResNet-18's first
// layer (one channel, 200,704 values at batch 256, on one block) took 0.4
// ms each with it, one dependent load after another.
#include "fastdiv.cuh"
#include "kernels.hpp"
#include "launch.cuh"

#include <stdexcept>
#include <string>

namespace dpt::cuda {
namespace {

// NormShape with its divisions as multiplies.
struct Channels {
    NormShape s;
    FastDiv by_hw, by_c;
    explicit Channels(const NormShape& shape) : s(shape), by_hw(shape.hw > 0 ? shape.hw : 1), by_c(shape.c > 0 ? shape.c : 1) {
        if (shape.size() >= (size_t(1) << 31))
            throw std::length_error("batch normalisation over " + std::to_string(shape.size()) +
                                    " values: a launch indexes at most 2^31 (use a smaller batch per device)");
    }
    // The channel of element i (NCHW).
    __device__ int channel_of(int i) const {
        const int plane = by_hw.div(i);
        return by_c.rest(plane, by_c.div(plane));
    }
    // Where value k of channel ch lies (sample by sample, hw at a time).
    __device__ int value_index(int ch, int k) const {
        const int sample = by_hw.div(k), j = by_hw.rest(k, sample);
        return (sample * s.c + ch) * s.hw + j;
    }
};

// Thread t of block ch visits the channel's values t, t + 256, ...: loaded
// `ahead` at a time, so that their loads are in flight together, then added
// in that same order (the bits do not depend on `ahead`).
constexpr int ahead = 8;

__global__ void stats_kernel(float* stats, const float* x, Channels g) {
    const int ch = blockIdx.x, step = int(blockDim.x);
    const int values = g.s.n * g.s.hw;
    double sum = 0, squares = 0;
    int k = int(threadIdx.x);
    for (; k + (ahead - 1) * step < values; k += ahead * step) {
        float v[ahead];
#pragma unroll
        for (int u = 0; u < ahead; ++u) v[u] = x[g.value_index(ch, k + u * step)];
#pragma unroll
        for (int u = 0; u < ahead; ++u) {
            sum += double(v[u]);
            squares += double(v[u]) * double(v[u]);
        }
    }
    for (; k < values; k += step) {
        const double v = x[g.value_index(ch, k)];
        sum += v;
        squares += v * v;
    }
    sum = launch::block_sum(sum);
    __syncthreads();  // block_sum's shared memory is used again
    squares = launch::block_sum(squares);
    if (threadIdx.x == 0) {
        stats[ch] = float(sum);
        stats[g.s.c + ch] = float(squares);
    }
}

__global__ void saved_kernel(float* saved, const float* stats, double count, float eps, int c) {
    for (int ch = threadIdx.x; ch < c; ch += blockDim.x) {
        const double mean = stats[ch] / count;
        const double var = fmax(0.0, stats[c + ch] / count - mean * mean);
        saved[ch] = float(mean);
        saved[c + ch] = float(1.0 / sqrt(var + eps));
    }
}

__global__ void normalize_kernel(float* y, const float* x, const float* saved, const float* gamma, const float* beta,
                                 Channels g, int total) {
    for (const int i : launch::grid_stride(total)) {
        const int ch = g.channel_of(i);
        const float m = saved[ch], inv_std = saved[g.s.c + ch];
        y[i] = gamma[ch] * inv_std * (x[i] - m) + beta[ch];
    }
}

__global__ void backward_sums_kernel(float* sums, float* dgamma, float* dbeta, const float* dy, const float* x,
                                     const float* saved, Channels g) {
    const int ch = blockIdx.x, step = int(blockDim.x);
    const float m = saved[ch], inv_std = saved[g.s.c + ch];
    const int values = g.s.n * g.s.hw;
    double sum_dy = 0, sum_dy_xhat = 0;
    int k = int(threadIdx.x);
    for (; k + (ahead - 1) * step < values; k += ahead * step) {
        float d[ahead], v[ahead];
#pragma unroll
        for (int u = 0; u < ahead; ++u) {
            const int j = g.value_index(ch, k + u * step);
            d[u] = dy[j];
            v[u] = x[j];
        }
#pragma unroll
        for (int u = 0; u < ahead; ++u) {
            sum_dy += d[u];
            sum_dy_xhat += double(d[u]) * double((v[u] - m) * inv_std);
        }
    }
    for (; k < values; k += step) {
        const int j = g.value_index(ch, k);
        sum_dy += dy[j];
        sum_dy_xhat += double(dy[j]) * double((x[j] - m) * inv_std);
    }
    sum_dy = launch::block_sum(sum_dy);
    __syncthreads();
    sum_dy_xhat = launch::block_sum(sum_dy_xhat);
    if (threadIdx.x == 0) {
        sums[ch] = float(sum_dy);
        sums[g.s.c + ch] = float(sum_dy_xhat);
        dbeta[ch] += float(sum_dy);
        dgamma[ch] += float(sum_dy_xhat);
    }
}

__global__ void backward_data_kernel(float* dx, const float* dy, const float* x, const float* saved, const float* sums,
                                     double count, const float* gamma, Channels g, int total) {
    for (const int i : launch::grid_stride(total)) {
        const int ch = g.channel_of(i);
        const float m = saved[ch], inv_std = saved[g.s.c + ch];
        const float mean_dy = float(sums[ch] / count), mean_dy_xhat = float(sums[g.s.c + ch] / count);
        dx[i] = gamma[ch] * inv_std * (dy[i] - mean_dy - (x[i] - m) * inv_std * mean_dy_xhat);
    }
}

__global__ void inference_kernel(float* y, const float* x, const float* running, const float* gamma, const float* beta,
                                 float eps, Channels g, int total) {
    for (const int i : launch::grid_stride(total)) {
        const int ch = g.channel_of(i);
        y[i] = gamma[ch] / sqrtf(running[g.s.c + ch] + eps) * (x[i] - running[ch]) + beta[ch];
    }
}

__global__ void running_kernel(float* running, const float* stats, double count, float momentum, int c) {
    for (int ch = threadIdx.x; ch < c; ch += blockDim.x) {
        const double mean = stats[ch] / count, var = fmax(0.0, stats[c + ch] / count - mean * mean);
        running[ch] = momentum * running[ch] + (1 - momentum) * float(mean);
        running[c + ch] = momentum * running[c + ch] + (1 - momentum) * float(var);
    }
}

}  // namespace

void batch_norm_stats(float* stats, const float* x, const NormShape& s, cudaStream_t stream) {
    if (s.c == 0) return;
    launch::kernel("stats_kernel", stats_kernel, s.c, launch::threads, stream, stats, x, Channels(s));
}

void batch_norm_forward(float* y, float* saved, const float* x, const float* stats, double count, const float* gamma,
                        const float* beta, float eps, const NormShape& s, cudaStream_t stream) {
    if (s.c == 0) return;
    launch::kernel("saved_kernel", saved_kernel, 1, launch::threads, stream, saved, stats, count, eps, s.c);
    if (s.size() == 0) return;
    launch::kernel("normalize_kernel", normalize_kernel, launch::grid_for(s.size()), launch::threads, stream,
        y, x, saved, gamma, beta, Channels(s), int(s.size()));
}

void batch_norm_backward_sums(float* sums, float* dgamma, float* dbeta, const float* dy, const float* x,
                              const float* saved, const NormShape& s, cudaStream_t stream) {
    if (s.c == 0) return;
    launch::kernel("backward_sums_kernel", backward_sums_kernel, s.c, launch::threads, stream,
        sums, dgamma, dbeta, dy, x, saved, Channels(s));
}

void batch_norm_backward_data(float* dx, const float* dy, const float* x, const float* saved, const float* sums,
                              double count, const float* gamma, const NormShape& s, cudaStream_t stream) {
    if (s.size() == 0) return;
    launch::kernel("backward_data_kernel", backward_data_kernel, launch::grid_for(s.size()), launch::threads, stream,
        dx, dy, x, saved, sums, count, gamma, Channels(s), int(s.size()));
}

void batch_norm_inference(float* y, const float* x, const float* running, const float* gamma, const float* beta,
                          float eps, const NormShape& s, cudaStream_t stream) {
    if (s.size() == 0) return;
    launch::kernel("inference_kernel", inference_kernel, launch::grid_for(s.size()), launch::threads, stream,
        y, x, running, gamma, beta, eps, Channels(s), int(s.size()));
}

void batch_norm_update_running(float* running, const float* stats, double count, float momentum, int c,
                               cudaStream_t stream) {
    if (c == 0) return;
    launch::kernel("running_kernel", running_kernel, 1, launch::threads, stream, running, stats, count, momentum, c);
}

}  // namespace dpt::cuda
