// The CPU convolution on the shapes it runs as Winograd's F(m x m, 3x3)
// (kernels/cpu/winograd.cpp), as direct sums over one input channel
// (kernels/cpu/conv_direct.cpp) or with the batch in the vector lanes
// (kernels/cpu/conv_lanes.cpp) against a direct convolution in double
// precision: forward, data gradient, weight and bias gradients. The finite
// differences of test_kernels.cpp check that the three agree with each other;
// this checks that they compute the convolution itself.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "cpu/conv_direct.hpp"
#include "cpu/conv_lanes.hpp"
#include "cpu/kernels.hpp"
#include "cpu/winograd.hpp"
#include "cpu/winograd_lanes.hpp"
#include "testing.hpp"

using namespace dpt;

namespace {

// x (n, c, h, w) at (j, ch, iy, ix), 0 outside the image (padding).
double at(const std::vector<float>& x, const ConvShape& s, int j, int ch, int iy, int ix) {
    if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) return 0.0;
    return x[((size_t(j) * s.c + ch) * s.h + iy) * s.w + ix];
}

double largest_difference(const std::vector<double>& want, const std::vector<float>& got) {
    REQUIRE(want.size() == got.size());
    double worst = 0.0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(want[i] - double(got[i])));
    return worst;
}

// The layer's inputs, drawn from [-1, 1], and its results computed in
// double precision by the definition of a 3x3 convolution; the weight and
// bias gradients accumulate onto dw0 and db0.
struct Reference {
    std::vector<float> x, w, b, dy, dw0, db0;
    std::vector<double> y, dx, dw, db;

    explicit Reference(const ConvShape& s)
        : x(testing::random_vector(s.in_size(), 1)), w(testing::random_vector(s.weight_size(), 2)),
          b(testing::random_vector(size_t(s.oc), 3)), dy(testing::random_vector(s.out_size(), 4)),
          dw0(testing::random_vector(s.weight_size(), 5)), db0(testing::random_vector(size_t(s.oc), 6)),
          y(s.out_size()), dx(s.in_size(), 0.0), dw(dw0.begin(), dw0.end()), db(db0.begin(), db0.end()) {
        const int oh = s.oh(), ow = s.ow();
        for (int j = 0; j < s.n; ++j)
            for (int o = 0; o < s.oc; ++o)
                for (int oy = 0; oy < oh; ++oy)
                    for (int ox = 0; ox < ow; ++ox) {
                        const size_t out = ((size_t(j) * s.oc + o) * oh + oy) * ow + ox;
                        double sum = b[size_t(o)];
                        db[size_t(o)] += dy[out];
                        for (int ch = 0; ch < s.c; ++ch)
                            for (int ki = 0; ki < s.kh; ++ki)
                                for (int kj = 0; kj < s.kw; ++kj) {
                                    const int iy = oy * s.stride - s.pad + ki, ix = ox * s.stride - s.pad + kj;
                                    const size_t tap = ((size_t(o) * s.c + ch) * s.kh + ki) * s.kw + kj;
                                    sum += double(w[tap]) * at(x, s, j, ch, iy, ix);
                                    dw[tap] += double(dy[out]) * at(x, s, j, ch, iy, ix);
                                    if (iy >= 0 && iy < s.h && ix >= 0 && ix < s.w)
                                        dx[((size_t(j) * s.c + ch) * s.h + iy) * s.w + ix] += double(w[tap]) * dy[out];
                                }
                        y[out] = sum;
                    }
    }
};

}  // namespace

