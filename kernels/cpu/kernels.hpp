// The CPU kernels: the readable reference for every layer of dptrain, and the
// compute of a CPU device. Each has a CUDA twin with the same arguments in
// kernels/cuda/ (plus a stream), and the GPU tests compare the two.
//
// Conventions (shared with the CUDA side):
//  - arguments in the order outputs, inputs, weights, sizes;
//  - tensors are NCHW float32, shapes in the comment beside each pointer;
//  - backward kernels *accumulate* (+=) into parameter gradients, so clearing
//    a replica's gradients is one memset of its flat gradient buffer;
//    gradients with respect to activations are overwritten;
//  - gradients are of the *sum* of the per-sample losses: the 1/B of the mean
//    is applied once, in the SGD update, with B the global batch.
//  - no kernel allocates: scratch space is passed in.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backward.hpp"
#include "shapes.hpp"

namespace dpt::cpu {

// C (m, n) = op(A) (m, k) . op(B) (k, n), or C += ... when accumulate is set.
// Row-major; op(A) = A^T when trans_a (A is then stored (k, m)), likewise B.
void gemm(float* c, const float* a, const float* b, int m, int n, int k,
          bool trans_a, bool trans_b, bool accumulate);

// Pixels of an image set gathered by index and scaled to [0, 1]: x (count, pixels),
// labels_out (count). images (N, pixels) as stored in the IDX file.
void gather_samples(float* x, int32_t* labels_out, const uint8_t* images,
                    const uint8_t* labels, const uint32_t* index, int count,
                    int pixels);

// The scratch floats the three conv2d kernels need for shape s (no more for
// a smaller s.n).
size_t conv2d_scratch_floats(const ConvShape& s);
// With s.math == Math::tf32 (and the dense kernels' `math`), the kernels
// below round each product's operands to TF32 into the end of their
// scratch, then compute in FP32 as usual: the twin of the tensor cores'
// arithmetic (shapes.hpp). Bias gradients sum the unrounded gradient.

// y (n, oc, oh, ow) = conv(x (n, c, h, w), w (oc, c, kh, kw)) + b (oc).
void conv2d_forward(float* y, const float* x, const float* w, const float* b,
                    const ConvShape& s, float* scratch);
// dx (n, c, h, w) = gradient wrt the input, overwritten.
void conv2d_backward_data(float* dx, const float* dy, const float* w,
                          const ConvShape& s, float* scratch);
// dw (oc, c, kh, kw) += ..., db (oc) += ...
void conv2d_backward_weight(float* dw, float* db, const float* dy, const float* x,
                            const ConvShape& s, float* scratch);
// The three above pick an algorithm by shape: Winograd's F(m x m, 3x3) for
// 3x3 convolutions of stride 1 and padding 1 on maps whose sides a tile of
// 2, 3 or 4 divides (winograd.hpp: the largest such tile), direct sums for
// a one-channel 3x3 (conv_direct.hpp), the batch in the vector lanes for
// 5x5 filters without padding (winograd_lanes.hpp, conv_lanes.hpp), an
// implicit GEMM otherwise. These run the implicit GEMM whatever the shape,
// for the benchmarks to set the algorithms side by side and for the GPU
// tests' plain twins; conv2d_scratch_floats covers them and every
// algorithm that fits.
void conv2d_forward_gemm(float* y, const float* x, const float* w, const float* b,
                         const ConvShape& s, float* scratch);
void conv2d_backward_data_gemm(float* dx, const float* dy, const float* w,
                               const ConvShape& s, float* scratch);
void conv2d_backward_weight_gemm(float* dw, float* db, const float* dy, const float* x,
                                 const ConvShape& s, float* scratch);

// y (n, c, oh, ow) = mean or max over each window of x (n, c, h, w).
void pool2d_forward(float* y, const float* x, PoolKind kind, const PoolShape& s);
// dx (n, c, h, w), overwritten. Max pooling sends each window's gradient to
// the first position holding the maximum (x and y identify it).
void pool2d_backward(float* dx, const float* dy, const float* x, const float* y,
                     PoolKind kind, const PoolShape& s);

// y (n, out) = x (n, in) . w^T + b, with w (out, in) and b (out). The
// scratch (dense_scratch_floats) holds the rounded operands with
// Math::tf32, and y^T where out > n (the same bits without it).
void dense_forward(float* y, const float* x, const float* w, const float* b,
                   int n, int in, int out, float* scratch = nullptr, Math math = Math::fp32);
// dw (out, in) += dy^T . x; db (out) += column sums of dy;
// dx (n, in) = dy . w, overwritten; skipped when dx is null (first layer).
// The two halves, weight then data, are also callable apart.
void dense_backward(float* dx, float* dw, float* db, const float* dy,
                    const float* x, const float* w, int n, int in, int out, float* scratch = nullptr,
                    Math math = Math::fp32);
void dense_backward_weight(float* dw, float* db, const float* dy, const float* x, int n, int in, int out,
                           float* scratch = nullptr, Math math = Math::fp32);
void dense_backward_data(float* dx, const float* dy, const float* w, int n, int in, int out,
                         float* scratch = nullptr, Math math = Math::fp32);
inline size_t dense_scratch_floats(int n, int in, int out, Math math = Math::fp32) {
    return (math == Math::tf32 ? size_t(n) * in + size_t(in) * out : 0) + size_t(n) * out;
}
// dst = src rounded to TF32 (to nearest, ties away from zero, as the GPU's
// cvt.rna.tf32.f32); NaN and infinity unchanged. dst may be src.
void round_to_tf32(float* dst, const float* src, size_t count);

// Batch normalisation in training, in two halves around what --bn sync
// sums across devices (per-channel sums, so that a part's statistics add up
// to the batch's; the CUDA twins have the same halves):
//   stats (2, c) = sum of x, sum of x^2, per channel, over this device's part;
//   forward: from stats summed over `count` values (this part's, or every
//     part's), saved (2, c) = mean, 1/sqrt(var + eps), with the biased
//     variance E[x^2] - mean^2, and y = gamma * (x - mean) / sqrt(var + eps) + beta;
//   backward_sums: sums (2, c) = sum of dy, sum of dy * xhat over this part,
//     with xhat = (x - mean) * inv_std; also dbeta += the first, dgamma +=
//     the second (this part's share of the parameter gradients);
//   backward_data: dx = gamma * inv_std * (dy - sum_dy / count - xhat *
//     sum_dy_xhat / count), overwritten, from sums over the same values as stats.
// gamma, beta, dgamma, dbeta (c).
void batch_norm_stats(float* stats, const float* x, const NormShape& s);
// relu: y = max(y, 0) too, for a ReLU that follows (the model's fusion).
void batch_norm_forward(float* y, float* saved, const float* x, const float* stats, double count, const float* gamma,
                        const float* beta, float eps, const NormShape& s, bool relu = false);
void batch_norm_backward_sums(float* sums, float* dgamma, float* dbeta, const float* dy, const float* x,
                              const float* saved, const NormShape& s);
// A ReLU after the layer, whose output is relu_y: dy masked by it first, in
// place (dy = relu_y > 0 ? dy : 0, relu_backward's), then the sums.
void batch_norm_backward_sums_relu(float* sums, float* dgamma, float* dbeta, float* dy, const float* relu_y,
                                   const float* x, const float* saved, const NormShape& s);
void batch_norm_backward_data(float* dx, const float* dy, const float* x, const float* saved, const float* sums,
                              double count, const float* gamma, const NormShape& s);
// Evaluation: y = gamma * (x - running mean) / sqrt(running var + eps) + beta,
// with running (2, c) = mean, var.
void batch_norm_inference(float* y, const float* x, const float* running, const float* gamma, const float* beta,
                          float eps, const NormShape& s, bool relu = false);
// running (2, c) = momentum * running + (1 - momentum) * (the batch's mean,
// biased var), from stats summed over `count` values (gluon's rule and
// defaults: momentum 0.9, eps 1e-5).
void batch_norm_update_running(float* running, const float* stats, double count, float momentum, int c);

// y = max(x, 0); y may alias x.
void relu_forward(float* y, const float* x, size_t count);
// dx = dy where y > 0, else 0; dx may alias dy. y is the forward output.
void relu_backward(float* dx, const float* dy, const float* y, size_t count);

// For each row of logits (n, classes): loss = logsumexp(row) - row[label],
// computed stably (max subtracted). Returns the sum of the n losses;
// dlogits (n, classes) = softmax(row) - onehot(label), the gradient of that sum.
double softmax_cross_entropy(float* dlogits, const float* logits,
                             const int32_t* labels, int n, int classes);
// Number of rows whose largest logit is at the label (first maximum wins).
int64_t count_correct(const float* logits, const int32_t* labels, int n, int classes);

// params -= scale * grads, element-wise. dptrain passes scale = lr / B.
void sgd_update(float* params, const float* grads, float scale, size_t count);

// acc += parts[0] + parts[1] + ... element-wise, parts added in order;
// parts[i] starts at staged + i * count. The sum step of the allreduce.
void sum_into(float* acc, const float* staged, int parts, size_t count);

// dst = src, count floats (a gradient that two layers' inputs share).
void copy(float* dst, const float* src, size_t count);

// A residual add with the ReLU after it (the model's fusion): acc =
// relu_forward's value of acc + other. Its backward: dy = y > 0 ? dy : 0 in
// place (relu_backward's, y the add's output), and the other input's
// gradient d_other = dy, or with accumulate d_other += dy.
void add_relu(float* acc, const float* other, size_t count);
void add_relu_backward(float* dy, float* d_other, const float* y, size_t count, bool accumulate);

// Divergence watch: when x holds a NaN or an infinity and step < *first_bad,
// *first_bad = step. The trainer runs it on the summed gradients of every
// step and reads *first_bad once an epoch, so the check costs no host wait.
void note_nonfinite(int32_t* first_bad, const float* x, size_t count, int32_t step);

// Fused forms, as the CUDA backend runs them (bias+ReLU in one pass, pooling
// backward with ReLU's mask). On the CPU they give the plain composition's
// bits, the reference the CUDA fusions are tested against: most are that
// composition; conv2d_forward_relu applies the ReLU as it stores where the
// convolution runs as direct sums (conv.cpp), and pool2d_backward_relu masks
// each plane as it finishes it (pool.cpp).
void conv2d_forward_relu(float* y, const float* x, const float* w, const float* b, const ConvShape& s,
                         float* scratch);
// conv2d_forward_relu, then pool2d_forward of its output y (ps: the pooling's
// shape): in one pass for a one-channel 3x3 layer and a 2x2 average pooling
// (conv_direct.cpp), else the two calls.
void conv2d_forward_relu_pool(float* y, float* pooled, const float* x, const float* w, const float* b,
                              const ConvShape& s, PoolKind kind, const PoolShape& ps, float* scratch);
inline void dense_forward_relu(float* y, const float* x, const float* w, const float* b,
                               int n, int in, int out, float* scratch = nullptr, Math math = Math::fp32) {
    dense_forward(y, x, w, b, n, in, out, scratch, math);
    relu_forward(y, y, size_t(n) * out);
}
// x is the output of the ReLU before the dense layer: dx = 0 where x <= 0.
inline void dense_backward_relu(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                                int n, int in, int out, float* scratch = nullptr, Math math = Math::fp32) {
    dense_backward(dx, dw, db, dy, x, w, n, in, out, scratch, math);
    relu_backward(dx, dx, x, size_t(n) * in);
}
// x is the ReLU output that was pooled: dx = 0 where x <= 0 (the mask put
// on each plane as it is done: relu_backward's bits, one pass fewer).
void pool2d_backward_relu(float* dx, const float* dy, const float* x, const float* y, PoolKind kind,
                          const PoolShape& s);
// dense_backward into dx, then pool2d_backward_relu of dx into grad_y: the
// backward of a dense layer whose input x is the flattened pooling (shape
// ps) of a ReLU's output y.
inline void dense_backward_pool(float* grad_y, float* dx, float* dw, float* db, const float* dy, const float* x,
                                const float* w, int n, int in, int out, const float* y, PoolKind kind,
                                const PoolShape& ps, float* scratch = nullptr, Math math = Math::fp32) {
    dense_backward(dx, dw, db, dy, x, w, n, in, out, scratch, math);
    pool2d_backward_relu(grad_y, dx, y, x, kind, ps);
}
// pool2d_backward_relu into dy, then conv2d_backward_weight: the weight
// gradient of a pooled convolution from the pooling's output gradient. dy
// is scratch: where conv2d_forward_relu_pool runs in one pass, the weight
// sums make each vector of dy as they read it and leave the buffer alone.
void conv2d_backward_weight_pool(float* dw, float* db, float* dy, const float* d_pooled, const float* x,
                                 const float* y, const float* pooled, const ConvShape& s, PoolKind kind,
                                 const PoolShape& ps, float* scratch);

// The layer kernels as one set, for the model code written once over any
// backend (src/model/model.hpp: Model::forward / Model::backward). The CUDA set
// (kernels/cuda/kernels.hpp) has the same members, bound to a stream.
struct KernelSet {
    Math math = Math::fp32;  // the conv and dense products' arithmetic (--tf32)
    // The last layer and the loss stay two calls here (model.hpp: LastDense).
    static constexpr bool fuses_loss(int, int, int) { return false; }
    static constexpr auto conv2d_scratch_floats = &cpu::conv2d_scratch_floats;
    static constexpr auto conv2d_forward = &cpu::conv2d_forward;
    static constexpr auto conv2d_forward_relu = &cpu::conv2d_forward_relu;
    static constexpr auto conv2d_forward_relu_pool = &cpu::conv2d_forward_relu_pool;
    static constexpr auto pool2d_forward = &cpu::pool2d_forward;
    static constexpr auto dense_scratch_floats = &cpu::dense_scratch_floats;
    static constexpr auto dense_forward = &cpu::dense_forward;
    static constexpr auto dense_forward_relu = &cpu::dense_forward_relu;
    static constexpr auto relu_forward = &cpu::relu_forward;
    static constexpr auto relu_backward = &cpu::relu_backward;
    static constexpr auto sum_into = &cpu::sum_into;
    static constexpr auto add_relu = &cpu::add_relu;
    // A layer's backward, one call each (kernels/backward.hpp): here the
    // plain calls, one after the other. weight_done() runs once the weight
    // and bias gradients are final.
    template <class Done>
    static void backward_conv(const ConvBackward& b, Done&& weight_done) {
        if (b.pool.d_pooled)
            cpu::conv2d_backward_weight_pool(b.dw, b.db, b.dy, b.pool.d_pooled, b.x, b.pool.y, b.pool.pooled, b.s,
                                             b.pool.kind, b.pool.shape, b.scratch);
        else
            cpu::conv2d_backward_weight(b.dw, b.db, b.dy, b.x, b.s, b.scratch);
        weight_done();
        if (!b.dx) return;
        if (!b.accumulate) return cpu::conv2d_backward_data(b.dx, b.dy, b.w, b.s, b.scratch);
        cpu::conv2d_backward_data(b.spare, b.dy, b.w, b.s, b.scratch);
        cpu::sum_into(b.dx, b.spare, 1, b.s.in_size());
    }
    // (dense_backward_pool, dense_backward_relu or dense_backward, as two
    // halves: weight_done() runs between them.)
    template <class Done = void (*)()>
    void backward_dense(const DenseBackward& b, Done&& weight_done = [] {}) const {
        cpu::dense_backward_weight(b.dw, b.db, b.dy, b.x, b.n, b.in, b.out, b.scratch, math);
        weight_done();
        cpu::dense_backward_data(b.dx, b.dy, b.w, b.n, b.in, b.out, b.scratch, math);
        if (b.pool_before.grad_y)
            cpu::pool2d_backward_relu(b.pool_before.grad_y, b.dx, b.pool_before.y, b.x, b.pool_before.kind,
                                      b.pool_before.shape);
        else if (b.relu_before)
            cpu::relu_backward(b.dx, b.dx, b.x, size_t(b.n) * b.in);
    }
    // relu_before: the pooling's input is a ReLU's output, whose mask it applies too.
    static void backward_pool(float* dx, const float* dy, const float* x, const float* y, PoolKind kind,
                              const PoolShape& s, bool relu_before) {
        if (relu_before) cpu::pool2d_backward_relu(dx, dy, x, y, kind, s);
        else cpu::pool2d_backward(dx, dy, x, y, kind, s);
    }
    // A residual add: the other input's gradient is dy too, written or
    // added; relu_y: the ReLU after the add, whose mask goes on dy first.
    static void backward_add(float* dy, float* d_other, const float* relu_y, size_t count, bool accumulate) {
        if (relu_y) cpu::add_relu_backward(dy, d_other, relu_y, count, accumulate);
        else if (accumulate) cpu::sum_into(d_other, dy, 1, count);
        else cpu::copy(d_other, dy, count);
    }
    // The sums need no scratch here (the GPU's may: kernels/cuda/norm.cu).
    static constexpr size_t batch_norm_scratch_floats(const NormShape&) { return 0; }
    static void batch_norm_stats(float* stats, const float* x, const NormShape& s, float*) {
        cpu::batch_norm_stats(stats, x, s);
    }
    static constexpr auto batch_norm_forward = &cpu::batch_norm_forward;
    static void batch_norm_backward_sums(float* sums, float* dgamma, float* dbeta, const float* dy, const float* x,
                                         const float* saved, const NormShape& s, float*) {
        cpu::batch_norm_backward_sums(sums, dgamma, dbeta, dy, x, saved, s);
    }
    static void batch_norm_backward_sums_relu(float* sums, float* dgamma, float* dbeta, float* dy,
                                              const float* relu_y, const float* x, const float* saved,
                                              const NormShape& s, float*) {
        cpu::batch_norm_backward_sums_relu(sums, dgamma, dbeta, dy, relu_y, x, saved, s);
    }
    static constexpr auto batch_norm_backward_data = &cpu::batch_norm_backward_data;
    static constexpr auto batch_norm_inference = &cpu::batch_norm_inference;
    static void batch_norm_update_running_all(const RunningUpdate* layers, int count, float momentum) {
        for (int l = 0; l < count; ++l)
            cpu::batch_norm_update_running(layers[l].running, layers[l].stats, layers[l].count, momentum, layers[l].c);
    }
};

}  // namespace dpt::cpu
