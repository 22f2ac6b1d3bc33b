// Batch normalisation on the GPU. CPU twin: kernels/cpu/norm.cpp (the same
// halves; kernels/cpu/kernels.hpp says what each computes). The per-channel
// sums accumulate in double in a fixed order, so a run gives the same bits
// every time; the element-wise halves take each channel's mean and 1/std
// from `saved`.
//
// The sums (the statistics, and the backward's two): version 1 runs a block
// a channel. Version 2 (versions.hpp: "batch_norm") cuts each channel's
// values into slices, enough that the channels' slices make about
// target_blocks blocks, each slice summed as version 1 sums a channel; the
// slices' sums go to scratch in double, and the last block of a channel to
// store its own (an integer ticket a channel) adds them in slice order,
// through the same fixed tree. ResNet-18's first layer (one channel,
// 200,704 values at batch 256) is then 256 blocks of 784 values where it
// was one block; its 64-channel layers 4 blocks a channel. Version 3 also
// leaves the channels' means and 1/std to the forward's normalising kernel,
// each block working them out from the sums (no saved_kernel). Version 4
// also moves every layer's running statistics in one launch after the
// update, where each layer took one. Version 5 also applies a ReLU that
// follows the layer in the normalising kernel (training's and
// evaluation's), where it was a kernel of its own; version 6 that ReLU's
// backward in the backward's sums kernel, which masks dy as it reads it;
// version 7 works out each channel's constants of the backward's data
// gradient and of evaluation once a block, not once a value.
//
// Indices are ints split by multiplication (fastdiv.cuh); a layer of 2^31
// values or more is refused. 64-bit division, which size_t indices cost, is
// a long subroutine on a GPU: on an H100 the sums over ResNet-18's first
// layer (one channel, 200,704 values at batch 256, on one block) took 0.4
// ms each with it, one dependent load after another.
#include "fastdiv.cuh"
#include "kernels.hpp"
#include "launch.cuh"
#include "tiles.cuh"
#include "versions.hpp"

#include <algorithm>
#include <cstdint>
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

// Blocks of 256 threads that fill a multiprocessor, for the kernels that
// ask to fit them all (__launch_bounds__, which holds them to 32 registers
// a thread): 8 where it holds 2,048 threads, 4 on sm_75's 1,024, 6 on the
// 1,536 of sm_86 and sm_89 (asked for more than that, ptxas warns and
// ignores the bound).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
constexpr int full_blocks = 4;
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ > 800 && __CUDA_ARCH__ < 900
constexpr int full_blocks = 6;
#else
constexpr int full_blocks = 8;
#endif

// Thread t of a block visits its run's values t, t + 256, ...: loaded
// `ahead` at a time, so that their loads are in flight together, then added
// in that same order (the bits do not depend on `ahead`). Run [first, last)
// of channel ch's values; `load(k)` reads what value k needs, and
// `two(loaded)` gives the two values it adds to the two sums. Two steps, so
// that a `two` that stores (the masked backward's) comes after all of its
// batch's loads: a store the compiler cannot tell apart from the next load's
// address holds that load back, and the batch's loads went one after another
// (the masked sums took 7 times the plain ones' time on an H200). The sums
// are valid in thread 0.
constexpr int ahead = 8;

struct TwoSums {
    double first = 0, second = 0;
};

template <class Load, class Two>
__device__ TwoSums run_sums(int first, int last, Load load, Two two) {
    const int step = int(blockDim.x);
    TwoSums s;
    int k = first + int(threadIdx.x);
    for (; k + (ahead - 1) * step < last; k += ahead * step) {
        decltype(load(k)) v[ahead];
#pragma unroll
        for (int u = 0; u < ahead; ++u) v[u] = load(k + u * step);
#pragma unroll
        for (int u = 0; u < ahead; ++u) {
            const TwoSums t = two(v[u]);
            s.first += t.first;
            s.second += t.second;
        }
    }
    for (; k < last; k += step) {
        const TwoSums t = two(load(k));
        s.first += t.first;
        s.second += t.second;
    }
    s.first = launch::block_sum(s.first);
    __syncthreads();  // block_sum's shared memory is used again
    s.second = launch::block_sum(s.second);
    return s;
}

// Slices of each channel's values (version 2): at least 1, at most one a
// thread of the block that adds them, and none shorter than
// slice_min_values. A function of the shape alone, so every GPU sums in the
// same order.
constexpr int slice_min_values = 512, target_blocks = 256;
int slices_of(const NormShape& s) {
    const long values = long(s.n) * s.hw;
    const long wanted = (target_blocks + s.c - 1) / std::max(s.c, 1);
    return int(std::clamp<long>(std::min(wanted, values / slice_min_values), 1, launch::threads));
}