TEST_CASE("3x3 convolutions run as Winograd F(m x m, 3x3) with m = 2, 3, 4 and equal the direct sums", "[winograd][conv]") {
    const ConvShape s = GENERATE(ConvShape{1, 1, 2, 2, 1, 3, 3, 1, 1},      // one tile of 2x2
                                 ConvShape{1, 1, 3, 3, 1, 3, 3, 1, 1},      // one tile of 3x3
                                 ConvShape{1, 1, 4, 4, 1, 3, 3, 1, 1},      // one tile of 4x4 (or 4 of 2x2)
                                 ConvShape{2, 8, 12, 12, 8, 3, 3, 1, 1},    // ResNet-18's 12x12 blocks
                                 ConvShape{2, 32, 12, 12, 16, 3, 3, 1, 1},  // whole blocks of 16 channels
                                 ConvShape{3, 16, 6, 6, 12, 3, 3, 1, 1},    // 6x6, more inputs than outputs
                                 ConvShape{2, 32, 3, 3, 24, 3, 3, 1, 1},    // ResNet-18's 3x3 maps
                                 ConvShape{2, 5, 4, 8, 9, 3, 3, 1, 1},      // non-square, fewer inputs
                                 ConvShape{2, 5, 6, 9, 7, 3, 3, 1, 1},      // non-square, tiles of 3 only
                                 ConvShape{40, 3, 12, 12, 5, 3, 3, 1, 1},   // several groups, the last short
                                 ConvShape{300, 2, 3, 3, 3, 3, 3, 1, 1},    // 256 one-tile samples, then 44
                                 ConvShape{1, 260, 3, 3, 5, 3, 3, 1, 1},    // more channels than one GEMM block packs
                                 ConvShape{0, 4, 6, 6, 4, 3, 3, 1, 1});     // an empty part
    CAPTURE(s.n, s.c, s.h, s.w, s.oc);
    REQUIRE(cpu::winograd_fits(s));
    const Reference want(s);
    const auto &x = want.x, &w = want.w, &b = want.b, &dy = want.dy, &dw0 = want.dw0, &db0 = want.db0;
    const auto &y = want.y, &dx = want.dx, &dw = want.dw, &db = want.db;

    std::vector<float> scratch(cpu::conv2d_scratch_floats(s));
    int tiles_run = 0;
    for (const int tile : {2, 3, 4}) {
        if (!cpu::winograd_tile_fits(s, tile)) continue;
        CAPTURE(tile);
        ++tiles_run;
        std::vector<float> got_y(s.out_size(), NAN), got_dx(s.in_size(), NAN), got_dw = dw0, got_db = db0;
        cpu::winograd_forward(got_y.data(), x.data(), w.data(), b.data(), s, scratch.data(), tile);
        cpu::winograd_backward_data(got_dx.data(), dy.data(), w.data(), s, scratch.data(), tile);
        cpu::winograd_backward_weight(got_dw.data(), got_db.data(), dy.data(), x.data(), s, scratch.data(), tile);

        // Each output of the forward and the data gradient sums 9 * channels
        // products of numbers in [-1, 1]; the weight gradient sums n * h * w.
        // The transforms add at most 6 x 6 such values, so rounding grows
        // like 2^-24 (6e-8) times (terms + 36) times their size, times what
        // the transforms' entries amplify it by: for m = 2 (entries 1 and
        // 1/2) 2e-7 per term bounds it (the largest measured: 2.1e-8); for
        // m = 3 and 4, A^T's entries reach 4 and 8 and the largest measured
        // are 1.2e-7 and 1.5e-7 per term, bounded by 1e-6. A wrong sign,
        // coefficient or tile offset moves an output by O(0.01) to O(1).
        const double forward_terms = 9.0 * s.c + 36, data_terms = 9.0 * s.oc + 36;
        const double weight_terms = double(s.n) * s.h * s.w + 36;
        const double per_term = tile == 2 ? 2e-7 : 1e-6;
        CHECK(largest_difference(y, got_y) <= per_term * forward_terms);
        CHECK(largest_difference(dx, got_dx) <= per_term * data_terms);
        CHECK(largest_difference(dw, got_dw) <= per_term * weight_terms);
        CHECK(largest_difference(db, got_db) <= per_term * weight_terms);

        if (tile != cpu::winograd_tile(s)) continue;
        // conv2d_* take this tile: the same computation, the same bits.
        std::vector<float> conv_y(s.out_size(), NAN), conv_dx(s.in_size(), NAN), conv_dw = dw0, conv_db = db0;
        cpu::conv2d_forward(conv_y.data(), x.data(), w.data(), b.data(), s, scratch.data());
        cpu::conv2d_backward_data(conv_dx.data(), dy.data(), w.data(), s, scratch.data());
        cpu::conv2d_backward_weight(conv_dw.data(), conv_db.data(), dy.data(), x.data(), s, scratch.data());
        CHECK(conv_y == got_y);
        CHECK(conv_dx == got_dx);
        CHECK(conv_dw == got_dw);
        CHECK(conv_db == got_db);
    }
    CHECK(tiles_run >= 1);
}

