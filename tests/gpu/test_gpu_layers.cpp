// The GPU tests of the other layers' kernels, against their CPU twins:
// pooling, batch norm (and the running statistics), and the elementwise
// kernels.
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <utility>

#include "cuda/kernels.hpp"
#include "gpu_checks.hpp"

namespace dpt::gpu_test {

void test_pool() {
    // LeNet's, odd ones, and ResNet-18's max pool 3/2 (26 -> 12) and last avg pool (3x3 -> 1).
    // Also ragged edges (inputs the windows do not reach), strides of 3 and 5.
    const PoolShape shapes[] = {{2, 3, 9, 9, 2, 2}, {1, 2, 26, 26, 2, 2}, {2, 2, 7, 8, 3, 2}, {1, 1, 5, 5, 3, 1},
                                {4, 64, 26, 26, 3, 2}, {4, 256, 3, 3, 3, 3}, {2, 3, 11, 10, 4, 3},
                                {1, 2, 12, 13, 5, 5}, {3, 2, 13, 11, 2, 3}};
    for (const PoolShape& s : shapes)
        for (PoolKind kind : {PoolKind::avg, PoolKind::max}) {
            char name[100];
            std::snprintf(name, sizeof name, "%s n%d c%d %dx%d k%d stride %d", kind == PoolKind::avg ? "avg" : "max",
                          s.n, s.c, s.h, s.w, s.k, s.stride);
            // Ties (small integers) for max: the first maximal tap must win on both sides.
            const auto x = kind == PoolKind::max ? small_integers(s.in_size(), 20) : random(s.in_size(), 20);
            const auto dy = random(s.out_size(), 21);
            std::vector<float> want_y(s.out_size()), want_dx(s.in_size());
            cpu::pool2d_forward(want_y.data(), x.data(), kind, s);
            cpu::pool2d_backward(want_dx.data(), dy.data(), x.data(), want_y.data(), kind, s);
            Buffer<float> dx_(x), ddy(dy), y(s.out_size()), dx(s.in_size());
            y.poison();
            cuda::pool2d_forward(y.p, dx_.p, kind, s, nullptr);
            const auto got_y = y.download();
            // Windows that do not overlap sum the same taps in the same order:
            // the same bits. Overlapping ones may contract a multiply-add.
            const bool overlap = s.k > s.stride;
            compare(std::string("pool2d_forward ") + name, got_y, want_y, 0.0);
            // Max pooling's backward adds the same dy values in the CPU's
            // order: the same bits, overlapping windows too.
            const double tolerance = overlap && kind == PoolKind::avg ? 1e-6 : 0.0;
            auto want_relu = want_dx;
            cpu::relu_backward(want_relu.data(), want_relu.data(), x.data(), want_relu.size());
            dx.poison();
            cuda::pool2d_backward(dx.p, ddy.p, dx_.p, y.p, kind, s, nullptr);
            compare(std::string("pool2d_backward ") + name, dx.download(), want_dx, tolerance);
            dx.poison();
            cuda::pool2d_backward_relu(dx.p, ddy.p, dx_.p, y.p, kind, s, nullptr);
            compare(std::string("pool2d_backward_relu (fused) ") + name, dx.download(), want_relu, tolerance);
        }
}

// Batch norm's halves against the CPU's, for LeNet-sized and ResNet-sized
// channels (26x26 maps, 64 channels; ResNet-18's first layer, one channel
// of 28x28 maps at batch 256). The per-channel sums are in double on both
// sides (in another order), so the statistics agree to float rounding;
// every output is within 1e-5 of its scale. A channel is cut into slices
// (one slice below 1,024 values: n3 c5 hw7, n2 c256 hw9, n7 c3 hw100),
// whose sums are added in slice order, and the tickets are back at 0 after
// each call. With the ReLU after the layer, forward and inference are the
// CPU's with it, and so is the backward with its mask.
void test_batch_norm() {
    const NormShape shapes[] = {{3, 5, 7},   {8, 64, 26 * 26}, {2, 256, 9}, {7, 3, 100},
                                {5, 2, 1000}, {256, 1, 28 * 28}, {2, 600, 3}};
    for (const NormShape s : shapes) {
        const std::string name = "batch_norm n" + std::to_string(s.n) + " c" + std::to_string(s.c) + " hw" + std::to_string(s.hw);
        const size_t c = size_t(s.c);
        std::vector<float> x = random(s.size(), 61);
        for (float& v : x) v = 2.0f * v + 0.5f;  // a mean away from 0
        const std::vector<float> dy = random(s.size(), 62), gamma = random(c, 63), beta = random(c, 64);
        std::vector<float> running = random(2 * c, 65);
        for (size_t k = c; k < 2 * c; ++k) running[k] = 1.0f + std::abs(running[k]);  // variances
        std::vector<float> stats(2 * c), saved(2 * c), y(s.size()), sums(2 * c), dx(s.size()), ye(s.size());
        std::vector<float> dgamma(c, 0.25f), dbeta(c, -0.25f), after = running;
        cpu::batch_norm_stats(stats.data(), x.data(), s);
        cpu::batch_norm_forward(y.data(), saved.data(), x.data(), stats.data(), s.per_channel(), gamma.data(), beta.data(), 1e-5f, s);
        cpu::batch_norm_backward_sums(sums.data(), dgamma.data(), dbeta.data(), dy.data(), x.data(), saved.data(), s);
        cpu::batch_norm_backward_data(dx.data(), dy.data(), x.data(), saved.data(), sums.data(), s.per_channel(), gamma.data(), s);
        cpu::batch_norm_inference(ye.data(), x.data(), running.data(), gamma.data(), beta.data(), 1e-5f, s);
        cpu::batch_norm_update_running(after.data(), stats.data(), s.per_channel(), 0.9f, s.c);

        {
            const std::string label = name;
            Buffer<float> dx_in(x), ddy(dy), dgm(gamma), dbt(beta), drun(running), dstats(2 * c), dsaved(2 * c),
                dyo(s.size()), dsums(2 * c), ddx(s.size()), dye(s.size()), ddg(std::vector<float>(c, 0.25f)),
                ddb(std::vector<float>(c, -0.25f)), scratch(cuda::batch_norm_scratch_floats(s) + 1);
            Tickets tickets;
            dyo.poison();
            ddx.poison();
            dstats.poison();
            dsums.poison();
            dsaved.poison();
            // The scratch one float off 8-byte alignment: the sums align their doubles themselves.
            const cuda::Workspace ws{scratch.p + 1, tickets.p};
            cuda::batch_norm_stats(dstats.p, dx_in.p, s, ws, nullptr);
            cuda::batch_norm_forward(dyo.p, dsaved.p, dx_in.p, dstats.p, s.per_channel(), dgm.p, dbt.p, 1e-5f, s, nullptr);
            cuda::batch_norm_backward_sums(dsums.p, ddg.p, ddb.p, ddy.p, dx_in.p, dsaved.p, s, ws, nullptr);
            cuda::batch_norm_backward_data(ddx.p, ddy.p, dx_in.p, dsaved.p, dsums.p, s.per_channel(), dgm.p, s, nullptr);
            cuda::batch_norm_inference(dye.p, dx_in.p, drun.p, dgm.p, dbt.p, 1e-5f, s, nullptr);
            cuda::batch_norm_update_running(drun.p, dstats.p, s.per_channel(), 0.9f, s.c, nullptr);
            compare(label + ": stats", dstats.download(), stats, 1e-6);
            compare(label + ": saved mean and 1/std", dsaved.download(), saved, 1e-5);
            compare(label + ": forward", dyo.download(), y, 1e-5);
            compare(label + ": backward sums", dsums.download(), sums, 1e-5);
            compare(label + ": dgamma (accumulated)", ddg.download(), dgamma, 1e-5);
            compare(label + ": dbeta (accumulated)", ddb.download(), dbeta, 1e-5);
            compare(label + ": backward data", ddx.download(), dx, 1e-5);
            compare(label + ": inference", dye.download(), ye, 1e-5);
            compare(label + ": running statistics", drun.download(), after, 1e-6);
            // From the CPU's statistics, the CPU's bits: a mixed run's
            // replicas hold the running statistics alike.
            Buffer<float> cpu_stats(stats), from_cpu(running);
            cuda::batch_norm_update_running(from_cpu.p, cpu_stats.p, s.per_channel(), 0.9f, s.c, nullptr);
            compare(label + ": running statistics from the CPU's sums, bit for bit", from_cpu.download(), after, 0.0);
            check_tickets(tickets, label);
            // With the ReLU after the layer (in the normalising kernel): the
            // CPU's with its ReLU.
            std::vector<float> y_relu(s.size()), ye_relu(s.size()), saved_relu(2 * c);
            cpu::batch_norm_forward(y_relu.data(), saved_relu.data(), x.data(), stats.data(), s.per_channel(),
                                    gamma.data(), beta.data(), 1e-5f, s, true);
            cpu::batch_norm_inference(ye_relu.data(), x.data(), running.data(), gamma.data(), beta.data(), 1e-5f, s,
                                      true);
            dyo.poison();
            dye.poison();
            cuda::batch_norm_forward(dyo.p, dsaved.p, dx_in.p, dstats.p, s.per_channel(), dgm.p, dbt.p, 1e-5f, s,
                                     nullptr, true);
            Buffer<float> first_running(running);
            cuda::batch_norm_inference(dye.p, dx_in.p, first_running.p, dgm.p, dbt.p, 1e-5f, s, nullptr, true);
            compare(label + ": forward with its ReLU", dyo.download(), y_relu, 1e-5);
            compare(label + ": inference with its ReLU", dye.download(), ye_relu, 1e-5);
            // Again, on the same scratch and tickets: the same bits.
            const std::vector<float> once = dstats.download(), sums_once = dsums.download();
            cuda::batch_norm_stats(dstats.p, dx_in.p, s, ws, nullptr);
            cuda::batch_norm_backward_sums(dsums.p, ddg.p, ddb.p, ddy.p, dx_in.p, dsaved.p, s, ws, nullptr);
            compare(label + ": stats again, the same bits", dstats.download(), once, 0.0);
            compare(label + ": backward sums again, the same bits", dsums.download(), sums_once, 0.0);
            // Its backward: dy masked by the ReLU's output (the CPU's, so
            // that both sides mask the same values), in place, then the
            // sums: the masked dy is the CPU's bit for bit, the sums and the
            // data gradient from them the CPU's within rounding.
            std::vector<float> masked = dy, sums_relu(2 * c), dgamma_relu(c, 0.25f), dbeta_relu(c, -0.25f),
                dx_relu(s.size());
            cpu::batch_norm_backward_sums_relu(sums_relu.data(), dgamma_relu.data(), dbeta_relu.data(), masked.data(),
                                               y_relu.data(), x.data(), saved.data(), s);
            cpu::batch_norm_backward_data(dx_relu.data(), masked.data(), x.data(), saved.data(), sums_relu.data(),
                                          s.per_channel(), gamma.data(), s);
            Buffer<float> dmasked(dy), relu_y(y_relu), dg_relu(std::vector<float>(c, 0.25f)),
                db_relu(std::vector<float>(c, -0.25f));
            dsums.poison();
            ddx.poison();
            cuda::batch_norm_backward_sums_relu(dsums.p, dg_relu.p, db_relu.p, dmasked.p, relu_y.p, dx_in.p,
                                                dsaved.p, s, ws, nullptr);
            cuda::batch_norm_backward_data(ddx.p, dmasked.p, dx_in.p, dsaved.p, dsums.p, s.per_channel(), dgm.p, s,
                                           nullptr);
            compare(label + ": dy masked by its ReLU, bit for bit", dmasked.download(), masked, 0.0);
            compare(label + ": backward sums with its ReLU", dsums.download(), sums_relu, 1e-5);
            compare(label + ": dgamma with its ReLU", dg_relu.download(), dgamma_relu, 1e-5);
            compare(label + ": dbeta with its ReLU", db_relu.download(), dbeta_relu, 1e-5);
            compare(label + ": backward data with its ReLU", ddx.download(), dx_relu, 1e-5);
            check_tickets(tickets, label + " (with its ReLU)");
        }
    }
}

// Several layers' running statistics moved by one launch, each the CPU's
// bits: channels 1,
// 64 and 300 (more than a block's threads), statistics from 3 samples of
// 5 values a channel; more layers than a call takes are refused.
void test_running_all() {
    const int channels[] = {1, 64, 300};
    std::vector<std::vector<float>> running, stats, want;
    for (int l = 0; l < 3; ++l) {
        const size_t c = size_t(channels[l]);
        NormShape s{3, channels[l], 5};
        std::vector<float> x = random(s.size(), 70 + uint64_t(l)), st(2 * c), r = random(2 * c, 80 + uint64_t(l));
        cpu::batch_norm_stats(st.data(), x.data(), s);
        for (size_t k = c; k < 2 * c; ++k) r[k] = 1.0f + std::abs(r[k]);  // variances
        std::vector<float> moved = r;
        cpu::batch_norm_update_running(moved.data(), st.data(), s.per_channel(), 0.9f, s.c);
        running.push_back(r);
        stats.push_back(st);
        want.push_back(moved);
    }
    {
        std::vector<std::unique_ptr<Buffer<float>>> r, st;
        std::vector<RunningUpdate> layers;
        for (int l = 0; l < 3; ++l) {
            r.push_back(std::make_unique<Buffer<float>>(running[size_t(l)]));
            st.push_back(std::make_unique<Buffer<float>>(stats[size_t(l)]));
            layers.push_back({r.back()->p, st.back()->p, 15.0, channels[l]});
        }
        cuda::batch_norm_update_running_all(layers.data(), 3, 0.9f, nullptr);
        for (int l = 0; l < 3; ++l)
            compare("batch_norm_update_running_all: layer of " +
                        std::to_string(channels[l]) + " channels = the CPU's, bit for bit",
                    r[size_t(l)]->download(), want[size_t(l)], 0.0);
        std::vector<RunningUpdate> many(size_t(running_updates_a_call) + 1, layers[0]);
        bool refused = false;
        try {
            cuda::batch_norm_update_running_all(many.data(), int(many.size()), 0.9f, nullptr);
        } catch (const std::invalid_argument&) {
            refused = true;
        }
        report(refused, "batch_norm_update_running_all: " + std::to_string(many.size()) + " layers in one call refused",
               "");
    }
}

void test_elementwise() {
    for (size_t count : {size_t(1), size_t(255), size_t(257), size_t(100003)}) {
        const std::string n = " count " + std::to_string(count);
        const auto x = random(count, 40), dy = random(count, 41);
        Buffer<float> dx_(x), ddy(dy), out(count);
        std::vector<float> want(count);
        cpu::relu_forward(want.data(), x.data(), count);
        out.poison();
        cuda::relu_forward(out.p, dx_.p, count, nullptr);
        compare("relu_forward" + n, out.download(), want, 0.0);
        cpu::relu_backward(want.data(), dy.data(), x.data(), count);
        out.poison();
        cuda::relu_backward(out.p, ddy.p, dx_.p, count, nullptr);
        compare("relu_backward" + n, out.download(), want, 0.0);

        // params - scale * grads: one rounding with an FMA, two without; the
        // CPU side contracts or not depending on -march: 1 ulp apart at most.
        std::vector<float> params = x;
        cpu::sgd_update(params.data(), dy.data(), 0.37f, count);
        Buffer<float> p(x);
        cuda::sgd_update(p.p, ddy.p, 0.37f, count, nullptr);
        compare("sgd_update" + n, p.download(), params, 2.4e-7);

        for (int parts = 1; parts <= 3; ++parts) {
            const auto staged = random(count * size_t(parts), 42);
            std::vector<float> acc = x;
            cpu::sum_into(acc.data(), staged.data(), parts, count);
            Buffer<float> a(x), st(staged);
            cuda::sum_into(a.p, st.p, parts, count, nullptr);
            compare("sum_into parts " + std::to_string(parts) + n, a.download(), acc, 0.0);
        }

        // A residual add with its ReLU, and its backward (with the other
        // input's gradient overwritten, then added to): the CPU's bits.
        {
            const std::string& label = n;
            std::vector<float> sum = x;
            cpu::add_relu(sum.data(), dy.data(), count);
            Buffer<float> a(x);
            cuda::add_relu(a.p, ddy.p, count, nullptr);
            compare("add_relu" + label, a.download(), sum, 0.0);
            const auto d0 = random(count, 43);
            for (const bool accumulate : {false, true}) {
                std::vector<float> masked = dy, d_other = d0;
                cpu::add_relu_backward(masked.data(), d_other.data(), sum.data(), count, accumulate);
                Buffer<float> gdy(dy), gother(d0);
                cuda::add_relu_backward(gdy.p, gother.p, a.p, count, accumulate, nullptr);
                const std::string what = label + (accumulate ? ", added to the other's gradient" : "");
                compare("add_relu_backward: dy masked" + what, gdy.download(), masked, 0.0);
                compare("add_relu_backward: the other's gradient" + what, gother.download(), d_other, 0.0);
            }
        }

        // The divergence watch: a NaN, +inf or -inf anywhere (first, last, middle
        // element) lowers the mark to the step, never raises it; finite data leaves it.
        const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                                  -std::numeric_limits<float>::infinity()};
        for (size_t at : {size_t(0), count / 2, count - 1}) {
            for (float special : specials) {
                for (int32_t before : {100, 3}) {
                    std::vector<float> bad = x;
                    bad[at] = special;
                    int32_t want_mark = before;
                    cpu::note_nonfinite(&want_mark, bad.data(), count, 5);
                    Buffer<float> db(bad);
                    Buffer<int32_t> mark(std::vector<int32_t>{before});
                    cuda::note_nonfinite(mark.p, db.p, count, 5, nullptr);
                    report(mark.download()[0] == want_mark && want_mark == std::min(before, 5),
                           "note_nonfinite at " + std::to_string(at) + n);
                }
            }
        }
        Buffer<int32_t> mark(std::vector<int32_t>{100});
        cuda::note_nonfinite(mark.p, dx_.p, count, 5, nullptr);
        report(mark.download()[0] == 100, "note_nonfinite leaves finite data alone" + n);

        // The fused pass: the update of the first `count - 3` floats and the
        // check of all of them, as the two kernels above one after the other
        // (same bits); a NaN in the checked tail only is still seen.
        for (bool tail_bad : {false, true}) {
            if (count <= 3) break;
            std::vector<float> g = dy;
            if (tail_bad) g[count - 1] = std::numeric_limits<float>::quiet_NaN();
            const size_t updated = count - 3;
            Buffer<float> p1(x), p2(x), dg(g);
            Buffer<int32_t> m1(std::vector<int32_t>{100}), m2(std::vector<int32_t>{100});
            cuda::note_nonfinite(m1.p, dg.p, count, 7, nullptr);
            cuda::sgd_update(p1.p, dg.p, 0.37f, updated, nullptr);
            cuda::sgd_update_checked(p2.p, dg.p, 0.37f, updated, m2.p, count, 7, nullptr);
            compare(std::string("sgd_update_checked = note_nonfinite + sgd_update") + (tail_bad ? ", NaN in the tail" : "") + n,
                    p2.download(), p1.download(), 0.0);
            report(m2.download()[0] == m1.download()[0] && m1.download()[0] == (tail_bad ? 7 : 100),
                   std::string("sgd_update_checked marks the step") + (tail_bad ? " (NaN in the checked tail)" : " (none)") + n);
        }
    }

