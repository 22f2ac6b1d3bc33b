// --tf32: tf32/05's loss kernel (the last dense layer, the loss and its
// backward in one launch, operands rounded to TF32) that also sums the bias
// gradient of the dense layer before it (LeNet's dense1) from the dx it
// writes, as it sums the last layer's [dw | db]: each group of 32 samples'
// column sums in sample order, then the groups in order.
//
// Against the trainer's (--tf32 runs dense2 and the loss apart, and dense1's
// backward launches a kernel for its bias, dense_backward_bias, since its
// product rounds dy and the bias sums it as it is): no bias kernel for
// dense1. The bias's sums in another order than the trainer's.
//
// The model hands a layer's backward its own gradients alone, so training
// cannot run this: a fused launcher of its own (dev.hpp:
// DenseLossBiasBefore), which kernel_bench's dense_head run times against
// the trainer's loss and dense_backward_bias. To adopt it, the model would
// hand the loss dense1's bias gradient and skip that layer's bias kernel.
// In a candidate build it stands in as tf32/05 does.
//
// Measured: not yet timed on a GPU.
#include "dev.hpp"

DEV_REPLACES(dense_loss_runs)
DEV_REPLACES(dense_softmax_cross_entropy)

#include "tf32/loss_tf32.cuh"

namespace DEV_NAMESPACE {

bool dense_loss_runs(int n, int in, int classes, Math math) {
    return dev::loss::runs_or_trainer(n, in, classes, math);
}

void dense_softmax_cross_entropy(float* logits, float* dlogits, double* loss_sum, const int32_t* labels, float* dx,
                                 float* dw, float* db, const float* x, const float* w, const float* b, int n, int in,
                                 int classes, bool relu_before, Workspace ws, cudaStream_t stream,
                                 const UnfinishedDense& before, Math math) {
    dev::loss::loss_or_trainer(logits, dlogits, loss_sum, labels, dx, dw, db, x, w, b, n, in, classes, relu_before, ws,
                               stream, before, math);
}

// The loss with db_before += the column sums of dx; in FP32 the trainer's
// loss and then dense_backward_bias, as training runs them.
void dense_loss_bias_before(float* logits, float* dlogits, double* loss_sum, const int32_t* labels, float* dx,
                            float* dw, float* db, const float* x, const float* w, const float* b, int n, int in,
                            int classes, bool relu_before, Workspace ws, cudaStream_t stream,
                            const UnfinishedDense& before, Math math, float* db_before) {
    if (math == Math::tf32)
        return dev::loss::dense_loss_tf32(logits, dlogits, loss_sum, labels, dx, dw, db, x, w, b, n, in, classes,
                                          relu_before, ws, stream, before, db_before);
    TRAINER(dense_softmax_cross_entropy)(logits, dlogits, loss_sum, labels, dx, dw, db, x, w, b, n, in, classes,
                                         relu_before, ws, stream, before, math);
    dense_backward_bias(db_before, dx, n, in, stream);
}

}  // namespace DEV_NAMESPACE

DEV_VERSION("tf32/10_loss_bias_before",
            "--tf32: tf32/05's loss kernel, which also sums the bias gradient of the dense layer before it from the "
            "dx it writes (groups of 32 samples, then the groups), where the trainer's launches dense_backward_bias "
            "for it; a fused launcher of its own, which training cannot call (kernel_bench's dense_head)",
            "not yet timed", l.dense_loss_runs = &DEV_NAMESPACE::dense_loss_runs;
            l.dense_softmax_cross_entropy = &DEV_NAMESPACE::dense_softmax_cross_entropy;
            l.dense_loss_bias_before = &DEV_NAMESPACE::dense_loss_bias_before)
