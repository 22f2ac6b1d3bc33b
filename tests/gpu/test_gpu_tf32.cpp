// The GPU tests of --tf32 (shapes.hpp: Math): the conv and dense launchers
// on the tensor cores against their CPU twins, the same products of
// operands rounded to TF32 (cpu::round_to_tf32, the CPU's own rounding) in
// FP32, at FP32's tolerance; and against the FP32 results, from which they
// must differ by TF32's rounding (about 1e-3 of the operands). Shapes on
// every tile (32, 64 and 128 rows), LeNet's at 7 and 64
// samples, a batch and sizes no tile divides.
#include <stdexcept>

#include "cuda/kernels.hpp"
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
// ReLU and the pooling after it, gathered from the dataset (on the direct
// kernel, which rounds its operands as it stages them), and
// the weight gradient through the pooling; against the CPU's calls on
// operands rounded to TF32 (the bias's sum on dy as it is), and apart from
// FP32's.
void test_tf32_first_layer() {
    for (const int n : {7, 64})
        for (PoolKind kind : {PoolKind::avg, PoolKind::max}) {
            ConvShape s = lenet::model().conv_shapes(n)[0];
            s.math = Math::tf32;
            ConvShape fp = s;
            fp.math = Math::fp32;
            const PoolShape ps{n, s.oc, s.oh(), s.ow(), 2, 2};
            const std::string name =
                describe(s) + (kind == PoolKind::avg ? ", avg pool" : ", max pool") + " --tf32";
            report(cuda::conv2d_forward_gathers(s), name + ": the first layer gathers its batch");
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
// ReLU and the pooling after it (the implicit GEMM on the tensor cores, and
// the pooling after), and beside it the fewest channels (a product mostly
// padding) and the most a rows kernel would take (20 input, 64 output).
// Against the CPU on operands rounded to TF32, and apart from FP32's.
void test_tf32_second_layer() {
    std::vector<ConvShape> shapes;
    for (const int n : {7, 64}) shapes.push_back(lenet::model().conv_shapes(n)[1]);
    shapes.push_back({3, 1, 13, 13, 1, 5, 5, 1, 0});
    shapes.push_back({2, 20, 13, 13, 64, 5, 5, 1, 0});
    for (ConvShape s : shapes)
        for (PoolKind kind : {PoolKind::avg, PoolKind::max}) {
            s.math = Math::tf32;
            const PoolShape ps{s.n, s.oc, s.oh(), s.ow(), 2, 2};
            const std::string name =
                describe(s) + (kind == PoolKind::avg ? ", avg pool" : ", max pool") + " --tf32";
            check_tf32_forward_pool(s, kind, ps, random(s.in_size(), 50), random(s.weight_size(), 51),
                                    random(size_t(s.oc), 52), name);
        }
}

void test_tf32_conv() {
    std::vector<ConvShape> shapes = {
        {3, 2, 7, 9, 5, 3, 3, 1, 0},
        {2, 3, 8, 8, 4, 3, 3, 2, 1},
        {4, 64, 12, 12, 128, 3, 3, 2, 1},  // 128 rows forward, 576 backward-data
        {4, 64, 12, 12, 128, 1, 1, 2, 0},  // a 1x1 shortcut
        {4, 16, 6, 6, 64, 3, 3, 1, 1},     // 64 rows
        {3, 1, 13, 13, 1, 5, 5, 1, 0},     // LeNet's conv2 geometry with the fewest channels
        {2, 20, 13, 13, 56, 5, 5, 1, 0},   // and more
    };
    for (int n : {7, 64})
        for (const ConvShape& s : lenet::model().conv_shapes(n)) shapes.push_back(s);
    for (ConvShape s : shapes) {
        s.math = Math::tf32;
        const std::string name = describe(s) + " --tf32";
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

}  // namespace

void test_tf32() {
    if (!has_tf32()) return;
    test_tf32_conv();
    test_tf32_first_layer();
    test_tf32_second_layer();
    report(!cuda::dense_loss_runs(256, 128, 10, Math::tf32),
           "the last layer with the loss leaves --tf32 to the layer's products and the loss apart");
    test_tf32_dense();
}

}  // namespace dpt::gpu_test
