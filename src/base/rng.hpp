// dptrain's random numbers: xoshiro256** seeded through splitmix64, with its
// own normal and uniform transforms. The standard library's distributions are
// not specified bit for bit, so a seed would give other weights and another
// data order under another compiler; these give the same on every platform.
#pragma once
#include <cmath>
#include <cstdint>
#include <numbers>
#include <span>
#include <utility>

namespace dpt {

class Rng {
   public:
    // `stream` separates independent uses of one seed (weights, data order).
    explicit Rng(uint64_t seed, uint64_t stream = 0) {
        uint64_t x = seed ^ (0x9e3779b97f4a7c15ULL * (stream + 1));
        for (uint64_t& s : state_) s = splitmix64(x);
    }

    uint64_t next() {
        const uint64_t result = rotl(state_[1] * 5, 7) * 9;
        const uint64_t t = state_[1] << 17;
        state_[2] ^= state_[0];
        state_[3] ^= state_[1];
        state_[1] ^= state_[2];
        state_[0] ^= state_[3];
        state_[2] ^= t;
        state_[3] = rotl(state_[3], 45);
        return result;
    }

    // Uniform in [0, 1), 53 random bits.
    double uniform() { return double(next() >> 11) * 0x1.0p-53; }

    // Uniform integer in [0, n), without modulo bias (Lemire's method).
    uint64_t below(uint64_t n) {
        unsigned __int128 m = (unsigned __int128)next() * n;
        if (uint64_t(m) < n) {
            const uint64_t threshold = -n % n;
            while (uint64_t(m) < threshold) m = (unsigned __int128)next() * n;
        }
        return uint64_t(m >> 64);
    }

    // Standard normal by Box-Muller (one of the pair is used: simple and exact enough).
    double normal() {
        const double u1 = 1.0 - uniform();  // (0, 1], so log is finite
        const double u2 = uniform();
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    }

    // Fisher-Yates shuffle.
    template <class T>
    void shuffle(std::span<T> items) {
        for (size_t i = items.size(); i > 1; --i) std::swap(items[i - 1], items[below(i)]);
    }

   private:
    static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    static uint64_t splitmix64(uint64_t& x) {
        uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    }
    uint64_t state_[4];
};

}  // namespace dpt
