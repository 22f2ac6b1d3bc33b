// The statistics of a batch norm layer right after a convolution whose
// forward product is split along k (ResNet-18's 128- to 512-channel
// layers), summed by the kernel that adds the splits (finish_stats_kernel).
//
// Against the trainer's (kernels/cuda/conv_forward.cu: the split product,
// then finish_splits adds each value's splits in split order and the bias
// and stores y; norm.cu: stats_kernel reads y again for the channel's sums
// in slices): a block a slice of a channel, each value its splits added in
// split order and the bias, stored in y and summed as stats_kernel sums it.
// No finish_splits, and y read once instead of twice; the same y and the
// same sums, bit for bit.
//
// The model runs the convolution and the batch norm's statistics as two
// calls, so training cannot run this: a fused launcher of its own (dev.hpp:
// ConvForwardStats), which kernel_bench's conv2d_forward_stats run times
// against the trainer's two. To adopt it, the model would hand the
// convolution the statistics of the layer after it. Its scratch: the
// convolution's (conv2d_scratch_floats), then the statistics' slices
// (batch_norm_scratch_floats). The product's operands are the trainer's
// (conv.cuh).
//
// Measured: not yet timed on a GPU.
#include "cuda/conv.cuh"
#include "cuda/norm.cuh"
#include "cuda/tiles.cuh"
#include "dev.hpp"

namespace {

using namespace dpt;
using namespace dpt::cuda;
using namespace dpt::cuda::conv;
using namespace dpt::cuda::norm;

// The product's splits: partial (splits, oc, n * oh * ow) in split order.
struct UnfinishedConv {
    float* y;
    const float* partial;
    const float* b;
    int splits;
};

// stats_kernel's sums of y, each value finished where stats_kernel would
// load it: its splits added by finish_splits' own split_sum, then the bias,
// as finish_splits with the trainer's epilogue does (its column of the
// product is the value's place in the channel's run, sample by sample),
// stored in y and summed.
__global__ void finish_stats_kernel(float* stats, UnfinishedConv u, Channels g, Slices sl) {
    const int ch = int(blockIdx.x), slice = int(blockIdx.y);
    const int values = g.s.n * g.s.hw, first = slice * sl.length;
    const size_t size = size_t(values) * g.s.c;                // the product's, a split's
    const float* const row = u.partial + size_t(ch) * values;  // the channel's row of the product, split 0
    const float bias = u.b[ch];
    TwoSums s = run_sums(
        first, min(values, first + sl.length),
        [&](int k) {
            const float v = tiled::split_sum(row, u.splits, size, size_t(k)) + bias;
            u.y[g.value_index(ch, k)] = v;
            return v;
        },
        [](float x) {  // (norm.cu: ValueAndSquare)
            const double v = x;
            return TwoSums{v, v * v};
        });
    if (channel_sums(s, sl, ch, slice) && threadIdx.x == 0) {  // (norm.cu: store_stats)
        stats[ch] = float(s.first);
        stats[g.s.c + ch] = float(s.second);
    }
}

// Whether the trainer runs s's forward as a split product (not a direct or
// rows kernel; conservatively, any shape those might take is not).
bool split_product(const ConvShape& s) {
    const bool rows = s.stride == 1 && s.pad == 0 && ((s.kh == 5 && s.ow() == 9) || (s.kh == 3 && s.ow() == 7));
    return !conv2d_forward_gathers(s) && !rows && conv2d_forward_splits(s) > 1;
}

}  // namespace

namespace DEV_NAMESPACE {

void conv2d_forward_stats(float* y, float* stats, const float* x, const float* w, const float* b, const ConvShape& s,
                          const NormShape& ns, Workspace ws, cudaStream_t stream) {
    const size_t conv_scratch = conv2d_scratch_floats(s);
    if (!split_product(s) || ns.c != s.oc || ns.size() != s.out_size()) {  // the trainer's two calls
        conv2d_forward(y, x, w, b, s, ws.scratch, stream);
        return batch_norm_stats(stats, y, ns, {ws.scratch + conv_scratch, ws.tickets}, stream);
    }
    const int m = s.oc, n = s.n * s.col_cols(), k = s.col_rows(), splits = conv2d_forward_splits(s);
    with_unfold(x, Geometry(s), [&](auto unfold) {
        tiled::gemm(m, n, k, Weights{w, k}, unfold, tiled::StoreSplit{ws.scratch, size_t(m) * n, n}, stream, splits,
                    s.math);
    });
    const Channels g(ns);
    const Slices sl = slices_for(ns, {ws.scratch + conv_scratch, ws.tickets});
    launch::kernel("finish_stats_kernel", finish_stats_kernel, dim3(unsigned(ns.c), unsigned(sl.count)),
                   launch::threads, stream, stats, UnfinishedConv{y, ws.scratch, b, splits}, g, sl);
}

}  // namespace DEV_NAMESPACE

DEV_VERSION("batch_norm/08_finish_stats",
            "the statistics of a batch norm after a convolution whose forward product is split (ResNet-18's 128- to "
            "512-channel layers) summed by the kernel that adds the splits and the bias and stores y, where the "
            "trainer's runs finish_splits and then reads y again for the sums: the same bits; a fused launcher of "
            "its own, which training cannot call (kernel_bench's conv2d_forward_stats)",
            "not yet timed", l.conv2d_forward_stats = &DEV_NAMESPACE::conv2d_forward_stats)
