// The GPU tests of the convolutions, against their CPU twins: forward (with
// the ReLU, the pooling, the batch gathered from the dataset), both
// backwards, through the pooling after, and the weight gradient's slices
// left to the input gradient's kernel.
#include <stdexcept>
#include <tuple>

#include "cuda/kernels.hpp"
#include "cuda/versions.hpp"
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
        // weight gradient's product (its 1x1 loader, version 14).
        {4, 128, 6, 6, 256, 1, 1, 2, 0},
        // Its 3x3 convs on 12x12 and 6x6 maps.
        {4, 64, 12, 12, 64, 3, 3, 1, 1},
        {4, 128, 6, 6, 128, 3, 3, 1, 1},
        // Its first conv: 64 x 9 weights, small enough for the direct
        // weight gradient (version 3).
        {4, 1, 28, 28, 64, 3, 3, 1, 0},
        // LeNet's conv2's geometry with other channel counts, for forward
        // version 10 and backward-data 8 (a multiple of 4 input channels, at
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
        std::vector<float> v6_y, v6_relu, v8_y, v8_relu;  // version 7 sums as 6 does, every later one as 8
        for (int v = 1; v <= cuda::version_count("conv2d_forward"); ++v) {
            cuda::select_version("conv2d_forward", v);
            const std::string version = " (version " + std::to_string(v) + ")";
            y.poison();
            cuda::conv2d_forward(y.p, dx_.p, dw_.p, db_.p, s, scratch.p, nullptr);
            const auto got = y.download();
            compare("conv2d_forward " + name + version, got, want, gemm_tol);
            y.poison();
            cuda::conv2d_forward_relu(y.p, dx_.p, dw_.p, db_.p, s, scratch.p, nullptr);
            const auto got_relu = y.download();
            compare("conv2d_forward_relu (fused) " + name + version, got_relu, want_relu, gemm_tol);
            if (v == 6) v6_y = got, v6_relu = got_relu;
            if (v == 8) v8_y = got, v8_relu = got_relu;
            if (v == 7 || v >= 9) {
                const int same = v == 7 ? 6 : 8;
                compare("conv2d_forward " + name + ": version " + std::to_string(v) + " = version " +
                            std::to_string(same) + ", bit for bit",
                        got, v == 7 ? v6_y : v8_y, 0.0);
                compare("conv2d_forward_relu " + name + ": version " + std::to_string(v) + " = version " +
                            std::to_string(same) + ", bit for bit",
                        got_relu, v == 7 ? v6_relu : v8_relu, 0.0);
            }
        }

        std::vector<float> want_dx(s.in_size());
        cpu::conv2d_backward_data_gemm(want_dx.data(), dy.data(), w.data(), s, cpu_scratch.data());
        std::vector<float> v4_dx;  // every later version sums as version 4 does
        for (int v = 1; v <= cuda::version_count("conv2d_backward_data"); ++v) {
            cuda::select_version("conv2d_backward_data", v);
            dx.poison();
            cuda::conv2d_backward_data(dx.p, ddy.p, dw_.p, s, scratch.p, nullptr);
            const auto got = dx.download();
            compare("conv2d_backward_data " + name + " (version " + std::to_string(v) + ")", got, want_dx, gemm_tol);
            if (v == 4) v4_dx = got;
            if (v >= 5)
                compare("conv2d_backward_data " + name + ": version " + std::to_string(v) + " = version 4, bit for bit",
                        got, v4_dx, 0.0);
            // Added to a gradient already there (version 10, where its kernels
            // can): what sum_into adds to it, bit for bit.
            const bool adds = cuda::conv2d_backward_data_adds(s, dw_.p);
            if (v < 10) {
                report(!adds, "conv2d_backward_data " + name + " (version " + std::to_string(v) + ") does not add", "");
            } else if (adds) {
                const auto dx0 = random(s.in_size(), 16);
                std::vector<float> want_sum = dx0;
                for (size_t i = 0; i < want_sum.size(); ++i) want_sum[i] += got[i];
                dx.upload(dx0);
                cuda::conv2d_backward_data(dx.p, ddy.p, dw_.p, s, scratch.p, nullptr, {}, true);
                compare("conv2d_backward_data " + name + " (version " + std::to_string(v) +
                            ") added to a gradient: sum_into's bits",
                        dx.download(), want_sum, 0.0);
            }
        }

        std::vector<float> want_dw = dw0, want_db = db0;
        cpu::conv2d_backward_weight_gemm(want_dw.data(), want_db.data(), dy.data(), x.data(), s, cpu_scratch.data());
        // Every version (kernels/cuda/versions.hpp), the one trained with
        // last, and for each every way of finishing a split product: those
        // the same sums, bit for bit.
        Tickets tickets;
        const int versions = cuda::version_count("conv2d_backward_weight");
        std::vector<float> v5_dw, v5_db;  // version 6 sums as version 5 does
        std::vector<float> v8_dw, v8_db;  // and versions 9 to 11 as version 8
        for (int v = 1; v <= versions; ++v) {
            cuda::select_version("conv2d_backward_weight", v);
            std::vector<float> first_dw, first_db;
            for (int sv = 1; sv <= cuda::version_count("gemm_split"); ++sv) {
                cuda::select_version("gemm_split", sv);
                gw.upload(dw0);
                gb.upload(db0);
                scratch.poison();
                cuda::conv2d_backward_weight(gw.p, gb.p, ddy.p, dx_.p, s, {scratch.p, tickets.p}, nullptr);
                const std::string version = " (version " + std::to_string(v) + ", gemm_split " + std::to_string(sv) + ")";
                const auto got_dw = gw.download(), got_db = gb.download();
                compare("conv2d_backward_weight dw " + name + version, got_dw, want_dw, gemm_tol);
                compare("conv2d_backward_weight db " + name + version, got_db, want_db, gemm_tol);
                if (sv == 1) {
                    first_dw = got_dw, first_db = got_db;
                    if (v == 5) v5_dw = got_dw, v5_db = got_db;
                    if (v == 6) {
                        compare("conv2d_backward_weight dw " + name + version + " = version 5", got_dw, v5_dw, 0.0);
                        compare("conv2d_backward_weight db " + name + version + " = version 5", got_db, v5_db, 0.0);
                    }
                    if (v == 8) v8_dw = got_dw, v8_db = got_db;
                    if (v >= 9) {
                        compare("conv2d_backward_weight dw " + name + version + " = version 8", got_dw, v8_dw, 0.0);
                        compare("conv2d_backward_weight db " + name + version + " = version 8", got_db, v8_db, 0.0);
                    }
                } else {
                    compare("conv2d_backward_weight dw " + name + version + " = gemm_split 1", got_dw, first_dw, 0.0);
                    compare("conv2d_backward_weight db " + name + version + " = gemm_split 1", got_db, first_db, 0.0);
                }
                check_tickets(tickets, "conv2d_backward_weight " + name + version);
            }
        }
    }
}

