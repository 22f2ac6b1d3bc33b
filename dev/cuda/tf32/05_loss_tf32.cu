// --tf32: the last dense layer, the softmax cross-entropy loss and the
// layer's backward in one launch under --tf32 too (dense_loss_wide_tf32):
// the trainer's loss kernel (kernels/cuda/dense.cu: dense_loss_wide, which
// takes FP32 alone), each product's operands rounded to TF32 as it reads
// them, the bias's gradient summed from dlogits as they are, on the FP32
// units (a product of two TF32 numbers is exact in FP32).
//
// Against the trainer's (--tf32 runs LeNet's dense2 and the loss apart:
// the forward's product on the GEMM core's TF32 tiles, the loss kernel, then
// the backward's two products and a bias kernel, 4 to 6 launches): one
// launch, a block a sample. The TF32 twin's sums within FP32's rounding,
// not the trainer's bits (its tensor cores add in their own order).
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

}  // namespace DEV_NAMESPACE

DEV_VERSION("tf32/05_loss_tf32",
            "--tf32: the last dense layer, the loss and the layer's backward in one launch under --tf32 too (the "
            "trainer's loss kernel, each product's operands rounded to TF32 as it reads them, on the FP32 units), "
            "where the trainer's runs the layer's products on the GEMM core's TF32 tiles and the loss apart",
            "not yet timed", l.dense_loss_runs = &DEV_NAMESPACE::dense_loss_runs;
            l.dense_softmax_cross_entropy = &DEV_NAMESPACE::dense_softmax_cross_entropy)
