// The CPU convolution on the shapes it runs as Winograd's F(2x2, 3x3)
// (kernels/cpu/winograd.cpp) against a direct convolution in double
// precision: forward, data gradient, weight and bias gradients. The finite
// differences of test_kernels.cpp check that the three agree with each other;
// this checks that they compute the convolution itself.
#include <catch2/catch.hpp>

#include <cmath>

#include "cpu/kernels.hpp"
#include "cpu/winograd.hpp"
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

}  // namespace

TEST_CASE("3x3 convolutions on even maps run as Winograd F(2x2,3x3) and equal the direct sums", "[conv]") {
    const ConvShape s = GENERATE(ConvShape{1, 1, 2, 2, 1, 3, 3, 1, 1},     // one tile
                                 ConvShape{2, 8, 12, 12, 8, 3, 3, 1, 1},   // ResNet-18's 12x12 blocks
                                 ConvShape{3, 16, 6, 6, 12, 3, 3, 1, 1},   // 6x6, more inputs than outputs
                                 ConvShape{2, 5, 4, 8, 9, 3, 3, 1, 1},     // non-square, fewer inputs
                                 ConvShape{40, 3, 12, 12, 5, 3, 3, 1, 1},  // 6 groups of 7 samples, the last short
                                 ConvShape{0, 4, 6, 6, 4, 3, 3, 1, 1});    // an empty part
    CAPTURE(s.n, s.c, s.h, s.w, s.oc);
    REQUIRE(cpu::winograd_fits(s));
    const int oh = s.oh(), ow = s.ow();
    const auto x = testing::random_vector(s.in_size(), 1), w = testing::random_vector(s.weight_size(), 2);
    const auto b = testing::random_vector(size_t(s.oc), 3), dy = testing::random_vector(s.out_size(), 4);
    const auto dw0 = testing::random_vector(s.weight_size(), 5), db0 = testing::random_vector(size_t(s.oc), 6);

    std::vector<double> y(s.out_size()), dx(s.in_size(), 0.0), dw(dw0.begin(), dw0.end()), db(db0.begin(), db0.end());
    for (int j = 0; j < s.n; ++j)
        for (int o = 0; o < s.oc; ++o)
            for (int oy = 0; oy < oh; ++oy)
                for (int ox = 0; ox < ow; ++ox) {
                    const size_t out = ((size_t(j) * s.oc + o) * oh + oy) * ow + ox;
                    double sum = b[size_t(o)];
                    db[size_t(o)] += dy[out];
                    for (int ch = 0; ch < s.c; ++ch)
                        for (int ki = 0; ki < 3; ++ki)
                            for (int kj = 0; kj < 3; ++kj) {
                                const int iy = oy - 1 + ki, ix = ox - 1 + kj;
                                const size_t tap = ((size_t(o) * s.c + ch) * 3 + ki) * 3 + kj;
                                sum += double(w[tap]) * at(x, s, j, ch, iy, ix);
                                dw[tap] += double(dy[out]) * at(x, s, j, ch, iy, ix);
                                if (iy >= 0 && iy < s.h && ix >= 0 && ix < s.w)
                                    dx[((size_t(j) * s.c + ch) * s.h + iy) * s.w + ix] += double(w[tap]) * dy[out];
                            }
                    y[out] = sum;
                }

    std::vector<float> scratch(cpu::conv2d_scratch_floats(s)), got_y(s.out_size(), NAN), got_dx(s.in_size(), NAN);
    std::vector<float> got_dw = dw0, got_db = db0;
    cpu::conv2d_forward(got_y.data(), x.data(), w.data(), b.data(), s, scratch.data());
    cpu::conv2d_backward_data(got_dx.data(), dy.data(), w.data(), s, scratch.data());
    cpu::conv2d_backward_weight(got_dw.data(), got_db.data(), dy.data(), x.data(), s, scratch.data());

    // Each output of the forward and the data gradient sums 9 * channels
    // products of numbers in [-1, 1]; the weight gradient sums n * h * w.
    // The transforms add at most 4 x 4 such values with factors 1 and 1/2,
    // so rounding grows like 2^-24 (6e-8) times (terms + 16) times their
    // size; 2e-7 per term bounds it (the largest measured is 2e-8 per term,
    // 1.6e-8 for the forward of 16 channels), while a wrong sign or tile
    // offset moves an output by O(0.1) to O(1).
    const double forward_terms = 9.0 * s.c + 16, data_terms = 9.0 * s.oc + 16, weight_terms = double(s.n) * s.h * s.w + 16;
    CHECK(largest_difference(y, got_y) <= 2e-7 * forward_terms);
    CHECK(largest_difference(dx, got_dx) <= 2e-7 * data_terms);
    CHECK(largest_difference(dw, got_dw) <= 2e-7 * weight_terms);
    CHECK(largest_difference(db, got_db) <= 2e-7 * weight_terms);
}

TEST_CASE("Winograd takes only the shapes whose output tiles into 2x2 blocks", "[conv]") {
    CHECK_FALSE(cpu::winograd_fits(ConvShape{2, 32, 3, 3, 32, 3, 3, 1, 1}));  // ResNet-18's 3x3 maps: odd
    CHECK_FALSE(cpu::winograd_fits(ConvShape{2, 3, 7, 6, 4, 3, 3, 1, 1}));    // odd height
    CHECK_FALSE(cpu::winograd_fits(ConvShape{2, 8, 12, 12, 16, 3, 3, 2, 1}));  // stride 2
    CHECK_FALSE(cpu::winograd_fits(ConvShape{2, 1, 28, 28, 20, 3, 3, 1, 0}));  // LeNet's conv1: no padding
    CHECK_FALSE(cpu::winograd_fits(ConvShape{1, 20, 13, 13, 50, 5, 5, 1, 0}));  // 5x5
}
