// kernel_bench: the trainer's CUDA launchers and every version in
// dev/cuda/ that stands beside one, at the real shapes of LeNet's and
// ResNet-18's layers: the convolutions (forward with the ReLU, LeNet's with
// the pooling after it too, ResNet-18's with the statistics of the batch
// norm after it; both backwards, LeNet's weight gradient then input
// gradient as training calls them, and ResNet-18's input gradient added to
// a block input's), the dense layers (forward,
// backward, through the pooling before, the last one with the loss, and
// LeNet's two together), ResNet-18's batch norm layers' kernels, its
// residual adds, max pooling's backward, and the GEMM on plain matrices of
// the layers' product shapes. For each it first checks the GPU's result
// against the CPU twin (kernels/cpu/), outputs poisoned, then times it: 3
// launches to warm up, then `--repeats` launches, each between two CUDA
// events, and the median; a dev version's row also gives its time against
// the trainer's, measured in the same run. A version that fails its check
// is not timed, and the program exits 1.
//
//   kernel_bench                          the trainer's launchers and every dev version, batch 256
//   kernel_bench conv2d_backward_data     the runs of one launcher, the trainer's and its dev versions
//   kernel_bench conv2d_forward/12_rows_single   one dev version, beside the trainer's
//   kernel_bench --dev                    only the runs a dev version stands in, and those versions
//   kernel_bench --model lenet --batch 128
//   kernel_bench --check --batch 4        checks only (CI runs this on the emulated GPU)
//   kernel_bench --tf32                   the products on the tensor cores (--tf32), checked against the
//                                         CPU twin's TF32-rounded operands
//   kernel_bench --list                   the dev versions: what each changes, what it measured
//
// On the emulated GPU the times are the CPU's and are labelled so: they say
// nothing about a GPU. Exit status: 0; 1 when a check failed; 2 for bad
// arguments; 77 when no GPU is usable (as the GPU tests).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/kernels.hpp"
#include "cuda/check.hpp"
#include "cuda/kernels.hpp"
#include "dev.hpp"
#include "model/model.hpp"
#include "model/models.hpp"
#include "base/rng.hpp"

using namespace dpt;

namespace {

// The launchers the runs below call: the trainer's, or a dev version's in
// place of some (dev.hpp).
cuda::dev::Launchers L;

#ifdef DPTRAIN_CUDA_EMULATION
constexpr bool emulated = true;
#else
constexpr bool emulated = false;
#endif

// A GEMM of depth k sums in another order on each side (FMAs on the GPU):
// 1e-5 of the largest value is about 80 ulps, as the GPU tests allow.
constexpr double tolerance = 1e-5;

// With --tf32 the tensor cores add a product's terms their own way, not by
// FFMA's round-to-nearest: on the V100, T4 and A100, Fasi, Higham, Mikaitis
// and Pranesh found their additions truncate ("Numerical behavior of NVIDIA
// tensor cores", PeerJ Computer Science, 2021), so the error grows with the
// depth of the sum rather than its square root. An H200 left 1e-6 of the
// largest value at depth 256 and 1.0 to 1.5e-5 at depth 2,304. The bound:
// depth x 2^-24 where that is above FP32's 1e-5 (from depth 168 on), 1.4e-4
// at depth 2,304. A kernel that read a wrong element or skipped a tile is
// off by far more, and so is one that leaves its operands unrounded: with
// the rounding taken out of Tf32Core, 259 of the 261 --tf32 checks at batch
// 4 failed on the emulated GPU, 2e-4 to 3e-4 off.
// The dlogits a check of the loss kernel's gradients starts from: the
// CPU's softmax gradient, or with --tf32 the kernel's own (checked against
// the CPU's apart): a dlogit that the GPU's expf puts a hair across a TF32
// rounding boundary from the CPU's would otherwise move its products by a
// TF32 step.
const std::vector<float>& backward_dy(const std::vector<float>& gpu, const std::vector<float>& cpu, Math math) {
    return math == Math::tf32 ? gpu : cpu;
}

double tolerance_for(Math math, long depth) {
    return math == Math::tf32 ? std::max(tolerance, double(depth) * 0x1p-24) : tolerance;
}

// The operands as a product sees them in `math`: rounded to TF32, or as they are.
std::vector<float> operand(std::vector<float> v, Math math) {
    if (math == Math::tf32) cpu::round_to_tf32(v.data(), v.data(), v.size());
    return v;
}

std::vector<float> random_floats(size_t n, uint64_t seed) {
    Rng rng(seed, 7);
    std::vector<float> v(n);
    for (float& x : v) x = float(2.0 * rng.uniform() - 1.0);
    return v;
}

struct Gpu {
    float* p = nullptr;
    size_t n;
    explicit Gpu(size_t count) : n(count) { CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(n, 1) * sizeof(float))); }
    explicit Gpu(const std::vector<float>& host) : Gpu(host.size()) { put(host); }
    ~Gpu() { cudaFree(p); }
    Gpu(const Gpu&) = delete;
    Gpu& operator=(const Gpu&) = delete;
    void put(const std::vector<float>& host) { CUDA_CHECK(cudaMemcpy(p, host.data(), n * sizeof(float), cudaMemcpyHostToDevice)); }
    void poison() { CUDA_CHECK(cudaMemset(p, 0xFF, n * sizeof(float))); }  // NaN: an element left unwritten fails
    std::vector<float> get() const {
        CUDA_CHECK(cudaDeviceSynchronize());
        std::vector<float> host(n);
        CUDA_CHECK(cudaMemcpy(host.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost));
        return host;
    }
};

// The tickets of the launchers' split products (splits.hpp: Workspace), zeroed.
struct Tickets {
    unsigned* p = nullptr;
    Tickets() {
        CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p), cuda::workspace_tickets * sizeof(unsigned)));
        CUDA_CHECK(cudaMemset(p, 0, cuda::workspace_tickets * sizeof(unsigned)));
    }
    ~Tickets() { cudaFree(p); }
    Tickets(const Tickets&) = delete;
    Tickets& operator=(const Tickets&) = delete;
};

// The largest |got - want| over the largest |want| (at least 1); infinite for a NaN.
double error(const std::vector<float>& got, const std::vector<float>& want) {
    double scale = 1.0, worst = 0.0;
    for (float w : want) scale = std::max(scale, double(std::abs(w)));
    for (size_t i = 0; i < want.size(); ++i)
        worst = std::max(worst, std::isnan(got[i]) ? INFINITY : std::abs(double(got[i]) - double(want[i])));
    return worst / scale;
}