// A convolution with its ReLU and the pooling after it (conv2d_forward_relu_pool)
// against the CPU's three steps, in every forward version: one kernel where
// the filter bank is small (version 2), the GEMM and pool_forward where not.
// The pooled output is also pool_forward's on the GPU's own y, bit for bit.
// Then its weight gradient from the pooling's (conv2d_backward_weight_pool)
// in every weight-gradient version: through the pooling inside version 3's
// direct kernel, else pool_backward and the product.
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
        {{3, 6, 7, 9, 70, 3, 3, 1, 0}, 2, 2},      // 70 channels: version 6's rows kernel, odd widths
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
            std::vector<float> v3_y, v3_pooled;  // versions 4 and 5 pool as they add the splits, to the same bits
            std::vector<float> v6_y, v6_pooled, v8_y, v8_pooled;  // version 7 sums as 6 does, every later one as 8
            for (int v = 1; v <= cuda::version_count("conv2d_forward"); ++v) {
                cuda::select_version("conv2d_forward", v);
                const std::string version = " (version " + std::to_string(v) + ")";
                y.poison();
                pooled.poison();
                cuda::conv2d_forward_relu_pool(y.p, pooled.p, dx.p, dw.p, db.p, s, kind, ps, scratch.p, nullptr);
                compare("conv2d_forward_relu_pool y " + name + version, y.download(), want, gemm_tol);
                const auto got = pooled.download();
                compare("conv2d_forward_relu_pool pooled " + name + version, got, want_pooled, gemm_tol);
                again.poison();
                cuda::pool2d_forward(again.p, y.p, kind, ps, nullptr);
                compare("conv2d_forward_relu_pool pooled = pool2d_forward(y) " + name + version, got,
                        again.download(), c.k > c.stride ? 1e-6 : 0.0);
                if (v == 3) v3_y = y.download(), v3_pooled = got;
                if (v == 4 || v == 5) {  // (versions 6 and 7 sum directly, in another order)
                    compare("conv2d_forward_relu_pool y = version 3's " + name + version, y.download(), v3_y, 0.0);
                    compare("conv2d_forward_relu_pool pooled = version 3's " + name + version, got, v3_pooled, 0.0);
                }
                if (v == 6) v6_y = y.download(), v6_pooled = got;
                if (v == 8) v8_y = y.download(), v8_pooled = got;
                if (v == 7) {
                    compare("conv2d_forward_relu_pool y = version 6's " + name + version, y.download(), v6_y, 0.0);
                    compare("conv2d_forward_relu_pool pooled = version 6's " + name + version, got, v6_pooled, 0.0);
                }
                if (v >= 9) {
                    compare("conv2d_forward_relu_pool y = version 8's " + name + version, y.download(), v8_y, 0.0);
                    compare("conv2d_forward_relu_pool pooled = version 8's " + name + version, got, v8_pooled, 0.0);
                }
            }
            // The weight gradient from the pooling's gradient, on the CPU's y
            // and pooled output (so that both pick the same window maxima).
            const auto d_pooled = random(ps.out_size(), 33);
            const auto dw0 = random(s.weight_size(), 34), db0 = random(size_t(s.oc), 35);
            std::vector<float> dy(s.out_size()), want_dw = dw0, want_db = db0;
            cpu::pool2d_backward_relu(dy.data(), d_pooled.data(), want.data(), want_pooled.data(), kind, ps);
            cpu::conv2d_backward_weight_gemm(want_dw.data(), want_db.data(), dy.data(), x.data(), s, cpu_scratch.data());
            Buffer<float> dd_pooled(d_pooled), cpu_y(want), cpu_pooled(want_pooled), gw(dw0), gb(db0), gdy(s.out_size());
            Tickets tickets;
            std::vector<float> v5_dw, v5_db;  // version 6 loads as version 5 does not, and sums as it does
            for (int v = 1; v <= cuda::version_count("conv2d_backward_weight"); ++v) {
                cuda::select_version("conv2d_backward_weight", v);
                const std::string version = " (version " + std::to_string(v) + ")";
                gw.upload(dw0);
                gb.upload(db0);
                scratch.poison();
                cuda::conv2d_backward_weight_pool(gw.p, gb.p, gdy.p, dd_pooled.p, dx.p, cpu_y.p, cpu_pooled.p, s, kind,
                                                  ps, {scratch.p, tickets.p}, nullptr);
                const auto got_dw = gw.download(), got_db = gb.download();
                compare("conv2d_backward_weight_pool dw " + name + version, got_dw, want_dw, gemm_tol);
                compare("conv2d_backward_weight_pool db " + name + version, got_db, want_db, gemm_tol);
                check_tickets(tickets, "conv2d_backward_weight_pool " + name + version);
                if (v == 5) v5_dw = got_dw, v5_db = got_db;
                if (v == 6) {
                    compare("conv2d_backward_weight_pool dw " + name + version + " = version 5", got_dw, v5_dw, 0.0);
                    compare("conv2d_backward_weight_pool db " + name + version + " = version 5", got_db, v5_db, 0.0);
                }
            }
        }
}

