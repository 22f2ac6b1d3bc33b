// kernel_bench: every version of the CUDA launchers that have versions
// (kernels/cuda/versions.hpp), side by side, at the real shapes of LeNet's
// and ResNet-18's convolution and dense layers (the GEMM core, "gemm",
// through each of their launchers; its products split along k,
// "gemm_split", through the dense layers and the weight gradients; LeNet's
// convolutions also with the pooling after them, conv2d_forward_relu_pool;
// dense layers after a pooling also through it, dense_backward_pool; the
// convolution after a pooling with the weight gradient of the one before,
// conv2d_backward_data_weight_pool; LeNet's convolutions' weight and input
// gradients one after the other, conv2d_backward_weight_data; a dense layer
// and the last one after it with the loss, dense_head; ResNet-18's batch norm
// layers' sums, batch_norm, and its convolutions with the statistics of the
// batch norm after them, conv2d_forward_stats; residual adds, residual; max pooling's backward
// at each pooling layer, pool; the convolutions' split products through
// their launchers, waves). For each launcher, layer and version it first
// checks the GPU's result against the CPU twin (kernels/cpu/), then times
// it: 3 launches to warm up, then `--repeats` launches, each between two
// CUDA events, and the median. A version that fails its check is not timed,
// and the program exits 1.
//
//   kernel_bench                                 every launcher and version, LeNet and ResNet-18, batch 256
//   kernel_bench conv2d_backward_weight          one launcher, every version
//   kernel_bench conv2d_backward_weight:1        one version
//   kernel_bench --model lenet --batch 128
//   kernel_bench --check --batch 8               checks only (CI runs this on the emulated GPU)
//   kernel_bench --tf32                          the conv and dense launchers on the tensor cores (--tf32),
//                                                checked against the CPU twin's TF32-rounded operands; and
//                                                the convolutions through each version of "tf32" (which
//                                                kernels take TF32 operands)
//   kernel_bench --list                          the launchers and what each version is
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
#include "cuda/versions.hpp"
#include "model/model.hpp"
#include "model/models.hpp"
#include "base/rng.hpp"

using namespace dpt;

namespace {

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
    // "conv2d_forward_relu_pool": LeNet's 2x2 pooling after the convolution
    // and its ReLU, in the forward kernel where it can be.
    PoolShape ps{s.n, s.oc, s.oh(), s.ow(), 2, 2};
    Gpu pooled{ps.out_size()};
    // "conv2d_forward_stats": the convolution without a ReLU, then the
    // statistics of a batch norm after it, as ResNet-18's training runs
    // them (batch_norm 8: the statistics add the product's splits).
    NormShape ns{s.n, s.oc, s.col_cols()};
    Gpu stats{2 * size_t(s.oc)};

    explicit ConvCase(const ConvShape& shape) : s(shape) {}

    // Multiply-adds count two; the same for the three launchers (twice that
    // for "conv2d_backward_weight_data": the weight gradient, then the input
    // gradient, as LeNet's model calls them, from weight version 13 the
    // first's slices added by the second's kernel).
    double flops(const std::string& run) const {
        return (run == "conv2d_backward_weight_data" ? 4.0 : 2.0) * s.oc * s.col_rows() * double(s.n) * s.col_cols();
    }
    // The longest sum of one product, as the selected version runs it:
    // backward-data's version 1 sums the spread gradient's taps, later ones
    // the channels before a gather.
    long depth(const std::string& launcher) const {
        if (launcher == "conv2d_backward_data")
            return cuda::conv2d_backward_data_version == 1 ? long(s.oc) * s.kh * s.kw : s.oc;
        if (launcher == "conv2d_backward_weight") return cuda::conv2d_weight_grad_depth(s);
        if (launcher == "conv2d_backward_weight_data")
            return std::max(depth("conv2d_backward_data"), depth("conv2d_backward_weight"));
        return s.col_rows();
    }