// One layer's convolution, its inputs on both sides, and what each launcher
// does with them.
struct ConvCase {
    ConvShape s;
    std::vector<float> x = random_floats(s.in_size(), 1), w = random_floats(s.weight_size(), 2),
                       b = random_floats(size_t(s.oc), 3), dy = random_floats(s.out_size(), 4),
                       dw0 = random_floats(s.weight_size(), 5), db0 = random_floats(size_t(s.oc), 6);
    Gpu gx{x}, gw{w}, gb{b}, gdy{dy}, scratch{cuda::conv2d_scratch_floats(s)};
    Gpu y{s.out_size()}, dx{s.in_size()}, dw{dw0}, db{db0};
    Tickets tickets;
    // "conv2d_backward_data_add": the input gradient added to dx0, as a
    // block input's (read by two layers) is, through `spare`.
    std::vector<float> dx0 = random_floats(s.in_size(), 7);
    Gpu spare{s.in_size()};
    // "conv2d_forward_stats": the forward (no ReLU), then the statistics of
    // a batch norm after it, as ResNet-18 runs them; the scratch of both.
    NormShape ns{s.n, s.oc, s.oh() * s.ow()};
    Gpu stats{2 * size_t(s.oc)}, both_scratch{cuda::conv2d_scratch_floats(s) + cuda::batch_norm_scratch_floats(ns)};
    // "conv2d_forward_relu_pool": LeNet's 2x2 pooling after the convolution
    // and its ReLU, in the forward kernel where it can be.
    PoolShape ps{s.n, s.oc, s.oh(), s.ow(), 2, 2};
    Gpu pooled{ps.out_size()};

    explicit ConvCase(const ConvShape& shape) : s(shape) {}

    // Multiply-adds count two; the same for the three launchers (twice that
    // for "conv2d_backward_weight_data": the weight gradient, then the input
    // gradient, as LeNet's model calls them, the first's slices added by the
    // second's kernel).
    double flops(const std::string& run) const {
        return (run == "conv2d_backward_weight_data" ? 4.0 : 2.0) * s.oc * s.col_rows() * double(s.n) * s.col_cols();
    }
    // The longest sum of one product: backward-data sums the channels
    // before a gather.
    long depth(const std::string& launcher) const {
        if (launcher == "conv2d_backward_data" || launcher == "conv2d_backward_data_add") return s.oc;
        if (launcher == "conv2d_backward_weight") return cuda::conv2d_weight_grad_depth(s);
        if (launcher == "conv2d_backward_weight_data")
            return std::max(depth("conv2d_backward_data"), depth("conv2d_backward_weight"));
        return s.col_rows();
    }

    void run(const std::string& launcher, cudaStream_t stream) {
        if (launcher == "conv2d_forward") L.conv2d_forward_relu(y.p, gx.p, gw.p, gb.p, s, scratch.p, stream);
        else if (launcher == "conv2d_forward_relu_pool")
            L.conv2d_forward_relu_pool(y.p, pooled.p, gx.p, gw.p, gb.p, s, PoolKind::max, ps, scratch.p, stream);
        else if (launcher == "conv2d_backward_data") L.conv2d_backward_data(dx.p, gdy.p, gw.p, s, scratch.p, stream, {});
        else if (launcher == "conv2d_forward_stats" && L.conv2d_forward_stats)
            L.conv2d_forward_stats(y.p, stats.p, gx.p, gw.p, gb.p, s, ns, {both_scratch.p, tickets.p}, stream);
        else if (launcher == "conv2d_forward_stats") {  // the trainer's (model.hpp: the layer, then the norm's stats)
            cuda::conv2d_forward(y.p, gx.p, gw.p, gb.p, s, both_scratch.p, stream);
            L.batch_norm_stats(stats.p, y.p, ns, {both_scratch.p + cuda::conv2d_scratch_floats(s), tickets.p}, stream);
        } else if (launcher == "conv2d_backward_data_add" && L.conv2d_backward_data_add)
            L.conv2d_backward_data_add(dx.p, spare.p, gdy.p, gw.p, s, scratch.p, stream);
        else if (launcher == "conv2d_backward_data_add") {  // the trainer's (kernels.hpp: backward_data)
            L.conv2d_backward_data(spare.p, gdy.p, gw.p, s, scratch.p, stream, {});
            cuda::sum_into(dx.p, spare.p, 1, s.in_size(), stream);
        }
        else if (launcher == "conv2d_backward_weight_data") {
            const cuda::UnfinishedWeightGrad left =
                L.conv2d_backward_weight_unfinished(dw.p, db.p, gdy.p, gx.p, s, {scratch.p, tickets.p}, stream);
            L.conv2d_backward_data(dx.p, gdy.p, gw.p, s, scratch.p, stream, left);
        } else L.conv2d_backward_weight(dw.p, db.p, gdy.p, gx.p, s, {scratch.p, tickets.p}, stream);
    }

    // The worst error of one run against the CPU twin (outputs poisoned
    // first): the implicit GEMM (the sums the GPU makes, unlike Winograd's),
    // on the operands rounded to TF32 with --tf32, the bias from dy as it is.
    double check(const std::string& launcher) {
        ConvShape fp = s;
        fp.math = Math::fp32;
        std::vector<float> cpu_scratch(cpu::conv2d_scratch_floats(fp));
        const auto x = operand(this->x, s.math), w = operand(this->w, s.math), dy = operand(this->dy, s.math);
        if (launcher == "conv2d_forward_stats") {  // y, and its sums from the GPU's y (one product deep)
            std::vector<float> want(s.out_size()), want_stats(stats.n);
            cpu::conv2d_forward_gemm(want.data(), x.data(), w.data(), b.data(), fp, cpu_scratch.data());
            y.poison();
            stats.poison();
            both_scratch.poison();
            run(launcher, nullptr);
            const std::vector<float> got = y.get();
            cpu::batch_norm_stats(want_stats.data(), got.data(), ns);
            return std::max(error(got, want), error(stats.get(), want_stats));
        }
        if (launcher == "conv2d_forward" || launcher == "conv2d_forward_relu_pool") {
            std::vector<float> want(s.out_size()), want_pooled(ps.out_size());
            cpu::conv2d_forward_gemm(want.data(), x.data(), w.data(), b.data(), fp, cpu_scratch.data());
            cpu::relu_forward(want.data(), want.data(), want.size());
            cpu::pool2d_forward(want_pooled.data(), want.data(), PoolKind::max, ps);
            y.poison();
            pooled.poison();
            run(launcher, nullptr);
            const double y_error = error(y.get(), want);
            return launcher == "conv2d_forward" ? y_error : std::max(y_error, error(pooled.get(), want_pooled));
        }
        std::vector<float> want_dx(s.in_size());
        cpu::conv2d_backward_data_gemm(want_dx.data(), dy.data(), w.data(), fp, cpu_scratch.data());
        dx.poison();
        if (launcher == "conv2d_backward_data") {
            run(launcher, nullptr);
            return error(dx.get(), want_dx);
        }
        if (launcher == "conv2d_backward_data_add") {
            for (size_t i = 0; i < want_dx.size(); ++i) want_dx[i] += dx0[i];
            dx.put(dx0);
            spare.poison();
            scratch.poison();
            run(launcher, nullptr);
            return error(dx.get(), want_dx);
        }
        std::vector<float> want_dw = dw0, want_db = db0, unused = dw0;  // backward-weight adds to what is there
        cpu::conv2d_backward_weight_gemm(want_dw.data(), unused.data(), dy.data(), x.data(), fp, cpu_scratch.data());
        cpu::conv2d_backward_weight_gemm(unused.data(), want_db.data(), this->dy.data(), this->x.data(), fp,
                                         cpu_scratch.data());
        dw.put(dw0);
        db.put(db0);
        scratch.poison();
        run(launcher, nullptr);
        const double weight_error = std::max(error(dw.get(), want_dw), error(db.get(), want_db));
        return launcher == "conv2d_backward_weight_data" ? std::max(weight_error, error(dx.get(), want_dx))
                                                         : weight_error;
    }
};