// The input gradient of a convolution after a pooling of a ReLU'd
// convolution, and the first convolution's weight gradient from it
// (conv2d_backward_data_weight_pool), against the CPU's two calls, in every
// backward-data version; version 3, which gathers the taps inside the weight
// gradient's kernel, gives version 2's bits exactly (where it applies: a
// small filter bank before, stride 1 after; else both run the two calls).
void test_conv_pool_conv() {
    struct Case {
        ConvShape conv;
        int k, stride;
        ConvShape next;
    };
    std::vector<Case> cases = {
        {{3, 2, 9, 7, 5, 3, 3, 1, 0}, 2, 2, {3, 5, 3, 2, 4, 2, 2, 1, 1}},       // padding: taps outside the input
        {{2, 3, 12, 12, 6, 3, 3, 2, 1}, 3, 1, {2, 6, 4, 4, 3, 3, 3, 1, 1}},     // overlapping windows
        {{2, 3, 12, 12, 6, 3, 3, 2, 1}, 2, 2, {2, 6, 3, 3, 4, 3, 3, 2, 1}},     // next of stride 2: the two calls
    };
    for (int n : {7, 64}) {
        const auto shapes = lenet::model().conv_shapes(n);
        cases.push_back({shapes[0], 2, 2, shapes[1]});  // LeNet's conv1, its pooling and conv2
    }
    for (const Case& c : cases)
        for (PoolKind kind : {PoolKind::max, PoolKind::avg}) {
            const ConvShape &s = c.conv, &next = c.next;
            const PoolShape ps{s.n, s.oc, s.oh(), s.ow(), c.k, c.stride};
            if (next.c != ps.c || next.h != ps.oh() || next.w != ps.ow()) {
                report(false, "a case whose next convolution reads the pooling", describe(next));
                continue;
            }
            const std::string name = describe(s) + (kind == PoolKind::avg ? ", avg" : ", max") + " pool, then " +
                                     describe(next);
            const auto x = random(s.in_size(), 40), w = random(s.weight_size(), 41), b = random(size_t(s.oc), 42);
            const auto next_w = random(next.weight_size(), 43), next_dy = random(next.out_size(), 44);
            const auto dw0 = random(s.weight_size(), 45), db0 = random(size_t(s.oc), 46);
            std::vector<float> cpu_scratch(std::max(cpu::conv2d_scratch_floats(s), cpu::conv2d_scratch_floats(next)));
            std::vector<float> y(s.out_size()), pooled(ps.out_size()), d_pooled(ps.out_size()), dy(s.out_size());
            cpu::conv2d_forward_gemm(y.data(), x.data(), w.data(), b.data(), s, cpu_scratch.data());
            cpu::relu_forward(y.data(), y.data(), y.size());
            cpu::pool2d_forward(pooled.data(), y.data(), kind, ps);
            std::vector<float> want_dw = dw0, want_db = db0;
            cpu::conv2d_backward_data_weight_pool(d_pooled.data(), next_dy.data(), next_w.data(), next, want_dw.data(),
                                                  want_db.data(), dy.data(), x.data(), y.data(), pooled.data(), s,
                                                  kind, ps, cpu_scratch.data());
            Buffer<float> gx(x), gy(y), gpooled(pooled), gnext_w(next_w), gnext_dy(next_dy), gd_pooled(ps.out_size()),
                gdy(s.out_size()), gw(dw0), gb(db0),
                scratch(std::max(cuda::conv2d_scratch_floats(s), cuda::conv2d_scratch_floats(next)));
            Tickets tickets;
            std::vector<float> before_dw, before_db;  // version 2's
            // The weight gradient at version 11: from version 12, conv1's
            // through its pooling alone (version 2's call) adds in another
            // order than the gather of version 3 is read in.
            cuda::select_version("conv2d_backward_weight", 11);
            for (int v = 1; v <= cuda::version_count("conv2d_backward_data"); ++v) {
                cuda::select_version("conv2d_backward_data", v);
                const std::string version = " (version " + std::to_string(v) + ")";
                gw.upload(dw0);
                gb.upload(db0);
                gd_pooled.poison();
                scratch.poison();
                cuda::conv2d_backward_data_weight_pool(gd_pooled.p, gnext_dy.p, gnext_w.p, next, gw.p, gb.p, gdy.p,
                                                       gx.p, gy.p, gpooled.p, s, kind, ps, {scratch.p, tickets.p},
                                                       nullptr);
                const auto got_dw = gw.download(), got_db = gb.download();
                compare("conv2d_backward_data_weight_pool dw " + name + version, got_dw, want_dw, gemm_tol);
                compare("conv2d_backward_data_weight_pool db " + name + version, got_db, want_db, gemm_tol);
                check_tickets(tickets, "conv2d_backward_data_weight_pool " + name + version);
                if (v < 3)  // (version 3 leaves d_pooled alone where it gathers)
                    compare("conv2d_backward_data_weight_pool d_pooled " + name + version, gd_pooled.download(), d_pooled,
                            gemm_tol);
                if (v == 2) before_dw = got_dw, before_db = got_db;
                if (v == 3) {
                    compare("conv2d_backward_data_weight_pool dw " + name + ": version 3 = version 2, bit for bit",
                            got_dw, before_dw, 0.0);
                    compare("conv2d_backward_data_weight_pool db " + name + ": version 3 = version 2, bit for bit",
                            got_db, before_db, 0.0);
                }
            }
            cuda::select_version("conv2d_backward_data", 0);
            cuda::select_version("conv2d_backward_weight", 0);
        }
}

