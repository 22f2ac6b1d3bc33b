// The CUDA kernels: every layer of dptrain on the GPU. Each launcher is the
// twin of the kernels/cpu/ function of the same name: same arguments, same
// conventions (see kernels/cpu/kernels.hpp), plus the stream it is queued on.
// The GPU tests (tests/gpu/) run both on the same inputs and compare.
//
// Two differences follow from running asynchronously: the loss and the count
// of correct predictions are added to a device-side total instead of being
// returned, and all pointers are device memory. Launchers never synchronise
// and never allocate; a bad launch throws CudaError (check.hpp).
//
// The fused launchers (bias+ReLU in the convolution and dense epilogues,
// pooling and dense backward with ReLU's mask) save a pass over the activations; their
// unfused composition on the CPU is the reference they are tested against.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "backward.hpp"
#include "shapes.hpp"
#include "splits.hpp"

namespace dpt::cuda {

// C (m, n) = op(A) . op(B), or C += ... when accumulate is set (row-major;
// A stored (k, m) when trans_a, B stored (n, k) when trans_b): tiles.cuh's
// SGEMM on plain matrices, for the tests (the layers below run the same
// kernel through loaders of their own; none calls this).
void gemm(float* c, const float* a, const float* b, int m, int n, int k,
          bool trans_a, bool trans_b, bool accumulate, cudaStream_t stream);

// x (count, pixels) = images[index[i]] / 255, labels_out (count) = labels[index[i]].
void gather_samples(float* x, int32_t* labels_out, const uint8_t* images,
                    const uint8_t* labels, const uint32_t* index, int count,
                    int pixels, cudaStream_t stream);

// gather_samples' arguments, for a kernel that gathers its input as it
// reads it instead (conv2d_forward_relu_pool_gathered).
struct GatherSource {
    float* x = nullptr;  // none: nothing to gather
    int32_t* labels_out = nullptr;
    const uint8_t* images = nullptr;
    const uint8_t* labels = nullptr;
    const uint32_t* index = nullptr;
    int count = 0, pixels = 0;
};

// Scratch floats the conv kernels need for shape s (no more for a smaller s.n):
// partial sums of the weight gradient when it is split along the batch.
size_t conv2d_scratch_floats(const ConvShape& s);
// The longest sum that one product of s's weight gradient hands the tensor
// cores (--tf32): the batch's output pixels, or one split of them. The
// tests' TF32 tolerance grows with it.
int conv2d_weight_grad_depth(const ConvShape& s);
// The splits along k of s's forward product and of its weight gradient's
// product (1: not split).
int conv2d_forward_splits(const ConvShape& s);
int conv2d_weight_grad_splits(const ConvShape& s);

// y (n, oc, oh, ow) = conv(x, w) + b; the _relu form stores max(., 0).
void conv2d_forward(float* y, const float* x, const float* w, const float* b,
                    const ConvShape& s, float* scratch, cudaStream_t stream);
void conv2d_forward_relu(float* y, const float* x, const float* w, const float* b,
                         const ConvShape& s, float* scratch, cudaStream_t stream);
// y = conv2d_forward_relu(x), then pooled = pool2d_forward(y): one kernel
// where the filter bank is small or the rows kernels take s, else the two.
// ps: the pooling's shape, whose input is y.
void conv2d_forward_relu_pool(float* y, float* pooled, const float* x, const float* w, const float* b,
                              const ConvShape& s, PoolKind kind, const PoolShape& ps, float* scratch,
                              cudaStream_t stream);
// Whether conv2d_forward_relu_pool_gathered takes a first layer of shape s
// (where its direct kernel runs).
bool conv2d_forward_gathers(const ConvShape& s);
// conv2d_forward_relu_pool of from.x, which the kernel gathers as it stages
// each image (and stores, with the labels, as gather_samples would), for
// s.n = from.count samples of from.pixels = s.c * s.h * s.w values.
void conv2d_forward_relu_pool_gathered(float* y, float* pooled, const GatherSource& from, const float* w,
                                       const float* b, const ConvShape& s, PoolKind kind, const PoolShape& ps,
                                       cudaStream_t stream);
// A weight gradient summed by slices of the batch whose slices are not yet
// added (conv2d_backward_weight_unfinished): [dw | db] (oc, taps + 1) +=
// the sum of `slices` partial sums in scratch, in slice order. dw null:
// nothing left.
struct UnfinishedWeightGrad {
    float* dw = nullptr;
    float* db = nullptr;
    const float* scratch = nullptr;
    int slices = 0, oc = 0, taps = 0;
};
// dx (n, c, h, w), overwritten. `weight`: a weight gradient left unfinished
// just before (its slices in the scratch this call is handed): added first,
// as finish_splits adds them, by the input gradient's own kernel where that
// is the tiled rows kernel (LeNet's conv2), else by finish_splits.
void conv2d_backward_data(float* dx, const float* dy, const float* w,
                          const ConvShape& s, float* scratch, cudaStream_t stream,
                          const UnfinishedWeightGrad& weight = {});
// dw (oc, c, kh, kw) += ..., db (oc) += ...
void conv2d_backward_weight(float* dw, float* db, const float* dy, const float* x,
                            const ConvShape& s, Workspace ws, cudaStream_t stream);
// Whether conv2d_backward_weight_unfinished leaves s's slices to the input
// gradient's kernel (LeNet's conv2, whose input gradient runs on the tiled
// rows kernel; x and w: the layer's input and weights, as the kernels take
// them).
bool conv2d_backward_weight_leaves_slices(const ConvShape& s, const float* x, const float* w);
// conv2d_backward_weight, but where conv2d_backward_weight_leaves_slices,
// only the slices' kernel: the rest is returned, for the layer's input
// gradient to add (conv2d_backward_data), which must run next, on the same
// scratch. Elsewhere the whole gradient, and an empty UnfinishedWeightGrad.
UnfinishedWeightGrad conv2d_backward_weight_unfinished(float* dw, float* db, const float* dy, const float* x,
                                                       const ConvShape& s, Workspace ws, cudaStream_t stream);
// The weight gradient of a convolution whose output y, after its ReLU, was
// pooled (conv2d_forward_relu_pool), from the pooling's output gradient:
// dy = pool2d_backward_relu(d_pooled), then conv2d_backward_weight. Where the
// filter bank is small the kernels read
// dy through the pooling and leave the dy buffer alone; otherwise dy is
// written on the way. For a first layer, which needs no data gradient.
void conv2d_backward_weight_pool(float* dw, float* db, float* dy, const float* d_pooled, const float* x,
                                 const float* y, const float* pooled, const ConvShape& s, PoolKind kind,
                                 const PoolShape& ps, Workspace ws, cudaStream_t stream);

void pool2d_forward(float* y, const float* x, PoolKind kind, const PoolShape& s,
                    cudaStream_t stream);
// dx (n, c, h, w), overwritten; max pooling credits the first maximal tap.
void pool2d_backward(float* dx, const float* dy, const float* x, const float* y,
                     PoolKind kind, const PoolShape& s, cudaStream_t stream);
// pool2d_backward, then ReLU's backward mask (x is the ReLU output being pooled):
// dx = 0 where x <= 0.
void pool2d_backward_relu(float* dx, const float* dy, const float* x, const float* y,
                          PoolKind kind, const PoolShape& s, cudaStream_t stream);

// Scratch floats the dense launchers need at n samples (their products,
// split along k, keep partial sums there). The dense launchers and the
// convolutions' weight gradients take a Workspace (splits.hpp): that
// scratch, and the tickets with which a split product adds its partial sums
// in its own kernel.
size_t dense_scratch_floats(int n, int in, int out, Math math = Math::fp32);
// y (n, out) = x (n, in) . w^T + b; the _relu form stores max(., 0).
// `math`: the products' arithmetic (shapes.hpp), on every dense launcher.
void dense_forward(float* y, const float* x, const float* w, const float* b,
                   int n, int in, int out, Workspace ws, cudaStream_t stream,
                   Math math = Math::fp32);
void dense_forward_relu(float* y, const float* x, const float* w, const float* b,
                        int n, int in, int out, Workspace ws, cudaStream_t stream,
                        Math math = Math::fp32);
// dw += dy^T . x; db += column sums of dy; dx = dy . w (skipped when null).
void dense_backward(float* dx, float* dw, float* db, const float* dy,
                    const float* x, const float* w, int n, int in, int out,
                    Workspace ws, cudaStream_t stream, Math math = Math::fp32);
// dense_backward, then ReLU's backward mask on dx (x is the output of the
// ReLU before the layer): dx = 0 where x <= 0.
void dense_backward_relu(float* dx, float* dw, float* db, const float* dy,
                         const float* x, const float* w, int n, int in, int out,
                         Workspace ws, cudaStream_t stream, Math math = Math::fp32);
// db (out) += column sums of dy (n, out), dy as it is: the kernel that the
// backward launches for the bias where its product does not sum it.
void dense_backward_bias(float* db, const float* dy, int n, int out, cudaStream_t stream);
// The backward of a dense layer whose input x (n, in) is the flattened
// pooling (shape ps) of a ReLU's output y: dense_backward into dx, then
// pool2d_backward_relu of dx into grad_y, the gradient of y. Where the
// pooling's windows do not overlap, grad_y is written without dx, which is
// left alone: by the data gradient's product in the weight gradient's
// launch; otherwise dx is written on the way.
void dense_backward_pool(float* grad_y, float* dx, float* dw, float* db, const float* dy, const float* x,
                         const float* w, int n, int in, int out, const float* y, PoolKind kind,
                         const PoolShape& ps, Workspace ws, cudaStream_t stream, Math math = Math::fp32);

// A classifier's last dense layer, the softmax cross-entropy loss and the
// layer's backward in one launch (FP32): logits (n, classes) =
// x . w^T + b, dlogits and *loss_sum as softmax_cross_entropy makes them,
// then dense_backward (relu_before: dense_backward_relu) from dlogits. The
// shapes it takes: dense_loss_fits; its scratch: dense_scratch_floats. The
// loss is summed in softmax_cross_entropy's order; the weight and bias
// gradients by groups of dense_loss_wide_group samples in sample order,
// then the groups in order. dense_loss_runs: whether training runs it (FP32,
// shapes that fit), or the layer and the loss one after the other.
constexpr int dense_loss_group = 16, dense_loss_wide_group = 32, dense_loss_classes_most = 32,
              dense_loss_in_most = 1024;
bool dense_loss_fits(int n, int in, int classes);
bool dense_loss_runs(int n, int in, int classes, Math math);
// A dense layer's forward with its ReLU, y = max(x . w^T + b, 0), whose
// product split along k has stored its splits' partial sums but not added
// them: the loss kernel that reads y adds them, the bias and the ReLU as
// finish_splits would, and stores y on the way. y null:
// nothing is left to finish.
struct UnfinishedDense {
    float* y = nullptr;             // (n, out)
    const float* partial = nullptr;  // (splits, n, out), in the workspace's scratch
    const float* b = nullptr;
    int splits = 0, n = 0, out = 0;
    size_t floats() const { return size_t(splits) * size_t(n) * size_t(out); }
};
// dense_forward_relu, but where the product is split and the loss
// can take over (dense_loss_runs, out within dense_loss_in_most), only the product:
// the rest is returned, for dense_softmax_cross_entropy. Otherwise the whole
// forward, and an empty UnfinishedDense.
UnfinishedDense dense_forward_relu_for_loss(float* y, const float* x, const float* w, const float* b, int n, int in,
                                            int out, Workspace ws, cudaStream_t stream, Math math = Math::fp32);
// before: the layer whose y is x, left unfinished (its partial sums stay
// in ws.scratch, and the loss's scratch follows them); empty: x is ready.
void dense_softmax_cross_entropy(float* logits, float* dlogits, double* loss_sum, const int32_t* labels, float* dx,
                                 float* dw, float* db, const float* x, const float* w, const float* b, int n, int in,
                                 int classes, bool relu_before, Workspace ws, cudaStream_t stream,
                                 const UnfinishedDense& before = {}, Math math = Math::fp32);

void relu_forward(float* y, const float* x, size_t count, cudaStream_t stream);
void relu_backward(float* dx, const float* dy, const float* y, size_t count,
                   cudaStream_t stream);

// dlogits as on the CPU; the sum of the n losses is added to *loss_sum.
// One block, rows in a fixed order: the total is the same on every run.
void softmax_cross_entropy(float* dlogits, double* loss_sum, const float* logits,
                           const int32_t* labels, int n, int classes,
                           cudaStream_t stream);
// *correct += number of rows whose first largest logit is at the label.
void count_correct(unsigned long long* correct, const float* logits,
                   const int32_t* labels, int n, int classes, cudaStream_t stream);

void sgd_update(float* params, const float* grads, float scale, size_t count,
                cudaStream_t stream);
void sum_into(float* acc, const float* staged, int parts, size_t count,
              cudaStream_t stream);
// dst = src, count floats of device memory.
void copy(float* dst, const float* src, size_t count, cudaStream_t stream);
// A residual add with the ReLU after it, and its backward, as on the CPU:
// one kernel each.
void add_relu(float* acc, const float* other, size_t count, cudaStream_t stream);
void add_relu_backward(float* dy, float* d_other, const float* y, size_t count, bool accumulate,
                       cudaStream_t stream);
// When x holds a NaN or an infinity: *first_bad = min(*first_bad, step).
void note_nonfinite(int32_t* first_bad, const float* x, size_t count, int32_t step,
                    cudaStream_t stream);
// note_nonfinite(first_bad, grads, checked, step), then sgd_update(params,
// grads, scale, count): one pass over the gradients instead of two (the
// update of the replica that watches for divergence).
void sgd_update_checked(float* params, const float* grads, float scale, size_t count,
                        int32_t* first_bad, size_t checked, int32_t step, cudaStream_t stream);
// Holds `stream` until *counter, a count in mapped host memory that a CPU
// thread raises, reaches `target` (a mixed run's GPU waiting for a CPU
// device's mark): one thread polls, sleeping a microsecond between reads.
void wait_for_host(const unsigned long long* counter, unsigned long long target, cudaStream_t stream);

// Batch normalisation, the halves of the CPU's (kernels/cpu/kernels.hpp):
// per-channel sums in double in a fixed order (norm.cu). The sums cut a
// channel into slices across blocks, which takes the
// workspace: batch_norm_scratch_floats of scratch and a ticket a channel;
// without tickets, a block a channel.
size_t batch_norm_scratch_floats(const NormShape& s);
void batch_norm_stats(float* stats, const float* x, const NormShape& s, Workspace ws, cudaStream_t stream);
// relu: y = max(y, 0) too (a ReLU after the layer, in the same kernel).
void batch_norm_forward(float* y, float* saved, const float* x, const float* stats, double count, const float* gamma,
                        const float* beta, float eps, const NormShape& s, cudaStream_t stream, bool relu = false);
void batch_norm_backward_sums(float* sums, float* dgamma, float* dbeta, const float* dy, const float* x,
                              const float* saved, const NormShape& s, Workspace ws, cudaStream_t stream);
// A ReLU after the layer, whose output is relu_y: dy masked by it first, in
// place (relu_backward's values).
void batch_norm_backward_sums_relu(float* sums, float* dgamma, float* dbeta, float* dy, const float* relu_y,
                                   const float* x, const float* saved, const NormShape& s, Workspace ws,
                                   cudaStream_t stream);
void batch_norm_backward_data(float* dx, const float* dy, const float* x, const float* saved, const float* sums,
                              double count, const float* gamma, const NormShape& s, cudaStream_t stream);
void batch_norm_inference(float* y, const float* x, const float* running, const float* gamma, const float* beta,
                          float eps, const NormShape& s, cudaStream_t stream, bool relu = false);
void batch_norm_update_running(float* running, const float* stats, double count, float momentum, int c,
                               cudaStream_t stream);
// Every layer's running statistics in `layers` (at most running_updates_a_call):
// one launch, a block a layer.
void batch_norm_update_running_all(const RunningUpdate* layers, int count, float momentum, cudaStream_t stream);

// The layer kernels bound to one stream, for the model's passes (src/model/model.hpp).
struct KernelSet {
    cudaStream_t stream;
    Math math = Math::fp32;  // the conv and dense products' arithmetic (--tf32)
    unsigned* tickets = nullptr;  // workspace_tickets, zeroed (splits.hpp: Workspace)