TEST_CASE("Winograd takes the largest output tile that divides the map, and only 3x3 stride-1 padding-1 shapes",
          "[winograd][conv]") {
    // ResNet-18's three maps.
    CHECK(cpu::winograd_tile(ConvShape{2, 64, 12, 12, 64, 3, 3, 1, 1}) == 4);
    CHECK(cpu::winograd_tile(ConvShape{2, 128, 6, 6, 128, 3, 3, 1, 1}) == 3);
    CHECK(cpu::winograd_tile(ConvShape{2, 256, 3, 3, 256, 3, 3, 1, 1}) == 3);
    CHECK(cpu::winograd_tile(ConvShape{2, 4, 2, 10, 4, 3, 3, 1, 1}) == 2);
    CHECK_FALSE(cpu::winograd_tile_fits(ConvShape{2, 4, 4, 6, 4, 3, 3, 1, 1}, 4));  // 6 is not a multiple of 4
    CHECK_FALSE(cpu::winograd_tile_fits(ConvShape{2, 4, 6, 6, 4, 3, 3, 1, 1}, 5));  // no such tile
    CHECK_FALSE(cpu::winograd_fits(ConvShape{2, 3, 7, 5, 4, 3, 3, 1, 1}));     // 7 and 5: no tile divides both
    CHECK_FALSE(cpu::winograd_fits(ConvShape{2, 8, 12, 12, 16, 3, 3, 2, 1}));  // stride 2
    CHECK_FALSE(cpu::winograd_fits(ConvShape{2, 1, 28, 28, 20, 3, 3, 1, 0}));  // LeNet's conv1: no padding
    CHECK_FALSE(cpu::winograd_fits(ConvShape{1, 20, 13, 13, 50, 5, 5, 1, 0}));  // 5x5
    CHECK_FALSE(cpu::winograd_fits(ConvShape{2, 4, 0, 0, 4, 3, 3, 1, 1}));     // an empty map
}

TEST_CASE("3x3 convolutions of a one-channel image run as direct sums and equal the definition", "[winograd][conv]") {
    const ConvShape s = GENERATE(ConvShape{2, 1, 28, 28, 64, 3, 3, 1, 0},  // ResNet-18's first conv
                                 ConvShape{3, 1, 28, 28, 20, 3, 3, 1, 0},  // LeNet's conv1
                                 ConvShape{2, 1, 10, 10, 5, 3, 3, 1, 0},   // rows of exactly one vector
                                 ConvShape{2, 1, 11, 11, 5, 3, 3, 1, 0},   // 9 = 8 + 1: the last vector overlaps by 7
                                 ConvShape{2, 1, 19, 19, 3, 3, 3, 1, 0},   // 17 = 16 + 1; 289 pixels, not a multiple of 8
                                 ConvShape{2, 1, 12, 30, 9, 3, 3, 1, 0},   // non-square, output channels past a block of 8
                                 ConvShape{0, 1, 28, 28, 4, 3, 3, 1, 0});  // an empty part
    CAPTURE(s.n, s.h, s.w, s.oc);
    REQUIRE(cpu::direct_conv_fits(s));
    const Reference want(s);
    std::vector<float> scratch(cpu::conv2d_scratch_floats(s), NAN);
    std::vector<float> y(s.out_size(), NAN), dx(s.in_size(), NAN), dw = want.dw0, db = want.db0;
    cpu::conv2d_forward(y.data(), want.x.data(), want.w.data(), want.b.data(), s, scratch.data());
    cpu::conv2d_backward_data(dx.data(), want.dy.data(), want.w.data(), s, scratch.data());
    cpu::conv2d_backward_weight(dw.data(), db.data(), want.dy.data(), want.x.data(), s, scratch.data());
    // With its ReLU, applied as each output is stored: the bits of the
    // forward followed by relu_forward.
    std::vector<float> fused(s.out_size(), NAN), composed = y;
    cpu::relu_forward(composed.data(), composed.data(), composed.size());
    cpu::conv2d_forward_relu(fused.data(), want.x.data(), want.w.data(), want.b.data(), s, scratch.data());
    CHECK((fused.empty() || std::memcmp(fused.data(), composed.data(), fused.size() * sizeof(float)) == 0));
    // Float sums of 9 products (forward), of 9 * oc (data gradient) or
    // n * oh * ow (weights) of numbers in [-1, 1]: rounding of about 2^-24
    // (6e-8) times the terms, bounded by 2e-7 per term. A tap at the wrong
    // shift, a lane counted twice or dropped in a row's overlapping last
    // vector, or a missed pixel is off by O(0.1) to O(1).
    const double forward_terms = 9, data_terms = 9.0 * s.oc, weight_terms = double(s.n) * s.oh() * s.ow() + 1;
    CHECK(largest_difference(want.y, y) <= 2e-7 * forward_terms);
    CHECK(largest_difference(want.dx, dx) <= 2e-7 * data_terms);
    CHECK(largest_difference(want.dw, dw) <= 2e-7 * weight_terms);
    CHECK(largest_difference(want.db, db) <= 2e-7 * weight_terms);
}