// Version 13 of the weight gradient: LeNet's conv2 leaves its slices'
// sums to the layer's input gradient's call (conv2d_backward_weight_unfinished),
// as training runs it on a GPU. Against version 12's two whole calls, the
// same bits: conv2's dx, dw and db through conv2d_backward_data, on the
// tiled kernels that add the slices themselves (data versions 9 and 12,
// two input channels a thread and one) and on one that leaves them to
// finish_splits (8); and through conv2d_backward_data_weight_pool with
// conv1's weight gradient (the call LeNet's model makes), where data
// versions 9 and 12 add them in their kernels and 3 before its columns
// take the scratch. Version 12 against the CPU. Batches
// of 7, 64 and 256.
void test_conv_weight_left() {
    for (const int n : {7, 64, 256}) {
        const auto shapes = lenet::model().conv_shapes(n);
        const ConvShape &s1 = shapes[0], &s = shapes[1];
        const PoolShape ps{s1.n, s1.oc, s1.oh(), s1.ow(), 2, 2};
        const auto x = random(s.in_size(), 80), w = random(s.weight_size(), 81), dy = random(s.out_size(), 82);
        const auto dw0 = random(s.weight_size(), 83), db0 = random(size_t(s.oc), 84);
        const auto x1 = random(s1.in_size(), 85), dw1_0 = random(s1.weight_size(), 86), db1_0 = random(size_t(s1.oc), 87);
        std::vector<float> y1 = random(s1.out_size(), 88), pooled1(ps.out_size());
        cpu::relu_forward(y1.data(), y1.data(), y1.size());
        cpu::pool2d_forward(pooled1.data(), y1.data(), PoolKind::avg, ps);
        std::vector<float> cpu_scratch(cpu::conv2d_scratch_floats(s)), want_dx(s.in_size()), want_dw = dw0,
                                                                        want_db = db0;
        cpu::conv2d_backward_weight(want_dw.data(), want_db.data(), dy.data(), x.data(), s, cpu_scratch.data());
        cpu::conv2d_backward_data(want_dx.data(), dy.data(), w.data(), s, cpu_scratch.data());

        Buffer<float> gx(x), gw(w), gdy(dy), dx(s.in_size()), dw(dw0), db(db0), gx1(x1), gy1(y1), gpooled1(pooled1),
            dy1(s1.out_size()), dw1(dw1_0), db1(db1_0),
            scratch(std::max(cuda::conv2d_scratch_floats(s), cuda::conv2d_scratch_floats(s1)));
        Tickets tickets;
        const cuda::Workspace ws{scratch.p, tickets.p};
        // conv2's weight gradient, then its input gradient by `call`; what they wrote.
        const auto run = [&](int weight_version, int data_version, bool with_pool) {
            cuda::select_version("conv2d_backward_weight", weight_version);
            cuda::select_version("conv2d_backward_data", data_version);
            for (Buffer<float>* p : {&dx, &scratch, &dy1}) p->poison();
            dw.upload(dw0), db.upload(db0), dw1.upload(dw1_0), db1.upload(db1_0);
            const cuda::UnfinishedWeightGrad left =
                cuda::conv2d_backward_weight_unfinished(dw.p, db.p, gdy.p, gx.p, s, ws, nullptr);
            const bool leaves = cuda::conv2d_backward_weight_leaves_slices(s, gx.p, gw.p);
            if (with_pool)
                cuda::conv2d_backward_data_weight_pool(dx.p, gdy.p, gw.p, s, dw1.p, db1.p, dy1.p, gx1.p, gy1.p,
                                                       gpooled1.p, s1, PoolKind::avg, ps, ws, nullptr, left);
            else
                cuda::conv2d_backward_data(dx.p, gdy.p, gw.p, s, scratch.p, nullptr, left);
            std::vector<std::vector<float>> got = {dx.download(), dw.download(), db.download()};
            if (with_pool) got.insert(got.end(), {dw1.download(), db1.download()});
            cuda::select_default_versions();
            return std::tuple{got, left.dw != nullptr, leaves};
        };
        const char* names[] = {"dx", "dw", "db", "conv1's dw", "conv1's db"};
        for (const bool with_pool : {false, true})
            for (const int data : with_pool ? std::vector<int>{3, 9, 12} : std::vector<int>{8, 9, 12}) {
                char name[120];
                std::snprintf(name, sizeof name, "conv2 n%d, %s (data version %d)", n,
                              with_pool ? "conv2d_backward_data_weight_pool" : "conv2d_backward_data", data);
                const auto [before, before_left, before_leaves] = run(12, data, with_pool);
                const auto [after, after_left, after_leaves] = run(13, data, with_pool);
                report(!before_left && !before_leaves, std::string(name) + ": weight version 12 leaves nothing");
                report(after_left && after_leaves == (data >= 9),
                       std::string(name) + ": weight version 13 leaves its slices" +
                           (data >= 9 ? ", to the input gradient's kernel" : ", to finish_splits"));
                if (!with_pool) {
                    compare(std::string(name) + ": dx (version 12)", before[0], want_dx, gemm_tol);
                    compare(std::string(name) + ": dw (version 12)", before[1], want_dw, gemm_tol);
                    compare(std::string(name) + ": db (version 12)", before[2], want_db, gemm_tol);
                }
                for (size_t k = with_pool && data == 3 ? 1 : 0; k < after.size(); ++k)  // (3 leaves dx alone)
                    compare(std::string(name) + ": " + names[k] + ", version 13 = version 12", after[k], before[k], 0.0);
                check_tickets(tickets, name);
            }
    }
}

