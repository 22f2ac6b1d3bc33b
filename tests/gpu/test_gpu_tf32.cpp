// The GPU tests of --tf32 (shapes.hpp: Math): the conv and dense launchers
// on the tensor cores against their CPU twins, the same products of
// operands rounded to TF32 (cpu::round_to_tf32, the CPU's own rounding) in
// FP32, at FP32's tolerance; and against the FP32 results, from which they
// must differ by TF32's rounding (about 1e-3 of the operands). Shapes on
// every tile of version 2 (32, 64 and 128 rows), LeNet's at 7 and 64
// samples, a batch and sizes no tile divides.
#include <stdexcept>

#include "cuda/kernels.hpp"
#include "cuda/versions.hpp"
#include "gpu_checks.hpp"
#include "model/lenet.hpp"

namespace dpt::gpu_test {

namespace {

// --tf32's checks: v rounded to TF32 as the CPU twin rounds it; and a
// result held to its TF32 twin at FP32's tolerance, and away from the FP32
// result by TF32's rounding, so that a launcher that ignored Math::tf32
// fails.
std::vector<float> rounded(std::vector<float> v) {
    cpu::round_to_tf32(v.data(), v.data(), v.size());
    return v;
}

void compare_tf32(const std::string& what, const std::vector<float>& got, const std::vector<float>& twin,
                  const std::vector<float>& fp32) {
    compare(what + ": the TF32 twin", got, twin, gemm_tol);
    double scale = 1.0, apart = 0.0;
    for (float w : fp32) scale = std::max(scale, double(std::abs(w)));
    for (size_t i = 0; i < fp32.size(); ++i) apart = std::max(apart, std::abs(double(got[i]) - double(fp32[i])));
    report(apart > 1e-5 * scale, what + ": not the FP32 result", "largest |diff| from FP32 " + std::to_string(apart));
}

// conv2d_forward_relu_pool of s (Math::tf32) against the CPU's calls on
// operands rounded to TF32, and apart from FP32's; returns the twin's ReLU
// output and pooling.
struct Tf32Forward {
    std::vector<float> y, pooled;
};

Tf32Forward check_tf32_forward_pool(const ConvShape& s, PoolKind kind, const PoolShape& ps, const std::vector<float>& x,
                                    const std::vector<float>& w, const std::vector<float>& b, const std::string& name) {
    ConvShape fp = s;
    fp.math = Math::fp32;
    const auto rx = rounded(x), rw = rounded(w);
    std::vector<float> cpu_scratch(cpu::conv2d_scratch_floats(fp));
    Tf32Forward twin{std::vector<float>(s.out_size()), std::vector<float>(ps.out_size())};
    std::vector<float> fp32(s.out_size());
    cpu::conv2d_forward_gemm(twin.y.data(), rx.data(), rw.data(), b.data(), fp, cpu_scratch.data());
    cpu::conv2d_forward_gemm(fp32.data(), x.data(), w.data(), b.data(), fp, cpu_scratch.data());
    cpu::relu_forward(twin.y.data(), twin.y.data(), twin.y.size());
    cpu::relu_forward(fp32.data(), fp32.data(), fp32.size());
    cpu::pool2d_forward(twin.pooled.data(), twin.y.data(), kind, ps);
    Buffer<float> dx(x), dw(w), db(b), scratch(cuda::conv2d_scratch_floats(s)), y(s.out_size()), pooled(ps.out_size());
    y.poison();
    pooled.poison();
    cuda::conv2d_forward_relu_pool(y.p, pooled.p, dx.p, dw.p, db.p, s, kind, ps, scratch.p, nullptr);
    compare_tf32("conv2d_forward_relu_pool y " + name, y.download(), twin.y, fp32);
    compare("conv2d_forward_relu_pool pooled " + name + ": the TF32 twin", pooled.download(), twin.pooled, gemm_tol);
    return twin;
}

// LeNet's conv1 with --tf32 as training calls it: the forward with the
// ReLU and the pooling after it, gathered from the dataset where the
// version gathers (`gathers`: tf32 version 2, on the direct kernel), and
// the weight gradient through the pooling; against the CPU's calls on
// operands rounded to TF32 (the bias's sum on dy as it is), and apart from
// FP32's.
void test_tf32_first_layer(const std::string& version, bool gathers) {
    for (const int n : {7, 64})
        for (PoolKind kind : {PoolKind::avg, PoolKind::max}) {
            ConvShape s = lenet::model().conv_shapes(n)[0];
            s.math = Math::tf32;
            ConvShape fp = s;
            fp.math = Math::fp32;
            const PoolShape ps{n, s.oc, s.oh(), s.ow(), 2, 2};
            const std::string name =
                describe(s) + (kind == PoolKind::avg ? ", avg pool" : ", max pool") + " --tf32" + version;
            report(cuda::conv2d_forward_gathers(s) == gathers,
                   name + (gathers ? ": the first layer gathers its batch" : ": the first layer does not gather"));
            const auto x = random(s.in_size(), 40), w = random(s.weight_size(), 41), b = random(size_t(s.oc), 42);
            const auto [twin, twin_pooled] = check_tf32_forward_pool(s, kind, ps, x, w, b, name);
            const auto rx = rounded(x);
            std::vector<float> cpu_scratch(cpu::conv2d_scratch_floats(fp));
            Buffer<float> dx(x), scratch(cuda::conv2d_scratch_floats(s));

            // dy through the pooling, from the twin's y and pooled output (so
            // that both sides pick the same window maxima).
            const auto d_pooled = random(ps.out_size(), 43);
            const auto dw0 = random(s.weight_size(), 44), db0 = random(size_t(s.oc), 45);
            std::vector<float> dy(s.out_size());
            cpu::pool2d_backward_relu(dy.data(), d_pooled.data(), twin.data(), twin_pooled.data(), kind, ps);
            const auto rdy = rounded(dy);
            std::vector<float> twin_dw = dw0, twin_db = db0, fp32_dw = dw0, unused = db0;
            cpu::conv2d_backward_weight_gemm(twin_dw.data(), unused.data(), rdy.data(), rx.data(), fp,
                                             cpu_scratch.data());
            cpu::conv2d_backward_weight_gemm(fp32_dw.data(), twin_db.data(), dy.data(), x.data(), fp,
                                             cpu_scratch.data());
            Buffer<float> dd_pooled(d_pooled), cpu_y(twin), cpu_pooled(twin_pooled), gw(dw0), gb(db0),
                gdy(s.out_size());
            Tickets tickets;
            scratch.poison();
            cuda::conv2d_backward_weight_pool(gw.p, gb.p, gdy.p, dd_pooled.p, dx.p, cpu_y.p, cpu_pooled.p, s, kind, ps,
                                              {scratch.p, tickets.p}, nullptr);
            compare_tf32("conv2d_backward_weight_pool dw " + name, gw.download(), twin_dw, fp32_dw);
            compare("conv2d_backward_weight_pool db " + name + ": the FP32 sum of dy", gb.download(), twin_db,
                    gemm_tol);
            check_tickets(tickets, "conv2d_backward_weight_pool " + name);
        }
}

// LeNet's conv2 with --tf32 as training calls it, the forward with the
// ReLU and the pooling after it (from tf32 version 3 on the rows kernel's
// FP32 units, from version 4 on the tensor cores, rows_forward_mma), and
// beside it shapes on that kernel's edges: the fewest channels (a product
// mostly padding) and the most (20 input, 64 output: k = 500, every
// fragment row used). Against the CPU on operands rounded to TF32, and
// apart from FP32's.
void test_tf32_second_layer(const std::string& version) {
    std::vector<ConvShape> shapes;
    for (const int n : {7, 64}) shapes.push_back(lenet::model().conv_shapes(n)[1]);
    shapes.push_back({3, 1, 13, 13, 1, 5, 5, 1, 0});
    shapes.push_back({2, 20, 13, 13, 64, 5, 5, 1, 0});
    for (ConvShape s : shapes)
        for (PoolKind kind : {PoolKind::avg, PoolKind::max}) {
            s.math = Math::tf32;
            const PoolShape ps{s.n, s.oc, s.oh(), s.ow(), 2, 2};
            const std::string name =
                describe(s) + (kind == PoolKind::avg ? ", avg pool" : ", max pool") + " --tf32" + version;
            check_tf32_forward_pool(s, kind, ps, random(s.in_size(), 50), random(s.weight_size(), 51),
                                    random(size_t(s.oc), 52), name);
        }
}

void test_tf32_conv(const std::string& version) {
    std::vector<ConvShape> shapes = {
        {3, 2, 7, 9, 5, 3, 3, 1, 0},
        {2, 3, 8, 8, 4, 3, 3, 2, 1},
        {4, 64, 12, 12, 128, 3, 3, 2, 1},  // 128 rows forward, 576 backward-data
        {4, 64, 12, 12, 128, 1, 1, 2, 0},  // a 1x1 shortcut
        {4, 16, 6, 6, 64, 3, 3, 1, 1},     // 64 rows
        {3, 1, 13, 13, 1, 5, 5, 1, 0},     // LeNet's conv2 kernels (tf32 4 and 7) on their edges: the fewest
        {2, 20, 13, 13, 56, 5, 5, 1, 0},   // channels, and the most both take (k = 56 for input_grad_mma)
    };
    for (int n : {7, 64})
        for (const ConvShape& s : lenet::model().conv_shapes(n)) shapes.push_back(s);
    for (ConvShape s : shapes) {
        s.math = Math::tf32;
        const std::string name = describe(s) + " --tf32" + version;
        ConvShape fp = s;
        fp.math = Math::fp32;
        const auto x = random(s.in_size(), 10), w = random(s.weight_size(), 11), b = random(size_t(s.oc), 12);
        const auto dy = random(s.out_size(), 13);
        const auto dw0 = random(s.weight_size(), 14), db0 = random(size_t(s.oc), 15);
        const auto rx = rounded(x), rw = rounded(w), rdy = rounded(dy);
        std::vector<float> cpu_scratch(cpu::conv2d_scratch_floats(fp));
        Tickets tickets;
        Buffer<float> dx_(x), dw_(w), db_(b), ddy(dy), scratch(cuda::conv2d_scratch_floats(s));
        Buffer<float> y(s.out_size()), dx(s.in_size()), gw(dw0), gb(db0);

        std::vector<float> twin(s.out_size()), fp32(s.out_size());
        cpu::conv2d_forward_gemm(twin.data(), rx.data(), rw.data(), b.data(), fp, cpu_scratch.data());
        cpu::conv2d_forward_gemm(fp32.data(), x.data(), w.data(), b.data(), fp, cpu_scratch.data());
        y.poison();
        cuda::conv2d_forward_relu(y.p, dx_.p, dw_.p, db_.p, s, scratch.p, nullptr);
        cpu::relu_forward(twin.data(), twin.data(), twin.size());
        cpu::relu_forward(fp32.data(), fp32.data(), fp32.size());
        compare_tf32("conv2d_forward_relu " + name, y.download(), twin, fp32);

        std::vector<float> twin_dx(s.in_size()), fp32_dx(s.in_size());
        cpu::conv2d_backward_data_gemm(twin_dx.data(), rdy.data(), rw.data(), fp, cpu_scratch.data());
        cpu::conv2d_backward_data_gemm(fp32_dx.data(), dy.data(), w.data(), fp, cpu_scratch.data());
        dx.poison();
        cuda::conv2d_backward_data(dx.p, ddy.p, dw_.p, s, scratch.p, nullptr);
        compare_tf32("conv2d_backward_data " + name, dx.download(), twin_dx, fp32_dx);

        // The weights from rounded operands; the bias from the unrounded dy.
        std::vector<float> twin_dw = dw0, twin_db = db0, fp32_dw = dw0, fp32_db = db0, unused = db0;
        cpu::conv2d_backward_weight_gemm(twin_dw.data(), unused.data(), rdy.data(), rx.data(), fp, cpu_scratch.data());
        cpu::conv2d_backward_weight_gemm(fp32_dw.data(), twin_db.data(), dy.data(), x.data(), fp, cpu_scratch.data());
        gw.upload(dw0);
        gb.upload(db0);
        scratch.poison();
        cuda::conv2d_backward_weight(gw.p, gb.p, ddy.p, dx_.p, s, {scratch.p, tickets.p}, nullptr);
        compare_tf32("conv2d_backward_weight dw " + name, gw.download(), twin_dw, fp32_dw);
        compare("conv2d_backward_weight db " + name + ": the FP32 sum of dy", gb.download(), twin_db, gemm_tol);
    }
}

void test_tf32_dense() {
    struct Size { int n, in, out; };
    for (const Size z : {Size{5, 17, 3}, Size{67, 800, 128}, Size{256, 128, 10}}) {
        char name[80];
        std::snprintf(name, sizeof name, "n%d in%d out%d --tf32", z.n, z.in, z.out);
        const auto x = random(size_t(z.n) * z.in, 30), w = random(size_t(z.out) * z.in, 31), b = random(size_t(z.out), 32);
        const auto dy = random(size_t(z.n) * z.out, 33), dw0 = random(w.size(), 34), db0 = random(b.size(), 35);
        const auto rx = rounded(x), rw = rounded(w), rdy = rounded(dy);
        Buffer<float> dx_(x), dw_(w), db_(b), ddy(dy), y(size_t(z.n) * z.out), dx(x.size()), gw(dw0), gb(db0);
        Tickets tickets;
        Buffer<float> scratch(std::max<size_t>(cuda::dense_scratch_floats(z.n, z.in, z.out, Math::tf32), 1));
        std::vector<float> twin(size_t(z.n) * z.out), fp32(twin.size());
        cpu::dense_forward(twin.data(), rx.data(), rw.data(), b.data(), z.n, z.in, z.out);
        cpu::dense_forward(fp32.data(), x.data(), w.data(), b.data(), z.n, z.in, z.out);
        y.poison();
        cuda::dense_forward(y.p, dx_.p, dw_.p, db_.p, z.n, z.in, z.out, {scratch.p, tickets.p}, nullptr, Math::tf32);
        compare_tf32(std::string("dense_forward ") + name, y.download(), twin, fp32);
        std::vector<float> twin_dx(x.size()), twin_dw = dw0, twin_db = db0, fp32_dx(x.size()), fp32_dw = dw0,
                                              unused = db0;
        cpu::dense_backward(twin_dx.data(), twin_dw.data(), unused.data(), rdy.data(), rx.data(), rw.data(), z.n, z.in,
                            z.out);
        cpu::dense_backward(fp32_dx.data(), fp32_dw.data(), twin_db.data(), dy.data(), x.data(), w.data(), z.n, z.in,
                            z.out);
        dx.poison();
        scratch.poison();
        cuda::dense_backward(dx.p, gw.p, gb.p, ddy.p, dx_.p, dw_.p, z.n, z.in, z.out, {scratch.p, tickets.p}, nullptr,
                             Math::tf32);
        compare_tf32(std::string("dense_backward dx ") + name, dx.download(), twin_dx, fp32_dx);
        compare_tf32(std::string("dense_backward dw ") + name, gw.download(), twin_dw, fp32_dw);
        compare(std::string("dense_backward db ") + name + ": the FP32 sum of dy", gb.download(), twin_db, gemm_tol);
    }
}

// The last layer with the loss in one launch under --tf32 (from tf32
// version 5): the logits from operands rounded to TF32, as the CPU twin
// computes them (dense_forward on rounded operands), and the softmax's
// gradient from them; dx and dw from the kernel's own dlogits, rounded
// (dense_backward on rounded operands: a dlogit that CUDA's expf puts a
// hair across a TF32 rounding boundary from the CPU's would otherwise move
// its products by a TF32 step), db from those dlogits as they are; and each
// apart from FP32's.
void test_tf32_dense_loss(const std::string& version) {
    struct Case { int n, in, classes; };
    for (const Case z : {Case{256, 128, 10}, Case{37, 50, 7}})
        for (const bool relu : {false, true}) {
            char name[120];
            std::snprintf(name, sizeof name, "dense_softmax_cross_entropy n%d in%d classes%d%s --tf32%s", z.n, z.in,
                          z.classes, relu ? " (ReLU before)" : "", version.c_str());
            const auto [x, w, b, dw0, db0, labels] = loss_inputs(z.n, z.in, z.classes, relu, 70);
            const auto backward = [&](float* dx, float* dw, float* db, const std::vector<float>& dy,
                                      const std::vector<float>& x, const std::vector<float>& w) {
                if (relu) cpu::dense_backward_relu(dx, dw, db, dy.data(), x.data(), w.data(), z.n, z.in, z.classes);
                else cpu::dense_backward(dx, dw, db, dy.data(), x.data(), w.data(), z.n, z.in, z.classes);
            };

            Buffer<float> gx(x), gw(w), gb(b), logits(size_t(z.n) * z.classes), dlogits(logits.n), dx(x.size()),
                dw(dw0), db(db0);
            Buffer<int32_t> glabels(labels);
            Buffer<double> loss(std::vector<double>{0.0});
            Buffer<float> scratch(cuda::dense_scratch_floats(z.n, z.in, z.classes, Math::tf32));
            Tickets tickets;
            for (Buffer<float>* p : {&logits, &dlogits, &dx, &scratch}) p->poison();
            cuda::dense_softmax_cross_entropy(logits.p, dlogits.p, loss.p, glabels.p, dx.p, dw.p, db.p, gx.p, gw.p,
                                              gb.p, z.n, z.in, z.classes, relu, {scratch.p, tickets.p}, nullptr, {},
                                              Math::tf32);
            const auto got_g = dlogits.download();

            std::vector<float> twin_z(logits.n), twin_g(logits.n), fp32_z(logits.n), fp32_g(logits.n);
            cpu::dense_forward(twin_z.data(), rounded(x).data(), rounded(w).data(), b.data(), z.n, z.in, z.classes);
            cpu::dense_forward(fp32_z.data(), x.data(), w.data(), b.data(), z.n, z.in, z.classes);
            cpu::softmax_cross_entropy(twin_g.data(), twin_z.data(), labels.data(), z.n, z.classes);
            cpu::softmax_cross_entropy(fp32_g.data(), fp32_z.data(), labels.data(), z.n, z.classes);
            std::vector<float> twin_dx(x.size()), twin_dw = dw0, twin_db = db0, unused_db = db0, unused_dw = dw0,
                                                  fp32_dx(x.size()), fp32_dw = dw0;
            backward(twin_dx.data(), twin_dw.data(), unused_db.data(), rounded(got_g), rounded(x), rounded(w));
            cpu::dense_backward(nullptr, unused_dw.data(), twin_db.data(), got_g.data(), x.data(), w.data(), z.n, z.in,
                                z.classes);
            unused_db = db0;
            backward(fp32_dx.data(), fp32_dw.data(), unused_db.data(), fp32_g, x, w);

            compare_tf32(std::string(name) + ": logits", logits.download(), twin_z, fp32_z);
            compare(std::string(name) + ": dlogits, the twin's", got_g, twin_g, gemm_tol);
            compare_tf32(std::string(name) + ": dx", dx.download(), twin_dx, fp32_dx);
            compare_tf32(std::string(name) + ": dw", dw.download(), twin_dw, fp32_dw);
            compare(std::string(name) + ": db, the FP32 sum of dlogits", db.download(), twin_db, gemm_tol);
            check_tickets(tickets, name);
        }
}

// From tf32 version 10, the loss's kernel adds the bias gradient of the
// dense layer before it (db_before), the column sums of the dx it writes,
// in groups of 32 samples then the groups in order: against the FP32 sums
// of the kernel's own dx, the same bits on a second run, and the other
// outputs those of a run without db_before. Then that layer's backward
// with bias_added leaves db alone under --tf32 and is refused in FP32,
// whose product adds the bias as a column. LeNet's shape, a group cut short
// (37), and more inputs than a block has threads (300 samples of 600).
// Before version 10 a db_before is refused, not ignored.
void test_tf32_bias_before(const std::string& version) {
    struct Case { int n, in, classes; };
    for (const Case z : {Case{256, 128, 10}, Case{37, 50, 7}, Case{300, 600, 3}}) {
        char name[120];
        std::snprintf(name, sizeof name, "dense_softmax_cross_entropy n%d in%d classes%d --tf32, db_before%s", z.n,
                      z.in, z.classes, version.c_str());
        const auto [x, w, b, dw0, db0, labels] = loss_inputs(z.n, z.in, z.classes, true, 80);
        const auto db_before0 = random(size_t(z.in), 86);
        Buffer<float> gx(x), gw(w), gb(b), logits(size_t(z.n) * z.classes), dlogits(logits.n), dx(x.size()),
            dw(dw0), db(db0), db_before(db_before0);
        Buffer<int32_t> glabels(labels);
        Buffer<double> loss(std::vector<double>{0.0});
        Buffer<float> scratch(cuda::dense_scratch_floats(z.n, z.in, z.classes, Math::tf32));
        Tickets tickets;
        const auto run = [&](bool with_before) {
            for (Buffer<float>* p : {&logits, &dlogits, &dx, &scratch}) p->poison();
            dw.upload(dw0);
            db.upload(db0);
            db_before.upload(db_before0);
            loss.upload({0.0});
            cuda::dense_softmax_cross_entropy(logits.p, dlogits.p, loss.p, glabels.p, dx.p, dw.p, db.p, gx.p, gw.p,
                                              gb.p, z.n, z.in, z.classes, true, {scratch.p, tickets.p}, nullptr, {},
                                              Math::tf32, with_before ? db_before.p : nullptr);
            return std::vector<std::vector<float>>{logits.download(), dlogits.download(), dx.download(),
                                                   dw.download(), db.download(), db_before.download()};
        };
        if (!cuda::dense_loss_sums_bias_before(Math::tf32)) {
            bool refused = false;
            try {
                run(true);
            } catch (const std::invalid_argument&) {
                refused = true;
            }
            report(refused, std::string(name) + ": refused");
            continue;
        }
        const auto got = run(true), again = run(true), without = run(false);
        check_tickets(tickets, name);
        std::vector<double> sums(db_before0.begin(), db_before0.end());
        for (int i = 0; i < z.n; ++i)
            for (int j = 0; j < z.in; ++j) sums[size_t(j)] += got[2][size_t(i) * z.in + j];
        compare(std::string(name) + ": db_before, the FP32 sums of dx", got[5], {sums.begin(), sums.end()}, gemm_tol);
        compare(std::string(name) + ": db_before again, the same bits", again[5], got[5], 0.0);
        const char* names[] = {"logits", "dlogits", "dx", "dw", "db"};
        for (size_t k = 0; k < 5; ++k)
            compare(std::string(name) + ": " + names[k] + ", the bits without db_before", got[k], without[k], 0.0);
        report(without[5] == db_before0, std::string(name) + ": without db_before, that bias is left alone");
    }
    // The layer before's backward, told its bias is added: dw and dx only.
    const int n = 37, in = 20, out = 50;
    const auto x = random(size_t(n) * in, 87), w = random(size_t(out) * in, 88), dy = random(size_t(n) * out, 89);
    const auto db0 = random(size_t(out), 90);
    Buffer<float> gx(x), gw(w), gdy(dy), dx(x.size()), dw(w.size()), db(db0), scratch(cuda::dense_scratch_floats(n, in, out, Math::tf32));
    Tickets tickets;
    cuda::dense_backward_relu(dx.p, dw.p, db.p, gdy.p, gx.p, gw.p, n, in, out, {scratch.p, tickets.p}, nullptr,
                              Math::tf32, true);
    report(db.download() == db0, "dense_backward_relu --tf32 with bias_added leaves db alone" + version);
    bool refused = false;
    try {
        cuda::dense_backward_relu(dx.p, dw.p, db.p, gdy.p, gx.p, gw.p, n, in, out, {scratch.p, tickets.p}, nullptr,
                                  Math::fp32, true);
    } catch (const std::invalid_argument&) {
        refused = true;
    }
    report(refused, "dense_backward_relu in FP32 refuses bias_added (its product adds the bias)" + version);
}

// LeNet's conv2 under --tf32 as training runs it (from tf32 version 6):
// the weight gradient leaves its slices (conv2d_backward_weight_unfinished)
// and the input gradient's kernel adds them, input_grad_rows_tiled_finishing
// in version 6, input_grad_mma in 7 and 8. The same bits as the two whole calls
// (dx, dw and db), which test_tf32_conv holds against the TF32 twin.
// Batches of 7, 64 and 256.
void test_tf32_weight_left(const std::string& version) {
    for (const int n : {7, 64, 256}) {
        ConvShape s = lenet::model().conv_shapes(n)[1];
        s.math = Math::tf32;
        const auto x = random(s.in_size(), 90), w = random(s.weight_size(), 91), dy = random(s.out_size(), 92);
        const auto dw0 = random(s.weight_size(), 93), db0 = random(size_t(s.oc), 94);
        Buffer<float> gx(x), gw(w), gdy(dy), dx(s.in_size()), dw(dw0), db(db0), scratch(cuda::conv2d_scratch_floats(s));
        Tickets tickets;
        const cuda::Workspace ws{scratch.p, tickets.p};
        const auto downloads = [&] {
            return std::vector<std::vector<float>>{dx.download(), dw.download(), db.download()};
        };
        for (Buffer<float>* p : {&dx, &scratch}) p->poison();
        cuda::conv2d_backward_weight(dw.p, db.p, gdy.p, gx.p, s, ws, nullptr);
        cuda::conv2d_backward_data(dx.p, gdy.p, gw.p, s, scratch.p, nullptr);
        const auto whole = downloads();

        for (Buffer<float>* p : {&dx, &scratch}) p->poison();
        dw.upload(dw0), db.upload(db0);
        const cuda::UnfinishedWeightGrad left =
            cuda::conv2d_backward_weight_unfinished(dw.p, db.p, gdy.p, gx.p, s, ws, nullptr);
        const bool leaves = cuda::conv2d_backward_weight_leaves_slices(s, gx.p, gw.p);
        cuda::conv2d_backward_data(dx.p, gdy.p, gw.p, s, scratch.p, nullptr, left);
        const auto split = downloads();
        const std::string name = "conv2 n" + std::to_string(n) + " --tf32" + version;
        report(left.dw != nullptr && leaves,
               name + ": the weight gradient leaves its slices to the input gradient's kernel");
        const char* names[] = {"dx", "dw", "db"};
        for (size_t k = 0; k < split.size(); ++k)
            compare(name + ": " + names[k] + " with the slices left = two whole calls", split[k], whole[k], 0.0);
        check_tickets(tickets, name);
    }
}

// tf32 version 8 runs version 7's input gradient (input_grad_mma) with 4
// warps of twice the columns instead of 8: the same products in the same
// order, so the same bits, on LeNet's conv2 at 7 and 256 samples and on
// the kernel's edges (1 channel in and out; 20 in and 56 out).
void test_tf32_input_grad_warps() {
    std::vector<ConvShape> shapes = {lenet::model().conv_shapes(7)[1], lenet::model().conv_shapes(256)[1],
                                     {3, 1, 13, 13, 1, 5, 5, 1, 0}, {2, 20, 13, 13, 56, 5, 5, 1, 0}};
    for (ConvShape s : shapes) {
        s.math = Math::tf32;
        const auto dy = random(s.out_size(), 95), w = random(s.weight_size(), 96);
        Buffer<float> gdy(dy), gw(w), dx(s.in_size()), scratch(cuda::conv2d_scratch_floats(s));
        const auto under = [&](int version) {
            cuda::select_version("tf32", version);
            dx.poison();
            cuda::conv2d_backward_data(dx.p, gdy.p, gw.p, s, scratch.p, nullptr);
            cuda::select_default_versions();
            return dx.download();
        };
        compare("conv2d_backward_data " + describe(s) + " --tf32: tf32 version 8 = 7", under(8), under(7), 0.0);
    }
}

// tf32 version 9 runs conv2's weight gradient on the tensor cores
// (weight_grad_mma), but sums the bias from dy as it is, in the rows
// kernel's order and into its slices: db the bits of version 8's, on
// LeNet's conv2 at 7, 64 and 256 samples.
void test_tf32_weight_bias() {
    for (const int n : {7, 64, 256}) {
        ConvShape s = lenet::model().conv_shapes(n)[1];
        s.math = Math::tf32;
        const auto x = random(s.in_size(), 97), dy = random(s.out_size(), 98), db0 = random(size_t(s.oc), 99);
        Buffer<float> gx(x), gdy(dy), dw(s.weight_size()), db(db0), scratch(cuda::conv2d_scratch_floats(s));
        Tickets tickets;
        const auto under = [&](int version) {
            cuda::select_version("tf32", version);
            db.upload(db0);
            scratch.poison();
            cuda::conv2d_backward_weight(dw.p, db.p, gdy.p, gx.p, s, {scratch.p, tickets.p}, nullptr);
            cuda::select_default_versions();
            return db.download();
        };
        compare("conv2d_backward_weight db " + describe(s) + " --tf32: tf32 version 9 = 8", under(9), under(8), 0.0);
        check_tickets(tickets, "conv2d_backward_weight " + describe(s) + " --tf32");
    }
}

}  // namespace

void test_tf32() {
    if (!has_tf32()) return;
    // Each version of the kernels that take TF32 operands (versions.cu: tf32).
    for (int v = 1; v <= cuda::version_count("tf32"); ++v) {
        cuda::select_version("tf32", v);
        const std::string version = " (tf32 version " + std::to_string(v) + ")";
        test_tf32_conv(version);
        test_tf32_first_layer(version, v >= 2);
        test_tf32_second_layer(version);
        report(cuda::dense_loss_runs(256, 128, 10, Math::tf32) == (v >= 5),
               std::string("the last layer with the loss ") + (v >= 5 ? "takes" : "leaves") + " --tf32" + version);
        if (v >= 5) test_tf32_dense_loss(version);
        if (v >= 5) test_tf32_bias_before(version);
        if (v >= 6) test_tf32_weight_left(version);
    }
    cuda::select_default_versions();
    test_tf32_input_grad_warps();
    test_tf32_weight_bias();
    // And, under the default tf32 version, the latest input-gradient version,
    // which rounds its operands as it stages them too (LeNet's conv2), and the
    // latest weight-gradient version (14: the implicit GEMM's predicated loads).
    for (const char* launcher : {"conv2d_backward_data", "conv2d_backward_weight"}) {
        const int latest = cuda::version_count(launcher);
        cuda::select_version(launcher, latest);
        test_tf32_conv(" (" + std::string(launcher) + " version " + std::to_string(latest) + ")");
        cuda::select_default_versions();
    }
    // The latest forward, whose rows kernel takes --tf32 from tf32 version 3
    // (tf32 4 moves LeNet's conv2 to the tensor cores).
    const int forward = cuda::version_count("conv2d_forward");
    cuda::select_version("conv2d_forward", forward);
    cuda::select_version("tf32", 3);
    test_tf32_conv(" (conv2d_forward version " + std::to_string(forward) + ", tf32 version 3)");
    cuda::select_default_versions();
    test_tf32_dense();
}

}  // namespace dpt::gpu_test
