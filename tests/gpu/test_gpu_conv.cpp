// The GPU tests of the convolutions, against their CPU twins: forward (with
// the ReLU, the pooling, the batch gathered from the dataset), both
// backwards, through the pooling after, and the weight gradient's slices
// left to the input gradient's kernel.
#include <stdexcept>
#include <utility>

#include "cuda/kernels.hpp"
#include "gpu_checks.hpp"
#include "model/lenet.hpp"

namespace dpt::gpu_test {

void test_conv() {
    std::vector<ConvShape> shapes = {
        {3, 2, 7, 9, 5, 3, 3, 1, 0},  // odd sizes, nothing a multiple of a tile
        {2, 3, 8, 8, 4, 3, 3, 2, 1},  // stride and padding
        {1, 1, 5, 5, 1, 5, 5, 1, 2},  // one channel, padding as wide as the image
        // ResNet-18's kinds: a stride-2 residual conv and its 1x1
        // shortcut, and a padded 3x3 on 3x3 maps with 256 channels.
        {4, 64, 12, 12, 128, 3, 3, 2, 1},
        {4, 64, 12, 12, 128, 1, 1, 2, 0},
        {4, 256, 3, 3, 256, 3, 3, 1, 1},
        // The other shortcut: 128 input channels, so no bias column in the
        // weight gradient's product.
        {4, 128, 6, 6, 256, 1, 1, 2, 0},
        // Its 3x3 convs on 12x12 and 6x6 maps.
        {4, 64, 12, 12, 64, 3, 3, 1, 1},
        {4, 128, 6, 6, 128, 3, 3, 1, 1},
        // Its first conv: 64 x 9 weights, small enough for the direct
        // weight gradient.
        {4, 1, 28, 28, 64, 3, 3, 1, 0},
        // LeNet's conv2's geometry with other channel counts, for the tiled
        // rows kernels (a multiple of 4 input channels, at
        // most 50 output channels, at most 20 input channels): the forward's
        // 25 groups of 2 channels all full; a last group of 1 and
        // backward-data's last chunk of 4 (of 5); two groups and one of 1, 4
        // input channels, one chunk.
        {3, 8, 13, 13, 50, 5, 5, 1, 0},
        {3, 8, 13, 13, 49, 5, 5, 1, 0},
        {2, 4, 13, 13, 5, 5, 5, 1, 0},
    };
    // LeNet's own, at 7 samples and at 64 (large enough that the weight gradient splits k).
    for (int n : {7, 64})
        for (const ConvShape& s : lenet::model().conv_shapes(n)) shapes.push_back(s);
    // The CPU side is the implicit GEMM, which sums the same products as the
    // GPU's direct kernels. For 3x3 stride-1 shapes conv2d_* take Winograd on
    // the CPU (kernels/cpu/winograd.cpp): other sums, up to 6e-6 of scale
    // from the direct ones with tiles of 3 and 4, too close to this
    // tolerance to say anything; tests/test_winograd.cpp checks them against
    // direct sums in double precision instead.
    for (const ConvShape& s : shapes) {
        const std::string name = describe(s);
        const auto x = random(s.in_size(), 10), w = random(s.weight_size(), 11), b = random(size_t(s.oc), 12);
        const auto dy = random(s.out_size(), 13);
        const auto dw0 = random(s.weight_size(), 14), db0 = random(size_t(s.oc), 15);  // backward weight adds to these
        std::vector<float> cpu_scratch(cpu::conv2d_scratch_floats(s));
        Fenced dx_(x);
        Buffer<float> dw_(w), db_(b), ddy(dy), scratch(cuda::conv2d_scratch_floats(s));
        Buffer<float> y(s.out_size()), dx(s.in_size()), gw(dw0), gb(db0);

        std::vector<float> want(s.out_size());
        cpu::conv2d_forward_gemm(want.data(), x.data(), w.data(), b.data(), s, cpu_scratch.data());
        std::vector<float> want_relu = want;
        cpu::relu_forward(want_relu.data(), want_relu.data(), want_relu.size());
        y.poison();
        cuda::conv2d_forward(y.p, dx_.p, dw_.p, db_.p, s, scratch.p, nullptr);
        compare("conv2d_forward " + name, y.download(), want, gemm_tol);
        y.poison();
        cuda::conv2d_forward_relu(y.p, dx_.p, dw_.p, db_.p, s, scratch.p, nullptr);
        compare("conv2d_forward_relu (fused) " + name, y.download(), want_relu, gemm_tol);

        std::vector<float> want_dx(s.in_size());
        cpu::conv2d_backward_data_gemm(want_dx.data(), dy.data(), w.data(), s, cpu_scratch.data());
        dx.poison();
        cuda::conv2d_backward_data(dx.p, ddy.p, dw_.p, s, scratch.p, nullptr);
        compare("conv2d_backward_data " + name, dx.download(), want_dx, gemm_tol);

        std::vector<float> want_dw = dw0, want_db = db0;
        cpu::conv2d_backward_weight_gemm(want_dw.data(), want_db.data(), dy.data(), x.data(), s, cpu_scratch.data());
        Tickets tickets;
        scratch.poison();
        cuda::conv2d_backward_weight(gw.p, gb.p, ddy.p, dx_.p, s, {scratch.p, tickets.p}, nullptr);
        compare("conv2d_backward_weight dw " + name, gw.download(), want_dw, gemm_tol);
        compare("conv2d_backward_weight db " + name, gb.download(), want_db, gemm_tol);
        check_tickets(tickets, "conv2d_backward_weight " + name);
    }
}

// A convolution with its ReLU and the pooling after it (conv2d_forward_relu_pool)
// against the CPU's three steps: one kernel where the filter bank is small
// or a rows kernel takes it, the splits' finishing kernel pooling too where
// the product is split, the GEMM and pool_forward elsewhere. The pooled
// output is also pool_forward's on the GPU's own y, bit for bit. Then its
// weight gradient from the pooling's (conv2d_backward_weight_pool): through
// the pooling inside the small filter bank's kernels, else pool_backward
// and the product.
void test_conv_pool() {
    struct Case {
        ConvShape conv;
        int k, stride;
    };
    std::vector<Case> cases = {
        {{3, 2, 9, 7, 5, 3, 3, 1, 0}, 2, 2},       // a group of 4 channels and one of 1; rows left over
        {{3, 2, 9, 7, 5, 3, 3, 1, 0}, 2, 3},       // windows with gaps between them: pixels in none
        {{2, 3, 12, 12, 6, 3, 3, 2, 1}, 3, 1},     // stride and padding; overlapping windows
        {{4, 1, 28, 28, 64, 3, 3, 1, 1}, 3, 2},    // ResNet-18's first conv's bank, padded
        {{7, 20, 13, 13, 50, 5, 5, 1, 0}, 2, 2},   // LeNet's conv2: 500 taps, the GEMM and a pool kernel
        {{7, 20, 13, 13, 50, 5, 5, 1, 0}, 2, 3},   // the same, split, with gaps between the windows
        {{2, 1, 40, 40, 4, 3, 3, 1, 1}, 2, 2},     // a plane of 1,600 pixels: too large for the direct kernel
        {{3, 6, 7, 9, 70, 3, 3, 1, 0}, 2, 2},      // 70 channels: the rows kernel, odd widths
    };
    for (int n : {7, 64}) cases.push_back({lenet::model().conv_shapes(n)[0], 2, 2});  // LeNet's conv1
    for (const Case& c : cases)
        for (PoolKind kind : {PoolKind::max, PoolKind::avg}) {
            const ConvShape& s = c.conv;
            const PoolShape ps{s.n, s.oc, s.oh(), s.ow(), c.k, c.stride};
            char pool[60];
            std::snprintf(pool, sizeof pool, ", %s pool %d/%d", kind == PoolKind::avg ? "avg" : "max", c.k, c.stride);
            const std::string name = describe(s) + pool;
            const auto x = random(s.in_size(), 30), w = random(s.weight_size(), 31), b = random(size_t(s.oc), 32);
            std::vector<float> cpu_scratch(cpu::conv2d_scratch_floats(s)), want(s.out_size()), want_pooled(ps.out_size());
            cpu::conv2d_forward_gemm(want.data(), x.data(), w.data(), b.data(), s, cpu_scratch.data());
            cpu::relu_forward(want.data(), want.data(), want.size());
            cpu::pool2d_forward(want_pooled.data(), want.data(), kind, ps);
            Buffer<float> dx(x), dw(w), db(b), scratch(cuda::conv2d_scratch_floats(s)), y(s.out_size()),
                pooled(ps.out_size()), again(ps.out_size());
            y.poison();
            pooled.poison();
            cuda::conv2d_forward_relu_pool(y.p, pooled.p, dx.p, dw.p, db.p, s, kind, ps, scratch.p, nullptr);
            compare("conv2d_forward_relu_pool y " + name, y.download(), want, gemm_tol);
            const auto got = pooled.download();
            compare("conv2d_forward_relu_pool pooled " + name, got, want_pooled, gemm_tol);
            again.poison();
            cuda::pool2d_forward(again.p, y.p, kind, ps, nullptr);
            compare("conv2d_forward_relu_pool pooled = pool2d_forward(y) " + name, got, again.download(),
                    c.k > c.stride ? 1e-6 : 0.0);
            // The weight gradient from the pooling's gradient, on the CPU's y
            // and pooled output (so that both pick the same window maxima).
            const auto d_pooled = random(ps.out_size(), 33);
            const auto dw0 = random(s.weight_size(), 34), db0 = random(size_t(s.oc), 35);
            std::vector<float> dy(s.out_size()), want_dw = dw0, want_db = db0;
            cpu::pool2d_backward_relu(dy.data(), d_pooled.data(), want.data(), want_pooled.data(), kind, ps);
            cpu::conv2d_backward_weight_gemm(want_dw.data(), want_db.data(), dy.data(), x.data(), s, cpu_scratch.data());
            Buffer<float> dd_pooled(d_pooled), cpu_y(want), cpu_pooled(want_pooled), gw(dw0), gb(db0), gdy(s.out_size());
            Tickets tickets;
            scratch.poison();
            cuda::conv2d_backward_weight_pool(gw.p, gb.p, gdy.p, dd_pooled.p, dx.p, cpu_y.p, cpu_pooled.p, s, kind, ps,
                                              {scratch.p, tickets.p}, nullptr);
            compare("conv2d_backward_weight_pool dw " + name, gw.download(), want_dw, gemm_tol);
            compare("conv2d_backward_weight_pool db " + name, gb.download(), want_db, gemm_tol);
            check_tickets(tickets, "conv2d_backward_weight_pool " + name);
        }
}

// LeNet's conv2 leaves its weight gradient's slices to the layer's input
// gradient's call (conv2d_backward_weight_unfinished), as training runs it
// on a GPU: the same bits as the two whole calls (conv2d_backward_weight,
// then conv2d_backward_data), which are checked against the CPU's implicit GEMM. Batches of
// 7, 64 and 256.
void test_conv_weight_left() {
    for (const int n : {7, 64, 256}) {
        const ConvShape s = lenet::model().conv_shapes(n)[1];
        const auto x = random(s.in_size(), 80), w = random(s.weight_size(), 81), dy = random(s.out_size(), 82);
        const auto dw0 = random(s.weight_size(), 83), db0 = random(size_t(s.oc), 84);
        std::vector<float> cpu_scratch(cpu::conv2d_scratch_floats(s)), want_dx(s.in_size()), want_dw = dw0,
                                                                        want_db = db0;
        // (the plain twins: conv2d_* may take Winograd's F(3x3, 5x5) for this shape)
        cpu::conv2d_backward_weight_gemm(want_dw.data(), want_db.data(), dy.data(), x.data(), s, cpu_scratch.data());
        cpu::conv2d_backward_data_gemm(want_dx.data(), dy.data(), w.data(), s, cpu_scratch.data());

        Buffer<float> gx(x), gw(w), gdy(dy), dx(s.in_size()), dw(dw0), db(db0), scratch(cuda::conv2d_scratch_floats(s));
        Tickets tickets;
        const cuda::Workspace ws{scratch.p, tickets.p};
        // conv2's weight gradient, then its input gradient: left unfinished, or whole.
        const auto run = [&](bool unfinished) {
            for (Buffer<float>* p : {&dx, &scratch}) p->poison();
            dw.upload(dw0), db.upload(db0);
            cuda::UnfinishedWeightGrad left;
            if (unfinished) left = cuda::conv2d_backward_weight_unfinished(dw.p, db.p, gdy.p, gx.p, s, ws, nullptr);
            else cuda::conv2d_backward_weight(dw.p, db.p, gdy.p, gx.p, s, ws, nullptr);
            cuda::conv2d_backward_data(dx.p, gdy.p, gw.p, s, scratch.p, nullptr, left);
            return std::pair{std::vector<std::vector<float>>{dx.download(), dw.download(), db.download()},
                             left.dw != nullptr};
        };
        const std::string name = "conv2 n" + std::to_string(n);
        const auto [whole, whole_left] = run(false);
        const auto [after, after_left] = run(true);
        report(after_left && cuda::conv2d_backward_weight_leaves_slices(s, gx.p, gw.p),
               name + ": the weight gradient leaves its slices to the input gradient's kernel");
        compare(name + ": dx (whole calls)", whole[0], want_dx, gemm_tol);
        compare(name + ": dw (whole calls)", whole[1], want_dw, gemm_tol);
        compare(name + ": db (whole calls)", whole[2], want_db, gemm_tol);
        const char* names[] = {"dx", "dw", "db"};
        for (size_t k = 0; k < after.size(); ++k)
            compare(name + ": " + names[k] + ", slices left = whole calls", after[k], whole[k], 0.0);
        check_tickets(tickets, name);
    }
}

// The first convolution gathering its batch from the dataset as it reads
// it: the input, the labels, the ReLU's output and the pooling, bit for bit
// as gather_samples and then conv2d_forward_relu_pool give them. LeNet's
// conv1, a part of 7 and of 64.
void test_conv_gathered() {
    const int stored = 90, pixels = 28 * 28;
    Rng rng(70, 70);
    std::vector<uint8_t> images(size_t(stored) * pixels), labels(stored);
    for (auto& v : images) v = uint8_t(rng.below(256));
    for (auto& v : labels) v = uint8_t(rng.below(10));
    Buffer<uint8_t> gimages(images), glabels(labels);
    for (const int n : {7, 64})
        for (PoolKind kind : {PoolKind::avg, PoolKind::max}) {
            const ConvShape s = lenet::model().conv_shapes(n)[0];
            const PoolShape ps{n, s.oc, s.oh(), s.ow(), 2, 2};
            const std::string name = "conv2d_forward_relu_pool_gathered " + describe(s) +
                                     (kind == PoolKind::avg ? ", avg pool" : ", max pool");
            std::vector<uint32_t> index(static_cast<size_t>(n));
            for (auto& i : index) i = uint32_t(rng.below(stored));
            Buffer<uint32_t> gindex(index);
            const auto w = random(s.weight_size(), 71), b = random(size_t(s.oc), 72);
            Buffer<float> gw(w), gb(b), scratch(cuda::conv2d_scratch_floats(s));
            Buffer<float> x(size_t(n) * pixels), y(s.out_size()), pooled(ps.out_size());
            Buffer<int32_t> l{size_t(n)};
            // gather_samples, then the plain call.
            cuda::gather_samples(x.p, l.p, gimages.p, glabels.p, gindex.p, n, pixels, nullptr);
            cuda::conv2d_forward_relu_pool(y.p, pooled.p, x.p, gw.p, gb.p, s, kind, ps, scratch.p, nullptr);
            const std::vector<std::vector<float>> want = {x.download(), y.download(), pooled.download()};
            const auto want_labels = l.download();
            for (Buffer<float>* p : {&x, &y, &pooled}) p->poison();
            l.poison();
            const bool gathers = cuda::conv2d_forward_gathers(s);
            cuda::conv2d_forward_relu_pool_gathered(y.p, pooled.p, {x.p, l.p, gimages.p, glabels.p, gindex.p, n, pixels},
                                                    gw.p, gb.p, s, kind, ps, nullptr);
            report(gathers, name + ": gathers LeNet's first layer");
            compare(name + ": the gathered input", x.download(), want[0], 0.0);
            report(l.download() == want_labels, name + ": the gathered labels");
            compare(name + ": y", y.download(), want[1], 0.0);
            compare(name + ": pooled", pooled.download(), want[2], 0.0);
        }
    bool refused = false;  // another layer: refused, not run wrong
    try {
        const ConvShape s = lenet::model().conv_shapes(4)[1];
        cuda::conv2d_forward_relu_pool_gathered(nullptr, nullptr, {nullptr, nullptr, nullptr, nullptr, nullptr, 4, 1},
                                                nullptr, nullptr, s, PoolKind::avg, {4, s.oc, s.oh(), s.ow(), 2, 2},
                                                nullptr);
    } catch (const std::invalid_argument&) {
        refused = true;
    }
    report(refused, "conv2d_forward_relu_pool_gathered refuses a layer its kernel cannot gather");
}

}  // namespace dpt::gpu_test