// The same bits whether the pooling runs in the convolution's pass or after
// it: the convolution's sums, then pool.cpp's (conv2d_forward_relu_pool),
// and the weight sums over the dy that pool2d_backward_relu writes
// (conv2d_backward_weight_pool, which makes that dy where it reads it).
TEST_CASE("a one-channel 3x3 convolution with its ReLU and 2x2 average pooling in one pass equals the three calls",
          "[winograd][conv][pool]") {
    const ConvShape s = GENERATE(ConvShape{3, 1, 28, 28, 20, 3, 3, 1, 0},  // LeNet's conv1: 16 lanes and an overlap
                                 ConvShape{2, 1, 10, 10, 5, 3, 3, 1, 0},   // rows of exactly 8
                                 ConvShape{2, 1, 20, 12, 3, 3, 3, 1, 0},   // 10 = 8 + 2: the last vector overlaps by 6
                                 ConvShape{2, 1, 20, 36, 3, 3, 3, 1, 0},   // 34 = 2 x 16 + 2
                                 ConvShape{0, 1, 28, 28, 4, 3, 3, 1, 0});  // an empty part
    CAPTURE(s.n, s.h, s.w, s.oc);
    const PoolShape ps{s.n, s.oc, s.oh(), s.ow(), 2, 2};
    REQUIRE(cpu::direct_pool_fits(s, PoolKind::avg, ps));
    const Reference in(s);
    // Some outputs sit below 0, so the ReLU's mask matters.
    std::vector<float> scratch(cpu::conv2d_scratch_floats(s), NAN);
    std::vector<float> y(s.out_size(), NAN), pooled(ps.out_size(), NAN);
    cpu::conv2d_forward_relu(y.data(), in.x.data(), in.w.data(), in.b.data(), s, scratch.data());
    cpu::pool2d_forward(pooled.data(), y.data(), PoolKind::avg, ps);
    std::vector<float> fused_y(s.out_size(), NAN), fused_pooled(ps.out_size(), NAN);
    cpu::conv2d_forward_relu_pool(fused_y.data(), fused_pooled.data(), in.x.data(), in.w.data(), in.b.data(), s,
                                  PoolKind::avg, ps, scratch.data());
    CHECK(fused_y == y);
    CHECK(fused_pooled == pooled);

    const std::vector<float> d_pooled = testing::random_vector(ps.out_size(), 7);
    std::vector<float> dy(s.out_size(), NAN), dw = in.dw0, db = in.db0;
    cpu::pool2d_backward_relu(dy.data(), d_pooled.data(), y.data(), pooled.data(), PoolKind::avg, ps);
    cpu::conv2d_backward_weight(dw.data(), db.data(), dy.data(), in.x.data(), s, scratch.data());
    std::vector<float> unused_dy(s.out_size(), NAN), fused_dw = in.dw0, fused_db = in.db0;
    cpu::conv2d_backward_weight_pool(fused_dw.data(), fused_db.data(), unused_dy.data(), d_pooled.data(),
                                     in.x.data(), y.data(), pooled.data(), s, PoolKind::avg, ps, scratch.data());
    CHECK(fused_dw == dw);
    CHECK(fused_db == db);
}

TEST_CASE("the convolution pools in its own pass only for a 2x2 average pooling of stride 2 over even rows",
          "[winograd][conv][pool]") {
    const auto fits = [](const ConvShape& s, PoolKind kind = PoolKind::avg, int k = 2, int stride = 2) {
        return cpu::direct_pool_fits(s, kind, PoolShape{s.n, s.oc, s.oh(), s.ow(), k, stride});
    };
    CHECK(fits(ConvShape{2, 1, 28, 28, 20, 3, 3, 1, 0}));
    CHECK_FALSE(fits(ConvShape{2, 1, 28, 28, 20, 3, 3, 1, 0}, PoolKind::max));
    CHECK_FALSE(fits(ConvShape{2, 1, 28, 28, 20, 3, 3, 1, 0}, PoolKind::avg, 3, 2));
    CHECK_FALSE(fits(ConvShape{2, 1, 28, 28, 20, 3, 3, 1, 0}, PoolKind::avg, 2, 1));
    CHECK_FALSE(fits(ConvShape{2, 1, 27, 28, 20, 3, 3, 1, 0}));  // 25 output rows: the last one dropped
    CHECK_FALSE(fits(ConvShape{2, 1, 28, 29, 20, 3, 3, 1, 0}));  // 27 output columns
    CHECK_FALSE(fits(ConvShape{2, 2, 28, 28, 20, 3, 3, 1, 0}));  // not direct sums
}

