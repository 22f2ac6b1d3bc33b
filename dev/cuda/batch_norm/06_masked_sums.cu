// The backward's sums of a batch norm layer with a ReLU after it, the ReLU's
// mask applied by the sums' kernel (backward_sums_masked).
//
// Against the trainer's (kernels/cuda/norm.cu: batch_norm_backward_sums_relu,
// relu_backward's kernel and then the sums'): the sums' kernel masks dy as
// it reads it, by the ReLU's output y, and stores the masked values back
// (relu_backward's, in place, for the data gradient's kernel): no kernel of
// its own for the mask, and dy read once. The same values, the same bits.
// Its threads hold a batch's dy, x, mask and index, which at 32 registers
// spilled to the stack: half the plain sums' blocks a multiprocessor (up to
// 64 registers a thread).
//
// Measured: not yet timed on a GPU. (Profiled once, before run_sums loaded
// a batch ahead of its stores, it ran 7 times as long as the plain sums.)
#include "cuda/norm.cuh"
#include "dev.hpp"

DEV_REPLACES(batch_norm_backward_sums_relu)

namespace {

using namespace dpt;
using namespace dpt::cuda;
using namespace dpt::cuda::norm;

__global__ void __launch_bounds__(launch::threads, full_blocks / 2) backward_sums_masked(
    float* sums, float* dgamma, float* dbeta, float* dy, const float* relu_y, const float* x, const float* saved,
    Channels g, Slices sl) {
    const int ch = int(blockIdx.x), slice = int(blockIdx.y);
    const float m = saved[ch], inv_std = saved[g.s.c + ch];
    const int values = g.s.n * g.s.hw, first = slice * sl.length;
    struct Loaded {
        float dy, x;
        bool masked;  // relu_y not above 0: dy is stored as 0 (relu_backward's value)
        int j;
    };
    TwoSums s = run_sums(
        first, min(values, first + sl.length),
        [&](int k) {
            const int j = g.value_index(ch, k);
            return Loaded{dy[j], x[j], !(relu_y[j] > 0.0f), j};
        },
        [&](const Loaded& v) {
            float d = v.dy;
            if (v.masked) dy[v.j] = d = 0.0f;
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

}  // namespace

namespace DEV_NAMESPACE {

void batch_norm_backward_sums_relu(float* sums, float* dgamma, float* dbeta, float* dy, const float* relu_y,
                                   const float* x, const float* saved, const NormShape& s, Workspace ws,
                                   cudaStream_t stream) {
    if (s.c == 0) return;
    const Channels g(s);  // (first: it refuses a layer too large to index)
    const Slices sl = slices_for(s, ws);
    launch::kernel("backward_sums_masked", backward_sums_masked, dim3(unsigned(s.c), unsigned(sl.count)),
                   launch::threads, stream, sums, dgamma, dbeta, dy, relu_y, x, saved, g, sl);
}

}  // namespace DEV_NAMESPACE

DEV_VERSION("batch_norm/06_masked_sums",
            "a batch norm's backward sums with the ReLU after the layer masked by the sums' kernel as it reads dy "
            "(and stores the masked dy back), where the trainer's runs relu_backward's kernel first: the same bits",
            "not yet timed", l.batch_norm_backward_sums_relu = &DEV_NAMESPACE::batch_norm_backward_sums_relu)