    void run(const std::string& launcher, cudaStream_t stream) {
        if (launcher == "conv2d_forward") cuda::conv2d_forward_relu(y.p, gx.p, gw.p, gb.p, s, scratch.p, stream);
        else if (launcher == "conv2d_forward_stats") {
            const cuda::UnfinishedConv left = cuda::conv2d_forward_for_stats(y.p, gx.p, gw.p, gb.p, s, scratch.p, stream);
            cuda::batch_norm_stats(stats.p, y.p, ns, {scratch.p, tickets.p}, stream, left);
        }
        else if (launcher == "conv2d_forward_relu_pool")
            cuda::conv2d_forward_relu_pool(y.p, pooled.p, gx.p, gw.p, gb.p, s, PoolKind::max, ps, scratch.p, stream);
        else if (launcher == "conv2d_backward_data") cuda::conv2d_backward_data(dx.p, gdy.p, gw.p, s, scratch.p, stream);
        else if (launcher == "conv2d_backward_weight_data") {
            const cuda::UnfinishedWeightGrad left =
                cuda::conv2d_backward_weight_unfinished(dw.p, db.p, gdy.p, gx.p, s, {scratch.p, tickets.p}, stream);
            cuda::conv2d_backward_data(dx.p, gdy.p, gw.p, s, scratch.p, stream, left);
        } else cuda::conv2d_backward_weight(dw.p, db.p, gdy.p, gx.p, s, {scratch.p, tickets.p}, stream);
    }

