// The input gradient's first pass (the unfolded gradient w^T . dy, for the
// stride-2 convolutions' gather: ResNet-18's downsampling blocks' first
// 3x3 and their 1x1 shortcuts) reading each thread's row of w^T as a run
// down w's column.
//
// Against the trainer's (kernels/cuda/conv_backward_data.cu: WeightColumns,
// each element's address worked out from its tap and channel): a thread's
// loads of w^T all fall in its row q of the tile (dev/cuda/gemm/core.cuh:
// a left operand's rows as runs), one filter tap's weights, one an output
// channel, `rows` floats apart: an add and a load. On 32- and 64-row tiles
// (on the 128-row one nvcc gave the runs 137 registers, 128 without: one
// block a multiprocessor where there were two). FP32; --tf32 hands the
// shape to the trainer. The same elements, the same sums, the same bits.
// The gather after it is the trainer's (conv2d_backward_data/columns.cuh).
//
// Measured: not yet timed on a GPU.
#include "conv2d_backward_data/columns.cuh"
#include "dev.hpp"

DEV_REPLACES(conv2d_backward_data)

namespace {

using namespace dpt;
using namespace dpt::cuda;
using namespace dpt::cuda::dev::columns;

struct WeightColumnsByRuns : WeightColumns {
    static constexpr int run_rows_most = 64;
    using Column = int;  // tap q of filter 0: an offset (32 bits, held in one register)
    __device__ Column column(int q) const { return q; }
    template <int N, int stride>
    __device__ void load_run(Column q, int o, int o_end, float* out) const {
        int at = o * rows + q;  // (a weight tensor has fewer than 2^31 values)
#pragma unroll
        for (int l = 0; l < N; ++l, at += stride * rows) out[l] = o + l * stride < o_end ? w[at] : 0.0f;
    }
};

}  // namespace

namespace DEV_NAMESPACE {

void conv2d_backward_data(float* dx, const float* dy, const float* w, const ConvShape& s, float* scratch,
                          cudaStream_t stream, const UnfinishedWeightGrad& weight) {
    if (s.stride == 1 || s.math != Math::fp32)
        return TRAINER(conv2d_backward_data)(dx, dy, w, s, scratch, stream, weight);
    if (weight.dw) conv::add_weight_slices(weight, stream);  // (before the columns reuse the scratch)
    input_grad_columns(scratch, dy, WeightColumnsByRuns{{w, s.col_rows()}}, s, stream, DevGemm{});
    gather<false>(dx, scratch, s, stream);
}

}  // namespace DEV_NAMESPACE

DEV_VERSION("conv2d_backward_data/11_weight_runs",
            "the stride-2 convolutions' unfolded input gradient (w^T . dy) reads each thread's row of w^T as a run "
            "down w's column, an add and a load, where the trainer's works out each element's address from its tap "
            "and channel (FP32, tiles of 32 and 64 rows): the same bits",
            "not yet timed", l.conv2d_backward_data = &DEV_NAMESPACE::conv2d_backward_data)
