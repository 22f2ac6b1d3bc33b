// A batch norm layer's data gradient and its evaluation, each channel's
// constants worked out once a block (backward_data_table_kernel,
// inference_table_kernel).
//
// Against the trainer's (kernels/cuda/norm.cu: backward_data_kernel,
// inference_kernel, which work them out again for each value: the
// backward's two double divisions of the sums by the count, evaluation's
// division by the square root of the running variance): into shared memory
// first, at most 512 channels (more: the trainer's). The same expressions,
// the same bits.
//
// Measured: not yet timed on a GPU.
#include "cuda/norm.cuh"
#include "dev.hpp"

DEV_REPLACES(batch_norm_backward_data)
DEV_REPLACES(batch_norm_inference)

namespace {

using namespace dpt;
using namespace dpt::cuda;
using namespace dpt::cuda::norm;

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
        const float v = scale[ch] * (x[i] - mean[ch]) + shift[ch];
        y[i] = relu ? (v > 0.0f ? v : 0.0f) : v;  // (relu_fwd's value: NaN -> 0)
    }
}

}  // namespace

namespace DEV_NAMESPACE {

void batch_norm_backward_data(float* dx, const float* dy, const float* x, const float* saved, const float* sums,
                              double count, const float* gamma, const NormShape& s, cudaStream_t stream) {
    if (s.size() == 0 || s.c > table_most_channels)
        return TRAINER(batch_norm_backward_data)(dx, dy, x, saved, sums, count, gamma, s, stream);
    launch::kernel("backward_data_table_kernel", backward_data_table_kernel, launch::grid_for(s.size()),
                   launch::threads, stream, dx, dy, x, saved, sums, count, gamma, Channels(s), int(s.size()));
}

void batch_norm_inference(float* y, const float* x, const float* running, const float* gamma, const float* beta,
                          float eps, const NormShape& s, cudaStream_t stream, bool relu) {
    if (s.size() == 0 || s.c > table_most_channels)
        return TRAINER(batch_norm_inference)(y, x, running, gamma, beta, eps, s, stream, relu);
    launch::kernel("inference_table_kernel", inference_table_kernel, launch::grid_for(s.size()), launch::threads,
                   stream, y, x, running, gamma, beta, eps, Channels(s), int(s.size()), relu);
}

}  // namespace DEV_NAMESPACE

DEV_VERSION("batch_norm/07_channel_tables",
            "a batch norm's data gradient and evaluation with each channel's constants worked out once a block, in "
            "shared memory (at most 512 channels), where the trainer's work them out for each value: the same bits",
            "not yet timed",
            (l.batch_norm_backward_data = &DEV_NAMESPACE::batch_norm_backward_data,
             l.batch_norm_inference = &DEV_NAMESPACE::batch_norm_inference))
