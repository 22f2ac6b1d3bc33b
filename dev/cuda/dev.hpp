// What a version in dev/cuda/ is to the two builds that compile it
// (dev/cuda/README.md says how to write one, run it and adopt it).
//
// - In the dev build (every version, beside the trainer's kernels) a
//   version's launchers live in a namespace of its own, DEV_NAMESPACE
//   (dpt::cuda::dev::<launcher>_<number>), and it registers itself
//   (DEV_VERSION): bench/kernel_bench checks it against the CPU twin and
//   times it against the trainer's launcher it stands beside.
// - In a candidate build (meson setup -Ddev_candidate=<launcher>/<file>) its
//   launchers take the trainer's names in dpt::cuda, and the trainer's own
//   are renamed trainer_<name> by the build: dptrain-candidate then trains
//   with the version in their place. The trainer's sources carry no switch.
//
// Either way TRAINER(name) is the trainer's launcher, for the shapes a
// version leaves to it.
#pragma once
#include <vector>

#include "cuda/kernels.hpp"

#ifdef DPTRAIN_CANDIDATE
#define DEV_NAMESPACE dpt::cuda
#define TRAINER(name) ::dpt::cuda::trainer_##name
// The trainer's launcher `name`, renamed by the candidate build.
#define DEV_REPLACES(name)                      \
    namespace dpt::cuda {                       \
    decltype(name) trainer_##name;              \
    }
#define DEV_VERSION(...)
#else
#define DEV_NAMESPACE dpt::cuda::dev::DEV_ID
#define TRAINER(name) ::dpt::cuda::name
#define DEV_REPLACES(name)
// Registers this file's version: its id (<launcher>/<file> without .cu),
// what it changes, what it measured (or "not yet timed"), and the
// launchers it puts in place of the trainer's (a statement on `l`, a
// Launchers&).
#define DEV_VERSION(id, what, measured, ...)                                                         \
    namespace {                                                                                     \
    const dpt::cuda::dev::Registered registered{{id, what, measured, [](dpt::cuda::dev::Launchers& l) { \
                                                     __VA_ARGS__;                                     \
                                                 }}};                                                 \
    }
#endif

namespace dpt::cuda::dev {

// dense_softmax_cross_entropy that also sums the bias gradient of the
// layer before (db_before += the column sums of dx): a launcher the
// trainer has none of (tf32/10).
using DenseLossBiasBefore = void (*)(float* logits, float* dlogits, double* loss_sum, const int32_t* labels, float* dx,
                                     float* dw, float* db, const float* x, const float* w, const float* b, int n,
                                     int in, int classes, bool relu_before, Workspace ws, cudaStream_t stream,
                                     const UnfinishedDense& before, Math math, float* db_before);

// dx += the input gradient of a convolution, where the trainer writes it
// into `spare` and adds that (conv2d_backward_data/10).
using ConvBackwardDataAdd = void (*)(float* dx, float* spare, const float* dy, const float* w, const ConvShape& s,
                                     float* scratch, cudaStream_t stream);

// A convolution's forward (no ReLU) and the statistics of the batch norm
// after it, where the trainer runs conv2d_forward, then batch_norm_stats
// (batch_norm/08). Its scratch: conv2d_scratch_floats(s), then
// batch_norm_scratch_floats(ns).
using ConvForwardStats = void (*)(float* y, float* stats, const float* x, const float* w, const float* b,
                                  const ConvShape& s, const NormShape& ns, Workspace ws, cudaStream_t stream);

// The launchers a version may stand in for, as kernel_bench calls them:
// the trainer's, unless a version's install puts its own in their place;
// and fused launchers the trainer has none of (null), which a version may
// add: kernel_bench then times it against the trainer's calls it fuses.
struct Launchers {
    decltype(&cuda::gemm) gemm = &cuda::gemm;
    decltype(&cuda::conv2d_forward_relu) conv2d_forward_relu = &cuda::conv2d_forward_relu;
    decltype(&cuda::conv2d_forward_relu_pool) conv2d_forward_relu_pool = &cuda::conv2d_forward_relu_pool;
    decltype(&cuda::conv2d_backward_data) conv2d_backward_data = &cuda::conv2d_backward_data;
    decltype(&cuda::conv2d_backward_weight) conv2d_backward_weight = &cuda::conv2d_backward_weight;
    decltype(&cuda::conv2d_backward_weight_unfinished) conv2d_backward_weight_unfinished =
        &cuda::conv2d_backward_weight_unfinished;
    decltype(&cuda::dense_forward_relu) dense_forward_relu = &cuda::dense_forward_relu;
    decltype(&cuda::dense_backward) dense_backward = &cuda::dense_backward;
    decltype(&cuda::dense_backward_pool) dense_backward_pool = &cuda::dense_backward_pool;
    decltype(&cuda::dense_loss_runs) dense_loss_runs = &cuda::dense_loss_runs;
    decltype(&cuda::dense_softmax_cross_entropy) dense_softmax_cross_entropy = &cuda::dense_softmax_cross_entropy;
    decltype(&cuda::batch_norm_stats) batch_norm_stats = &cuda::batch_norm_stats;
    decltype(&cuda::batch_norm_backward_sums) batch_norm_backward_sums = &cuda::batch_norm_backward_sums;
    decltype(&cuda::batch_norm_backward_sums_relu) batch_norm_backward_sums_relu = &cuda::batch_norm_backward_sums_relu;
    decltype(&cuda::batch_norm_backward_data) batch_norm_backward_data = &cuda::batch_norm_backward_data;
    decltype(&cuda::batch_norm_inference) batch_norm_inference = &cuda::batch_norm_inference;
    decltype(&cuda::add_relu) add_relu = &cuda::add_relu;
    decltype(&cuda::add_relu_backward) add_relu_backward = &cuda::add_relu_backward;
    decltype(&cuda::pool2d_backward) pool2d_backward = &cuda::pool2d_backward;
    DenseLossBiasBefore dense_loss_bias_before = nullptr;  // the trainer's: the loss, then dense_backward_bias
    ConvBackwardDataAdd conv2d_backward_data_add = nullptr;  // the trainer's: conv2d_backward_data, then sum_into
    ConvForwardStats conv2d_forward_stats = nullptr;          // the trainer's: conv2d_forward, then batch_norm_stats
};

struct Version {
    const char* id;        // <launcher>/<NN_name>: its file under dev/cuda/, without .cu
    const char* what;      // what it changes against the trainer's kernel
    const char* measured;  // what it measured, on which GPU and when; or "not yet timed"
    void (*install)(Launchers&);  // puts its launchers in place of the trainer's
};

// Every version in this build, in the order they registered.
std::vector<Version>& versions();
struct Registered {
    explicit Registered(const Version& v) { versions().push_back(v); }
};

}  // namespace dpt::cuda::dev