// A loss's labels (sample i: class i * 7 mod classes) on the GPU, and its
// sum: what the dense cases that run the loss hand it.
struct LossTargets {
    std::vector<int32_t> labels;
    int32_t* glabels = nullptr;
    double* loss = nullptr;
    LossTargets(int n, int classes) : labels(size_t(n)) {
        for (size_t i = 0; i < labels.size(); ++i) labels[i] = int32_t((i * 7) % size_t(classes));
        CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&glabels), labels.size() * sizeof(int32_t) + 1));
        CUDA_CHECK(cudaMemcpy(glabels, labels.data(), labels.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&loss), sizeof(double)));
    }
    ~LossTargets() {
        cudaFree(glabels);
        cudaFree(loss);
    }
    LossTargets(const LossTargets&) = delete;
    LossTargets& operator=(const LossTargets&) = delete;
};

// One dense layer's products, forward (with ReLU) or backward, likewise;
// where a pooling of a ReLU's output comes before the layer (shape `ps`),
// also "dense_backward_pool" and "dense_backward_pool max": the backward
// through that pooling (avg, as LeNet's --pool and ResNet-18 by default, or
// max), with x the pooling of the ReLU of a random y. A model's last layer,
// where no pooling comes before it, also "dense_loss": its forward, the
// softmax cross-entropy and its backward, as a training step runs them (one
// launch, dense_softmax_cross_entropy, where it takes the shape; else three
// calls).
struct DenseCase {
    DenseShape s;
    std::optional<PoolShape> ps;
    std::vector<float> y_before = relu(random_floats(ps ? ps->in_size() : 0, 7));
    std::vector<float> x = ps ? pooled(y_before, PoolKind::avg) : random_floats(size_t(s.n) * s.in, 1),
                       x_max = ps ? pooled(y_before, PoolKind::max) : std::vector<float>{},
                       w = random_floats(size_t(s.out) * s.in, 2), b = random_floats(size_t(s.out), 3),
                       dy = random_floats(size_t(s.n) * s.out, 4), dw0 = random_floats(size_t(s.out) * s.in, 5),
                       db0 = random_floats(size_t(s.out), 6);
    Gpu gx{x}, gx_max{x_max}, gw{w}, gb{b}, gdy{dy}, scratch{cuda::dense_scratch_floats(s.n, s.in, s.out, s.math)};
    Gpu y{size_t(s.n) * s.out}, dx{size_t(s.n) * s.in}, dw{dw0}, db{db0};
    Gpu gy_before{y_before}, grad_before{y_before.size()}, dlogits{size_t(s.n) * s.out};
    Tickets tickets;
    LossTargets targets{s.n, s.out};  // dense_loss's

    DenseCase(const DenseShape& shape, const std::optional<PoolShape>& pool) : s(shape), ps(pool) {}

    static std::vector<float> relu(std::vector<float> y) {
        cpu::relu_forward(y.data(), y.data(), y.size());
        return y;
    }
    // The pooling of y, as the model's forward leaves it.
    std::vector<float> pooled(const std::vector<float>& y, PoolKind kind) const {
        std::vector<float> x(ps->out_size());
        cpu::pool2d_forward(x.data(), y.data(), kind, *ps);
        return x;
    }
    static PoolKind kind_of(const std::string& run) { return run.ends_with("max") ? PoolKind::max : PoolKind::avg; }