TEST_CASE("direct sums take one-channel 3x3 convolutions of stride 1 without padding whose rows fill a vector",
          "[winograd][conv]") {
    CHECK(cpu::direct_conv_fits(ConvShape{2, 1, 28, 28, 64, 3, 3, 1, 0}));
    CHECK(cpu::direct_conv_fits(ConvShape{2, 1, 10, 10, 4, 3, 3, 1, 0}));   // rows of 8
    CHECK_FALSE(cpu::direct_conv_fits(ConvShape{2, 1, 9, 9, 4, 3, 3, 1, 0}));   // rows of 7
    CHECK_FALSE(cpu::direct_conv_fits(ConvShape{2, 2, 28, 28, 4, 3, 3, 1, 0})); // two channels
    CHECK_FALSE(cpu::direct_conv_fits(ConvShape{2, 1, 28, 28, 4, 3, 3, 2, 0})); // stride 2
    CHECK_FALSE(cpu::direct_conv_fits(ConvShape{2, 1, 28, 28, 4, 3, 3, 1, 1})); // padding
    CHECK_FALSE(cpu::direct_conv_fits(ConvShape{2, 1, 28, 28, 4, 5, 5, 1, 0})); // 5x5
}

TEST_CASE("5x5 convolutions with the batch in the vector lanes equal the definition", "[winograd][conv]") {
    const ConvShape s = GENERATE(ConvShape{32, 20, 13, 13, 50, 5, 5, 1, 0},  // LeNet's conv2, a CPU device's chunk
                                 ConvShape{1, 20, 13, 13, 50, 5, 5, 1, 0},   // one sample: the other lanes empty
                                 ConvShape{70, 3, 10, 13, 7, 5, 5, 1, 0},    // five groups of 16, the last short
                                 ConvShape{17, 5, 8, 9, 6, 5, 5, 1, 0},      // rows of 4 and 5 outputs: the edges alone
                                 ConvShape{2, 6, 6, 15, 9, 5, 5, 1, 0},      // 11 outputs a row, 2 rows
                                 ConvShape{0, 20, 13, 13, 50, 5, 5, 1, 0});  // an empty part
    CAPTURE(s.n, s.c, s.h, s.w, s.oc);
    // The lanes' kernels themselves, whichever passes this build's conv2d_* hand them.
    const Reference want(s);
    std::vector<float> scratch(cpu::lanes_conv_scratch_floats(s), NAN);
    std::vector<float> y(s.out_size(), NAN), dx(s.in_size(), NAN), dw = want.dw0, db = want.db0;
    cpu::lanes_conv_forward(y.data(), want.x.data(), want.w.data(), want.b.data(), s, scratch.data());
    cpu::lanes_conv_backward_data(dx.data(), want.dy.data(), want.w.data(), s, scratch.data());
    cpu::lanes_conv_backward_weight(dw.data(), db.data(), want.dy.data(), want.x.data(), s, scratch.data());
    std::vector<float> fused(s.out_size(), NAN), composed = y;
    cpu::relu_forward(composed.data(), composed.data(), composed.size());
    cpu::lanes_conv_forward(fused.data(), want.x.data(), want.w.data(), want.b.data(), s, scratch.data(), true);
    CHECK((fused.empty() || std::memcmp(fused.data(), composed.data(), fused.size() * sizeof(float)) == 0));
    // As above: float sums of 25 * c (forward), 25 * oc (data gradient) or
    // n * oh * ow (weights) products of numbers in [-1, 1]. A lane from the
    // wrong sample, a tap at the wrong shift or one kept at a row's edge
    // where it falls outside dy is off by O(0.1) to O(1).
    const double forward_terms = 25.0 * s.c + 1, data_terms = 25.0 * s.oc,
                 weight_terms = double(s.n) * s.oh() * s.ow() + 1;
    CHECK(largest_difference(want.y, y) <= 2e-7 * forward_terms);
    CHECK(largest_difference(want.dx, dx) <= 2e-7 * data_terms);
    CHECK(largest_difference(want.dw, dw) <= 2e-7 * weight_terms);
    CHECK(largest_difference(want.db, db) <= 2e-7 * weight_terms);
    // conv2d_* within the same bounds where they take the direct sums
    // (shapes in whole 3x3 tiles go to Winograd's F(3x3, 5x5), checked
    // below), whichever algorithm else.
    std::vector<float> scratch2(cpu::conv2d_scratch_floats(s), NAN), y2(s.out_size(), NAN), dx2(s.in_size(), NAN),
        dw2 = want.dw0, db2 = want.db0;
    cpu::conv2d_forward(y2.data(), want.x.data(), want.w.data(), want.b.data(), s, scratch2.data());
    cpu::conv2d_backward_data(dx2.data(), want.dy.data(), want.w.data(), s, scratch2.data());
    cpu::conv2d_backward_weight(dw2.data(), db2.data(), want.dy.data(), want.x.data(), s, scratch2.data());
    if (!cpu::winograd5_fits(s)) {
        CHECK(largest_difference(want.y, y2) <= 2e-7 * forward_terms);
        CHECK(largest_difference(want.dx, dx2) <= 2e-7 * data_terms);
        CHECK(largest_difference(want.dw, dw2) <= 2e-7 * weight_terms);
    }
}

