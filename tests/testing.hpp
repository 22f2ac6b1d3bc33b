// Helpers shared by the tests: seeded random tensors and a finite-difference
// gradient of a scalar function.
#pragma once
#include <cmath>
#include <functional>
#include <vector>

#include "base/rng.hpp"

namespace dpt::testing {

inline std::vector<float> random_vector(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
    Rng rng(seed, 99);
    std::vector<float> v(n);
    for (float& x : v) x = lo + (hi - lo) * float(rng.uniform());
    return v;
}

// Values at least `gap` away from 0 and from each other's neighbourhood, so a
// perturbation smaller than gap/2 changes no ReLU mask and no max-pool winner:
// a random sign times a random permutation of gap, 2*gap, 3*gap, ...
inline std::vector<float> spaced_values(size_t n, uint64_t seed, float gap) {
    Rng rng(seed, 7);
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = gap * float(i + 1);
    rng.shuffle(std::span<float>(v));
    for (float& x : v)
        if (rng.uniform() < 0.5) x = -x;
    return v;
}

// Central difference (f(x + h e_i) - f(x - h e_i)) / 2h for each i in `indices`.
inline std::vector<double> finite_difference(const std::function<double()>& f, std::vector<float>& x,
                                             const std::vector<size_t>& indices, float h) {
    std::vector<double> g;
    for (size_t i : indices) {
        const float saved = x[i];
        x[i] = saved + h;
        const double up = f();
        x[i] = saved - h;
        const double down = f();
        x[i] = saved;
        g.push_back((up - down) / (2.0 * double(h)));
    }
    return g;
}

// Up to `count` distinct indices in [0, n), always including the first and last.
inline std::vector<size_t> some_indices(size_t n, size_t count, uint64_t seed) {
    std::vector<size_t> all(n);
    for (size_t i = 0; i < n; ++i) all[i] = i;
    if (n <= count) return all;
    Rng rng(seed, 3);
    rng.shuffle(std::span<size_t>(all.data() + 1, n - 2));
    std::vector<size_t> picked(all.begin(), all.begin() + long(count - 1));
    picked.push_back(n - 1);
    return picked;
}

// sum_i r_i * y_i in double: a random scalar projection of an output, whose
// gradient with respect to y is r. Backward is then fed dy = r.
inline double project(const std::vector<float>& y, const std::vector<float>& r) {
    double s = 0.0;
    for (size_t i = 0; i < y.size(); ++i) s += double(y[i]) * double(r[i]);
    return s;
}

}  // namespace dpt::testing