    // Forward: one product; backward: two (dw and dx); the loss: all three.
    double flops(const std::string& run) const {
        return (run == "dense_forward" ? 2.0 : run == "dense_loss" ? 6.0 : 4.0) * double(s.n) * s.in * s.out;
    }
    // The longest sum (unsplit: at least as long as a split's).
    long depth(const std::string& run) const {
        return run == "dense_forward" ? s.in : run == "dense_loss" ? std::max({s.n, s.in, s.out}) : std::max(s.n, s.out);
    }
    void run(const std::string& run, cudaStream_t stream) {
        const cuda::Workspace ws{scratch.p, tickets.p};
        if (run == "dense_loss" && L.dense_loss_runs(s.n, s.in, s.out, s.math)) {
            L.dense_softmax_cross_entropy(y.p, dlogits.p, targets.loss, targets.glabels, dx.p, dw.p, db.p, gx.p,
                                              gw.p, gb.p, s.n, s.in, s.out, false, ws, stream, {}, s.math);
        } else if (run == "dense_loss") {
            cuda::dense_forward(y.p, gx.p, gw.p, gb.p, s.n, s.in, s.out, ws, stream, s.math);
            cuda::softmax_cross_entropy(dlogits.p, targets.loss, y.p, targets.glabels, s.n, s.out, stream);
            L.dense_backward(dx.p, dw.p, db.p, dlogits.p, gx.p, gw.p, s.n, s.in, s.out, ws, stream, s.math);
        } else if (run == "dense_forward")
            L.dense_forward_relu(y.p, gx.p, gw.p, gb.p, s.n, s.in, s.out, {scratch.p, tickets.p}, stream, s.math);
        else if (run.starts_with("dense_backward_pool"))
            L.dense_backward_pool(grad_before.p, dx.p, dw.p, db.p, gdy.p, kind_of(run) == PoolKind::max ? gx_max.p : gx.p,
                                  gw.p, s.n, s.in, s.out, gy_before.p, kind_of(run), *ps, {scratch.p, tickets.p}, stream,
                                  s.math);
        else
            L.dense_backward(dx.p, dw.p, db.p, gdy.p, gx.p, gw.p, s.n, s.in, s.out, {scratch.p, tickets.p}, stream,
                             s.math);
    }
    // (The CPU twin rounds the operands itself with Math::tf32.)
    double check(const std::string& run) {
        scratch.poison();
        std::vector<float> cpu_scratch(cpu::dense_scratch_floats(s.n, s.in, s.out, s.math));
        if (run == "dense_forward") {
            std::vector<float> want(size_t(s.n) * s.out);
            cpu::dense_forward_relu(want.data(), x.data(), w.data(), b.data(), s.n, s.in, s.out, cpu_scratch.data(),
                                    s.math);
            y.poison();
            this->run(run, nullptr);
            return error(y.get(), want);
        }
        if (run == "dense_loss") {  // the gradients, from the CPU's logits and softmax (backward_dy)
            std::vector<float> z(size_t(s.n) * s.out), g(z.size()), want_dx(size_t(s.n) * s.in), want_dw = dw0,
                                                                                   want_db = db0;
            cpu::dense_forward(z.data(), x.data(), w.data(), b.data(), s.n, s.in, s.out, cpu_scratch.data(), s.math);
            cpu::softmax_cross_entropy(g.data(), z.data(), targets.labels.data(), s.n, s.out);
            dw.put(dw0);
            db.put(db0);
            y.poison();
            dx.poison();
            this->run(run, nullptr);
            const std::vector<float> got_g = dlogits.get();
            cpu::dense_backward(want_dx.data(), want_dw.data(), want_db.data(), backward_dy(got_g, g, s.math).data(),
                                x.data(), w.data(), s.n, s.in, s.out, cpu_scratch.data(), s.math);
            return std::max({error(y.get(), z), error(got_g, g), error(dx.get(), want_dx), error(dw.get(), want_dw),
                             error(db.get(), want_db)});
        }
        const std::vector<float>& x = kind_of(run) == PoolKind::max ? x_max : this->x;
        std::vector<float> want_dx(size_t(s.n) * s.in), want_dw = dw0, want_db = db0;
        cpu::dense_backward(want_dx.data(), want_dw.data(), want_db.data(), dy.data(), x.data(), w.data(), s.n, s.in,
                            s.out, cpu_scratch.data(), s.math);
        dw.put(dw0);
        db.put(db0);
        dx.poison();
        if (run.starts_with("dense_backward_pool")) {
            // The pooled input's gradient is on the way (dx, left alone
            // where the product writes grad_before itself): not checked.
            std::vector<float> want_before(y_before.size());
            cpu::pool2d_backward_relu(want_before.data(), want_dx.data(), y_before.data(), x.data(), kind_of(run), *ps);
            grad_before.poison();
            this->run(run, nullptr);
            return std::max({error(grad_before.get(), want_before), error(dw.get(), want_dw), error(db.get(), want_db)});
        }
        this->run(run, nullptr);
        return std::max({error(dx.get(), want_dx), error(dw.get(), want_dw), error(db.get(), want_db)});
    }
};

// A dense layer with its ReLU and the model's last layer after it (LeNet's
// dense1 and dense2): "dense_head", the first's forward, then the last
// layer's forward, the loss and that layer's backward, as a training step
// runs them: in FP32 the last layer with the loss in one launch
// (dense_softmax_cross_entropy), the first's forward splits left to it
// (dense_forward_relu_for_loss); with --tf32 five calls. And the first
// layer's bias gradient, the column sums of dh, by the kernel its backward
// launches for it (dense_backward_bias).
struct DenseHeadCase {
    DenseShape s, last;
    std::vector<float> x = random_floats(size_t(s.n) * s.in, 11), w = random_floats(size_t(s.out) * s.in, 12),
                       b = random_floats(size_t(s.out), 13), w2 = random_floats(size_t(last.out) * last.in, 14),
                       b2 = random_floats(size_t(last.out), 15), dw0 = random_floats(w2.size(), 16),
                       db0 = random_floats(b2.size(), 17), db1_0 = random_floats(b.size(), 18);
    Gpu gx{x}, gw{w}, gb{b}, gw2{w2}, gb2{b2}, h{size_t(s.n) * s.out}, logits{size_t(s.n) * last.out},
        dlogits{logits.n}, dh{h.n}, dw{dw0}, db{db0}, db1{db1_0};
    Gpu scratch{std::max(cuda::dense_scratch_floats(s.n, s.in, s.out, s.math),
                         cuda::dense_scratch_floats(last.n, last.in, last.out, last.math))};
    Tickets tickets;
    LossTargets targets{s.n, last.out};

    DenseHeadCase(const DenseShape& first, const DenseShape& last_layer) : s(first), last(last_layer) {}

    // The first layer's product, then the last layer's three.
    double flops(const std::string&) const {
        return 2.0 * s.n * s.in * s.out + 6.0 * double(last.n) * last.in * last.out;
    }
    long depth(const std::string&) const { return std::max({long(s.in), long(s.n), long(last.in)}); }
    void run(const std::string&, cudaStream_t stream) {
        const cuda::Workspace ws{scratch.p, tickets.p};
        if (L.dense_loss_runs(last.n, last.in, last.out, last.math)) {
            const cuda::UnfinishedDense left =
                cuda::dense_forward_relu_for_loss(h.p, gx.p, gw.p, gb.p, s.n, s.in, s.out, ws, stream, s.math);
            if (L.dense_loss_bias_before)  // (a dev version's: the first layer's bias summed by the loss's kernel)
                return L.dense_loss_bias_before(logits.p, dlogits.p, targets.loss, targets.glabels, dh.p, dw.p, db.p,
                                                h.p, gw2.p, gb2.p, last.n, last.in, last.out, true, ws, stream, left,
                                                last.math, db1.p);
            L.dense_softmax_cross_entropy(logits.p, dlogits.p, targets.loss, targets.glabels, dh.p, dw.p, db.p,
                                          h.p, gw2.p, gb2.p, last.n, last.in, last.out, true, ws, stream, left,
                                          last.math);
            cuda::dense_backward_bias(db1.p, dh.p, s.n, s.out, stream);
            return;
        }
        cuda::dense_forward_relu(h.p, gx.p, gw.p, gb.p, s.n, s.in, s.out, ws, stream, s.math);
        cuda::dense_forward(logits.p, h.p, gw2.p, gb2.p, last.n, last.in, last.out, ws, stream, last.math);
        cuda::softmax_cross_entropy(dlogits.p, targets.loss, logits.p, targets.glabels, last.n, last.out, stream);
        cuda::dense_backward_relu(dh.p, dw.p, db.p, dlogits.p, h.p, gw2.p, last.n, last.in, last.out, ws, stream,
                                  last.math);
        cuda::dense_backward_bias(db1.p, dh.p, s.n, s.out, stream);
    }
    // The first layer's output against the CPU's; the logits and the last
    // layer's gradients against the CPU's from the GPU's output of the
    // first (so that each check is one product deep, as the others are).
    double check(const std::string& run) {
        std::vector<float> cpu_scratch(std::max(cpu::dense_scratch_floats(s.n, s.in, s.out, s.math),
                                                cpu::dense_scratch_floats(last.n, last.in, last.out, last.math)));
        dw.put(dw0);
        db.put(db0);
        db1.put(db1_0);
        for (Gpu* p : {&h, &logits, &dh, &scratch}) p->poison();
        this->run(run, nullptr);
        const std::vector<float> got_h = h.get(), got_dh = dh.get();
        std::vector<float> want_h(h.n), z(logits.n), g(z.size()), want_dh(h.n), want_dw = dw0, want_db = db0;
        cpu::dense_forward_relu(want_h.data(), x.data(), w.data(), b.data(), s.n, s.in, s.out, cpu_scratch.data(),
                                s.math);
        cpu::dense_forward(z.data(), got_h.data(), w2.data(), b2.data(), last.n, last.in, last.out,
                           cpu_scratch.data(), last.math);
        cpu::softmax_cross_entropy(g.data(), z.data(), targets.labels.data(), last.n, last.out);
        const std::vector<float> got_g = dlogits.get();
        const std::vector<float>& dy = backward_dy(got_g, g, last.math);
        cpu::dense_backward_relu(want_dh.data(), want_dw.data(), want_db.data(), dy.data(), got_h.data(), w2.data(),
                                 last.n, last.in, last.out, cpu_scratch.data(), last.math);
        std::vector<double> sums(db1_0.begin(), db1_0.end());  // the column sums of the GPU's dh, as it is
        for (int i = 0; i < s.n; ++i)
            for (int o = 0; o < s.out; ++o) sums[size_t(o)] += got_dh[size_t(i) * s.out + o];
        const std::vector<float> want_db1(sums.begin(), sums.end());
        return std::max({error(got_h, want_h), error(logits.get(), z), error(got_g, g), error(got_dh, want_dh),
                         error(dw.get(), want_dw), error(db.get(), want_db), error(db1.get(), want_db1)});
    }
};

