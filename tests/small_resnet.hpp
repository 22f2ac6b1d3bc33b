// A small ResNet for the tests: every path of ResNet-18's walk at a
// fraction of its cost. Batch norm as the first layer (no input gradient)
// and after convs, a max pool 3x3/2, an identity shortcut (an add reading an
// earlier layer's output, whose input gradient two layers add to) and a
// projected one (a conv reading an earlier layer's output), ReLUs after
// batch norm and after adds, and an avg pool of fixed kind.
// Sides 28 -> 26 -> 12 -> 12 -> 6 -> 1.
#pragma once
#include "model/model.hpp"

namespace dpt::testing {

inline const Model& small_resnet() {
    static const Model model("small ResNet", {1, 28, 28}, [] {
        std::vector<Layer> l{batch_norm(), conv(4, 3), pool(PoolKind::max, 3, 2)};
        const int x1 = int(l.size()) - 1;
        l.insert(l.end(), {conv(4, 3, 1, 1), batch_norm(), relu(), conv(4, 3, 1, 1), batch_norm(), add(x1), relu()});
        const int x2 = int(l.size()) - 1;
        l.insert(l.end(), {conv(6, 3, 2, 1), batch_norm(), relu(), conv(6, 3, 1, 1), batch_norm()});
        const int main = int(l.size()) - 1;
        l.insert(l.end(), {conv_from(x2, 6, 1, 2), add(main), relu(), pool(PoolKind::avg, 6, 6), flatten(), dense(10)});
        return l;
    }());
    return model;
}

}  // namespace dpt::testing
