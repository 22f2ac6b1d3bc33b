// Batch normalisation on the GPU. CPU twin: kernels/cpu/norm.cpp (the same
// halves; kernels/cpu/kernels.hpp says what each computes). The per-channel
// sums accumulate in double in a fixed order, so a run gives the same bits
// every time; the element-wise halves take each channel's mean and 1/std
// from `saved`.
//
// The sums (the statistics, and the backward's two) cut each channel's
// values into slices, enough that the channels' slices make about
// target_blocks blocks, each slice summed by a block in a fixed order; the
// slices' sums go to scratch in double, and the last block of a channel to
// store its own (an integer ticket a channel) adds them in slice order,
// through the same fixed tree. ResNet-18's first layer (one channel,
// 200,704 values at batch 256) is 256 blocks of 784 values, where a block a
// channel would be one; its 64-channel layers 4 blocks a channel. The
// forward's normalising kernel works out the channels' means and 1/std from
// the sums itself, each block (no kernel of their own), and applies a ReLU
// that follows the layer (as evaluation's does). One launch moves every
// layer's running statistics after the update.
//
// Indices are ints split by multiplication (fastdiv.cuh); a layer of 2^31
// values or more is refused. 64-bit division, which size_t indices cost, is
// a long subroutine on a GPU: on an H100 the sums over ResNet-18's first
// layer (one channel, 200,704 values at batch 256, on one block) took 0.4
// ms each with it, one dependent load after another.
#include "fastdiv.cuh"
#include "kernels.hpp"
#include "launch.cuh"
#include "norm.cuh"
#include "tiles.cuh"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace dpt::cuda {
using namespace norm;  // (norm.cuh: what the kernels share)
namespace {

// What the statistics sum of a value: it and its square, in double.
struct ValueAndSquare {
    __device__ TwoSums operator()(float x) const {
        const double v = x;
        return TwoSums{v, v * v};
    }
};

// The channel's sums, stored by the block that holds them.
__device__ void store_stats(float* stats, const TwoSums& s, int c, int ch) {
    if (threadIdx.x == 0) {
        stats[ch] = float(s.first);
        stats[c + ch] = float(s.second);
    }
}

// Block (ch, slice) of the grid (channels, slices).
__global__ void stats_kernel(float* stats, const float* x, Channels g, Slices sl) {
    const int ch = int(blockIdx.x), slice = int(blockIdx.y);
    const int values = g.s.n * g.s.hw, first = slice * sl.length;
    TwoSums s = run_sums(
        first, min(values, first + sl.length), [&](int k) { return x[g.value_index(ch, k)]; }, ValueAndSquare{});
    if (channel_sums(s, sl, ch, slice)) store_stats(stats, s, g.s.c, ch);
}

// Channel ch's mean and 1/std from the sums over `count` values.
struct MeanInvStd {
    float mean, inv_std;
};
__device__ MeanInvStd mean_inv_std(const float* stats, double count, float eps, int c, int ch) {
    const double mean = stats[ch] / count;
    const double var = fmax(0.0, stats[c + ch] / count - mean * mean);
    return {float(mean), float(1.0 / sqrt(var + eps))};
}

__global__ void saved_kernel(float* saved, const float* stats, double count, float eps, int c) {
    for (int ch = threadIdx.x; ch < c; ch += blockDim.x) {
        const MeanInvStd v = mean_inv_std(stats, count, eps, c, ch);
        saved[ch] = v.mean;
        saved[c + ch] = v.inv_std;
    }
}

// v, or with `relu` relu_fwd's value of it (NaN -> 0): the ReLU after the
// layer.
__device__ float relu_if(bool relu, float v) { return relu ? (v > 0.0f ? v : 0.0f) : v; }

__device__ float normalized(float x, float m, float inv_std, float gamma, float beta, bool relu) {
    return relu_if(relu, gamma * inv_std * (x - m) + beta);
}

__global__ void normalize_kernel(float* y, const float* x, const float* saved, const float* gamma, const float* beta,
                                 Channels g, int total, bool relu) {
    for (const int i : launch::grid_stride(total)) {
        const int ch = g.channel_of(i);
        y[i] = normalized(x[i], saved[ch], saved[g.s.c + ch], gamma[ch], beta[ch], relu);
    }
}

// Each block works out every channel's mean and 1/std from the
// sums itself, into shared memory (block 0 also stores them for the
// backward), and then normalises its values: saved_kernel's arithmetic and
// normalize_kernel's, in one launch.
// As many of its blocks a multiprocessor as normalize_kernel's (32 registers
// a thread: full_blocks).
constexpr int saving_most_channels = 1024;
__global__ void __launch_bounds__(launch::threads, full_blocks) normalize_saving_kernel(
    float* y, float* saved, const float* x, const float* stats, double count, float eps, const float* gamma,
    const float* beta, Channels g, int total, bool relu) {
    __shared__ float block_saved[2 * saving_most_channels];
    const int c = g.s.c;
    for (int ch = int(threadIdx.x); ch < c; ch += int(blockDim.x)) {
        const MeanInvStd v = mean_inv_std(stats, count, eps, c, ch);
        block_saved[ch] = v.mean;
        block_saved[c + ch] = v.inv_std;
        if (blockIdx.x == 0) {
            saved[ch] = v.mean;
            saved[c + ch] = v.inv_std;
        }
    }
    __syncthreads();
    for (const int i : launch::grid_stride(total)) {
        const int ch = g.channel_of(i);
        y[i] = normalized(x[i], block_saved[ch], block_saved[c + ch], gamma[ch], beta[ch], relu);
    }
}

__global__ void __launch_bounds__(launch::threads, full_blocks) backward_sums_kernel(
    float* sums, float* dgamma, float* dbeta, const float* dy, const float* x, const float* saved, Channels g,
    Slices sl) {
    const int ch = int(blockIdx.x), slice = int(blockIdx.y);
    const float m = saved[ch], inv_std = saved[g.s.c + ch];
    const int values = g.s.n * g.s.hw, first = slice * sl.length;
    struct Loaded {
        float dy, x;
    };
    TwoSums s = run_sums(
        first, min(values, first + sl.length),
        [&](int k) {
            const int j = g.value_index(ch, k);
            return Loaded{dy[j], x[j]};
        },
        [&](const Loaded& v) { return TwoSums{double(v.dy), double(v.dy) * double((v.x - m) * inv_std)}; });
    if (!channel_sums(s, sl, ch, slice)) return;
    if (threadIdx.x == 0) {
        sums[ch] = float(s.first);
        sums[g.s.c + ch] = float(s.second);
        dbeta[ch] += float(s.first);
        dgamma[ch] += float(s.second);
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
                                 float eps, Channels g, int total, bool relu) {
    for (const int i : launch::grid_stride(total)) {
        const int ch = g.channel_of(i);
        y[i] = relu_if(relu, gamma[ch] / sqrtf(running[g.s.c + ch] + eps) * (x[i] - running[ch]) + beta[ch]);
    }
}

// The running statistics are parameters, which every replica must hold bit
// for bit, a CPU device's too: each multiply-add is one rounding, spelled
// out as the CPU twin spells it, whatever either compiler would contract.
__device__ void move_running(float* running, const float* stats, double count, float momentum, int c) {
    for (int ch = threadIdx.x; ch < c; ch += blockDim.x) {
        const double mean = stats[ch] / count, var = fmax(0.0, fma(-mean, mean, stats[c + ch] / count));
        running[ch] = __fmaf_rn(momentum, running[ch], (1 - momentum) * float(mean));
        running[c + ch] = __fmaf_rn(momentum, running[c + ch], (1 - momentum) * float(var));
    }
}

__global__ void running_kernel(float* running, const float* stats, double count, float momentum, int c) {
    move_running(running, stats, count, momentum, c);
}

// Every layer's in one launch, block l layer l's.
struct RunningLayers {
    RunningUpdate layer[running_updates_a_call];
    float momentum;
};
__global__ void running_all_kernel(RunningLayers all) {
    const RunningUpdate& u = all.layer[blockIdx.x];
    move_running(u.running, u.stats, u.count, all.momentum, u.c);
}

}  // namespace

size_t batch_norm_scratch_floats(const NormShape& s) {
    // Two doubles a slice, and a float to align them (slices_for).
    return s.c > 0 ? 4 * size_t(s.c) * size_t(slices_of(s)) + 1 : 0;
}

void batch_norm_stats(float* stats, const float* x, const NormShape& s, Workspace ws, cudaStream_t stream) {
    if (s.c == 0) return;
    const Channels g(s);  // (first: it refuses a layer too large to index)
    const Slices sl = slices_for(s, ws);
    launch::kernel("stats_kernel", stats_kernel, dim3(unsigned(s.c), unsigned(sl.count)), launch::threads, stream,
                   stats, x, g, sl);
}

void batch_norm_forward(float* y, float* saved, const float* x, const float* stats, double count, const float* gamma,
                        const float* beta, float eps, const NormShape& s, cudaStream_t stream, bool relu) {
    if (s.c == 0) return;
    if (s.size() > 0 && s.c <= saving_most_channels)
        return launch::kernel("normalize_saving_kernel", normalize_saving_kernel, launch::grid_for(s.size()),
                              launch::threads, stream, y, saved, x, stats, count, eps, gamma, beta, Channels(s),
                              int(s.size()), relu);
    launch::kernel("saved_kernel", saved_kernel, 1, launch::threads, stream, saved, stats, count, eps, s.c);
    if (s.size() == 0) return;
    launch::kernel("normalize_kernel", normalize_kernel, launch::grid_for(s.size()), launch::threads, stream,
        y, x, saved, gamma, beta, Channels(s), int(s.size()), relu);
}

void batch_norm_backward_sums(float* sums, float* dgamma, float* dbeta, const float* dy, const float* x,
                              const float* saved, const NormShape& s, Workspace ws, cudaStream_t stream) {
    if (s.c == 0) return;
    const Channels g(s);  // (first: it refuses a layer too large to index)
    const Slices sl = slices_for(s, ws);
    launch::kernel("backward_sums_kernel", backward_sums_kernel, dim3(unsigned(s.c), unsigned(sl.count)),
                   launch::threads, stream, sums, dgamma, dbeta, dy, x, saved, g, sl);
}

void batch_norm_backward_sums_relu(float* sums, float* dgamma, float* dbeta, float* dy, const float* relu_y,
                                   const float* x, const float* saved, const NormShape& s, Workspace ws,
                                   cudaStream_t stream) {
    relu_backward(dy, dy, relu_y, s.size(), stream);
    batch_norm_backward_sums(sums, dgamma, dbeta, dy, x, saved, s, ws, stream);
}

void batch_norm_backward_data(float* dx, const float* dy, const float* x, const float* saved, const float* sums,
                              double count, const float* gamma, const NormShape& s, cudaStream_t stream) {
    if (s.size() == 0) return;
    launch::kernel("backward_data_kernel", backward_data_kernel, launch::grid_for(s.size()), launch::threads, stream,
        dx, dy, x, saved, sums, count, gamma, Channels(s), int(s.size()));
}

void batch_norm_inference(float* y, const float* x, const float* running, const float* gamma, const float* beta,
                          float eps, const NormShape& s, cudaStream_t stream, bool relu) {
    if (s.size() == 0) return;
    launch::kernel("inference_kernel", inference_kernel, launch::grid_for(s.size()), launch::threads, stream,
        y, x, running, gamma, beta, eps, Channels(s), int(s.size()), relu);
}

void batch_norm_update_running(float* running, const float* stats, double count, float momentum, int c,
                               cudaStream_t stream) {
    if (c == 0) return;
    launch::kernel("running_kernel", running_kernel, 1, launch::threads, stream, running, stats, count, momentum, c);
}

void batch_norm_update_running_all(const RunningUpdate* layers, int count, float momentum, cudaStream_t stream) {
    if (count > running_updates_a_call)
        throw std::invalid_argument("batch_norm_update_running_all: " + std::to_string(count) + " layers, at most " +
                                    std::to_string(running_updates_a_call) + " a call");
    if (count <= 0) return;
    RunningLayers all{};
    std::copy(layers, layers + count, all.layer);
    all.momentum = momentum;
    launch::kernel("running_all_kernel", running_all_kernel, unsigned(count), launch::threads, stream, all);
}

}  // namespace dpt::cuda
