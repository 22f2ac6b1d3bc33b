// The blocked GEMM against a plain triple loop in double precision.
#include <catch2/catch.hpp>

#include "cpu/kernels.hpp"
#include "testing.hpp"

using namespace dpt;

TEST_CASE("gemm matches a double-precision triple loop for every transposition and edge size", "[gemm]") {
    // Sizes: 1, odd, and past each blocking boundary (tiles of 1 to 12 rows
    // by tile_rows, NR=16 or 32, KC=256, MC=144).
    const int m = GENERATE(1, 5, 6, 7, 13, 50, 64, 145);
    const int n = GENERATE(1, 15, 16, 17, 33, 81);
    const int k = GENERATE(1, 9, 257);
    const bool ta = GENERATE(false, true), tb = GENERATE(false, true), accumulate = GENERATE(false, true);
    CAPTURE(m, n, k, ta, tb, accumulate);

    const auto a = testing::random_vector(size_t(m) * k, 1), b = testing::random_vector(size_t(k) * n, 2);
    const auto c0 = testing::random_vector(size_t(m) * n, 3);
    std::vector<float> c = c0;
    cpu::gemm(c.data(), a.data(), b.data(), m, n, k, ta, tb, accumulate);

    double worst = 0.0;
    for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
            double ref = accumulate ? c0[size_t(i) * n + j] : 0.0;
            for (int p = 0; p < k; ++p)
                ref += double(ta ? a[size_t(p) * m + i] : a[size_t(i) * k + p]) *
                       double(tb ? b[size_t(j) * k + p] : b[size_t(p) * n + j]);
            worst = std::max(worst, std::abs(ref - c[size_t(i) * n + j]));
        }
    // Each output sums k products of numbers in [-1, 1] in float: rounding
    // error grows at most like k * 2^-24 * (sum of |terms|) <= k * 6e-8 * k;
    // a looser 1e-6 * k bounds it for these sizes while any indexing slip
    // (an error of order 1) fails.
    CHECK(worst <= 1e-6 * (k + 1));
}

TEST_CASE("gemm with k = 0 leaves or clears C as asked", "[gemm]") {
    std::vector<float> c = {1, 2, 3, 4};
    cpu::gemm(c.data(), nullptr, nullptr, 2, 2, 0, false, false, true);
    CHECK(c == std::vector<float>{1, 2, 3, 4});
    cpu::gemm(c.data(), nullptr, nullptr, 2, 2, 0, false, false, false);
    CHECK(c == std::vector<float>{0, 0, 0, 0});
}
