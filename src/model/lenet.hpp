// LeNet as the tutorial defines it, as a list of layers (model.hpp computes
// the rest: 8 tensors, 129,068 parameters, 6 activation buffers):
//   conv 20@3x3 -> ReLU -> 2x2 pool -> conv 50@5x5 -> ReLU -> 2x2 pool
//   -> flatten 800 -> dense 128 -> ReLU -> dense 10 -> softmax cross-entropy
#pragma once
#include "model/model.hpp"

namespace dpt::lenet {

inline constexpr int image_side = 28;

inline const Model& model() {
    static const Model lenet("LeNet", {1, image_side, image_side},
                             {conv(20, 3), relu(), pool(2, 2),
                              conv(50, 5), relu(), pool(2, 2),
                              flatten(), dense(128), relu(), dense(10)});
    return lenet;
}

}  // namespace dpt::lenet