// A batch norm layer's per-channel sums (ResNet-18's): "batch_norm_stats",
// the statistics (a value's square and two additions: 3 FLOP a value), and
// "batch_norm_backward_sums", the backward's two sums (with x normalised on
// the way: 5), and "batch_norm_backward_sums_relu", the same after the
// mask of a ReLU that follows the layer (dy masked in place, as its
// backward leaves it: repeated launches mask a masked dy, the same work),
// each checked against the CPU twin; dgamma and dbeta start from values of
// their own, as the gradients accumulate. And the element-wise halves
// around them: "batch_norm_backward_data", the data gradient from those
// sums (6 FLOP a value), and "batch_norm_inference", evaluation's
// normalisation by the running statistics (3).
struct NormCase {
    NormShape s;
    std::vector<float> x = shifted(random_floats(s.size(), 21)), dy = random_floats(s.size(), 22),
                       dg0 = random_floats(size_t(s.c), 23), db0 = random_floats(size_t(s.c), 24),
                       y_relu = std::vector<float>(s.size()), saved = saved_of(s, x, y_relu),
                       gamma = random_floats(size_t(s.c), 28), beta = random_floats(size_t(s.c), 29),
                       sums = sums_of(s, dy, x, saved), running = running_of(saved);
    Gpu gx{x}, gdy{dy}, gsaved{saved}, out{2 * size_t(s.c)}, dgamma{dg0}, dbeta{db0},
        scratch{cuda::batch_norm_scratch_floats(s)}, gy_relu{y_relu}, masked{dy}, ggamma{gamma}, gbeta{beta},
        gsums{sums}, grunning{running}, values{s.size()};
    Tickets tickets;

    explicit NormCase(const NormShape& shape) : s(shape) {}

    static std::vector<float> shifted(std::vector<float> v) {  // a mean away from 0
        for (float& f : v) f = 2.0f * f + 0.5f;
        return v;
    }
    // Each channel's mean and 1/std, as the forward leaves them; y, its
    // output with a ReLU after it.
    static std::vector<float> saved_of(const NormShape& s, const std::vector<float>& x, std::vector<float>& y) {
        std::vector<float> stats(2 * size_t(s.c)), saved(stats.size()), ones(size_t(s.c), 1.0f),
            zeros(size_t(s.c), 0.0f);
        cpu::batch_norm_stats(stats.data(), x.data(), s);
        cpu::batch_norm_forward(y.data(), saved.data(), x.data(), stats.data(), s.per_channel(), ones.data(),
                                zeros.data(), 1e-5f, s, true);
        return saved;
    }
    // The backward's two sums over dy, as the data gradient reads them.
    static std::vector<float> sums_of(const NormShape& s, const std::vector<float>& dy, const std::vector<float>& x,
                                      const std::vector<float>& saved) {
        std::vector<float> sums(2 * size_t(s.c)), dg(size_t(s.c)), db(size_t(s.c));
        cpu::batch_norm_backward_sums(sums.data(), dg.data(), db.data(), dy.data(), x.data(), saved.data(), s);
        return sums;
    }
    // Running statistics: the batch's means, and variances of 1 and more.
    static std::vector<float> running_of(const std::vector<float>& saved) {
        std::vector<float> r = saved;
        for (size_t k = r.size() / 2; k < r.size(); ++k) r[k] = 1.0f + std::abs(r[k]);
        return r;
    }
    double flops(const std::string& run) const {
        const double per_value = run == "batch_norm_stats"           ? 3.0
                                 : run == "batch_norm_inference"     ? 3.0
                                 : run == "batch_norm_backward_data" ? 6.0
                                                                     : 5.0;
        return per_value * double(s.size());
    }
    long depth(const std::string&) const { return long(s.n) * s.hw; }
    void run(const std::string& run, cudaStream_t stream) {
        const cuda::Workspace ws{scratch.p, tickets.p};
        if (run == "batch_norm_stats") L.batch_norm_stats(out.p, gx.p, s, ws, stream);
        else if (run == "batch_norm_backward_data")
            L.batch_norm_backward_data(values.p, gdy.p, gx.p, gsaved.p, gsums.p, s.per_channel(), ggamma.p, s, stream);
        else if (run == "batch_norm_inference")
            L.batch_norm_inference(values.p, gx.p, grunning.p, ggamma.p, gbeta.p, 1e-5f, s, stream, false);
        else if (run == "batch_norm_backward_sums_relu")
            L.batch_norm_backward_sums_relu(out.p, dgamma.p, dbeta.p, masked.p, gy_relu.p, gx.p, gsaved.p, s, ws, stream);
        else L.batch_norm_backward_sums(out.p, dgamma.p, dbeta.p, gdy.p, gx.p, gsaved.p, s, ws, stream);
    }
    double check(const std::string& run) {
        std::vector<float> want(out.n), want_dg = dg0, want_db = db0;
        out.poison();
        scratch.poison();
        if (run == "batch_norm_stats") {
            cpu::batch_norm_stats(want.data(), x.data(), s);
            this->run(run, nullptr);
            return error(out.get(), want);
        }
        if (run == "batch_norm_backward_data" || run == "batch_norm_inference") {
            std::vector<float> want_values(s.size());
            if (run == "batch_norm_backward_data")
                cpu::batch_norm_backward_data(want_values.data(), dy.data(), x.data(), saved.data(), sums.data(),
                                              s.per_channel(), gamma.data(), s);
            else
                cpu::batch_norm_inference(want_values.data(), x.data(), running.data(), gamma.data(), beta.data(),
                                          1e-5f, s);
            values.poison();
            this->run(run, nullptr);
            return error(values.get(), want_values);
        }
        dgamma.put(dg0);
        dbeta.put(db0);
        if (run == "batch_norm_backward_sums_relu") {
            std::vector<float> want_masked = dy;
            cpu::batch_norm_backward_sums_relu(want.data(), want_dg.data(), want_db.data(), want_masked.data(),
                                               y_relu.data(), x.data(), saved.data(), s);
            masked.put(dy);
            this->run(run, nullptr);
            return std::max({error(out.get(), want), error(dgamma.get(), want_dg), error(dbeta.get(), want_db),
                             error(masked.get(), want_masked)});
        }
        cpu::batch_norm_backward_sums(want.data(), want_dg.data(), want_db.data(), dy.data(), x.data(), saved.data(), s);
        this->run(run, nullptr);
        return std::max({error(out.get(), want), error(dgamma.get(), want_dg), error(dbeta.get(), want_db)});
    }
};
std::string describe(const NormShape& s, const std::string& what = "norm") {
    return what + " c" + std::to_string(s.c) + " hw" + std::to_string(s.hw);
}

