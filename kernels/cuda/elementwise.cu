// The small kernels of a training step on the GPU: loading samples, ReLU,
// a residual add with its ReLU, softmax cross-entropy, accuracy, the SGD
// update and the allreduce's sum.
// CPU twin: kernels/cpu/elementwise.cpp.
#include "kernels.hpp"
#include "launch.cuh"

namespace dpt::cuda {
namespace {

__global__ void gather(float* x, int32_t* labels_out, const uint8_t* images, const uint8_t* labels,
                       const uint32_t* index, int count, int pixels) {
    const float scale = 1.0f / 255.0f;
    for (const size_t e : launch::grid_stride(size_t(count) * pixels)) {
        const size_t i = e / pixels, p = e % pixels;
        x[e] = float(images[size_t(index[i]) * pixels + p]) * scale;
        if (p == 0) labels_out[i] = labels[index[i]];
    }
}

__global__ void relu_fwd(float* y, const float* x, size_t count) {
    for (const size_t i : launch::grid_stride(count)) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

__global__ void relu_bwd(float* dx, const float* dy, const float* y, size_t count) {
    for (const size_t i : launch::grid_stride(count)) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

// A residual add and the ReLU after it (version 2 of "residual"), forward
// and backward: sum_parts' and relu_fwd's values, and relu_bwd's and a
// copy's (or sum_parts').
__global__ void add_relu_kernel(float* acc, const float* other, size_t count) {
    for (const size_t i : launch::grid_stride(count)) {
        const float v = acc[i] + other[i];
        acc[i] = v > 0.0f ? v : 0.0f;
    }
}

__global__ void add_relu_backward_kernel(float* dy, float* d_other, const float* y, size_t count, bool accumulate) {
    for (const size_t i : launch::grid_stride(count)) {
        const float d = y[i] > 0.0f ? dy[i] : 0.0f;
        dy[i] = d;
        d_other[i] = accumulate ? d_other[i] + d : d;
    }
}

// One block: thread t takes rows t, t + 256, ...; the losses are summed in a
// fixed order, so the reported loss is the same on every run.
__global__ void softmax_xent(float* dlogits, double* loss_sum, const float* logits, const int32_t* labels, int n,
                             int classes) {
    double loss = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float* z = logits + size_t(i) * classes;
        float* g = dlogits + size_t(i) * classes;
        float zmax = z[0];
        for (int j = 1; j < classes; ++j) zmax = fmaxf(zmax, z[j]);
        float sum = 0.0f;
        for (int j = 0; j < classes; ++j) {
            g[j] = expf(z[j] - zmax);
            sum += g[j];
        }
        const float inv = 1.0f / sum;
        for (int j = 0; j < classes; ++j) g[j] *= inv;
        g[labels[i]] -= 1.0f;
        loss += double(logf(sum) + zmax - z[labels[i]]);
    }
    loss = launch::block_sum(loss);
    if (threadIdx.x == 0) *loss_sum += loss;
}

__global__ void correct_count(unsigned long long* correct, const float* logits, const int32_t* labels, int n,
                              int classes) {
    unsigned long long hits = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float* z = logits + size_t(i) * classes;
        int best = 0;
        for (int j = 1; j < classes; ++j)
            if (z[j] > z[best]) best = j;
        hits += best == labels[i];
    }
    hits = launch::block_sum(hits);
    if (threadIdx.x == 0) *correct += hits;
}

__global__ void sgd(float* params, const float* grads, float scale, size_t count) {
    for (const size_t i : launch::grid_stride(count)) params[i] = __fmaf_rn(-scale, grads[i], params[i]);  // as the CPU twin: one rounding
}

__global__ void sum_parts(float* acc, const float* staged, int parts, size_t count) {
    for (const size_t i : launch::grid_stride(count)) {
        float v = acc[i];
        for (int p = 0; p < parts; ++p) v += staged[size_t(p) * count + i];
        acc[i] = v;
    }
}

// Each thread looks at its elements; the few that find a NaN or an infinity
// lower *first_bad. atomicMin on an integer gives the same result in any
// order, so this stays deterministic.
__global__ void nonfinite(int32_t* first_bad, const float* x, size_t count, int32_t step) {
    bool bad = false;
    for (const size_t i : launch::grid_stride(count)) bad |= (__float_as_uint(x[i]) & 0x7f800000u) == 0x7f800000u;
    if (bad) atomicMin(first_bad, step);
}

// Both of the above in one pass: the update for i < count, the check for
// i < checked (the check also covers the running statistics' slots).
__global__ void sgd_checked(float* params, const float* grads, float scale, size_t count, int32_t* first_bad,
                            size_t checked, int32_t step) {
    bool bad = false;
    for (const size_t i : launch::grid_stride(count > checked ? count : checked)) {
        const float g = grads[i];
        if (i < checked) bad |= (__float_as_uint(g) & 0x7f800000u) == 0x7f800000u;
        if (i < count) params[i] = __fmaf_rn(-scale, g, params[i]);
    }
    if (bad) atomicMin(first_bad, step);
}


}  // namespace

void gather_samples(float* x, int32_t* labels_out, const uint8_t* images, const uint8_t* labels,
                    const uint32_t* index, int count, int pixels, cudaStream_t stream) {
    if (count <= 0) return;
    launch::kernel("gather", gather, launch::grid_for(size_t(count) * pixels), launch::threads, stream,
        x, labels_out, images, labels, index, count, pixels);
}

void relu_forward(float* y, const float* x, size_t count, cudaStream_t stream) {
    if (count == 0) return;
    launch::kernel("relu_fwd", relu_fwd, launch::grid_for(count), launch::threads, stream, y, x, count);
}

void relu_backward(float* dx, const float* dy, const float* y, size_t count, cudaStream_t stream) {
    if (count == 0) return;
    launch::kernel("relu_bwd", relu_bwd, launch::grid_for(count), launch::threads, stream, dx, dy, y, count);
}

void softmax_cross_entropy(float* dlogits, double* loss_sum, const float* logits, const int32_t* labels, int n,
                           int classes, cudaStream_t stream) {
    if (n <= 0) return;
    launch::kernel("softmax_xent", softmax_xent, 1, launch::threads, stream,
        dlogits, loss_sum, logits, labels, n, classes);
}

void count_correct(unsigned long long* correct, const float* logits, const int32_t* labels, int n, int classes,
                   cudaStream_t stream) {
    if (n <= 0) return;
    launch::kernel("correct_count", correct_count, 1, launch::threads, stream, correct, logits, labels, n, classes);
}

void sgd_update(float* params, const float* grads, float scale, size_t count, cudaStream_t stream) {
    if (count == 0) return;
    launch::kernel("sgd", sgd, launch::grid_for(count), launch::threads, stream, params, grads, scale, count);
}

void sum_into(float* acc, const float* staged, int parts, size_t count, cudaStream_t stream) {
    if (count == 0 || parts <= 0) return;
    launch::kernel("sum_parts", sum_parts, launch::grid_for(count), launch::threads, stream,
        acc, staged, parts, count);
}

void copy(float* dst, const float* src, size_t count, cudaStream_t stream) {
    if (count == 0) return;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, count * sizeof(float), cudaMemcpyDeviceToDevice, stream));
}

