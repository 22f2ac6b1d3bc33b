// The gluon tutorials' ResNet-18 for 28x28 images (their utils'
// resnet18_28), as a list of layers:
//   batch norm -> conv 64@3x3 -> max pool 3x3/2
//   -> residual 64, residual 64, residual 128/2, residual 128,
//      residual 256/2, residual 256 -> avg pool 3x3 -> dense 10
// where residual c/s is relu(bn(conv 3x3 (relu(bn(conv 3x3/s (x))))) + x),
// the shortcut x becoming a 1x1 conv with stride s where the shape changes.
// Sides 28 -> 26 -> 12 -> 12 -> 6 -> 3 -> 1. 2,777,868 trained parameters
// (11.1 MB of gradients a step, 21.5x LeNet's) and 13 batch norms, whose
// running statistics add 3,202 more floats to a replica.
#pragma once
#include "model/lenet.hpp"
#include "model/model.hpp"

namespace dpt::resnet {

namespace detail {

// Appends residual(channels, stride) to `layers`; `project`: the shortcut
// is a 1x1 conv (the shape changes).
inline void residual(std::vector<Layer>& layers, int channels, int stride, bool project) {
    const int x = int(layers.size()) - 1;  // the block's input: the last layer's output
    layers.insert(layers.end(), {conv(channels, 3, stride, 1), batch_norm(), relu(), conv(channels, 3, 1, 1),
                                 batch_norm()});
    if (project) {
        const int main = int(layers.size()) - 1;
        layers.push_back(conv_from(x, channels, 1, stride));
        layers.push_back(add(main));
    } else {
        layers.push_back(add(x));
    }
    layers.push_back(relu());
}

inline std::vector<Layer> layers() {
    std::vector<Layer> l{batch_norm(), conv(64, 3), pool(PoolKind::max, 3, 2)};
    detail::residual(l, 64, 1, false);
    detail::residual(l, 64, 1, false);
    detail::residual(l, 128, 2, true);
    detail::residual(l, 128, 1, false);
    detail::residual(l, 256, 2, true);
    detail::residual(l, 256, 1, false);
    l.push_back(pool(PoolKind::avg, 3, 3));
    l.push_back(flatten());
    l.push_back(dense(10));
    return l;
}

}  // namespace detail

inline const Model& model() {
    static const Model resnet18("ResNet-18", {1, lenet::image_side, lenet::image_side}, detail::layers());
    return resnet18;
}

}  // namespace dpt::resnet