// The first convolution gathering its batch from the dataset as it reads
// it (conv2d_forward version 5, and the latest: from version 11 a block a
// sample, window_forward): the input, the labels, the ReLU's output and
// the pooling, bit for bit as gather_samples and then the default
// conv2d_forward_relu_pool give them. LeNet's conv1, a part of 7 and of 64.
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
            for (const int v : {5, cuda::version_count("conv2d_forward")}) {
                const std::string version = " (version " + std::to_string(v) + ")";
                for (Buffer<float>* p : {&x, &y, &pooled}) p->poison();
                l.poison();
                cuda::select_version("conv2d_forward", v);
                const bool gathers = cuda::conv2d_forward_gathers(s);
                cuda::conv2d_forward_relu_pool_gathered(y.p, pooled.p,
                                                        {x.p, l.p, gimages.p, glabels.p, gindex.p, n, pixels}, gw.p,
                                                        gb.p, s, kind, ps, nullptr);
                cuda::select_default_versions();
                report(gathers, name + version + ": gathers LeNet's first layer");
                compare(name + version + ": the gathered input", x.download(), want[0], 0.0);
                report(l.download() == want_labels, name + version + ": the gathered labels");
                compare(name + version + ": y", y.download(), want[1], 0.0);
                compare(name + version + ": pooled", pooled.download(), want[2], 0.0);
            }
        }
    bool refused = false;  // another layer: refused, not run wrong
    try {
        cuda::select_version("conv2d_forward", 5);
        const ConvShape s = lenet::model().conv_shapes(4)[1];
        cuda::conv2d_forward_relu_pool_gathered(nullptr, nullptr, {nullptr, nullptr, nullptr, nullptr, nullptr, 4, 1},
                                                nullptr, nullptr, s, PoolKind::avg, {4, s.oc, s.oh(), s.ow(), 2, 2},
                                                nullptr);
    } catch (const std::invalid_argument&) {
        refused = true;
    }
    cuda::select_default_versions();
    report(refused, "conv2d_forward_relu_pool_gathered refuses a layer its kernel cannot gather");
}

}  // namespace dpt::gpu_test
