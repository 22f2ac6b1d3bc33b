// The weight gradient's split product (ResNet-18's convolutions) taking
// fewer, longer splits where that runs in fewer waves of blocks a split.
//
// Against the trainer's (conv2d_weight_grad_splits, from the shape alone:
// enough splits for about 512 blocks of 64 x 64 tiles, at least 128 of k
// each): a launch of s splits
// takes about ceil(blocks / wave) waves of blocks k / s long, so s goes to
// the count, at most the trainer's, with the least ceil(blocks / wave) / s
// (the tile, and with it the wave, chosen again for each count, as the
// GEMM chooses it), where that gains 5% or more. A wave: an H100's 132
// multiprocessors times the blocks of the product's tile that one holds at
// the least (1 of 128 rows, 2 of 64, 3 of 32). On an H200, ResNet-18's
// 64-channel weight gradients ran 280 blocks of 64 rows, 1.06 waves: the
// last 16 blocks alone in a second one. A function of the shape alone, so
// every GPU rounds alike; longer splits, summed in another order than the
// trainer's. (At f70e423 the forward's split products took the same
// count; here the weight gradient's alone.) The product's path otherwise
// the trainer's (conv2d_backward_weight/product.cuh).
//
// Measured: not yet timed on a GPU.
#include "conv2d_backward_weight/product.cuh"
#include "dev.hpp"

DEV_REPLACES(conv2d_backward_weight)

namespace {

using namespace dpt;
using namespace dpt::cuda;
using namespace dpt::cuda::conv;
using namespace dpt::cuda::dev::weight_product;

constexpr int wave_multiprocessors = 132;
struct Waves {
    long blocks, wave;
};
Waves waves_of(int m, int n, int splits) {
    using tiled::ceil_div;
    const int rows = tiled::tile_rows(m, [&](int r) { return long(ceil_div(m, r)) * ceil_div(n, 128) * splits; });
    return {long(ceil_div(m, rows)) * ceil_div(n, 128) * splits,
            long(wave_multiprocessors) * (rows == 128 ? 1 : rows == 64 ? 2 : 3)};
}
// `splits`, or fewer where that takes fewer waves a split of k.
int fit_waves(int m, int n, int splits) {
    if (splits <= 1 || m <= 0 || n <= 0) return splits;
    // Time, in waves a split of k: ceil(blocks / wave) / s, compared as the fraction waves / s.
    const auto waves = [&](int s) {
        const Waves w = waves_of(m, n, s);
        return (w.blocks + w.wave - 1) / w.wave;
    };
    const Waves at = waves_of(m, n, splits);
    const long tiles = at.blocks / splits, as_asked = (at.blocks + at.wave - 1) / at.wave;
    int best = splits;
    long best_waves = as_asked;
    // The candidates: the most splits that fit each count of whole waves.
    for (long j = 1; j < as_asked; ++j) {
        const int s = int(std::clamp<long>(j * at.wave / tiles, 1, splits));
        const long w = waves(s);
        if (w * best < best_waves * s) best = s, best_waves = w;  // w / s < best_waves / best
    }
    // Only for a gain of 5% or more by this count, which leaves out what it
    // cannot know from the shape (the blocks a multiprocessor that a kernel
    // really holds; the adding of the splits).
    return 20 * best_waves * splits <= 19 * as_asked * best ? best : splits;
}

}  // namespace

namespace DEV_NAMESPACE {

void conv2d_backward_weight(float* dw, float* db, const float* dy, const float* x, const ConvShape& s, Workspace ws,
                            cudaStream_t stream) {
    if (trainer_kernel_takes(s)) return TRAINER(conv2d_backward_weight)(dw, db, dy, x, s, ws, stream);
    const int splits = fit_waves(s.oc, s.col_rows(), conv2d_weight_grad_splits(s));
    product(dw, db, dy, x, s, ws, stream, splits, TrainerOperands{}, TrainerGemm{});
}

}  // namespace DEV_NAMESPACE

DEV_VERSION("waves/02_fit_waves",
            "the weight gradient's split product (ResNet-18's) takes fewer, longer splits where that runs in fewer "
            "waves of blocks a split of k (an H100's 132 multiprocessors times the tile's blocks each holds), at "
            "most the trainer's count; the splits summed in another order",
            "not yet timed", l.conv2d_backward_weight = &DEV_NAMESPACE::conv2d_backward_weight)