// A residual add and the ReLU after it (ResNet-18's blocks' ends, shapes as
// (n, c, h x w)): "add_relu", the add (1 FLOP a value), and
// "add_relu_backward", the mask stored back and the other input's gradient
// a copy of it (no FLOPs: compare the times), each checked against the CPU
// twin, bit for bit as it is exact.
struct ResidualCase {
    NormShape s;
    std::vector<float> acc = random_floats(s.size(), 25), other = random_floats(s.size(), 26),
                       dy = random_floats(s.size(), 27), y = relu_of_sum(acc, other);
    Gpu gacc{acc}, gother{other}, gdy{dy}, gy{y}, d_other{s.size()};

    explicit ResidualCase(const NormShape& shape) : s(shape) {}

    static std::vector<float> relu_of_sum(std::vector<float> a, const std::vector<float>& b) {
        cpu::add_relu(a.data(), b.data(), a.size());
        return a;
    }
    double flops(const std::string& run) const { return run == "add_relu" ? double(s.size()) : 0.0; }
    long depth(const std::string&) const { return 1; }
    // Repeated launches add to a sum already made, or mask a masked dy: the same work.
    void run(const std::string& run, cudaStream_t stream) {
        if (run == "add_relu") L.add_relu(gacc.p, gother.p, s.size(), stream);
        else L.add_relu_backward(gdy.p, d_other.p, gy.p, s.size(), false, stream);
    }
    double check(const std::string& run) {
        if (run == "add_relu") {
            gacc.put(acc);
            this->run(run, nullptr);
            return error(gacc.get(), y);
        }
        std::vector<float> want_dy = dy, want_other(s.size());
        cpu::add_relu_backward(want_dy.data(), want_other.data(), y.data(), s.size(), false);
        gdy.put(dy);
        d_other.poison();
        this->run(run, nullptr);
        return std::max(error(gdy.get(), want_dy), error(d_other.get(), want_other));
    }
};

// Max pooling's backward ("pool2d_backward max") at a model's pooling
// layers, x small integers so that windows hold ties (the first maximal tap
// is credited), checked against the CPU twin. No FLOPs: compare the times.
struct PoolCase {
    PoolShape s;
    std::vector<float> x = small_integers(s.in_size()), dy = random_floats(s.out_size(), 31), y = pooled(s, x);
    Gpu gx{x}, gdy{dy}, gy{y}, dx{s.in_size()};

    explicit PoolCase(const PoolShape& shape) : s(shape) {}

    static std::vector<float> small_integers(size_t n) {
        std::vector<float> v = random_floats(n, 30);
        for (float& f : v) f = std::floor(4.0f * f);
        return v;
    }
    static std::vector<float> pooled(const PoolShape& s, const std::vector<float>& x) {
        std::vector<float> y(s.out_size());
        cpu::pool2d_forward(y.data(), x.data(), PoolKind::max, s);
        return y;
    }
    double flops(const std::string&) const { return 0.0; }
    long depth(const std::string&) const { return 1; }
    void run(const std::string&, cudaStream_t stream) {
        L.pool2d_backward(dx.p, gdy.p, gx.p, gy.p, PoolKind::max, s, stream);
    }
    double check(const std::string& run) {
        std::vector<float> want(s.in_size());
        cpu::pool2d_backward(want.data(), dy.data(), x.data(), y.data(), PoolKind::max, s);
        dx.poison();
        this->run(run, nullptr);
        return error(dx.get(), want);
    }
};
std::string describe(const PoolShape& s) {
    return "pool " + std::to_string(s.c) + "x" + std::to_string(s.h) + "x" + std::to_string(s.w) + " k" +
           std::to_string(s.k) + "/" + std::to_string(s.stride);
}

// The GEMM core on plain row-major matrices (cuda::gemm, which no layer
// calls: the layers run the same tiles through loaders of their own), at
// the shape of a layer's product: "gemm", C (m, n) = A (m, k) . B (k, n).
struct GemmCase {
    int m, n, k;
    std::vector<float> a = random_floats(size_t(m) * k, 41), b = random_floats(size_t(k) * n, 42);
    Gpu ga{a}, gb{b}, c{size_t(m) * n};

    GemmCase(int m_, int n_, int k_) : m(m_), n(n_), k(k_) {}
    double flops(const std::string&) const { return 2.0 * m * n * double(k); }
    long depth(const std::string&) const { return k; }
    void run(const std::string&, cudaStream_t stream) { L.gemm(c.p, ga.p, gb.p, m, n, k, false, false, false, stream); }
    double check(const std::string& run) {
        std::vector<float> want(c.n);
        cpu::gemm(want.data(), a.data(), b.data(), m, n, k, false, false, false);
        c.poison();
        this->run(run, nullptr);
        return error(c.get(), want);
    }
};
std::string describe(const GemmCase& g) {
    return "gemm " + std::to_string(g.m) + "x" + std::to_string(g.n) + "x" + std::to_string(g.k);
}