// Where a launch of the sums keeps its slices' partial sums: `slices` a
// channel, two doubles each, 8-byte aligned in the float scratch.
struct Slices {
    int count = 1, length = 0;  // slices a channel; values a slice (the last may have fewer)
    double* partial = nullptr;  // (channel, slice, 2)
    unsigned* tickets = nullptr;  // one a channel
};

Slices slices_for(const NormShape& s, Workspace ws) {
    Slices sl;
    const int values = s.n * s.hw;
    if (batch_norm_version >= 2 && ws.tickets && ws.scratch) sl.count = slices_of(s);
    sl.length = (values + sl.count - 1) / sl.count;
    if (sl.count > 1) {
        const auto at = reinterpret_cast<std::uintptr_t>(ws.scratch);
        sl.partial = reinterpret_cast<double*>((at + 7) / 8 * 8);
        sl.tickets = ws.tickets;
    }
    return sl;
}

// Block (ch, slice)'s sums of its run: with one slice they are the
// channel's (true); otherwise stored to scratch, and true in the last block
// of the channel to store its own, which then holds the slices' sums added
// in slice order (thread t loads slice t's; block_sum's fixed tree).
__device__ bool channel_sums(TwoSums& s, const Slices& sl, int ch, int slice) {
    if (sl.count == 1) return true;
    double* const channel = sl.partial + 2 * size_t(ch) * sl.count;  // (slice, 2)
    if (threadIdx.x == 0) {
        channel[2 * slice] = s.first;
        channel[2 * slice + 1] = s.second;
    }
    if (!launch::last_to_arrive(&sl.tickets[ch], unsigned(sl.count))) return false;
    TwoSums mine;
    if (int(threadIdx.x) < sl.count) {
        mine.first = __ldcg(&channel[2 * threadIdx.x]);
        mine.second = __ldcg(&channel[2 * threadIdx.x + 1]);
    }
    __syncthreads();  // run_sums' block_sum shared memory is used again
    s.first = launch::block_sum(mine.first);
    __syncthreads();
    s.second = launch::block_sum(mine.second);
    return true;
}

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