    // The worst error of one run against the CPU twin (outputs poisoned
    // first): the implicit GEMM (the sums the GPU makes, unlike Winograd's),
    // on the operands rounded to TF32 with --tf32, the bias from dy as it is.
    double check(const std::string& launcher) {
        ConvShape fp = s;
        fp.math = Math::fp32;
        std::vector<float> cpu_scratch(cpu::conv2d_scratch_floats(fp));
        const auto x = operand(this->x, s.math), w = operand(this->w, s.math), dy = operand(this->dy, s.math);
        if (launcher == "conv2d_forward_stats") {
            std::vector<float> want(s.out_size()), want_stats(stats.n);
            cpu::conv2d_forward_gemm(want.data(), x.data(), w.data(), b.data(), fp, cpu_scratch.data());
            cpu::batch_norm_stats(want_stats.data(), want.data(), ns);
            y.poison();
            stats.poison();
            scratch.poison();
            run(launcher, nullptr);
            return std::max(error(y.get(), want), error(stats.get(), want_stats));
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

// A convolution after a pooling of a ReLU'd convolution (LeNet's conv2 after
// conv1), as the model runs both backwards at once:
// "conv2d_backward_data_weight_pool", the second's input gradient and from it
// the first's weight gradient (backward-data version 3: no gather kernel),
// through a max pooling; "conv2d_backward_data_weight_pool avg" through an
// average pooling, LeNet's own (conv2d_backward_weight 12 reads conv1's
// gradient through it a window at a time). FP32 (with --tf32 the first
// conv's weight gradient is a product: the two calls).
struct ConvPoolConvCase {
    ConvShape s, next;
    PoolShape ps;
    std::vector<float> x = random_floats(s.in_size(), 1), y = relu(random_floats(s.out_size(), 7)),
                       pooled = pool(y, PoolKind::max), pooled_avg = pool(y, PoolKind::avg),
                       next_w = random_floats(next.weight_size(), 2), next_dy = random_floats(next.out_size(), 4),
                       dw0 = random_floats(s.weight_size(), 5), db0 = random_floats(size_t(s.oc), 6);
    Gpu gx{x}, gy{y}, gpooled{pooled}, gpooled_avg{pooled_avg}, gnext_w{next_w}, gnext_dy{next_dy},
        scratch{std::max(cuda::conv2d_scratch_floats(s), cuda::conv2d_scratch_floats(next))};
    Gpu d_pooled{ps.out_size()}, dy{s.out_size()}, dw{dw0}, db{db0};
    Tickets tickets;

    explicit ConvPoolConvCase(const Model::ConvPoolConv& c) : s(c.first), next(c.next), ps(c.pool) {}

    static std::vector<float> relu(std::vector<float> v) {
        cpu::relu_forward(v.data(), v.data(), v.size());
        return v;
    }
    std::vector<float> pool(const std::vector<float>& v, PoolKind kind) const {
        std::vector<float> out(ps.out_size());
        cpu::pool2d_forward(out.data(), v.data(), kind, ps);
        return out;
    }
    static PoolKind kind_of(const std::string& run) { return run.ends_with(" avg") ? PoolKind::avg : PoolKind::max; }
    // The two products: next's input gradient, the first's weight gradient.
    double flops(const std::string&) const {
        return 2.0 * next.oc * next.col_rows() * double(next.n) * next.col_cols() +
               2.0 * s.oc * s.col_rows() * double(s.n) * s.col_cols();
    }
    long depth(const std::string&) const { return std::max<long>(next.oc, cuda::conv2d_weight_grad_depth(s)); }
    void run(const std::string& run, cudaStream_t stream) {
        const PoolKind kind = kind_of(run);
        cuda::conv2d_backward_data_weight_pool(d_pooled.p, gnext_dy.p, gnext_w.p, next, dw.p, db.p, dy.p, gx.p, gy.p,
                                               kind == PoolKind::avg ? gpooled_avg.p : gpooled.p, s, kind, ps,
                                               {scratch.p, tickets.p}, stream);
    }
    double check(const std::string& run) {
        std::vector<float> cpu_scratch(std::max(cpu::conv2d_scratch_floats(s), cpu::conv2d_scratch_floats(next)));
        std::vector<float> want_pooled(ps.out_size()), want_dy(s.out_size()), want_dw = dw0, want_db = db0;
        const PoolKind kind = kind_of(run);
        cpu::conv2d_backward_data_weight_pool(want_pooled.data(), next_dy.data(), next_w.data(), next, want_dw.data(),
                                              want_db.data(), want_dy.data(), x.data(), y.data(),
                                              (kind == PoolKind::avg ? pooled_avg : pooled).data(), s, kind, ps,
                                              cpu_scratch.data());
        dw.put(dw0);
        db.put(db0);
        scratch.poison();
        this->run(run, nullptr);
        return std::max(error(dw.get(), want_dw), error(db.get(), want_db));
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
// launch from dense version 6, dense_softmax_cross_entropy; before, three
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
        if (run == "dense_loss" && cuda::dense_loss_runs(s.n, s.in, s.out, s.math)) {
            cuda::dense_softmax_cross_entropy(y.p, dlogits.p, targets.loss, targets.glabels, dx.p, dw.p, db.p, gx.p,
                                              gw.p, gb.p, s.n, s.in, s.out, false, ws, stream, {}, s.math);
        } else if (run == "dense_loss") {
            cuda::dense_forward(y.p, gx.p, gw.p, gb.p, s.n, s.in, s.out, ws, stream, s.math);
            cuda::softmax_cross_entropy(dlogits.p, targets.loss, y.p, targets.glabels, s.n, s.out, stream);
            cuda::dense_backward(dx.p, dw.p, db.p, dlogits.p, gx.p, gw.p, s.n, s.in, s.out, ws, stream, s.math);
        } else if (run == "dense_forward")
            cuda::dense_forward_relu(y.p, gx.p, gw.p, gb.p, s.n, s.in, s.out, {scratch.p, tickets.p}, stream, s.math);
        else if (run.starts_with("dense_backward_pool"))
            cuda::dense_backward_pool(grad_before.p, dx.p, dw.p, db.p, gdy.p,
                                      kind_of(run) == PoolKind::max ? gx_max.p : gx.p, gw.p, s.n, s.in, s.out,
                                      gy_before.p, kind_of(run), *ps, {scratch.p, tickets.p}, stream, s.math);
        else
            cuda::dense_backward(dx.p, dw.p, db.p, gdy.p, gx.p, gw.p, s.n, s.in, s.out, {scratch.p, tickets.p}, stream,
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
// runs them: from dense version 6 the last layer with the loss in one
// launch (dense_softmax_cross_entropy), and from version 10 the first's
// forward splits left to that launch (dense_forward_relu_for_loss); before
// version 6, five calls. And the first layer's bias gradient, the column
// sums of dh: with --tf32 from tf32 version 10 by the loss's launch
// (db_before), else by the kernel its backward launches for it
// (dense_backward_bias), so that every version does the same work.
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
        if (cuda::dense_loss_runs(last.n, last.in, last.out, last.math)) {
            const cuda::UnfinishedDense left =
                cuda::dense_forward_relu_for_loss(h.p, gx.p, gw.p, gb.p, s.n, s.in, s.out, ws, stream, s.math);
            const bool bias_too = cuda::dense_loss_sums_bias_before(last.math);
            cuda::dense_softmax_cross_entropy(logits.p, dlogits.p, targets.loss, targets.glabels, dh.p, dw.p, db.p,
                                              h.p, gw2.p, gb2.p, last.n, last.in, last.out, true, ws, stream, left,
                                              last.math, bias_too ? db1.p : nullptr);
            if (!bias_too) cuda::dense_backward_bias(db1.p, dh.p, s.n, s.out, stream);
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
        if (run == "batch_norm_stats") cuda::batch_norm_stats(out.p, gx.p, s, ws, stream);
        else if (run == "batch_norm_backward_data")
            cuda::batch_norm_backward_data(values.p, gdy.p, gx.p, gsaved.p, gsums.p, s.per_channel(), ggamma.p, s,
                                           stream);
        else if (run == "batch_norm_inference")
            cuda::batch_norm_inference(values.p, gx.p, grunning.p, ggamma.p, gbeta.p, 1e-5f, s, stream);
        else if (run == "batch_norm_backward_sums_relu")
            cuda::batch_norm_backward_sums_relu(out.p, dgamma.p, dbeta.p, masked.p, gy_relu.p, gx.p, gsaved.p, s, ws,
                                                stream);
        else cuda::batch_norm_backward_sums(out.p, dgamma.p, dbeta.p, gdy.p, gx.p, gsaved.p, s, ws, stream);
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
        if (run == "add_relu") cuda::add_relu(gacc.p, gother.p, s.size(), stream);
        else cuda::add_relu_backward(gdy.p, d_other.p, gy.p, s.size(), false, stream);
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
        cuda::pool2d_backward(dx.p, gdy.p, gx.p, gy.p, PoolKind::max, s, stream);
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

}  // namespace

int main(int argc, char** argv) {
    std::vector<ModelKind> models = {ModelKind::lenet, ModelKind::resnet18};
    int batch = 256, repeats = 20;
    bool check_only = false, list = false;
    Math math = Math::fp32;
    std::map<std::string, std::set<int>> wanted;  // launcher -> versions (empty: all)
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&] {
            if (i + 1 >= argc) usage_error(a + " needs a value");
            return argv[++i];
        };
        if (a == "--check") check_only = true;
        else if (a == "--list") list = true;
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
        } else {
            const size_t colon = a.find(':');
            const std::string name = a.substr(0, colon);
            bool known = false;
            for (const auto& l : cuda::launcher_versions()) {
                if (name != l.launcher) continue;
                known = true;
                if (colon != std::string::npos)
                    wanted[name].insert(number(a.c_str() + colon + 1, a.c_str(), 1));
                else
                    wanted[name];
                for (int v : wanted[name])
                    if (v > int(l.versions.size()))
                        usage_error(name + " has versions 1 to " + std::to_string(l.versions.size()) + " (got " + std::to_string(v) + ")");
            }
            if (!known) usage_error("no launcher with versions is called '" + name + "' (--list shows them)");
        }
    }
    if (list) {
        for (const auto& l : cuda::launcher_versions()) {
            std::printf("%s\n", l.launcher);
            for (size_t v = 0; v < l.versions.size(); ++v)
                std::printf("  %zu%s %s\n", v + 1, int(v) + 1 == l.trained ? " (trained with)" : "", l.versions[v]);
        }
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
    std::printf("GPU 0: %s%s; batch %d; %s; v*: the version dptrain trains with%s\n", prop.name, emulated ? " (emulated: times are the CPU's)" : "", batch,
                check_only ? "checks only" : ("median of " + std::to_string(repeats) + " launches").c_str(),
                math == Math::tf32 ? "; --tf32: conv and dense products on the tensor cores (every GEMM version runs "
                                     "version 2's tiles)"
                                   : "");
    std::printf("%-36s %-8s %-26s %3s  %-9s %10s %10s %8s\n", "launcher", "model", "layer", "v", "check", "ms", "GFLOP/s",
                "vs v1");

    int failed = 0;
    // Every wanted launcher and version on one layer's case; `runs(l)` says
    // what each launcher runs there (none: not this kind of layer).
    auto bench = [&](auto& c, ModelKind kind, const std::string& layer, auto&& runs) {
        for (const auto& l : cuda::launcher_versions()) {
            if (!wanted.empty() && !wanted.contains(l.launcher)) continue;
            const int chosen = *l.selected;
            for (const std::string& run : runs(std::string(l.launcher))) {
                // (A run named after the launcher is one of its calls; another is the GEMM core's, through it.)
                const std::string label = run.starts_with(l.launcher) ? run : std::string(l.launcher) + ": " + run;
                // The GEMM core's rows run a launcher's version that is a
                // product at every shape (later ones sum small filter banks
                // directly, without the core).
                const bool through = run != l.launcher;
                if (l.launcher == std::string("gemm") && run == "conv2d_forward") cuda::select_version(run, 1);
                if (l.launcher == std::string("gemm") && run == "conv2d_backward_weight") cuda::select_version(run, 2);
                double v1_ms = 0;
                for (int v = 1; v <= int(l.versions.size()); ++v) {
                    if (!wanted.empty() && !wanted[l.launcher].empty() && !wanted[l.launcher].contains(v)) continue;
                    cuda::select_version(l.launcher, v);
                    const double err = c.check(run);
                    const bool ok = err <= tolerance_for(math, c.depth(run));
                    char check[16];
                    std::snprintf(check, sizeof check, "%s %.0e", ok ? "ok" : "FAIL", err);
                    std::printf("%-36s %-8s %-26s %3d%c %-9s", label.c_str(), to_string(kind), layer.c_str(), v,
                                v == l.trained ? '*' : ' ', check);
                    if (!ok) ++failed;
                    if (ok && !check_only) {
                        const double ms = time_ms(c, run, repeats);
                        if (v == 1) v1_ms = ms;
                        std::printf(" %10.4f %10.1f", ms, c.flops(run) / (ms * 1e6));
                        if (v > 1 && v1_ms > 0) std::printf(" %7.2fx", v1_ms / ms);
                    }
                    std::printf("\n");
                    std::fflush(stdout);
                }
                cuda::select_version(l.launcher, chosen);
                if (through) cuda::select_version(run, 0);
            }
        }
    };
    for (ModelKind kind : models) {
        std::set<std::string> seen;
        for (const ConvShape& s : model_of(kind).conv_shapes(batch, math)) {
            if (!seen.insert(describe(s)).second) continue;  // ResNet repeats its shapes
            ConvCase c(s);
            bench(c, kind, describe(s), [kind, math](const std::string& launcher) {
                // The GEMM core is run through each convolution launcher.
                if (launcher == "gemm") return std::vector<std::string>{"conv2d_forward", "conv2d_backward_data", "conv2d_backward_weight"};
                // LeNet pools after each convolution's ReLU: time that as one call too.
                // Split products (and their finishing) run in the larger weight gradients.
                if (launcher == "gemm_split") return std::vector<std::string>{"conv2d_backward_weight"};
                // How many splits: the split forward and weight-gradient products.
                if (launcher == "waves") return std::vector<std::string>{"conv2d_forward", "conv2d_backward_weight"};
                // The kernels that take TF32 operands (--tf32 alone): every convolution launcher through them.
                if (launcher == "tf32") {
                    if (math != Math::tf32) return std::vector<std::string>{};
                    std::vector<std::string> runs = {"conv2d_forward", "conv2d_backward_data", "conv2d_backward_weight"};
                    if (kind == ModelKind::lenet) {  // (and the two gradients as training calls them, from tf32 6)
                        runs.insert(runs.begin() + 1, "conv2d_forward_relu_pool");
                        runs.push_back("conv2d_backward_weight_data");
                    }
                    return runs;
                }
                if (launcher == "conv2d_forward" && kind == ModelKind::lenet)
                    return std::vector<std::string>{launcher, "conv2d_forward_relu_pool"};
                // ResNet-18's convolutions before a batch norm, with its statistics.
                if (launcher == "batch_norm" && kind == ModelKind::resnet18)
                    return std::vector<std::string>{"conv2d_forward_stats"};
                if (launcher == "conv2d_backward_weight" && kind == ModelKind::lenet)
                    return std::vector<std::string>{launcher, "conv2d_backward_weight_data"};
                if (launcher.starts_with("conv2d")) return std::vector<std::string>{launcher};
                return std::vector<std::string>{};
            });
        }
        if (math == Math::fp32)
            for (const Model::ConvPoolConv& pair : model_of(kind).conv_pool_convs(batch)) {
                ConvPoolConvCase c(pair);
                bench(c, kind, describe(pair.next) + " + before", [](const std::string& launcher) {
                    if (launcher == "conv2d_backward_data")
                        return std::vector<std::string>{"conv2d_backward_data_weight_pool",
                                                        "conv2d_backward_data_weight_pool avg"};
                    if (launcher == "conv2d_backward_weight")
                        return std::vector<std::string>{"conv2d_backward_data_weight_pool avg"};
                    return std::vector<std::string>{};
                });
            }
        const auto dense = model_of(kind).dense_shapes(batch, math);
        const auto pools = model_of(kind).dense_pools(batch);
        for (size_t i = 0; i < dense.size(); ++i) {
            DenseCase c(dense[i], pools[i]);
            bench(c, kind, describe(dense[i]), [&](const std::string& launcher) {
                std::vector<std::string> runs;
                if (launcher == "gemm" || launcher == "gemm_split" || launcher == "dense")
                    runs = {"dense_forward", "dense_backward"};
                // The model's call where a pooling comes before: the backward
                // through it (version 5 and later, in the product's epilogue).
                if (launcher == "dense" && pools[i]) runs.insert(runs.end(), {"dense_backward_pool", "dense_backward_pool max"});
                // The last layer with the loss (version 6 and later: one launch;
                // with --tf32, from tf32 version 5).
                if ((launcher == "dense" || (launcher == "tf32" && math == Math::tf32)) && !pools[i] &&
                    i + 1 == dense.size())
                    runs.push_back("dense_loss");
                return runs;
            });
        }
        // The last two dense layers together, where the last has no pooling before it.
        if (dense.size() >= 2 && !pools.back()) {
            DenseHeadCase c(dense[dense.size() - 2], dense.back());
            bench(c, kind, describe(dense[dense.size() - 2]) + " + last", [math](const std::string& launcher) {
                return launcher == "dense" || (launcher == "tf32" && math == Math::tf32)
                           ? std::vector<std::string>{"dense_head"}
                           : std::vector<std::string>{};
            });
        }
        std::set<std::string> norms_seen;
        for (const NormShape& s : model_of(kind).norm_shapes(batch)) {
            if (!norms_seen.insert(describe(s)).second) continue;
            NormCase c(s);
            bench(c, kind, describe(s), [](const std::string& launcher) {
                return launcher == "batch_norm"
                           ? std::vector<std::string>{"batch_norm_stats", "batch_norm_backward_sums",
                                                      "batch_norm_backward_sums_relu", "batch_norm_backward_data",
                                                      "batch_norm_inference"}
                           : std::vector<std::string>{};
            });
        }
        std::set<std::string> pools_seen;
        for (const PoolShape& s : model_of(kind).pool_shapes(batch)) {
            if (!pools_seen.insert(describe(s)).second) continue;
            PoolCase c(s);
            bench(c, kind, describe(s), [](const std::string& launcher) {
                return launcher == "pool" ? std::vector<std::string>{"pool2d_backward max"} : std::vector<std::string>{};
            });
        }
        std::set<std::string> adds_seen;
        for (const NormShape& s : model_of(kind).add_shapes(batch)) {
            if (!adds_seen.insert(describe(s, "add")).second) continue;
            ResidualCase c(s);
            bench(c, kind, describe(s, "add"), [](const std::string& launcher) {
                return launcher == "residual" ? std::vector<std::string>{"add_relu", "add_relu_backward"}
                                              : std::vector<std::string>{};
            });
        }
    }
    if (failed)
        std::printf("FAIL: %d version(s) differ from the CPU twin by more than %.0e of the largest value%s\n", failed,
                    tolerance, math == Math::tf32 ? " (or depth x 2^-24 where larger)" : "");
    return failed ? 1 : 0;
}