void add_relu(float* acc, const float* other, size_t count, cudaStream_t stream) {
    if (count == 0) return;
    launch::kernel("add_relu_kernel", add_relu_kernel, launch::grid_for(count), launch::threads, stream, acc, other,
                   count);
}

void add_relu_backward(float* dy, float* d_other, const float* y, size_t count, bool accumulate,
                       cudaStream_t stream) {
    if (count == 0) return;
    launch::kernel("add_relu_backward_kernel", add_relu_backward_kernel, launch::grid_for(count), launch::threads,
                   stream, dy, d_other, y, count, accumulate);
}

void sgd_update_checked(float* params, const float* grads, float scale, size_t count, int32_t* first_bad,
                        size_t checked, int32_t step, cudaStream_t stream) {
    const size_t most = count > checked ? count : checked;
    if (most == 0) return;
    launch::kernel("sgd_checked", sgd_checked, launch::grid_for(most), launch::threads, stream, params, grads, scale, count,
                   first_bad, checked, step);
}

void note_nonfinite(int32_t* first_bad, const float* x, size_t count, int32_t step, cudaStream_t stream) {
    if (count == 0) return;
    launch::kernel("nonfinite", nonfinite, launch::grid_for(count), launch::threads, stream,
        first_bad, x, count, step);
}

// volatile: every read goes to host memory, where the CPU thread writes.
// Then what the CPU wrote before raising the count (a CPU device's
// gradients) is what this stream's next copies read.
__global__ void poll_host(const volatile unsigned long long* counter, unsigned long long target) {
    while (launch::read_from_host(counter) < target) __nanosleep(1000);
    launch::acquire_from_host(counter);
}

void wait_for_host(const unsigned long long* counter, unsigned long long target, cudaStream_t stream) {
    launch::kernel("poll_host", poll_host, 1, 1, stream, counter, target);
}

}  // namespace dpt::cuda
