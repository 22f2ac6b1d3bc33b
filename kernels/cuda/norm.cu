// Batch normalisation on the GPU. CPU twin: kernels/cpu/norm.cpp (the same
// halves; kernels/cpu/kernels.hpp says what each computes). The per-channel
// sums are one block a channel, accumulated in double in a fixed order, so
// a run gives the same bits every time; the element-wise halves take each
// channel's mean and 1/std from `saved`.
#include "kernels.hpp"
#include "launch.cuh"

namespace dpt::cuda {
namespace {

#define FOR_EACH_INDEX(i, count) \
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < (count); i += size_t(gridDim.x) * blockDim.x)

// Thread t of block ch visits the channel's values t, t + 256, ... (sample
// by sample, hw at a time).
__device__ size_t channel_value(const NormShape& s, int ch, size_t k) {
    const size_t sample = k / size_t(s.hw), j = k % size_t(s.hw);
    return (sample * size_t(s.c) + size_t(ch)) * size_t(s.hw) + j;
}

__global__ void stats_kernel(float* stats, const float* x, NormShape s) {
    const int ch = blockIdx.x;
    const size_t values = size_t(s.n) * size_t(s.hw);
    double sum = 0, squares = 0;
    for (size_t k = threadIdx.x; k < values; k += blockDim.x) {
        const double v = x[channel_value(s, ch, k)];
        sum += v;
        squares += v * v;
    }
    sum = launch::block_sum(sum);
    __syncthreads();  // block_sum's shared memory is used again
    squares = launch::block_sum(squares);
    if (threadIdx.x == 0) {
        stats[ch] = float(sum);
        stats[s.c + ch] = float(squares);
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
                                 NormShape s, size_t total) {
    FOR_EACH_INDEX(i, total) {
        const int ch = int((i / size_t(s.hw)) % size_t(s.c));
        const float m = saved[ch], inv_std = saved[s.c + ch];
        y[i] = gamma[ch] * inv_std * (x[i] - m) + beta[ch];
    }
}

__global__ void backward_sums_kernel(float* sums, float* dgamma, float* dbeta, const float* dy, const float* x,
                                     const float* saved, NormShape s) {
    const int ch = blockIdx.x;
    const float m = saved[ch], inv_std = saved[s.c + ch];
    const size_t values = size_t(s.n) * size_t(s.hw);
    double sum_dy = 0, sum_dy_xhat = 0;
    for (size_t k = threadIdx.x; k < values; k += blockDim.x) {
        const size_t j = channel_value(s, ch, k);
        sum_dy += dy[j];
        sum_dy_xhat += double(dy[j]) * double((x[j] - m) * inv_std);
    }
    sum_dy = launch::block_sum(sum_dy);
    __syncthreads();
    sum_dy_xhat = launch::block_sum(sum_dy_xhat);
    if (threadIdx.x == 0) {
        sums[ch] = float(sum_dy);
        sums[s.c + ch] = float(sum_dy_xhat);
        dbeta[ch] += float(sum_dy);
        dgamma[ch] += float(sum_dy_xhat);
    }
}

__global__ void backward_data_kernel(float* dx, const float* dy, const float* x, const float* saved, const float* sums,
                                     double count, const float* gamma, NormShape s, size_t total) {
    FOR_EACH_INDEX(i, total) {
        const int ch = int((i / size_t(s.hw)) % size_t(s.c));
        const float m = saved[ch], inv_std = saved[s.c + ch];
        const float mean_dy = float(sums[ch] / count), mean_dy_xhat = float(sums[s.c + ch] / count);
        dx[i] = gamma[ch] * inv_std * (dy[i] - mean_dy - (x[i] - m) * inv_std * mean_dy_xhat);
    }
}

__global__ void inference_kernel(float* y, const float* x, const float* running, const float* gamma, const float* beta,
                                 float eps, NormShape s, size_t total) {
    FOR_EACH_INDEX(i, total) {
        const int ch = int((i / size_t(s.hw)) % size_t(s.c));
        y[i] = gamma[ch] / sqrtf(running[s.c + ch] + eps) * (x[i] - running[ch]) + beta[ch];
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
    launch::kernel("stats_kernel", stats_kernel, s.c, launch::threads, stream, stats, x, s);
}

void batch_norm_forward(float* y, float* saved, const float* x, const float* stats, double count, const float* gamma,
                        const float* beta, float eps, const NormShape& s, cudaStream_t stream) {
    if (s.c == 0) return;
    launch::kernel("saved_kernel", saved_kernel, 1, launch::threads, stream, saved, stats, count, eps, s.c);
    if (s.size() == 0) return;
    launch::kernel("normalize_kernel", normalize_kernel, launch::grid_for(s.size()), launch::threads, stream,
        y, x, saved, gamma, beta, s, s.size());
}

void batch_norm_backward_sums(float* sums, float* dgamma, float* dbeta, const float* dy, const float* x,
                              const float* saved, const NormShape& s, cudaStream_t stream) {
    if (s.c == 0) return;
    launch::kernel("backward_sums_kernel", backward_sums_kernel, s.c, launch::threads, stream,
        sums, dgamma, dbeta, dy, x, saved, s);
}

void batch_norm_backward_data(float* dx, const float* dy, const float* x, const float* saved, const float* sums,
                              double count, const float* gamma, const NormShape& s, cudaStream_t stream) {
    if (s.size() == 0) return;
    launch::kernel("backward_data_kernel", backward_data_kernel, launch::grid_for(s.size()), launch::threads, stream,
        dx, dy, x, saved, sums, count, gamma, s, s.size());
}

void batch_norm_inference(float* y, const float* x, const float* running, const float* gamma, const float* beta,
                          float eps, const NormShape& s, cudaStream_t stream) {
    if (s.size() == 0) return;
    launch::kernel("inference_kernel", inference_kernel, launch::grid_for(s.size()), launch::threads, stream,
        y, x, running, gamma, beta, eps, s, s.size());
}

void batch_norm_update_running(float* running, const float* stats, double count, float momentum, int c,
                               cudaStream_t stream) {
    if (c == 0) return;
    launch::kernel("running_kernel", running_kernel, 1, launch::threads, stream, running, stats, count, momentum, c);
}

}  // namespace dpt::cuda