// Version 8: stats_kernel, where the layer's input is a convolution's
// output whose product split along k left its splits' partial sums
// (UnfinishedConv; conv_forward.cu: forward). Each value is finished where
// stats_kernel would load it: its splits added by finish_splits' own
// split_sum, then the bias, as finish_splits with StoreOutput<false> does
// (its column of the product is the value's place in the channel's run,
// sample by sample), stored in y and summed. The same y and the same sums
// as finish_splits then stats_kernel, bit for bit, and one pass over y
// instead of two.
__global__ void finish_stats_kernel(float* stats, UnfinishedConv u, Channels g, Slices sl) {
    const int ch = int(blockIdx.x), slice = int(blockIdx.y);
    const int values = g.s.n * g.s.hw, first = slice * sl.length;
    const size_t size = size_t(values) * g.s.c;  // the product's, a split's
    const float* const row = u.partial + size_t(ch) * values;  // the channel's row of the product, split 0
    const float bias = u.b[ch];
    TwoSums s = run_sums(
        first, min(values, first + sl.length),
        [&](int k) {
            const float v = tiled::split_sum(row, u.splits, size, size_t(k)) + bias;
            u.y[g.value_index(ch, k)] = v;
            return v;
        },
        ValueAndSquare{});
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
// layer (version 5).
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

// Version 3: each block works out every channel's mean and 1/std from the
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

// A ReLU after the layer (version 6): its output y masks dy as dy is read,
// and the masked values are stored back (relu_bwd's, in place). A kernel of
// its own (Masked), with half the plain sums' blocks a multiprocessor (up to
// 64 registers a thread): each of its threads holds a batch's dy, x, mask
// and index (run_sums), which at 32 registers spilled to the stack. The
// sums' grids are a few hundred blocks (slices_of), 2 to 4 a multiprocessor
// on an H200, so neither bound holds blocks back there.
struct ReluMask {
    const float* y = nullptr;
    float* dy = nullptr;  // where the masked dy goes (the dy read)
};

template <bool Masked>
__global__ void __launch_bounds__(launch::threads, Masked ? full_blocks / 2 : full_blocks) backward_sums_kernel(
    float* sums, float* dgamma, float* dbeta, const float* dy, const float* x, const float* saved, Channels g,
    Slices sl, ReluMask relu) {
    const int ch = int(blockIdx.x), slice = int(blockIdx.y);
    const float m = saved[ch], inv_std = saved[g.s.c + ch];
    const int values = g.s.n * g.s.hw, first = slice * sl.length;
    struct Loaded {
        float dy, x;
        bool masked;  // relu.y not above 0: dy is stored as 0 (relu_bwd's value)
        int j;
    };
    TwoSums s = run_sums(
        first, min(values, first + sl.length),
        [&](int k) {
            const int j = g.value_index(ch, k);
            return Loaded{dy[j], x[j], Masked && !(relu.y[j] > 0.0f), j};
        },
        [&](const Loaded& v) {
            float d = v.dy;
            if (Masked && v.masked) relu.dy[v.j] = d = 0.0f;
            return TwoSums{double(d), double(d) * double((v.x - m) * inv_std)};
        });
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

// Version 7: the two kernels above with each channel's constants worked
// out once a block, into shared memory, where each value worked them out
// again (the backward's two double divisions of the sums by the count; the
// evaluation's division by the square root of the running variance). The
// same expressions, the same bits. At most table_most_channels channels.
constexpr int table_most_channels = 512;

__global__ void __launch_bounds__(launch::threads, full_blocks) backward_data_table_kernel(
    float* dx, const float* dy, const float* x, const float* saved, const float* sums, double count,
    const float* gamma, Channels g, int total) {
    __shared__ float scale[table_most_channels], mean[table_most_channels], inv_std[table_most_channels],
        mean_dy[table_most_channels], mean_dy_xhat[table_most_channels];
    const int c = g.s.c;
    for (int ch = int(threadIdx.x); ch < c; ch += int(blockDim.x)) {
        mean[ch] = saved[ch];
        inv_std[ch] = saved[c + ch];
        scale[ch] = gamma[ch] * saved[c + ch];
        mean_dy[ch] = float(sums[ch] / count);
        mean_dy_xhat[ch] = float(sums[c + ch] / count);
    }
    __syncthreads();
    for (const int i : launch::grid_stride(total)) {
        const int ch = g.channel_of(i);
        dx[i] = scale[ch] * (dy[i] - mean_dy[ch] - (x[i] - mean[ch]) * inv_std[ch] * mean_dy_xhat[ch]);
    }
}

__global__ void __launch_bounds__(launch::threads, full_blocks) inference_table_kernel(
    float* y, const float* x, const float* running, const float* gamma, const float* beta, float eps, Channels g,
    int total, bool relu) {
    __shared__ float scale[table_most_channels], mean[table_most_channels], shift[table_most_channels];
    const int c = g.s.c;
    for (int ch = int(threadIdx.x); ch < c; ch += int(blockDim.x)) {
        scale[ch] = gamma[ch] / sqrtf(running[c + ch] + eps);
        mean[ch] = running[ch];
        shift[ch] = beta[ch];
    }
    __syncthreads();
    for (const int i : launch::grid_stride(total)) {
        const int ch = g.channel_of(i);
        y[i] = relu_if(relu, scale[ch] * (x[i] - mean[ch]) + shift[ch]);
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

// Version 4: every layer's in one launch, block l layer l's.
struct RunningLayers {
    RunningUpdate layer[running_updates_a_call];
    float momentum;
};
__global__ void running_all_kernel(RunningLayers all) {
    const RunningUpdate& u = all.layer[blockIdx.x];
    move_running(u.running, u.stats, u.count, all.momentum, u.c);
}

// Before version 5, a ReLU after the layer is a kernel of its own.
void relu_unless_fused(float* y, const NormShape& s, bool relu, cudaStream_t stream) {
    if (relu && batch_norm_version < 5) relu_forward(y, y, s.size(), stream);
}

// The backward's sums, dy masked as it is read where relu.y is set.
void backward_sums(float* sums, float* dgamma, float* dbeta, const float* dy, const float* x, const float* saved,
                   const NormShape& s, Workspace ws, ReluMask relu, cudaStream_t stream) {
    if (s.c == 0) return;
    const Channels g(s);  // (first: it refuses a layer too large to index)
    const Slices sl = slices_for(s, ws);
    launch::kernel("backward_sums_kernel", relu.y ? backward_sums_kernel<true> : backward_sums_kernel<false>,
                   dim3(unsigned(s.c), unsigned(sl.count)), launch::threads, stream, sums, dgamma, dbeta, dy, x, saved,
                   g, sl, relu);
}

}  // namespace

size_t batch_norm_scratch_floats(const NormShape& s) {
    // Two doubles a slice, and a float to align them (slices_for).
    return s.c > 0 ? 4 * size_t(s.c) * size_t(slices_of(s)) + 1 : 0;
}

void batch_norm_stats(float* stats, const float* x, const NormShape& s, Workspace ws, cudaStream_t stream,
                      const UnfinishedConv& before) {
    if (before.y && (before.y != x || before.partial != ws.scratch || before.splits < 2))
        throw std::invalid_argument("batch_norm_stats: the unfinished convolution before is not the one whose "
                                    "output is x, or its partial sums are not at the start of the scratch");
    if (s.c == 0) return;
    const Channels g(s);  // (first: it refuses a layer too large to index)
    if (before.y) {  // the slices' sums after the convolution's splits
        const Slices sl = slices_for(s, {ws.scratch + size_t(before.splits) * s.size(), ws.tickets});
        launch::kernel("finish_stats_kernel", finish_stats_kernel, dim3(unsigned(s.c), unsigned(sl.count)),
                       launch::threads, stream, stats, before, g, sl);
        return;
    }
    const Slices sl = slices_for(s, ws);
    launch::kernel("stats_kernel", stats_kernel, dim3(unsigned(s.c), unsigned(sl.count)), launch::threads, stream,
                   stats, x, g, sl);
}

void batch_norm_forward(float* y, float* saved, const float* x, const float* stats, double count, const float* gamma,
                        const float* beta, float eps, const NormShape& s, cudaStream_t stream, bool relu) {
    if (s.c == 0) return;
    const bool fused = relu && batch_norm_version >= 5;
    if (batch_norm_version >= 3 && s.size() > 0 && s.c <= saving_most_channels) {
        launch::kernel("normalize_saving_kernel", normalize_saving_kernel, launch::grid_for(s.size()), launch::threads,
                       stream, y, saved, x, stats, count, eps, gamma, beta, Channels(s), int(s.size()), fused);
        return relu_unless_fused(y, s, relu, stream);
    }
    launch::kernel("saved_kernel", saved_kernel, 1, launch::threads, stream, saved, stats, count, eps, s.c);
    if (s.size() == 0) return;
    launch::kernel("normalize_kernel", normalize_kernel, launch::grid_for(s.size()), launch::threads, stream,
        y, x, saved, gamma, beta, Channels(s), int(s.size()), fused);
    relu_unless_fused(y, s, relu, stream);
}

void batch_norm_backward_sums(float* sums, float* dgamma, float* dbeta, const float* dy, const float* x,
                              const float* saved, const NormShape& s, Workspace ws, cudaStream_t stream) {
    backward_sums(sums, dgamma, dbeta, dy, x, saved, s, ws, {}, stream);
}

void batch_norm_backward_sums_relu(float* sums, float* dgamma, float* dbeta, float* dy, const float* relu_y,
                                   const float* x, const float* saved, const NormShape& s, Workspace ws,
                                   cudaStream_t stream) {
    if (batch_norm_version >= 6) return backward_sums(sums, dgamma, dbeta, dy, x, saved, s, ws, {relu_y, dy}, stream);
    relu_backward(dy, dy, relu_y, s.size(), stream);
    batch_norm_backward_sums(sums, dgamma, dbeta, dy, x, saved, s, ws, stream);
}

void batch_norm_backward_data(float* dx, const float* dy, const float* x, const float* saved, const float* sums,
                              double count, const float* gamma, const NormShape& s, cudaStream_t stream) {
    if (s.size() == 0) return;
    if (batch_norm_version >= 7 && s.c <= table_most_channels)
        return launch::kernel("backward_data_table_kernel", backward_data_table_kernel, launch::grid_for(s.size()),
                              launch::threads, stream, dx, dy, x, saved, sums, count, gamma, Channels(s),
                              int(s.size()));
    launch::kernel("backward_data_kernel", backward_data_kernel, launch::grid_for(s.size()), launch::threads, stream,
        dx, dy, x, saved, sums, count, gamma, Channels(s), int(s.size()));
}

void batch_norm_inference(float* y, const float* x, const float* running, const float* gamma, const float* beta,
                          float eps, const NormShape& s, cudaStream_t stream, bool relu) {
    if (s.size() == 0) return;
    if (batch_norm_version >= 7 && s.c <= table_most_channels)
        return launch::kernel("inference_table_kernel", inference_table_kernel, launch::grid_for(s.size()),
                              launch::threads, stream, y, x, running, gamma, beta, eps, Channels(s), int(s.size()),
                              relu);
    launch::kernel("inference_kernel", inference_kernel, launch::grid_for(s.size()), launch::threads, stream,
        y, x, running, gamma, beta, eps, Channels(s), int(s.size()), relu && batch_norm_version >= 5);
    relu_unless_fused(y, s, relu, stream);
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
    if (batch_norm_version < 4) {
        for (int l = 0; l < count; ++l)
            batch_norm_update_running(layers[l].running, layers[l].stats, layers[l].count, momentum, layers[l].c, stream);
        return;
    }
    if (count <= 0) return;
    RunningLayers all{};
    std::copy(layers, layers + count, all.layer);
    all.momentum = momentum;
    launch::kernel("running_all_kernel", running_all_kernel, unsigned(count), launch::threads, stream, all);
}

}  // namespace dpt::cuda