TEST_CASE("5x5 convolutions in whole 3x3 tiles run as Winograd's F(3x3, 5x5) in the lanes and equal the definition",
          "[winograd][conv]") {
    const ConvShape s = GENERATE(ConvShape{32, 20, 13, 13, 50, 5, 5, 1, 0},  // LeNet's conv2, a CPU device's chunk
                                 ConvShape{1, 20, 13, 13, 50, 5, 5, 1, 0},   // one sample: the other lanes empty
                                 ConvShape{70, 3, 10, 13, 7, 5, 5, 1, 0},    // 6x9 outputs: 2 x 3 tiles; five groups
                                 ConvShape{17, 7, 7, 7, 3, 5, 5, 1, 0},      // one tile; channels past the tiles' 5
                                 ConvShape{2, 6, 16, 10, 11, 5, 5, 1, 0},    // 12x6 outputs: 4 x 2 tiles
                                 ConvShape{0, 20, 13, 13, 50, 5, 5, 1, 0});  // an empty part
    CAPTURE(s.n, s.c, s.h, s.w, s.oc);
    const bool fits = cpu::winograd5_fits(s);
    if (!fits) {
        WARN("this build has neither AVX2 nor AVX-512: the lanes take no shape");
        return;
    }
    const Reference want(s);
    std::vector<float> scratch(cpu::winograd5_scratch_floats(s), NAN), scratch2(cpu::conv2d_scratch_floats(s), NAN);
    std::vector<float> y(s.out_size(), NAN), dx(s.in_size(), NAN);
    cpu::winograd5_forward(y.data(), want.x.data(), want.w.data(), want.b.data(), s, scratch.data());
    cpu::winograd5_backward_data(dx.data(), want.dy.data(), want.w.data(), s, scratch.data());
    std::vector<float> dw = want.dw0, db = want.db0;
    cpu::winograd5_backward_weight(dw.data(), db.data(), want.dy.data(), want.x.data(), s, scratch.data());
    std::vector<float> fused(s.out_size(), NAN), composed = y;
    cpu::relu_forward(composed.data(), composed.data(), composed.size());
    cpu::winograd5_forward(fused.data(), want.x.data(), want.w.data(), want.b.data(), s, scratch.data(), true);
    CHECK((fused.empty() || std::memcmp(fused.data(), composed.data(), fused.size() * sizeof(float)) == 0));
    // With the 2x2 average pooling done in the lanes: pool2d_forward's bits
    // (conv2d_forward_relu_pool takes it), the last row and column dropped
    // where the outputs are odd.
    const PoolShape ps{s.n, s.oc, s.oh(), s.ow(), 2, 2};
    std::vector<float> want_pooled(ps.out_size(), NAN), pooled(ps.out_size(), NAN), y_too(s.out_size(), NAN);
    cpu::pool2d_forward(want_pooled.data(), composed.data(), PoolKind::avg, ps);
    cpu::conv2d_forward_relu_pool(y_too.data(), pooled.data(), want.x.data(), want.w.data(), want.b.data(), s,
                                  PoolKind::avg, ps, scratch2.data());
    CHECK(y_too == composed);
    CHECK(pooled == want_pooled);
    // Each output sums 25 * c (forward) or 25 * oc (data gradient) products
    // of numbers in [-1, 1]; the transforms add up to 7 x 7 such values with
    // coefficients up to 12 (B^T) and 4 (A^T), and G's fractions (1/18,
    // 32/45, ...) are rounded to float. The largest measured on these
    // shapes: 3.4e-7 per term (forward) and 1.5e-7 (data gradient);
    // bounded by 2e-6, as is the weight gradient. A wrong
    // coefficient, tile offset or overlapping patch is off by O(0.1) to O(1).
    const double forward_terms = 25.0 * s.c + 49, data_terms = 25.0 * s.oc + 49, per_term = 2e-6;
    CHECK(largest_difference(want.y, y) <= per_term * forward_terms);
    CHECK(largest_difference(want.dx, dx) <= per_term * data_terms);
    // The weight gradient sums n * oh * ow products a weight, and G^T dU G
    // adds 7 x 7 such sums with G's fractions (largest measured: 3.2e-7 per
    // term); the bias is the plain sum of dy.
    const double weight_terms = double(s.n) * s.oh() * s.ow() + 49;
    CHECK(largest_difference(want.dw, dw) <= per_term * weight_terms);
    CHECK(largest_difference(want.db, db) <= 2e-7 * weight_terms);
    // conv2d_forward, conv2d_backward_data and conv2d_backward_weight take it: the same bits.
    std::vector<float> y2(s.out_size(), NAN), dx2(s.in_size(), NAN), dw2 = want.dw0, db2 = want.db0;
    cpu::conv2d_forward(y2.data(), want.x.data(), want.w.data(), want.b.data(), s, scratch2.data());
    cpu::conv2d_backward_data(dx2.data(), want.dy.data(), want.w.data(), s, scratch2.data());
    cpu::conv2d_backward_weight(dw2.data(), db2.data(), want.dy.data(), want.x.data(), s, scratch2.data());
    CHECK(y2 == y);
    CHECK(dx2 == dx);
    CHECK(dw2 == dw);
    CHECK(db2 == db);
}

