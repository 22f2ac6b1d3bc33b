// The GPU tests of the dense layers, against their CPU twins: forward and
// backward, through the pooling before, the last layer with the loss, and
// LeNet's dense head in few kernels.
#include <map>
#include <stdexcept>

#include "cuda/kernels.hpp"
#include "gpu_checks.hpp"

namespace dpt::gpu_test {

void test_dense() {
    struct Size { int n, in, out; };
    // The larger two split every product along k.
    for (const Size z : {Size{1, 1, 1}, Size{5, 17, 3}, Size{67, 800, 128}, Size{256, 128, 10}}) {
        char name[80];
        std::snprintf(name, sizeof name, "n%d in%d out%d", z.n, z.in, z.out);
        const auto x = random(size_t(z.n) * z.in, 30), w = random(size_t(z.out) * z.in, 31), b = random(size_t(z.out), 32);
        const auto dy = random(size_t(z.n) * z.out, 33), dw0 = random(w.size(), 34), db0 = random(b.size(), 35);
        Buffer<float> dx_(x), dw_(w), db_(b), ddy(dy), y(size_t(z.n) * z.out), dx(x.size()), gw(dw0), gb(db0);
        Buffer<float> scratch(std::max<size_t>(cuda::dense_scratch_floats(z.n, z.in, z.out), 1));

        std::vector<float> want(size_t(z.n) * z.out), want_relu;
        cpu::dense_forward(want.data(), x.data(), w.data(), b.data(), z.n, z.in, z.out);
        want_relu = want;
        cpu::relu_forward(want_relu.data(), want_relu.data(), want_relu.size());
        std::vector<float> want_dx(x.size()), want_dw = dw0, want_db = db0;
        cpu::dense_backward(want_dx.data(), want_dw.data(), want_db.data(), dy.data(), x.data(), w.data(), z.n, z.in,
                            z.out);
        std::vector<float> relu_x = x, want_relu_dx(x.size()), want_relu_dw = dw0, unused_db = db0;
        cpu::relu_forward(relu_x.data(), relu_x.data(), relu_x.size());
        cpu::dense_backward_relu(want_relu_dx.data(), want_relu_dw.data(), unused_db.data(), dy.data(), relu_x.data(),
                                 w.data(), z.n, z.in, z.out);
        Buffer<float> dr_(relu_x);
        Tickets tickets;
        const cuda::Workspace ws{scratch.p, tickets.p};
        const std::string label = name;
        auto check = [&](const std::string& what, const std::vector<float>& got, const std::vector<float>& want) {
            compare(what + label, got, want, gemm_tol);
        };
        y.poison();
        scratch.poison();
        cuda::dense_forward(y.p, dx_.p, dw_.p, db_.p, z.n, z.in, z.out, ws, nullptr);
        check("dense_forward ", y.download(), want);
        y.poison();
        scratch.poison();
        cuda::dense_forward_relu(y.p, dx_.p, dw_.p, db_.p, z.n, z.in, z.out, ws, nullptr);
        check("dense_forward_relu (fused) ", y.download(), want_relu);

        // Plain, then with the ReLU before the layer in the same pass
        // (x then stands for the ReLU's output, half of it zero).
        for (const bool relu : {false, true}) {
            const std::string what = relu ? "dense_backward_relu (fused) " : "dense_backward ";
            dx.poison();
            scratch.poison();
            gw.upload(dw0);
            gb.upload(db0);
            if (relu) cuda::dense_backward_relu(dx.p, gw.p, gb.p, ddy.p, dr_.p, dw_.p, z.n, z.in, z.out, ws, nullptr);
            else cuda::dense_backward(dx.p, gw.p, gb.p, ddy.p, dx_.p, dw_.p, z.n, z.in, z.out, ws, nullptr);
            check(what + "dx ", dx.download(), relu ? want_relu_dx : want_dx);
            check(what + "dw ", gw.download(), relu ? want_relu_dw : want_dw);
            check(what + "db ", gb.download(), want_db);
        }
        check_tickets(tickets, "dense " + label);
    }
}

// A dense layer after a pooling of a ReLU's output (dense_backward_pool):
// the gradient of the pooled y against the CPU's dense_backward and
// pool2d_backward_relu, and bit for bit against the GPU's own two
// launchers. Where the windows do not overlap, the data gradient is stored
// through the pooling without dx, by the product launched with the weight
// gradient's (its splits added by a kernel after them): dx is left as it
// was.
// LeNet's conv2 (9x9 by 2/2: a last row and column no window covers),
// ResNet-18's last pooling (3x3 by 3/3), windows apart (2 by 3), and
// overlapping ones (3 by 2), which keep the two launchers.
void test_dense_pool() {
    struct Case { PoolShape ps; int out; };
    for (const Case z : {Case{{67, 50, 9, 9, 2, 2}, 128}, Case{{5, 256, 3, 3, 3, 3}, 10},
                         Case{{3, 2, 8, 7, 2, 3}, 5}, Case{{2, 3, 7, 7, 3, 2}, 4}})
        for (PoolKind kind : {PoolKind::avg, PoolKind::max}) {
            const PoolShape& ps = z.ps;
            const int n = ps.n, in = int(ps.out_size() / size_t(n)), out = z.out;
            char name[120];
            std::snprintf(name, sizeof name, "%s n%d c%d %dx%d k%d stride %d -> %d", kind == PoolKind::avg ? "avg" : "max",
                          n, ps.c, ps.h, ps.w, ps.k, ps.stride, out);
            // y: a ReLU's output, a third of it zero (ties for max).
            std::vector<float> y = kind == PoolKind::max ? small_integers(ps.in_size(), 40) : random(ps.in_size(), 40);
            for (float& v : y) v = v > -0.3f ? v : 0.0f;
            std::vector<float> x(ps.out_size());
            cpu::pool2d_forward(x.data(), y.data(), kind, ps);
            const auto w = random(size_t(out) * in, 41), dy = random(size_t(n) * out, 42);
            const auto dw0 = random(w.size(), 43), db0 = random(size_t(out), 44);
            std::vector<float> want_gy(ps.in_size()), want_dx(x.size()), want_dw = dw0, want_db = db0;
            cpu::dense_backward_pool(want_gy.data(), want_dx.data(), want_dw.data(), want_db.data(), dy.data(),
                                     x.data(), w.data(), n, in, out, y.data(), kind, ps);
            Buffer<float> gy_(y), gx(x), gw_(w), gdy(dy), gy(y.size()), dx(x.size()), dw(dw0), db(db0);
            Buffer<float> scratch(cuda::dense_scratch_floats(n, in, out, Math::fp32));
            Tickets tickets;
            const cuda::Workspace ws{scratch.p, tickets.p};
            const std::string label = name;
            // The two launchers, then the fused one.
            gy.poison();
            dx.poison();
            dw.upload(dw0);
            db.upload(db0);
            cuda::dense_backward(dx.p, dw.p, db.p, gdy.p, gx.p, gw_.p, n, in, out, ws, nullptr);
            cuda::pool2d_backward_relu(gy.p, dx.p, gy_.p, gx.p, kind, ps, nullptr);
            const auto two_gy = gy.download(), two_dw = dw.download(), two_db = db.download();
            gy.poison();
            dx.poison();
            dw.upload(dw0);
            db.upload(db0);
            cuda::dense_backward_pool(gy.p, dx.p, dw.p, db.p, gdy.p, gx.p, gw_.p, n, in, out, gy_.p, kind, ps, ws,
                                      nullptr);
            const auto got_gy = gy.download();
            compare("dense_backward_pool grad y " + label, got_gy, want_gy, gemm_tol);
            compare("dense_backward_pool dw " + label, dw.download(), want_dw, gemm_tol);
            compare("dense_backward_pool db " + label, db.download(), want_db, gemm_tol);
            compare("dense_backward_pool grad y = the two launchers' " + label, got_gy, two_gy, 0.0);
            compare("dense_backward_pool dw = the two launchers' " + label, dw.download(), two_dw, 0.0);
            compare("dense_backward_pool db = the two launchers' " + label, db.download(), two_db, 0.0);
            const auto got_dx = dx.download();
            if (ps.k <= ps.stride) {  // windows apart: one launch
                const auto kept = std::count_if(got_dx.begin(), got_dx.end(), [](float f) { return std::isnan(f); });
                report(size_t(kept) == got_dx.size(), "dense_backward_pool " + label + ": one product, dx left alone",
                       std::to_string(kept) + " of " + std::to_string(got_dx.size()) + " values of dx as they were");
            } else {
                compare("dense_backward_pool dx on the way " + label, got_dx, want_dx, gemm_tol);
            }
            check_tickets(tickets, "dense_backward_pool " + label);
        }
}

// The last dense layer and the loss in one launch
// (dense_softmax_cross_entropy), against the CPU's three
// calls: dense_forward, softmax_cross_entropy, dense_backward (or _relu).
// LeNet's last layer at batch 256 and at a last, smaller part; a group of
// samples cut short (37); the most inputs and classes it takes, and more
// samples than a block has threads (300); one sample. Each twice: the same
// bits both times, whichever blocks finish last.
void test_dense_loss() {
    {
        const std::string label;
        struct Case { int n, in, classes; };
        for (const Case z :
             {Case{256, 128, 10}, Case{100, 128, 10}, Case{37, 50, 7}, Case{300, 1024, 32}, Case{1, 3, 2}})
            for (const bool relu : {false, true}) {
                char name[100];
                std::snprintf(name, sizeof name, "dense_softmax_cross_entropy n%d in%d classes%d%s%s", z.n, z.in,
                              z.classes, relu ? " (ReLU before)" : "", label.c_str());
                const auto [x, w, b, dw0, db0, labels] = loss_inputs(z.n, z.in, z.classes, relu, 60);

                std::vector<float> want_z(size_t(z.n) * z.classes), want_g(want_z.size()), want_dx(x.size());
                std::vector<float> want_dw = dw0, want_db = db0;
                cpu::dense_forward(want_z.data(), x.data(), w.data(), b.data(), z.n, z.in, z.classes);
                const double want_loss = cpu::softmax_cross_entropy(want_g.data(), want_z.data(), labels.data(), z.n,
                                                                    z.classes);
                if (relu)
                    cpu::dense_backward_relu(want_dx.data(), want_dw.data(), want_db.data(), want_g.data(), x.data(),
                                             w.data(), z.n, z.in, z.classes);
                else
                    cpu::dense_backward(want_dx.data(), want_dw.data(), want_db.data(), want_g.data(), x.data(),
                                        w.data(), z.n, z.in, z.classes);

                Buffer<float> gx(x), gw(w), gb(b), logits(want_z.size()), dlogits(want_z.size()), dx(x.size()),
                    dw(dw0), db(db0);
                Buffer<int32_t> glabels(labels);
                Buffer<double> loss(std::vector<double>{0.5});  // the kernel adds to what is there
                Buffer<float> scratch(cuda::dense_scratch_floats(z.n, z.in, z.classes));
                Tickets tickets;
                std::vector<std::vector<float>> first;
                double first_loss = 0;
                for (int run = 0; run < 2; ++run) {
                    for (Buffer<float>* p : {&logits, &dlogits, &dx, &scratch}) p->poison();
                    dw.upload(dw0);
                    db.upload(db0);
                    loss.upload({0.5});
                    cuda::dense_softmax_cross_entropy(logits.p, dlogits.p, loss.p, glabels.p, dx.p, dw.p, db.p, gx.p,
                                                      gw.p, gb.p, z.n, z.in, z.classes, relu, {scratch.p, tickets.p},
                                                      nullptr);
                    const std::vector<std::vector<float>> got = {logits.download(), dlogits.download(), dx.download(),
                                                                 dw.download(), db.download()};
                    const double got_loss = loss.download()[0] - 0.5;
                    if (run == 1) {
                        const char* names[] = {"logits", "dlogits", "dx", "dw", "db"};
                        for (size_t k = 0; k < got.size(); ++k)
                            compare(std::string(name) + ": " + names[k] + " again, the same bits", got[k], first[k],
                                    0.0);
                        report(got_loss == first_loss, std::string(name) + ": the loss again, the same bits");
                        break;
                    }
                    first = got, first_loss = got_loss;
                    compare(std::string(name) + ": logits", got[0], want_z, gemm_tol);
                    compare(std::string(name) + ": dlogits", got[1], want_g, gemm_tol);
                    compare(std::string(name) + ": dx", got[2], want_dx, gemm_tol);
                    compare(std::string(name) + ": dw", got[3], want_dw, gemm_tol);
                    compare(std::string(name) + ": db", got[4], want_db, gemm_tol);
                    if (relu) {
                        size_t leaked = 0;
                        for (size_t i = 0; i < x.size(); ++i) leaked += x[i] == 0.0f && got[2][i] != 0.0f;
                        report(leaked == 0, std::string(name) + ": dx is 0 where the ReLU's output is",
                               std::to_string(leaked) + " not");
                    }
                    report(std::abs(got_loss - want_loss) <= gemm_tol * std::max(1.0, std::abs(want_loss)),
                           std::string(name) + ": loss", std::to_string(got_loss) + " vs " + std::to_string(want_loss));
                    check_tickets(tickets, name);
                }
            }
    }
    // Beyond what its kernel holds: refused at the launch, not run wrong.
    bool refused = false;
    try {
        cuda::dense_softmax_cross_entropy(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                          nullptr, nullptr, 4, cuda::dense_loss_in_most + 1, 10, false,
                                          {nullptr, nullptr}, nullptr);
    } catch (const std::invalid_argument&) {
        refused = true;
    }
    report(refused && !cuda::dense_loss_fits(4, 128, cuda::dense_loss_classes_most + 1) &&
               cuda::dense_loss_fits(256, 128, 10),
           "dense_softmax_cross_entropy refuses more inputs or classes than it holds");
}

// A dense layer with its ReLU, then the last layer with the loss, as
// training runs them (KernelSet: loss_input): the first layer's forward
// leaves its splits' partial sums to the loss's kernel
// (dense_forward_relu_for_loss), which adds them, the bias and the ReLU as
// it loads each sample. Against the two run whole: every
// output the same bits (the first layer's y, the logits, dlogits, dx, dw,
// db and the loss), and against the CPU. LeNet's head at batch 256 and at a
// last part of 100 samples (split 16 ways); 40 samples of 24 inputs, too
// short to split, and 1,100 outputs, more than the loss takes: run whole,
// nothing left. And a loss handed a layer that is not its input refuses it.
void test_dense_head() {
    struct Case { int n, in, hidden, classes; bool left; };
    for (const Case z : {Case{256, 800, 128, 10, true}, Case{100, 800, 128, 10, true}, Case{40, 24, 64, 10, false},
                         Case{3, 64, cuda::dense_loss_in_most + 76, 5, false}}) {
        char name[100];
        std::snprintf(name, sizeof name, "dense head n%d in%d hidden%d classes%d", z.n, z.in, z.hidden, z.classes);
        const auto x = random(size_t(z.n) * z.in, 70), w1 = random(size_t(z.hidden) * z.in, 71);
        const auto b1 = random(size_t(z.hidden), 72), w2 = random(size_t(z.classes) * z.hidden, 73);
        const auto b2 = random(size_t(z.classes), 74), dw0 = random(w2.size(), 75), db0 = random(b2.size(), 76);
        std::vector<int32_t> labels(size_t(z.n));
        Rng rng(77, 77);
        for (auto& l : labels) l = int32_t(rng.below(uint64_t(z.classes)));
        std::vector<float> want_y(size_t(z.n) * z.hidden);
        cpu::dense_forward(want_y.data(), x.data(), w1.data(), b1.data(), z.n, z.in, z.hidden);
        cpu::relu_forward(want_y.data(), want_y.data(), want_y.size());

        Buffer<float> gx(x), gw1(w1), gb1(b1), gw2(w2), gb2(b2), y(want_y.size()), logits(size_t(z.n) * z.classes),
            dlogits(logits.n), dy(want_y.size()), dw(dw0), db(db0);
        Buffer<int32_t> glabels(labels);
        Buffer<double> loss(std::vector<double>{0.0});
        Buffer<float> scratch(std::max(cuda::dense_scratch_floats(z.n, z.in, z.hidden),
                                       cuda::dense_scratch_floats(z.n, z.hidden, z.classes)));
        Tickets tickets;
        const cuda::Workspace ws{scratch.p, tickets.p};
        std::vector<std::vector<float>> whole;
        double whole_loss = 0;
        for (const bool leaving : {false, true}) {
            const std::string label = std::string(name) + (leaving ? " (left to the loss)" : " (whole)");
            for (Buffer<float>* p : {&y, &logits, &dlogits, &dy, &scratch}) p->poison();
            dw.upload(dw0);
            db.upload(db0);
            loss.upload({0.0});
            cuda::UnfinishedDense left;
            if (leaving) left = cuda::dense_forward_relu_for_loss(y.p, gx.p, gw1.p, gb1.p, z.n, z.in, z.hidden, ws, nullptr);
            else cuda::dense_forward_relu(y.p, gx.p, gw1.p, gb1.p, z.n, z.in, z.hidden, ws, nullptr);
            if (leaving)
                report((left.y != nullptr) == z.left,
                       label + (z.left ? ": the forward leaves its splits to the loss" : ": the forward runs whole"));
            if (z.hidden > cuda::dense_loss_in_most) {  // beyond the loss kernel: the forward alone
                compare(label + ": y", y.download(), want_y, gemm_tol);
                continue;
            }
            cuda::dense_softmax_cross_entropy(logits.p, dlogits.p, loss.p, glabels.p, dy.p, dw.p, db.p, y.p, gw2.p,
                                              gb2.p, z.n, z.hidden, z.classes, true, ws, nullptr, left);
            const std::vector<std::vector<float>> got = {y.download(),  logits.download(), dlogits.download(),
                                                         dy.download(), dw.download(),     db.download()};
            const double got_loss = loss.download()[0];
            check_tickets(tickets, label);
            compare(label + ": y", got[0], want_y, gemm_tol);
            if (!leaving) {
                whole = got, whole_loss = got_loss;
                continue;
            }
            const char* names[] = {"y", "logits", "dlogits", "dx", "dw", "db"};
            for (size_t k = 0; k < got.size(); ++k)
                compare(label + ": " + names[k] + " = run whole", got[k], whole[k], 0.0);
            report(got_loss == whole_loss, label + ": the loss = run whole");
        }
    }
    // A loss handed the unfinished layer of another buffer: refused at the
    // launch, where it would have read splits that are not its input's.
    bool refused = false;
    try {
        Tickets tickets;  // (without, it would be refused for that)
        float other = 0;
        const cuda::UnfinishedDense left{&other, nullptr, nullptr, 16, 4, 128};
        cuda::dense_softmax_cross_entropy(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                          nullptr, nullptr, 4, 128, 10, true, {nullptr, tickets.p}, nullptr, left);
    } catch (const std::invalid_argument&) {
        refused = true;
    }
    report(refused, "dense_softmax_cross_entropy refuses an unfinished layer that is not its input");
}

}  // namespace dpt::gpu_test