    // gather_samples: bytes to [0, 1] and labels, by index.
    const int count = 37, pixels = 784, stored = 100;
    std::vector<uint8_t> images(size_t(stored) * pixels), labels(stored);
    std::vector<uint32_t> index(count);
    Rng rng(9, 9);
    for (auto& v : images) v = uint8_t(rng.below(256));
    for (auto& v : labels) v = uint8_t(rng.below(10));
    for (auto& v : index) v = uint32_t(rng.below(stored));
    std::vector<float> want_x(size_t(count) * pixels);
    std::vector<int32_t> want_l(count);
    cpu::gather_samples(want_x.data(), want_l.data(), images.data(), labels.data(), index.data(), count, pixels);
    Buffer<uint8_t> di(images), dl(labels);
    Buffer<uint32_t> dindex(index);
    Buffer<float> x(want_x.size());
    Buffer<int32_t> l{size_t(count)};
    x.poison();
    l.poison();
    cuda::gather_samples(x.p, l.p, di.p, dl.p, dindex.p, count, pixels, nullptr);
    compare("gather_samples images", x.download(), want_x, 0.0);
    report(l.download() == want_l, "gather_samples labels");

    for (int n : {1, 37, 300}) {  // 300: more rows than the kernel's 256 threads
        const int classes = 10;
        const auto logits = random(size_t(n) * classes, 50);
        std::vector<int32_t> lab(static_cast<size_t>(n));
        for (auto& v : lab) v = int32_t(rng.below(classes));
        std::vector<float> want_d(logits.size());
        const double want_loss = cpu::softmax_cross_entropy(want_d.data(), logits.data(), lab.data(), n, classes);
        Buffer<float> dlog(logits), d(logits.size());
        Buffer<int32_t> dlab(lab);
        Buffer<double> loss(std::vector<double>{0.5});  // the kernel adds to what is there
        d.poison();
        cuda::softmax_cross_entropy(d.p, loss.p, dlog.p, dlab.p, n, classes, nullptr);
        // expf/logf of CUDA and glibc differ by an ulp or two.
        compare("softmax_cross_entropy dlogits n" + std::to_string(n), d.download(), want_d, 1e-6);
        const double got_loss = loss.download()[0] - 0.5;
        report(std::abs(got_loss - want_loss) <= 1e-6 * std::max(1.0, std::abs(want_loss)),
               "softmax_cross_entropy loss n" + std::to_string(n),
               std::to_string(got_loss) + " vs " + std::to_string(want_loss));

        const auto tied = small_integers(size_t(n) * classes, 51);  // ties: the first maximum wins
        Buffer<float> dt(tied);
        Buffer<unsigned long long> correct(std::vector<unsigned long long>{7});
        cuda::count_correct(correct.p, dt.p, dlab.p, n, classes, nullptr);
        const int64_t want_correct = cpu::count_correct(tied.data(), lab.data(), n, classes);
        report(int64_t(correct.download()[0]) - 7 == want_correct, "count_correct n" + std::to_string(n));
    }
}

}  // namespace dpt::gpu_test