TEST_CASE("the lanes take 5x5 convolutions of stride 1 without padding, output rows of 4 pixels or more",
          "[winograd][conv]") {
    using cpu::ConvPass;
    // Which passes depends on the kernels' build (16 floats a vector: all
    // three; AVX2: the data gradient; else none), whose flags this file
    // does not share: the passes go together as documented.
    const ConvShape lenet{32, 20, 13, 13, 50, 5, 5, 1, 0};
    const bool forward = cpu::lanes_conv_fits(lenet, ConvPass::forward), data = cpu::lanes_conv_fits(lenet, ConvPass::data);
    INFO("this build's lanes take LeNet's conv2 forward " << forward << ", data gradient " << data);
    CHECK(cpu::lanes_conv_fits(lenet, ConvPass::weight) == forward);
    CHECK((data || !forward));
    CHECK(cpu::lanes_conv_fits(ConvShape{2, 3, 8, 8, 4, 5, 5, 1, 0}, ConvPass::data) == data);  // rows of 4
    for (ConvPass pass : {ConvPass::forward, ConvPass::data, ConvPass::weight}) {
        CHECK_FALSE(cpu::lanes_conv_fits(ConvShape{2, 3, 7, 7, 4, 5, 5, 1, 0}, pass));    // rows of 3
        CHECK_FALSE(cpu::lanes_conv_fits(ConvShape{2, 3, 13, 13, 4, 5, 5, 2, 0}, pass));  // stride 2
        CHECK_FALSE(cpu::lanes_conv_fits(ConvShape{2, 3, 13, 13, 4, 5, 5, 1, 2}, pass));  // padding
        CHECK_FALSE(cpu::lanes_conv_fits(ConvShape{2, 3, 13, 13, 4, 3, 3, 1, 0}, pass));  // 3x3
        CHECK_FALSE(cpu::lanes_conv_fits(ConvShape{2, 3, 13, 13, 4, 5, 3, 1, 0}, pass));  // 5x3
    }
}
