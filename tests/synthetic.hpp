// A small stand-in for Fashion-MNIST, for the CPU and GPU tests of devices.
#pragma once
#include "model/dataset.hpp"
#include "base/rng.hpp"

namespace dpt::testing {

// Image i has every pixel equal to i % 256 (so a loaded part shows which
// samples it holds), label i % 10. With `random_pixels` the images are noise
// instead, for training tests.
inline Dataset synthetic(size_t count, bool random_pixels = false) {
    Dataset d;
    d.count = count;
    d.rows = d.cols = 28;
    d.images.resize(count * 784);
    d.labels.resize(count);
    Rng rng(5, 5);
    for (size_t i = 0; i < count; ++i) {
        for (size_t p = 0; p < 784; ++p) d.images[i * 784 + p] = uint8_t(random_pixels ? rng.below(256) : i % 256);
        d.labels[i] = uint8_t(i % 10);
    }
    return d;
}

}  // namespace dpt::testing