// Median milliseconds of one launch.
template <class Case>
double time_ms(Case& c, const std::string& launcher, int repeats) {
    cudaStream_t stream = nullptr;
    CUDA_CHECK(cudaStreamCreate(&stream));
    for (int i = 0; i < 3; ++i) c.run(launcher, stream);
    std::vector<cudaEvent_t> events(size_t(repeats) + 1);
    for (cudaEvent_t& e : events) CUDA_CHECK(cudaEventCreate(&e));
    CUDA_CHECK(cudaEventRecord(events[0], stream));
    for (int i = 0; i < repeats; ++i) {
        c.run(launcher, stream);
        CUDA_CHECK(cudaEventRecord(events[size_t(i) + 1], stream));
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<double> ms;
    for (int i = 0; i < repeats; ++i) {
        float t = 0;
        CUDA_CHECK(cudaEventElapsedTime(&t, events[size_t(i)], events[size_t(i) + 1]));
        ms.push_back(t);
    }
    for (cudaEvent_t e : events) cudaEventDestroy(e);
    cudaStreamDestroy(stream);
    std::nth_element(ms.begin(), ms.begin() + ptrdiff_t(ms.size() / 2), ms.end());
    return ms[ms.size() / 2];
}

std::string describe(const ConvShape& s) {
    char text[120];
    std::snprintf(text, sizeof text, "%d->%d %dx%d k%d s%d p%d", s.c, s.oc, s.h, s.w, s.kh, s.stride, s.pad);
    return text;
}
std::string describe(const DenseShape& s) { return "dense " + std::to_string(s.in) + "->" + std::to_string(s.out); }

[[noreturn]] void usage_error(const std::string& message) {
    std::fprintf(stderr, "kernel_bench: %s (see the opening comment of bench/kernel_bench.cpp, or --list)\n",
                 message.c_str());
    std::exit(2);
}

int number(const char* text, const char* option, int least) {
    char* end = nullptr;
    const long v = std::strtol(text, &end, 10);
    if (!*text || *end || v < least || v > 1 << 20)
        usage_error(std::string(option) + " must be a whole number from " + std::to_string(least) + " (got '" + text + "')");
    return int(v);
}

// The launchers each run calls (its name, or a group's), for the dev
// versions that stand in for them.
const std::map<std::string, std::vector<std::string>> launchers_of = {
    {"gemm", {"gemm"}},
    {"conv2d_forward", {"conv2d_forward_relu"}},
    {"conv2d_forward_relu_pool", {"conv2d_forward_relu_pool"}},
    {"conv2d_forward_stats", {"batch_norm_stats", "conv2d_forward_stats"}},
    {"conv2d_backward_data", {"conv2d_backward_data"}},
    {"conv2d_backward_data_add", {"conv2d_backward_data", "conv2d_backward_data_add"}},
    {"conv2d_backward_weight", {"conv2d_backward_weight"}},
    {"conv2d_backward_weight_data", {"conv2d_backward_weight_unfinished", "conv2d_backward_data"}},
    {"dense_forward", {"dense_forward_relu"}},
    {"dense_backward", {"dense_backward"}},
    {"dense_backward_pool", {"dense_backward_pool"}},
    {"dense_backward_pool max", {"dense_backward_pool"}},
    {"dense_loss", {"dense_backward", "dense_loss_runs", "dense_softmax_cross_entropy"}},
    {"dense_head", {"dense_loss_runs", "dense_softmax_cross_entropy", "dense_loss_bias_before"}},
    {"batch_norm_stats", {"batch_norm_stats"}},
    {"batch_norm_backward_sums", {"batch_norm_backward_sums"}},
    {"batch_norm_backward_sums_relu", {"batch_norm_backward_sums_relu"}},
    {"batch_norm_backward_data", {"batch_norm_backward_data"}},
    {"batch_norm_inference", {"batch_norm_inference"}},
    {"add_relu", {"add_relu"}},
    {"add_relu_backward", {"add_relu_backward"}},
    {"pool2d_backward max", {"pool2d_backward"}},
};

// Whether version v stands in for a launcher that `run` calls: installed on
// a fresh set, one of them is no longer the trainer's.
bool stands_in(const cuda::dev::Version& v, const std::string& run) {
    cuda::dev::Launchers trainer, mine;
    v.install(mine);
    const auto differs = [&](const std::string& name) {
#define DEV_DIFFERS(f) \
    if (name == #f) return mine.f != trainer.f;
        DEV_DIFFERS(gemm) DEV_DIFFERS(conv2d_forward_relu) DEV_DIFFERS(conv2d_forward_relu_pool)
        DEV_DIFFERS(conv2d_backward_data) DEV_DIFFERS(conv2d_backward_weight)
        DEV_DIFFERS(conv2d_backward_weight_unfinished) DEV_DIFFERS(dense_forward_relu) DEV_DIFFERS(dense_backward)
        DEV_DIFFERS(dense_backward_pool) DEV_DIFFERS(dense_loss_runs) DEV_DIFFERS(dense_softmax_cross_entropy)
        DEV_DIFFERS(dense_loss_bias_before) DEV_DIFFERS(conv2d_backward_data_add)
        DEV_DIFFERS(conv2d_forward_stats)
        DEV_DIFFERS(batch_norm_stats) DEV_DIFFERS(batch_norm_backward_sums)
        DEV_DIFFERS(batch_norm_backward_sums_relu) DEV_DIFFERS(batch_norm_backward_data)
        DEV_DIFFERS(batch_norm_inference) DEV_DIFFERS(add_relu) DEV_DIFFERS(add_relu_backward)
        DEV_DIFFERS(pool2d_backward)
#undef DEV_DIFFERS
        return false;
    };
    for (const std::string& name : launchers_of.at(run))
        if (differs(name)) return true;
    return false;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<ModelKind> models = {ModelKind::lenet, ModelKind::resnet18};
    int batch = 256, repeats = 20;
    bool check_only = false, list = false, dev_only = false;
    Math math = Math::fp32;
    std::set<std::string> wanted_runs, wanted_versions;  // empty: all
    const auto& versions = cuda::dev::versions();
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&] {
            if (i + 1 >= argc) usage_error(a + " needs a value");
            return argv[++i];
        };
        if (a == "--check") check_only = true;
        else if (a == "--list") list = true;
        else if (a == "--dev") dev_only = true;
        else if (a == "--tf32") math = Math::tf32;
        else if (a == "--batch") batch = number(value(), "--batch", 1);
        else if (a == "--repeats") repeats = number(value(), "--repeats", 1);
        else if (a == "--model") {
            const std::string m = value();
            if (m == "lenet") models = {ModelKind::lenet};
            else if (m == "resnet18") models = {ModelKind::resnet18};
            else if (m != "both") usage_error("--model must be lenet, resnet18 or both (got '" + m + "')");
        } else if (a.starts_with("-")) {
            usage_error("unknown option " + a);
        } else if (a.find('/') != std::string::npos) {
            if (std::none_of(versions.begin(), versions.end(), [&](const auto& v) { return a == v.id; }))
                usage_error("no dev version is called '" + a + "' (--list shows them)");
            wanted_versions.insert(a);
        } else {
            bool known = false;
            for (const auto& [run, launchers] : launchers_of)
                if (run == a || run.starts_with(a + " ") ||
                    std::find(launchers.begin(), launchers.end(), a) != launchers.end()) {
                    wanted_runs.insert(run);
                    known = true;
                }
            if (!known) usage_error("no run or launcher is called '" + a + "'");
        }
    }
    if (list) {
        for (const auto& v : versions) std::printf("%s\n  %s\n  measured: %s\n", v.id, v.what, v.measured);
        std::printf("%zu dev versions (dev/cuda/README.md)\n", versions.size());
        return 0;
    }

    int gpus = 0;
    if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
        std::printf("SKIP: no usable GPU\n");
        return 77;
    }
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    if (math == Math::tf32 && prop.major < 8) {
        std::printf("SKIP: --tf32 needs compute capability 8.0 or later (GPU 0 has %d.%d)\n", prop.major, prop.minor);
        return 77;
    }
    std::printf("GPU 0: %s%s; batch %d; %s%s\n", prop.name, emulated ? " (emulated: times are the CPU's)" : "", batch,
                check_only ? "checks only" : ("median of " + std::to_string(repeats) + " launches").c_str(),
                math == Math::tf32 ? "; --tf32: conv and dense products on the tensor cores" : "");
    std::printf("%-30s %-8s %-26s %-36s %-9s %10s %10s %11s\n", "run", "model", "layer", "kernel", "check", "ms",
                "GFLOP/s", "vs trainer");

    int failed = 0, ran = 0;
    // The trainer's launcher and then each dev version that stands in for
    // it, on one layer's case: each checked, and timed.
    auto bench = [&](auto& c, ModelKind kind, const std::string& layer, const std::vector<std::string>& runs) {
        for (const std::string& run : runs) {
            if (!wanted_runs.empty() && !wanted_runs.contains(run)) continue;
            std::vector<const cuda::dev::Version*> mine;
            for (const auto& v : versions)
                if ((wanted_versions.empty() || wanted_versions.contains(v.id)) && stands_in(v, run)) mine.push_back(&v);
            if ((dev_only || !wanted_versions.empty()) && mine.empty()) continue;
            double trainer_ms = 0;
            for (size_t k = 0; k <= mine.size(); ++k) {
                L = {};
                if (k > 0) mine[k - 1]->install(L);
                const double err = c.check(run);
                const bool ok = err <= tolerance_for(math, c.depth(run));
                char check[16];
                std::snprintf(check, sizeof check, "%s %.0e", ok ? "ok" : "FAIL", err);
                std::printf("%-30s %-8s %-26s %-36s %-9s", run.c_str(), to_string(kind), layer.c_str(),
                            k == 0 ? "trainer" : mine[k - 1]->id, check);
                ++ran;
                if (!ok) ++failed;
                if (ok && !check_only) {
                    const double ms = time_ms(c, run, repeats);
                    if (k == 0) trainer_ms = ms;
                    std::printf(" %10.4f %10.1f", ms, c.flops(run) / (ms * 1e6));
                    if (k > 0 && trainer_ms > 0) std::printf(" %10.2fx", ms / trainer_ms);
                }
                std::printf("\n");
                std::fflush(stdout);
            }
            L = {};
        }
    };
    for (ModelKind kind : models) {
        std::set<std::string> seen;
        for (const ConvShape& s : model_of(kind).conv_shapes(batch, math)) {
            if (!seen.insert(describe(s)).second) continue;  // ResNet repeats its shapes
            ConvCase c(s);
            std::vector<std::string> runs = {"conv2d_forward", "conv2d_backward_data", "conv2d_backward_weight"};
            if (kind == ModelKind::lenet) {  // LeNet pools after each ReLU; its gradients as training calls them
                runs.insert(runs.begin() + 1, "conv2d_forward_relu_pool");
                runs.push_back("conv2d_backward_weight_data");
            } else if (s.c > 1) {  // a block's input, which two layers read (not the image); a batch norm after
                runs.insert(runs.begin() + 1, "conv2d_forward_stats");
                runs.insert(runs.begin() + 3, "conv2d_backward_data_add");
            }
            bench(c, kind, describe(s), runs);
            // The GEMM core alone (FP32) at the forward product's shape (oc, n*oh*ow, c*kh*kw).
            if (math == Math::fp32) {
                GemmCase g(s.oc, s.n * s.col_cols(), s.col_rows());
                bench(g, kind, describe(g), {"gemm"});
            }
        }
        const auto dense = model_of(kind).dense_shapes(batch, math);
        const auto pools = model_of(kind).dense_pools(batch);
        for (size_t i = 0; i < dense.size(); ++i) {
            DenseCase c(dense[i], pools[i]);
            std::vector<std::string> runs = {"dense_forward", "dense_backward"};
            if (pools[i]) runs.insert(runs.end(), {"dense_backward_pool", "dense_backward_pool max"});
            if (!pools[i] && i + 1 == dense.size()) runs.push_back("dense_loss");
            bench(c, kind, describe(dense[i]), runs);
        }
        // The last two dense layers together, where the last has no pooling before it.
        if (dense.size() >= 2 && !pools.back()) {
            DenseHeadCase c(dense[dense.size() - 2], dense.back());
            bench(c, kind, describe(dense[dense.size() - 2]) + " + last", {"dense_head"});
        }
        std::set<std::string> norms_seen;
        for (const NormShape& s : model_of(kind).norm_shapes(batch)) {
            if (!norms_seen.insert(describe(s)).second) continue;
            NormCase c(s);
            bench(c, kind, describe(s),
                  {"batch_norm_stats", "batch_norm_backward_sums", "batch_norm_backward_sums_relu",
                   "batch_norm_backward_data", "batch_norm_inference"});
        }
        std::set<std::string> pools_seen;
        for (const PoolShape& s : model_of(kind).pool_shapes(batch)) {
            if (!pools_seen.insert(describe(s)).second) continue;
            PoolCase c(s);
            bench(c, kind, describe(s), {"pool2d_backward max"});
        }
        std::set<std::string> adds_seen;
        for (const NormShape& s : model_of(kind).add_shapes(batch)) {
            if (!adds_seen.insert(describe(s, "add")).second) continue;
            ResidualCase c(s);
            bench(c, kind, describe(s, "add"), {"add_relu", "add_relu_backward"});
        }
    }
    if (ran == 0) std::printf("nothing ran: no layer of %s has a run that was asked for\n", models.size() > 1 ? "either model" : "this model");
    if (failed)
        std::printf("FAIL: %d kernel(s) differ from the CPU twin by more than %.0e of the largest value%s\n", failed,
                    tolerance, math == Math::tf32 ? " (or depth x 2^-24 where larger)" : "");
    return failed ? 1 : 0;
}