    Workspace workspace(float* scratch) const { return {scratch, tickets}; }

    static size_t conv2d_scratch_floats(const ConvShape& s) { return cuda::conv2d_scratch_floats(s); }
    void conv2d_forward(float* y, const float* x, const float* w, const float* b, const ConvShape& s,
                        float* scratch) const {
        cuda::conv2d_forward(y, x, w, b, s, scratch, stream);
    }
    void conv2d_forward_relu(float* y, const float* x, const float* w, const float* b,
                             const ConvShape& s, float* scratch) const {
        cuda::conv2d_forward_relu(y, x, w, b, s, scratch, stream);
    }
    // The step's batch while it is still to be gathered into gather.x: the
    // convolution that reads x first gathers it (GpuDevice::load_train).
    GatherSource gather;
    void conv2d_forward_relu_pool(float* y, float* pooled, const float* x, const float* w, const float* b,
                                  const ConvShape& s, PoolKind kind, const PoolShape& ps, float* scratch) {
        if (gather.x && gather.x == x) {
            cuda::conv2d_forward_relu_pool_gathered(y, pooled, std::exchange(gather, {}), w, b, s, kind, ps, stream);
            return;
        }
        cuda::conv2d_forward_relu_pool(y, pooled, x, w, b, s, kind, ps, scratch, stream);
    }
    // A layer's backward, one call each (kernels/backward.hpp). A
    // convolution's weight gradient may leave its slices to its input
    // gradient's kernel, which adds them first (LeNet's conv2:
    // conv2d_backward_weight_leaves_slices); weight_done() runs once the
    // weight and bias gradients are final (or queued so).
    template <class Done>
    void backward_conv(const ConvBackward& b, Done&& weight_done) const {
        const Workspace ws = workspace(b.scratch);
        if (b.pool.d_pooled) {
            cuda::conv2d_backward_weight_pool(b.dw, b.db, b.dy, b.pool.d_pooled, b.x, b.pool.y, b.pool.pooled, b.s,
                                              b.pool.kind, b.pool.shape, ws, stream);
        } else if (b.dx && cuda::conv2d_backward_weight_leaves_slices(b.s, b.x, b.w)) {
            const UnfinishedWeightGrad left = cuda::conv2d_backward_weight_unfinished(b.dw, b.db, b.dy, b.x, b.s, ws, stream);
            backward_data(b, left);
            return weight_done();
        } else {
            cuda::conv2d_backward_weight(b.dw, b.db, b.dy, b.x, b.s, ws, stream);
        }
        weight_done();
        if (b.dx) backward_data(b, {});
    }
    // Its input gradient, written, or (accumulate) staged and added.
    void backward_data(const ConvBackward& b, const UnfinishedWeightGrad& left) const {
        if (!b.accumulate) return cuda::conv2d_backward_data(b.dx, b.dy, b.w, b.s, b.scratch, stream, left);
        cuda::conv2d_backward_data(b.spare, b.dy, b.w, b.s, b.scratch, stream, left);
        cuda::sum_into(b.dx, b.spare, 1, b.s.in_size(), stream);
    }
    void pool2d_forward(float* y, const float* x, PoolKind kind, const PoolShape& s) const {
        cuda::pool2d_forward(y, x, kind, s, stream);
    }
    // relu_before: the pooling's input is a ReLU's output, whose mask it applies too.
    void backward_pool(float* dx, const float* dy, const float* x, const float* y, PoolKind kind, const PoolShape& s,
                       bool relu_before) const {
        if (relu_before) cuda::pool2d_backward_relu(dx, dy, x, y, kind, s, stream);
        else cuda::pool2d_backward(dx, dy, x, y, kind, s, stream);
    }
    static size_t dense_scratch_floats(int n, int in, int out, Math math) {
        return cuda::dense_scratch_floats(n, in, out, math);
    }
    void dense_forward(float* y, const float* x, const float* w, const float* b, int n, int in,
                       int out, float* scratch, Math math) const {
        cuda::dense_forward(y, x, w, b, n, in, out, workspace(scratch), stream, math);
    }
    // The input of the last layer where it runs with the loss, while a
    // training pass's forward runs (GpuDevice::forward_backward): the dense
    // layer that writes it may leave its finish to the loss (unfinished).
    const float* loss_input = nullptr;
    UnfinishedDense unfinished;
    void dense_forward_relu(float* y, const float* x, const float* w, const float* b, int n,
                            int in, int out, float* scratch, Math math) {
        if (y == loss_input) {
            unfinished = cuda::dense_forward_relu_for_loss(y, x, w, b, n, in, out, workspace(scratch), stream, math);
            return;
        }
        cuda::dense_forward_relu(y, x, w, b, n, in, out, workspace(scratch), stream, math);
    }
    void backward_dense(const DenseBackward& b) const {
        const Workspace ws = workspace(b.scratch);
        if (b.pool_before.grad_y)
            cuda::dense_backward_pool(b.pool_before.grad_y, b.dx, b.dw, b.db, b.dy, b.x, b.w, b.n, b.in, b.out,
                                      b.pool_before.y, b.pool_before.kind, b.pool_before.shape, ws, stream, math);
        else if (b.relu_before)
            cuda::dense_backward_relu(b.dx, b.dw, b.db, b.dy, b.x, b.w, b.n, b.in, b.out, ws, stream, math);
        else
            cuda::dense_backward(b.dx, b.dw, b.db, b.dy, b.x, b.w, b.n, b.in, b.out, ws, stream, math);
    }
    // Whether the last layer, a dense one of these shapes, runs with the
    // loss (dense_softmax_cross_entropy; model.hpp: LastDense).
    bool fuses_loss(int n, int in, int classes) const {
        return tickets && dense_loss_runs(n, in, classes, math);
    }
    void dense_softmax_cross_entropy(float* logits, float* dlogits, double* loss_sum, const int32_t* labels,
                                     float* dx, float* dw, float* db, const float* x, const float* w, const float* b,
                                     int n, int in, int classes, bool relu_before, float* scratch) {
        const UnfinishedDense before = unfinished.y == x ? std::exchange(unfinished, {}) : UnfinishedDense{};
        cuda::dense_softmax_cross_entropy(logits, dlogits, loss_sum, labels, dx, dw, db, x, w, b, n, in, classes,
                                          relu_before, workspace(scratch), stream, before, math);
    }
    void relu_forward(float* y, const float* x, size_t count) const { cuda::relu_forward(y, x, count, stream); }
    void relu_backward(float* dx, const float* dy, const float* y, size_t count) const {
        cuda::relu_backward(dx, dy, y, count, stream);
    }
    void sum_into(float* acc, const float* staged, int parts, size_t count) const {
        cuda::sum_into(acc, staged, parts, count, stream);
    }
    void add_relu(float* acc, const float* other, size_t count) const { cuda::add_relu(acc, other, count, stream); }
    // A residual add: the other input's gradient is dy too, written or
    // added; relu_y: the ReLU after the add, whose mask goes on dy first.
    void backward_add(float* dy, float* d_other, const float* relu_y, size_t count, bool accumulate) const {
        if (relu_y) cuda::add_relu_backward(dy, d_other, relu_y, count, accumulate, stream);
        else if (accumulate) cuda::sum_into(d_other, dy, 1, count, stream);
        else cuda::copy(d_other, dy, count, stream);
    }
    static size_t batch_norm_scratch_floats(const NormShape& s) { return cuda::batch_norm_scratch_floats(s); }
    void batch_norm_stats(float* stats, const float* x, const NormShape& s, float* scratch) const {
        cuda::batch_norm_stats(stats, x, s, workspace(scratch), stream);
    }
    void batch_norm_forward(float* y, float* saved, const float* x, const float* stats, double count,
                            const float* gamma, const float* beta, float eps, const NormShape& s, bool relu) const {
        cuda::batch_norm_forward(y, saved, x, stats, count, gamma, beta, eps, s, stream, relu);
    }
    void batch_norm_backward_sums(float* sums, float* dgamma, float* dbeta, const float* dy, const float* x,
                                  const float* saved, const NormShape& s, float* scratch) const {
        cuda::batch_norm_backward_sums(sums, dgamma, dbeta, dy, x, saved, s, workspace(scratch), stream);
    }
    void batch_norm_backward_sums_relu(float* sums, float* dgamma, float* dbeta, float* dy, const float* relu_y,
                                       const float* x, const float* saved, const NormShape& s, float* scratch) const {
        cuda::batch_norm_backward_sums_relu(sums, dgamma, dbeta, dy, relu_y, x, saved, s, workspace(scratch), stream);
    }
    void batch_norm_backward_data(float* dx, const float* dy, const float* x, const float* saved,
                                  const float* sums, double count, const float* gamma, const NormShape& s) const {
        cuda::batch_norm_backward_data(dx, dy, x, saved, sums, count, gamma, s, stream);
    }
    void batch_norm_inference(float* y, const float* x, const float* running, const float* gamma,
                              const float* beta, float eps, const NormShape& s, bool relu) const {
        cuda::batch_norm_inference(y, x, running, gamma, beta, eps, s, stream, relu);
    }
    void batch_norm_update_running_all(const RunningUpdate* layers, int count, float momentum) const {
        cuda::batch_norm_update_running_all(layers, count, momentum, stream);
    }
};

}  // namespace dpt::cuda
