// GPU tests: every CUDA kernel against its CPU twin, and GPU replicas against
// CPU devices. Plain C++ with its own main (Catch2 stays out of nvcc's way and
// Debian's v2 has no SKIP): with no usable CUDA device it says why and returns
// 77, which meson reports as SKIP, here and in CI.
//
//   gpu_tests kernels    each launcher vs kernels/cpu on random inputs
//   gpu_tests tf32       the --tf32 launchers alone (a part of `kernels`)
//   gpu_tests replicas   1, 2 and 3 GPU replicas (sharing GPUs round-robin)
//                        vs CPU devices; two epochs replayed from one graph
//                        vs queued kernels; a recording that fails midway
//   gpu_tests graph-first  the trainer's order in a fresh process: the
//                        epoch is recorded as a graph before any kernel has
//                        ever run (kernels load lazily, during the capture)
//
// Outputs are poisoned (all bits set: NaN) before every GPU run, so an
// element a kernel forgets to write fails the comparison. Tolerances are
// relative to the largest reference value and stated where they are used.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <initializer_list>
#include <map>
#include <memory>
#include <stdexcept>
#include <set>
#include <string>
#include <tuple>
#include <thread>
#include <utility>
#include <vector>

#ifdef DPTRAIN_CUDA_EMULATION
#include <pthread.h>

#include "device_code.hpp"
#endif
#include "cpu/kernels.hpp"
#include "cuda/check.hpp"
#include "cuda/fastdiv.cuh"
#include "cuda/kernels.hpp"
#include "cuda/splits.hpp"
#include "cuda/versions.hpp"
#include "parallel/device_factory.hpp"
#include "devices/gpu.hpp"
#include "model/lenet.hpp"
#include "model/resnet.hpp"
#include "small_resnet.hpp"
#include "parallel/parallel.hpp"
#include "synthetic.hpp"
#include "testing.hpp"
#include "run/trainer.hpp"

using namespace dpt;

namespace {

int failures = 0, checks = 0;

const Allreduce& naive() { return allreduce_named("naive"); }

void report(bool ok, const std::string& what, const std::string& detail = "") {
    ++checks;
    if (!ok) ++failures;
    std::printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", what.c_str(), detail.empty() ? "" : "  ", detail.c_str());
}

// Device memory for one test tensor.
template <class T>
struct Buffer {
    T* p = nullptr;
    size_t n;
    explicit Buffer(size_t count) : n(count) { CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(n, 1) * sizeof(T))); }
    explicit Buffer(const std::vector<T>& host) : Buffer(host.size()) { upload(host); }
    ~Buffer() { cudaFree(p); }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    void upload(const std::vector<T>& host) {
        CUDA_CHECK(cudaMemcpy(p, host.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    }
    void poison() { CUDA_CHECK(cudaMemset(p, 0xFF, n * sizeof(T))); }
    void zero() { CUDA_CHECK(cudaMemset(p, 0, n * sizeof(T))); }
    std::vector<T> download() const {
        CUDA_CHECK(cudaDeviceSynchronize());
        std::vector<T> host(n);
        CUDA_CHECK(cudaMemcpy(host.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
        return host;
    }
};

// A tensor with NaNs after its end, in the same allocation: a kernel that
// reads past the end (a tile's tail, a filter tap past the last channel)
// turns what it computes into NaN, even where it multiplies what it read by
// a zero, rather than reading some other tensor's finite values unseen.
struct Fenced : Buffer<float> {
    static constexpr size_t fence = 4096;
    explicit Fenced(const std::vector<float>& host) : Buffer<float>(host.size() + fence) {
        poison();
        CUDA_CHECK(cudaMemcpy(p, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
    }
};

// |got - want| <= tol * max(1, max |want|) everywhere, and no NaN in got.
// tol = 0 asks for the same bits.
void compare(const std::string& what, const std::vector<float>& got, const std::vector<float>& want, double tol) {
    double scale = 1.0, worst = 0.0;
    size_t worst_at = 0, bad = 0;
    for (float w : want) scale = std::max(scale, double(std::abs(w)));
    for (size_t i = 0; i < want.size(); ++i) {
        const double d = std::isnan(got[i]) ? INFINITY : std::abs(double(got[i]) - double(want[i]));
        if (d > worst) worst = d, worst_at = i;
        if (tol == 0.0 ? std::memcmp(&got[i], &want[i], sizeof(float)) != 0 : d > tol * scale) ++bad;
    }
    char detail[200];
    std::snprintf(detail, sizeof detail, "(%zu values, largest |diff| %.3g at %zu, %.3g of scale %.3g; bound %s)",
                  want.size(), worst, worst_at, worst / scale, scale,
                  tol == 0.0 ? "same bits" : (std::to_string(tol) + " of scale").c_str());
    report(bad == 0, what, detail);
}

std::vector<float> random(size_t n, uint64_t seed) { return testing::random_vector(n, seed); }

// The tickets of the launchers' split products (splits.hpp: Workspace),
// zeroed as a device's are.
struct Tickets : Buffer<unsigned> {
    Tickets() : Buffer<unsigned>(size_t(cuda::workspace_tickets)) { zero(); }
};
// Every ticket is back at 0 after a launcher ran: else the next split
// product's blocks would not know which of them is last.
void check_tickets(const Tickets& t, const std::string& what) {
    const auto host = t.download();
    const auto left = std::count_if(host.begin(), host.end(), [](unsigned v) { return v != 0; });
    report(left == 0, what + ": every ticket back at 0", std::to_string(left) + " not");
}

// Integers in [-3, 3]: many ties, for max pooling's and argmax's first-wins rules.
std::vector<float> small_integers(size_t n, uint64_t seed) {
    std::vector<float> v = random(n, seed);
    for (float& x : v) x = std::round(3.0f * x);
    return v;
}

std::string describe(const ConvShape& s) {
    char b[120];
    std::snprintf(b, sizeof b, "n%d c%d %dx%d -> oc%d k%dx%d stride %d pad %d", s.n, s.c, s.h, s.w, s.oc, s.kh, s.kw,
                  s.stride, s.pad);
    return b;
}

// A GEMM of depth k sums k products in another order on each side, with FMAs
// on the GPU: rounding differs by about sqrt(k) ulps of the result's scale.
// 1e-5 of the largest value is ~80 ulps: room for k in the thousands, while a
// wrong index or a missed tile is off by whole values.
constexpr double gemm_tol = 1e-5;

void test_gemm() {
    const int sizes[] = {1, 17, 64, 65, 130};
    for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb)
            for (int m : sizes)
                for (int n : {1, 63, 100})
                    for (int k : {1, 16, 33, 300}) {
                        const bool acc = (m + n + k) % 2 == 1;
                        const auto a = random(size_t(m) * k, 1), b = random(size_t(k) * n, 2), c0 = random(size_t(m) * n, 3);
                        std::vector<float> want = c0;
                        cpu::gemm(want.data(), a.data(), b.data(), m, n, k, ta, tb, acc);
                        Buffer<float> da(a), db(b), dc(c0);
                        if (!acc) dc.poison();
                        cuda::gemm(dc.p, da.p, db.p, m, n, k, ta, tb, acc, nullptr);
                        char what[100];
                        std::snprintf(what, sizeof what, "gemm m%d n%d k%d%s%s%s", m, n, k, ta ? " A^T" : "",
                                      tb ? " B^T" : "", acc ? " +=" : "");
                        compare(what, dc.download(), want, gemm_tol);
                    }
}

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
        std::vector<float> v6_y, v6_relu, v8_y, v8_relu;  // version 7 sums as 6 does, 9 and 10 as 8
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
        std::vector<float> v4_dx;  // versions 5 to 8 sum as version 4 does
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
            std::vector<float> v6_y, v6_pooled, v8_y, v8_pooled;  // version 7 sums as 6 does, 9 and 10 as 8
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
// tiled kernel that adds the slices itself (data version 9) and on one that
// leaves them to finish_splits (8); and through
// conv2d_backward_data_weight_pool with conv1's weight gradient (the call
// LeNet's model makes), where data version 9 adds them in its kernel and 3
// before its columns take the scratch. Version 12 against the CPU. Batches
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
            for (const int data : with_pool ? std::vector<int>{3, 9} : std::vector<int>{8, 9}) {
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

#ifdef DPTRAIN_CUDA_EMULATION
// The emulated GPU holds every kernel's shared memory in thread-local
// storage, which glibc takes out of each thread's stack: a thread started
// now (as the streams and CPU devices' workers are) has 4 MB or more of
// stack besides it. (With the default 8 MB, 0.2 MB were left, and a stream
// thread under ThreadSanitizer overran it.)
void test_thread_stacks() {
    size_t stack = 0;
    std::thread([&] {
        pthread_attr_t attr;
        if (pthread_getattr_np(pthread_self(), &attr) != 0) return;
        pthread_attr_getstacksize(&attr, &stack);
        pthread_attr_destroy(&attr);
    }).join();
    const size_t tls = cuda_emulation::static_tls_bytes();
    report(stack >= tls + (size_t(4) << 20), "a new thread has 4 MB of stack or more besides the kernels' shared memory",
           "stack " + std::to_string(stack >> 10) + " KiB, thread-local storage " + std::to_string(tls >> 10) + " KiB");
}
#endif

// fastdiv.cuh's division by multiplication against the division, on the
// host (the same code runs on the GPU): every divisor up to 4,100 (a layer's
// widths and taps), then large ones, each on numerators near its multiples
// and near 2^31.
void test_fastdiv() {
    long wrong = 0, tried = 0;
    auto check = [&](int d, int n) {
        ++tried;
        if (n >= 0 && cuda::FastDiv(d).div(n) != n / d) ++wrong;
    };
    for (int d = 1; d <= 4100; ++d)
        for (int q : {0, 1, 2, 7, 1000, 99991, 2147483647 / d - 1, 2147483647 / d})
            for (int r : {-1, 0, 1, d - 1})
                if (long(q) * d + r >= 0 && long(q) * d + r <= 2147483647L) check(d, int(long(q) * d + r));
    for (int d : {65536, 65537, 1 << 20, 3 << 20, 1 << 30, 2147483647})
        for (int n : {0, d - 1, d, 2147483646, 2147483647}) check(d, n);
    report(wrong == 0, "FastDiv divides as / does", std::to_string(wrong) + " wrong of " + std::to_string(tried));
}

// splits.hpp: the scratch sized for a product at a device's capacity holds
// the partial sums of that product at every smaller batch too (a batch's
// last part is smaller, and fewer rows can mean more splits). Products of
// every orientation of LeNet's and ResNet-18's dense layers (the weight
// gradient's with the bias's column of ones, dense version 3), at capacities
// up to 8,448, where a smaller part leaves fewer tiles than 132.
void test_split_scratch() {
    long wrong = 0, tried = 0;
    std::string first;
    for (int capacity : {1, 7, 64, 256, 1000, 4224, 8448})
        for (const auto& [in, out] : {std::pair{800, 128}, std::pair{128, 10}, std::pair{256, 10}}) {
            // (m, n, k) of the forward, weight-gradient and data-gradient products at batch b.
            auto products = [&](int b) {
                return std::vector<std::array<int, 3>>{{b, out, in}, {out, in + 1, b}, {b, in, out}};
            };
            const auto at_capacity = products(capacity);
            for (int b = 1; b <= capacity; b += std::max(1, capacity / 997)) {
                const auto here = products(b);
                for (size_t p = 0; p < here.size(); ++p) {
                    const auto [m, n, k] = here[p];
                    const int splits = cuda::tiled::splits_to_fill(m, n, k);
                    const size_t need = splits > 1 ? size_t(splits) * size_t(m) * size_t(n) : 0;
                    const auto [cm, cn, ck] = at_capacity[p];
                    ++tried;
                    if (need > cuda::tiled::split_scratch_floats(cm, cn, ck) && wrong++ == 0)
                        first = "capacity " + std::to_string(capacity) + ", batch " + std::to_string(b) + ", product " +
                                std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
                }
            }
        }
    report(wrong == 0, "split scratch at a device's capacity suffices for every smaller batch",
           std::to_string(wrong) + " short of " + std::to_string(tried) + (first.empty() ? "" : ", first: " + first));
}

void test_pool() {
    // LeNet's, odd ones, and ResNet-18's max pool 3/2 (26 -> 12) and last avg pool (3x3 -> 1).
    // Also ragged edges (inputs the windows do not reach, tiles cut short),
    // a stride of 3 (tiles of 3x3 pixels) and one of 5 (no tiles: version 1's kernel).
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
            // order in every version (version 2: a tile of pixels a thread):
            // the same bits, overlapping windows too.
            const double tolerance = overlap && kind == PoolKind::avg ? 1e-6 : 0.0;
            auto want_relu = want_dx;
            cpu::relu_backward(want_relu.data(), want_relu.data(), x.data(), want_relu.size());
            for (int v = 1; v <= cuda::version_count("pool"); ++v) {
                cuda::select_version("pool", v);
                const std::string version = " (pool " + std::to_string(v) + ")";
                dx.poison();
                cuda::pool2d_backward(dx.p, ddy.p, dx_.p, y.p, kind, s, nullptr);
                compare(std::string("pool2d_backward ") + name + version, dx.download(), want_dx, tolerance);
                dx.poison();
                cuda::pool2d_backward_relu(dx.p, ddy.p, dx_.p, y.p, kind, s, nullptr);
                compare(std::string("pool2d_backward_relu (fused) ") + name + version, dx.download(), want_relu,
                        tolerance);
            }
            cuda::select_version("pool", 0);
        }
}

// Version 2 of "waves": a split product whose blocks would spill into one
// more wave takes fewer, longer splits (tiles.cuh: fit_waves). Two shapes
// where it does, small enough for the emulated GPU: a weight gradient of 65
// one-tap filters over 17,920 pixels (140 splits of one 128-row tile, 1.06
// waves of 132 blocks; 132 splits in version 2) and a forward of one filter
// of 896 taps over 7,296 pixels (7 splits of 57 tiles, 399 blocks of 32
// rows, 1.01 waves of 396; 6). Each version against the CPU, with every
// way of finishing the weight gradient's splits.
void test_waves() {
    const ConvShape weight{20, 1, 28, 32, 65, 1, 1, 1, 0}, forward{57, 896, 16, 8, 1, 1, 1, 1, 0};
    const int expected[2][2] = {{140, 7}, {132, 6}};  // [version - 1][weight, forward]
    Tickets tickets;
    for (int v = 1; v <= 2; ++v) {
        cuda::select_version("waves", v);
        const std::string version = " (waves " + std::to_string(v) + ")";
        const int got_splits[2] = {cuda::conv2d_weight_grad_splits(weight), cuda::conv2d_forward_splits(forward)};
        report(got_splits[0] == expected[v - 1][0] && got_splits[1] == expected[v - 1][1],
               "waves " + std::to_string(v) + ": the weight gradient's and the forward's splits",
               std::to_string(got_splits[0]) + " and " + std::to_string(got_splits[1]) + ", expected " +
                   std::to_string(expected[v - 1][0]) + " and " + std::to_string(expected[v - 1][1]));
        {
            const ConvShape& s = weight;
            const auto x = random(s.in_size(), 90), dy = random(s.out_size(), 91);
            const auto dw0 = random(s.weight_size(), 92), db0 = random(size_t(s.oc), 93);
            std::vector<float> want_dw = dw0, want_db = db0, cpu_scratch(cpu::conv2d_scratch_floats(s));
            cpu::conv2d_backward_weight_gemm(want_dw.data(), want_db.data(), dy.data(), x.data(), s,
                                             cpu_scratch.data());
            Buffer<float> gx(x), gdy(dy), gw(dw0), gb(db0), scratch(cuda::conv2d_scratch_floats(s));
            for (int sv = 1; sv <= cuda::version_count("gemm_split"); ++sv) {
                cuda::select_version("gemm_split", sv);
                gw.upload(dw0);
                gb.upload(db0);
                scratch.poison();
                cuda::conv2d_backward_weight(gw.p, gb.p, gdy.p, gx.p, s, {scratch.p, tickets.p}, nullptr);
                const std::string label = describe(s) + version + ", gemm_split " + std::to_string(sv);
                compare("conv2d_backward_weight dw " + label, gw.download(), want_dw, gemm_tol);
                compare("conv2d_backward_weight db " + label, gb.download(), want_db, gemm_tol);
                check_tickets(tickets, "conv2d_backward_weight " + label);
            }
            cuda::select_version("gemm_split", 0);
        }
        {
            const ConvShape& s = forward;
            const auto x = random(s.in_size(), 94), w = random(s.weight_size(), 95), b = random(size_t(s.oc), 96);
            std::vector<float> want(s.out_size()), cpu_scratch(cpu::conv2d_scratch_floats(s));
            cpu::conv2d_forward_gemm(want.data(), x.data(), w.data(), b.data(), s, cpu_scratch.data());
            Buffer<float> gx(x), gw(w), gb(b), y(s.out_size()), scratch(cuda::conv2d_scratch_floats(s));
            y.poison();
            cuda::conv2d_forward(y.p, gx.p, gw.p, gb.p, s, scratch.p, nullptr);
            compare("conv2d_forward " + describe(s) + version, y.download(), want, gemm_tol);
        }
    }
    cuda::select_version("waves", 0);
}

void test_dense() {
    struct Size { int n, in, out; };
    // The larger two split every product along k (version 2).
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
        // Every version (kernels/cuda/versions.hpp), the one trained with
        // last, and for each every way of finishing a split product: those
        // the same sums, bit for bit (first: gemm_split version 1's). From
        // version 4 on the backward's two products run in one launch: the
        // same sums as version 3's, bit for bit too.
        std::map<std::string, std::vector<float>> first;
        for (int v = 1; v <= cuda::version_count("dense"); ++v)
            for (int sv = 1; sv <= cuda::version_count("gemm_split"); ++sv) {
                cuda::select_version("dense", v);
                cuda::select_version("gemm_split", sv);
                const std::string version = std::string(name) + " (version " + std::to_string(v) + ", gemm_split " +
                                            std::to_string(sv) + ")";
                auto check = [&](const std::string& what, const std::vector<float>& got, const std::vector<float>& want) {
                    compare(what + version, got, want, gemm_tol);
                    const std::string key = what + std::to_string(v);
                    if (sv == 1) first[key] = got;
                    else compare(what + version + " = gemm_split 1", got, first[key], 0.0);
                    if (v >= 4)
                        compare(what + version + " = version 3", got, first[what + "3" + "/" + std::to_string(sv)], 0.0);
                    first[key + "/" + std::to_string(sv)] = got;
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
                    if (relu)
                        cuda::dense_backward_relu(dx.p, gw.p, gb.p, ddy.p, dr_.p, dw_.p, z.n, z.in, z.out, ws, nullptr);
                    else
                        cuda::dense_backward(dx.p, gw.p, gb.p, ddy.p, dx_.p, dw_.p, z.n, z.in, z.out, ws, nullptr);
                    check(what + "dx ", dx.download(), relu ? want_relu_dx : want_dx);
                    check(what + "dw ", gw.download(), relu ? want_relu_dw : want_dw);
                    check(what + "db ", gb.download(), want_db);
                }
                if (sv > 1) check_tickets(tickets, "dense " + version);
            }
    }
}

// A dense layer after a pooling of a ReLU's output (dense_backward_pool):
// the gradient of the pooled y against the CPU's dense_backward and
// pool2d_backward_relu, and bit for bit against the GPU's own two
// launchers, for each way of finishing a split product. Where the windows
// do not overlap, the data gradient is stored through the pooling without
// dx: from version 5 by the product launched with the weight gradient's
// (gemm_split 2 on version 2 of the GEMM core; from version 9 gemm_split 1
// too, the splits then added by a kernel after them), from version 7
// otherwise by the kernel that adds its splits, where the product is
// split: dx is left as it was.
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
            for (int v = 1; v <= cuda::version_count("dense"); ++v)
                for (int sv = 1; sv <= cuda::version_count("gemm_split"); ++sv) {
                    cuda::select_version("dense", v);
                    cuda::select_version("gemm_split", sv);
                    const std::string version = std::string(name) + " (version " + std::to_string(v) + ", gemm_split " +
                                                std::to_string(sv) + ")";
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
                    cuda::dense_backward_pool(gy.p, dx.p, dw.p, db.p, gdy.p, gx.p, gw_.p, n, in, out, gy_.p, kind, ps,
                                              ws, nullptr);
                    const auto got_gy = gy.download();
                    compare("dense_backward_pool grad y " + version, got_gy, want_gy, gemm_tol);
                    compare("dense_backward_pool dw " + version, dw.download(), want_dw, gemm_tol);
                    compare("dense_backward_pool db " + version, db.download(), want_db, gemm_tol);
                    compare("dense_backward_pool grad y = the two launchers' " + version, got_gy, two_gy, 0.0);
                    compare("dense_backward_pool dw = the two launchers' " + version, dw.download(), two_dw, 0.0);
                    compare("dense_backward_pool db = the two launchers' " + version, db.download(), two_db, 0.0);
                    const auto got_dx = dx.download();
                    // (One launch needs version 2 of the GEMM core; on version
                    // 1 the pooling keeps its kernel, through dx.)
                    const bool apart = ps.k <= ps.stride;
                    const bool paired = v >= 5 && (sv >= 2 || v >= 9) && cuda::gemm_version >= 2;
                    const bool finished = v >= 7 && !paired && cuda::tiled::splits_to_fill(n, in, out) > 1;
                    if (apart && (paired || finished)) {
                        const auto kept =
                            std::count_if(got_dx.begin(), got_dx.end(), [](float f) { return std::isnan(f); });
                        report(size_t(kept) == got_dx.size(),
                               "dense_backward_pool " + version + ": one product, dx left alone",
                               std::to_string(kept) + " of " + std::to_string(got_dx.size()) +
                                   " values of dx as they were");
                    } else {
                        compare("dense_backward_pool dx on the way " + version, got_dx, want_dx, gemm_tol);
                    }
                    check_tickets(tickets, "dense_backward_pool " + version);
                }
        }
}

// --tf32 (shapes.hpp: Math): the conv and dense launchers on the tensor
// cores against their CPU twins, the same products of operands rounded to
// TF32 (cpu::round_to_tf32, the CPU's own rounding) in FP32, at FP32's
// tolerance; and against the FP32 results, from which they must differ by
// TF32's rounding (about 1e-3 of the operands), so that a launcher that
// ignored Math::tf32 fails. Shapes on every tile of version 2 (32, 64 and
// 128 rows), LeNet's at 7 and 64 samples, a batch and sizes no tile divides.
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

// TF32 tensor cores need compute capability 8.0 (on an older GPU the
// kernels trap, and dptrain refuses --tf32).
bool has_tf32() {
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major >= 8) return true;
    std::printf("SKIP the --tf32 checks: GPU 0 has compute capability %d.%d, TF32 needs 8.0\n", prop.major, prop.minor);
    return false;
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

// The last dense layer and the loss in one launch
// (dense_softmax_cross_entropy, dense version 6), against the CPU's three
// calls: dense_forward, softmax_cross_entropy, dense_backward (or _relu).
// LeNet's last layer at batch 256 and at a last, smaller part; a group of
// samples cut short (37); the most inputs and classes it takes, and more
// samples than a block has threads (300); one sample. Each twice: the same
// bits both times, whichever blocks finish last. Both kernels: version 6's
// and version 8's (dense_loss_wide), whose logits, dlogits, dx and loss are
// version 6's bit for bit (its dw and db are summed in larger groups).
// Random inputs of the last layer with the loss (seeds seed to seed + 5):
// x (a ReLU's output, a third of it zero, where relu), w, b, the gradients
// it adds to, and the labels.
struct LossInputs {
    std::vector<float> x, w, b, dw0, db0;
    std::vector<int32_t> labels;
};
LossInputs loss_inputs(int n, int in, int classes, bool relu, uint64_t seed) {
    LossInputs l{random(size_t(n) * in, seed),  random(size_t(classes) * in, seed + 1),
                 random(size_t(classes), seed + 2), {}, {}, std::vector<int32_t>(size_t(n))};
    if (relu)
        for (float& v : l.x) v = v > -0.3f ? std::max(v, 0.0f) : 0.0f;
    l.dw0 = random(l.w.size(), seed + 3);
    l.db0 = random(l.b.size(), seed + 4);
    Rng rng(seed + 5, seed + 5);
    for (auto& label : l.labels) label = int32_t(rng.below(uint64_t(classes)));
    return l;
}

void test_dense_loss() {
    std::map<std::string, std::vector<float>> version6;  // what version 6 gave, by shape and name
    std::map<std::string, double> version6_loss;
    for (const int v : {6, 8}) {
        cuda::select_version("dense", v);
        const std::string version = " (dense " + std::to_string(v) + ")";
        struct Case { int n, in, classes; };
        for (const Case z :
             {Case{256, 128, 10}, Case{100, 128, 10}, Case{37, 50, 7}, Case{300, 1024, 32}, Case{1, 3, 2}})
            for (const bool relu : {false, true}) {
                char name[100];
                std::snprintf(name, sizeof name, "dense_softmax_cross_entropy n%d in%d classes%d%s%s", z.n, z.in,
                              z.classes, relu ? " (ReLU before)" : "", version.c_str());
                const std::string shape = std::to_string(z.n) + "/" + std::to_string(z.in) + "/" +
                                          std::to_string(z.classes) + "/" + std::to_string(relu);
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
                    const char* same[] = {"logits", "dlogits", "dx"};
                    for (size_t k = 0; k < 3; ++k) {
                        if (v == 6) version6[shape + same[k]] = got[k];
                        else compare(std::string(name) + ": " + same[k] + " = version 6's", got[k],
                                     version6[shape + same[k]], 0.0);
                    }
                    if (v == 6) version6_loss[shape] = got_loss;
                    else report(got_loss == version6_loss[shape], std::string(name) + ": the loss = version 6's");
                }
            }
    }
    cuda::select_default_versions();
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
// training runs them (KernelSet: loss_input): with version 10 the first
// layer's forward leaves its splits' partial sums to the loss's kernel
// (dense_forward_relu_for_loss), which adds them, the bias and the ReLU as
// it loads each sample. Against version 9, which runs the two whole: every
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
        std::vector<std::vector<float>> version9;
        double version9_loss = 0;
        for (const int v : {9, 10}) {
            cuda::select_version("dense", v);
            const std::string version = std::string(name) + " (dense " + std::to_string(v) + ")";
            for (Buffer<float>* p : {&y, &logits, &dlogits, &dy, &scratch}) p->poison();
            dw.upload(dw0);
            db.upload(db0);
            loss.upload({0.0});
            const cuda::UnfinishedDense left =
                cuda::dense_forward_relu_for_loss(y.p, gx.p, gw1.p, gb1.p, z.n, z.in, z.hidden, ws, nullptr);
            report((left.y != nullptr) == (v == 10 && z.left),
                   version + (v == 10 && z.left ? ": the forward leaves its splits to the loss"
                                                : ": the forward runs whole"));
            if (z.hidden > cuda::dense_loss_in_most) {  // beyond the loss kernel: the forward alone
                compare(version + ": y", y.download(), want_y, gemm_tol);
                continue;
            }
            cuda::dense_softmax_cross_entropy(logits.p, dlogits.p, loss.p, glabels.p, dy.p, dw.p, db.p, y.p, gw2.p,
                                              gb2.p, z.n, z.hidden, z.classes, true, ws, nullptr, left);
            const std::vector<std::vector<float>> got = {y.download(),  logits.download(), dlogits.download(),
                                                         dy.download(), dw.download(),     db.download()};
            const double got_loss = loss.download()[0];
            check_tickets(tickets, version);
            compare(version + ": y", got[0], want_y, gemm_tol);
            if (v == 9) {
                version9 = got, version9_loss = got_loss;
                continue;
            }
            const char* names[] = {"y", "logits", "dlogits", "dx", "dw", "db"};
            for (size_t k = 0; k < got.size(); ++k)
                compare(version + ": " + names[k] + " = version 9's", got[k], version9[k], 0.0);
            report(got_loss == version9_loss, version + ": the loss = version 9's");
        }
    }
    // A loss handed the unfinished layer of another buffer: refused at the
    // launch, where it would have read splits that are not its input's.
    cuda::select_version("dense", 10);
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
    cuda::select_default_versions();
    report(refused, "dense_softmax_cross_entropy refuses an unfinished layer that is not its input");
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
    test_tf32_dense();
}

// Version 8 of the forward convolution changes how its implicit GEMM
// addresses the unfolded input, not what it sums or in which order: it gives
// the bits of version 7 on every kind of convolution the layers run
// (implicit products of every tile size, split along k, 1x1; FP32 and
// --tf32), with k-loops of an odd and an even number of k-steps.
void test_versions_same_bits() {
    // What `run` gives with `selections` (launcher, version) on top of the defaults.
    using Selections = std::vector<std::pair<const char*, int>>;
    const auto under = [](const Selections& selections, auto run) {
        cuda::select_default_versions();
        for (const auto& [launcher, version] : selections) cuda::select_version(launcher, version);
        auto got = run();
        cuda::select_default_versions();
        return got;
    };
    const Selections before{{"conv2d_forward", 7}};
    const std::vector<std::pair<std::string, Selections>> afters = {
        {"conv2d_forward 8", {{"conv2d_forward", 8}}},
        {"conv2d_backward_data 11", {{"conv2d_backward_data", 11}}},  // (its products of w^T by runs)
        {"gemm 3", {{"conv2d_forward", 7}, {"gemm", 3}}},              // (its padded shared-memory rows)
    };

    std::vector<ConvShape> shapes = {
        {3, 2, 7, 9, 5, 3, 3, 1, 0},         // k = 18: 3 k-steps
        {2, 3, 8, 8, 4, 3, 3, 2, 1},         // k = 27: 4
        {4, 64, 12, 12, 128, 3, 3, 2, 1},    // 128 rows; backward data 576 rows
        {4, 64, 12, 12, 128, 1, 1, 2, 0},    // 1x1: a tap a channel
        {4, 256, 3, 3, 256, 3, 3, 1, 1},     // split along k
        {4, 16, 6, 6, 64, 3, 3, 1, 1},       // 64 rows
        {4, 7, 6, 6, 20, 5, 5, 1, 2},        // 25 taps, 32 rows
    };
    for (const ConvShape& s : lenet::model().conv_shapes(64)) shapes.push_back(s);
    for (const Math math : {Math::fp32, Math::tf32}) {
        if (math == Math::tf32 && !has_tf32()) continue;
        for (ConvShape s : shapes) {
            s.math = math;
            const std::string name = describe(s) + (math == Math::tf32 ? " --tf32" : "");
            const auto x = random(s.in_size(), 10), w = random(s.weight_size(), 11), b = random(size_t(s.oc), 12);
            const auto dy = random(s.out_size(), 13), dw0 = random(s.weight_size(), 14), db0 = random(size_t(s.oc), 15);
            Fenced dx_(x);
            Buffer<float> dw_(w), db_(b), ddy(dy), scratch(cuda::conv2d_scratch_floats(s));
            Buffer<float> y(s.out_size()), dx(s.in_size()), gw(dw0), gb(db0);
            Tickets tickets;
            const auto forward = [&] {
                y.poison();
                scratch.poison();
                cuda::conv2d_forward_relu(y.p, dx_.p, dw_.p, db_.p, s, scratch.p, nullptr);
                return y.download();
            };
            const auto backward = [&] {
                dx.poison();
                scratch.poison();
                cuda::conv2d_backward_data(dx.p, ddy.p, dw_.p, s, scratch.p, nullptr);
                gw.upload(dw0);
                gb.upload(db0);
                scratch.poison();
                cuda::conv2d_backward_weight(gw.p, gb.p, ddy.p, dx_.p, s, {scratch.p, tickets.p}, nullptr);
                auto got = dx.download();
                for (const auto& part : {gw.download(), gb.download()}) got.insert(got.end(), part.begin(), part.end());
                return got;
            };
            const auto want_y = under(before, forward), want_back = under(before, backward);
            for (const auto& [label, after] : afters) {
                compare("conv2d_forward_relu " + name + ": " + label + " = before, bit for bit", under(after, forward),
                        want_y, 0.0);
                compare("conv2d_backward_data and _weight " + name + ": " + label + " = before, bit for bit",
                        under(after, backward), want_back, 0.0);
            }
        }
    }
}

// In version `from`, keeps each named result; in version `to`, compares it
// with the one kept, bit for bit.
void keep_or_compare(std::map<std::string, std::vector<float>>& kept, int v, int from, int to, const std::string& label,
                     std::initializer_list<std::pair<const char*, std::vector<float>>> results) {
    for (const auto& [what, got] : results) {
        if (v == from) kept[what] = got;
        else if (v == to)
            compare(label + ": " + what + " = version " + std::to_string(from) + "'s, bit for bit", got, kept[what], 0.0);
    }
}

// Batch norm's halves against the CPU's, for LeNet-sized and ResNet-sized
// channels (26x26 maps, 64 channels; ResNet-18's first layer, one channel
// of 28x28 maps at batch 256), with each version of the sums. The
// per-channel sums are in double on both sides (in another order), so the
// statistics agree to float rounding; every output is within 1e-5 of its
// scale. Version 2 cuts a channel into slices (one slice below 1,024 values:
// n3 c5 hw7, n2 c256 hw9, n7 c3 hw100), whose sums it adds in slice order:
// where a channel is one slice, version 1's bits; and its tickets are back at
// 0 after each call. Version 3's forward works out the means and 1/std in
// the normalising kernel: version 2's bits. With the ReLU after the layer,
// forward and inference are the CPU's with it, and version 5's (in the
// kernel) version 4's (relu_forward after it), bit for bit; and so is the
// backward with its mask, version 6's (in the sums' kernel) version 5's;
// version 7's data gradient and inference (each channel's constants once a
// block; up to 512 channels, a layer of 600 on the kernels before) version
// 6's, bit for bit.
// Batch norm version 8: a convolution whose product splits along k leaves
// its splits (conv2d_forward_for_stats) to the statistics of the batch norm
// after it (batch_norm_stats with the unfinished convolution), which add
// them, the bias, store y and sum it. Against conv2d_forward then
// batch_norm_stats: y and the statistics the same bits, at every distinct
// convolution of ResNet-18 at 7 and 64 samples, some of which split (and
// the rest run whole, nothing left). And the statistics refuse a
// convolution left for another buffer.
void test_stats_after_conv() {
    cuda::select_version("batch_norm", 8);
    for (const int n : {7, 64}) {
        std::set<std::string> seen;
        int left = 0;
        for (const ConvShape& s : resnet::model().conv_shapes(n)) {
            if (!seen.insert(describe(s)).second) continue;
            const std::string name = "conv2d_forward_for_stats " + describe(s);
            const NormShape ns{s.n, s.oc, s.col_cols()};
            const auto x = random(s.in_size(), 100), w = random(s.weight_size(), 101), b = random(size_t(s.oc), 102);
            Buffer<float> gx(x), gw(w), gb(b), y(s.out_size()), stats(2 * size_t(s.oc)),
                scratch(cuda::conv2d_scratch_floats(s));
            Tickets tickets;
            const cuda::Workspace ws{scratch.p, tickets.p};
            y.poison();
            stats.poison();
            cuda::conv2d_forward(y.p, gx.p, gw.p, gb.p, s, scratch.p, nullptr);
            cuda::batch_norm_stats(stats.p, y.p, ns, ws, nullptr);
            const auto want_y = y.download(), want_stats = stats.download();
            y.poison();
            stats.poison();
            scratch.poison();
            const cuda::UnfinishedConv u = cuda::conv2d_forward_for_stats(y.p, gx.p, gw.p, gb.p, s, scratch.p, nullptr);
            left += u.y != nullptr;
            cuda::batch_norm_stats(stats.p, y.p, ns, ws, nullptr, u);
            const std::string how = u.y ? " (its splits left to the statistics)" : " (run whole)";
            compare(name + how + ": y, the bits of the two calls", y.download(), want_y, 0.0);
            compare(name + how + ": the statistics, the bits of the two calls", stats.download(), want_stats, 0.0);
            check_tickets(tickets, name);
        }
        report(left > 0, "conv2d_forward_for_stats at " + std::to_string(n) + " samples: " + std::to_string(left) +
                             " of ResNet-18's convolutions leave their splits to the statistics");
    }
    bool refused = false;
    try {
        float other = 0;
        const cuda::UnfinishedConv u{&other, nullptr, nullptr, 4};
        Tickets tickets;
        cuda::batch_norm_stats(nullptr, nullptr, {4, 8, 16}, {nullptr, tickets.p}, nullptr, u);
    } catch (const std::invalid_argument&) {
        refused = true;
    }
    cuda::select_default_versions();
    report(refused, "batch_norm_stats refuses a convolution left unfinished for another buffer");
}

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

        std::vector<float> first_stats, first_sums, first_dgamma;  // version 1's
        std::map<std::string, std::vector<float>> kept;               // version 2's, 4's and 5's
        for (int v = 1; v <= cuda::version_count("batch_norm"); ++v) {
            cuda::select_version("batch_norm", v);
            const std::string label = name + " (batch_norm " + std::to_string(v) + ")";
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
            keep_or_compare(kept, v, 2, 3, label, {{"forward", dyo.download()}, {"saved", dsaved.download()}});
            keep_or_compare(kept, v, 6, 7, label, {{"backward data", ddx.download()}, {"inference", dye.download()}});
            if (v == 1) {
                first_stats = dstats.download();
                first_sums = dsums.download();
                first_dgamma = ddg.download();
            } else if (long(s.n) * s.hw < 1024) {
                compare(label + ": stats = version 1's, bit for bit (one slice)", dstats.download(), first_stats, 0.0);
                compare(label + ": backward sums = version 1's, bit for bit", dsums.download(), first_sums, 0.0);
                compare(label + ": dgamma = version 1's, bit for bit", ddg.download(), first_dgamma, 0.0);
            }
            // With the ReLU after the layer (in the kernel from version 5;
            // before, relu_forward after it): the CPU's with its ReLU.
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
            keep_or_compare(kept, v, 4, 5, label,
                            {{"forward with its ReLU", dyo.download()}, {"inference with its ReLU", dye.download()}});
            keep_or_compare(kept, v, 6, 7, label, {{"inference with its ReLU", dye.download()}});
            // Again, on the same scratch and tickets: the same bits.
            const std::vector<float> once = dstats.download(), sums_once = dsums.download();
            cuda::batch_norm_stats(dstats.p, dx_in.p, s, ws, nullptr);
            cuda::batch_norm_backward_sums(dsums.p, ddg.p, ddb.p, ddy.p, dx_in.p, dsaved.p, s, ws, nullptr);
            compare(label + ": stats again, the same bits", dstats.download(), once, 0.0);
            compare(label + ": backward sums again, the same bits", dsums.download(), sums_once, 0.0);
            // Its backward: dy masked by the ReLU's output (the CPU's, so
            // that both sides mask the same values), in place, then the
            // sums (in the sums' kernel from version 6; before, relu_backward
            // first): the masked dy is the CPU's bit for bit, the sums and
            // the data gradient from them the CPU's within rounding, and
            // version 6's version 5's bit for bit.
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
            keep_or_compare(kept, v, 5, 6, label,
                            {{"backward sums with its ReLU", dsums.download()},
                             {"dgamma with its ReLU", dg_relu.download()},
                             {"backward data with its ReLU", ddx.download()}});
            keep_or_compare(kept, v, 6, 7, label, {{"backward data with its ReLU", ddx.download()}});
        }
        cuda::select_version("batch_norm", 0);
    }
}

// Several layers' running statistics moved by one call (a launch a layer,
// or from batch_norm version 4 one launch), each the CPU's bits: channels 1,
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
    for (int v = 1; v <= cuda::version_count("batch_norm"); ++v) {
        cuda::select_version("batch_norm", v);
        std::vector<std::unique_ptr<Buffer<float>>> r, st;
        std::vector<RunningUpdate> layers;
        for (int l = 0; l < 3; ++l) {
            r.push_back(std::make_unique<Buffer<float>>(running[size_t(l)]));
            st.push_back(std::make_unique<Buffer<float>>(stats[size_t(l)]));
            layers.push_back({r.back()->p, st.back()->p, 15.0, channels[l]});
        }
        cuda::batch_norm_update_running_all(layers.data(), 3, 0.9f, nullptr);
        for (int l = 0; l < 3; ++l)
            compare("batch_norm_update_running_all (batch_norm " + std::to_string(v) + "): layer of " +
                        std::to_string(channels[l]) + " channels = the CPU's, bit for bit",
                    r[size_t(l)]->download(), want[size_t(l)], 0.0);
        std::vector<RunningUpdate> many(size_t(running_updates_a_call) + 1, layers[0]);
        bool refused = false;
        try {
            cuda::batch_norm_update_running_all(many.data(), int(many.size()), 0.9f, nullptr);
        } catch (const std::invalid_argument&) {
            refused = true;
        }
        report(refused, "batch_norm_update_running_all (batch_norm " + std::to_string(v) + "): " +
                            std::to_string(many.size()) + " layers in one call refused", "");
    }
    cuda::select_version("batch_norm", 0);
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
        // input's gradient overwritten, then added to), each version the
        // CPU's bits.
        for (int v = 1; v <= cuda::version_count("residual"); ++v) {
            cuda::select_version("residual", v);
            const std::string label = n + " (residual " + std::to_string(v) + ")";
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
        cuda::select_version("residual", 0);

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

// --- replicas ---

struct Trained {
    std::vector<std::vector<float>> params;  // per replica
    double loss_sum = 0.0;
    int64_t correct = 0;
    int32_t first_bad_step = -1;  // the divergence watch
};

struct EpochOptions {
    bool graph = false;  // record the epoch once and replay it, as train() does
    float lr = 0.1f;
    int epochs = 1;      // each with its own sample order
    const char* allreduce = "naive";
    int bucket_kb = -1;  // >= 0: --overlap with buckets of this size
    const Model* model = &lenet::model();
    BatchNormMode bn = BatchNormMode::local;
    size_t samples = 150;  // 150 / 32: a short last batch
    Math math = Math::fp32;  // --tf32: Math::tf32
};

// `epochs` epochs of `count` synthetic samples in batches of `batch` on n
// devices, then the test set evaluated on device 0. The loss sum and the
// divergence watch accumulate over the epochs, as they do over a graph's
// replays in train().
Trained run_epochs(const DeviceChoice& choice, int batch, const EpochOptions& o) {
    const size_t count = o.samples;
    const int n = choice.count();
    const Dataset train = testing::synthetic(count, true), test = testing::synthetic(64, true);
    const ReplicaSetup setup{&train, &test, (batch + n - 1) / n, PoolKind::avg, 0,
                             o.bucket_kb >= 0 ? overlap_buckets(*o.model, o.bucket_kb, o.bn) : std::vector<Range>{},
                             o.model, o.bn, false, o.math};
    const Allreduce& allreduce = allreduce_named(o.allreduce);
    const StepPlan plan = plan_step(*o.model, o.bn, setup.buckets);
    const auto owned = make_devices(choice, setup, allreduce);
    const std::vector<Device*> devices = pointers(owned);
    const auto init = init_params(InitKind::xavier, 4, *o.model);
    for (Device* d : devices) d->write_params(init);
    const auto queue = [&] {
        for (size_t first = 0; first < count; first += size_t(batch))
            train_step(devices, allreduce, plan, first, even_parts(int(std::min<size_t>(batch, count - first)), int(devices.size())), o.lr, int32_t(first / batch));
    };
    std::unique_ptr<Recording> recording;
    if (o.graph) {
        std::string why;
        recording = record_graph(devices, queue, why);
        report(recording != nullptr, "the epoch records as a CUDA graph", why);
        if (!recording) return {};
    }
    for (int epoch = 1; epoch <= o.epochs; ++epoch) {
        // The graph reads the order from device memory: a new order before each replay.
        const auto order = epoch_order(count, 4, epoch);
        for (Device* d : devices) d->set_order(order.data(), order.size());
        if (recording) recording->replay();
        else queue();
        for (Device* d : devices) d->synchronize();  // `order` may go
    }
    Trained t;
    for (Device* d : devices) {
        t.params.emplace_back(o.model->param_count());
        d->read_params(t.params.back());
        t.loss_sum += d->take_loss_sum();
    }
    for (size_t first = 0; first < test.count; first += size_t(setup.capacity))
        devices[0]->evaluate_test(first, int(std::min<size_t>(setup.capacity, test.count - first)));
    t.correct = devices[0]->take_correct();
    t.first_bad_step = devices[0]->take_first_bad_step();
    return t;
}

// run_epochs, each distinct run once: several checks start from the same
// run (naive on 3 replicas is the baseline of the replica checks, of the
// ring's and of --overlap's), which is trained for the first and handed to
// the others. A run is the devices, the batch, every option and the
// version each launcher runs; no check compares a run with itself.
Trained train_epochs(const DeviceChoice& choice, int batch, const EpochOptions& o = {}) {
    static std::map<std::string, Trained> done;
    char options[200];
    std::snprintf(options, sizeof options, " batch %d graph %d lr %a epochs %d %s kb %d model %p bn %d samples %zu math %d",
                  batch, int(o.graph), double(o.lr), o.epochs, o.allreduce, o.bucket_kb, static_cast<const void*>(o.model),
                  int(o.bn), o.samples, int(o.math));
    std::string key = describe(choice) + options;
    for (const cuda::LauncherVersions& l : cuda::launcher_versions())
        key += std::string(" ") + l.launcher + " " + std::to_string(*l.selected);
    if (const auto it = done.find(key); it != done.end()) return it->second;
    Trained t = run_epochs(choice, batch, o);
    if (!t.params.empty()) done.emplace(key, t);  // (empty: the recording failed, reported)
    return t;
}

Trained train_epochs(DeviceKind kind, int n, int batch, const EpochOptions& o = {}) {
    return train_epochs(DeviceChoice::of(kind, n), batch, o);
}

double largest(const std::vector<float>& v) {
    double m = 0.0;
    for (float x : v) m = std::max(m, double(std::abs(x)));
    return m;
}

// GPU against CPU after an epoch (5 steps). Rounding differs (summation
// order, FMAs): alone it moves every weight by ~1e-7 of the largest. But now
// and then a ReLU input or a max-pool contest within ~1e-7 of a tie is
// decided the other way; that changes one sample's share of the gradient of
// the weights feeding that unit (a conv1 channel's 10, a dense unit's 801),
// ~1e-5 of the largest weight, and later steps spread a smaller echo of it.
// A mean over all weights can be pushed past a tight bound by one such flip,
// so the test bounds how many weights differ by more than 1e-5 of the
// largest: at most 1% (1,290; one flip in dense1 moves 801, and the echoes
// stay under the threshold), and the largest difference within 1e-3. A wrong
// index or a missed tile moves a whole layer's update, ~1e-2 of its weights:
// conv2's and dense1's layers are 20% and 79% of the weights, and conv1's
// 180 weights feed everything after the first step, so each fails both.
void compare_with_cpu(const std::string& what, const std::vector<float>& gpu, const std::vector<float>& cpu,
                      double threshold = 1e-5) {
    const double scale = largest(cpu);
    double worst = 0.0;
    size_t beyond = 0;
    for (size_t i = 0; i < cpu.size(); ++i) {
        const double d = std::isnan(gpu[i]) ? INFINITY : std::abs(double(gpu[i]) - double(cpu[i]));
        worst = std::max(worst, d);
        if (d > threshold * scale) ++beyond;
    }
    const size_t allowed = cpu.size() / 100;
    char detail[200];
    std::snprintf(detail, sizeof detail,
                  "(%zu weights differ by more than %g of the largest, bound %zu; largest %.3g of the largest, "
                  "bound 1e-3)", beyond, threshold, allowed, worst / scale);
    report(beyond <= allowed && worst <= 1e-3 * scale, what, detail);
}

bool same_bits(const Trained& a, const Trained& b) {
    if (a.params.size() != b.params.size()) return false;
    for (size_t i = 0; i < a.params.size(); ++i)
        if (a.params[i].size() != b.params[i].size() ||
            std::memcmp(a.params[i].data(), b.params[i].data(), a.params[i].size() * sizeof(float)) != 0)
            return false;
    return std::memcmp(&a.loss_sum, &b.loss_sum, sizeof a.loss_sum) == 0 && a.correct == b.correct &&
           a.first_bad_step == b.first_bad_step;
}

// Two epochs with two orders, replayed from one recorded graph, against the
// same two epochs queued kernel by kernel: every replica's parameters, the
// loss summed over both replays, the accuracy count and the divergence
// watch, bit for bit (the same kernels in the same order on the same data).
void check_graph_replays(int n, int batch, const std::string& name) {
    // Recorded first: in a fresh process (graph-first) no kernel has run before it.
    const Trained replayed = train_epochs(DeviceKind::gpu, n, batch, {.graph = true, .epochs = 2});
    const Trained queued = train_epochs(DeviceKind::gpu, n, batch, {.epochs = 2});
    if (replayed.params.empty()) return;  // the recording failed, reported
    char detail[160];
    std::snprintf(detail, sizeof detail, "(loss sums %.17g and %.17g)", replayed.loss_sum, queued.loss_sum);
    report(same_bits(replayed, queued),
           name + ": two epochs replayed from one graph, two orders, give the same bits as queued kernels", detail);
}

// A recording whose work fails midway (here: an exception after the first
// step was queued) comes back as null with the reason, leaves no stream
// capturing, and has run nothing: the same devices then train kernel by
// kernel to the same bits as devices that never tried.
void check_failed_recording(int n, int batch) {
    const size_t count = 150;
    const Dataset train = testing::synthetic(count, true), test = testing::synthetic(64, true);
    const auto owned = make_devices(DeviceChoice::of(DeviceKind::gpu, n), {&train, &test, (batch + n - 1) / n, PoolKind::avg}, naive());
    const std::vector<Device*> devices = pointers(owned);
    const StepPlan plan = plan_step(lenet::model(), BatchNormMode::local);
    const auto init = init_params(InitKind::xavier, 4);
    for (Device* d : devices) d->write_params(init);
    const auto order = epoch_order(count, 4, 1);
    for (Device* d : devices) d->set_order(order.data(), order.size());
    std::string why;
    const auto recording = record_graph(devices, [&] {
        train_step(devices, naive(), plan, 0, even_parts(batch, int(devices.size())), 0.1f, 0);
        throw std::runtime_error("stopped on purpose after one step");
    }, why);
    report(recording == nullptr && why.find("on purpose") != std::string::npos,
           "a recording that fails midway returns null and the reason", "(why: " + why + ")");
    for (size_t first = 0; first < count; first += size_t(batch))
        train_step(devices, naive(), plan, first, even_parts(int(std::min<size_t>(batch, count - first)), int(devices.size())), 0.1f, int32_t(first / batch));
    Trained after;
    for (Device* d : devices) {
        after.params.emplace_back(lenet::model().param_count());
        d->read_params(after.params.back());
        after.loss_sum += d->take_loss_sum();
    }
    const Trained fresh = train_epochs(DeviceKind::gpu, n, batch);
    report(after.params == fresh.params && after.loss_sum == fresh.loss_sum,
           std::to_string(n) + " GPU replicas: after the failed recording, queued training gives the bits of fresh devices");
}

// GPU replicas record their work and are not paced by the host; beside a CPU
// device (a mixed run) the devices together record nothing, and say which
// device cannot, so the trainer queues their steps one by one.
void check_capabilities() {
    const Dataset train = testing::synthetic(64, true), test = testing::synthetic(16, true);
    const auto owned = make_devices(DeviceChoice::of(DeviceKind::gpu, 1).then(DeviceKind::cpu, 1), {&train, &test, 8, PoolKind::avg}, naive());
    const std::vector<Device*> devices = pointers(owned);
    const Capabilities gpu = devices[0]->capabilities(), cpu = devices[1]->capabilities();
    report(gpu.records_graphs && !gpu.host_paced && !cpu.records_graphs && cpu.host_paced,
           "a GPU replica records graphs and is not host-paced; a CPU device the other way round");
    std::string why;
    const auto recording = record_work(devices, [] {}, why);
    report(recording == nullptr && why == "cpu:0 does not record its work",
           "record_work over a GPU replica and a CPU device: null, naming the CPU device", "(why: " + why + ")");
}

// A mixed run (--gpus 1 --cpus 2, and two GPU replicas beside one CPU
// device): the GPU waits for the CPU devices' marks in pinned memory and
// copies their gradients; they wait for its mark. Every replica ends with the
// same bits (the allreduce hands every device the same sum, and the update is
// one fused multiply-add on both kinds), and the run trains as CPU devices do.
void test_mixed(int batch) {
    for (const DeviceChoice& choice : {DeviceChoice::of(DeviceKind::gpu, 1).then(DeviceKind::cpu, 2), DeviceChoice::of(DeviceKind::gpu, 2).then(DeviceKind::cpu, 1)}) {
        const std::string name = "mixed, " + describe(choice);
        const Trained mixed = train_epochs(choice, batch);
        if (mixed.params.size() != size_t(choice.count())) {
            report(false, name + ": trained");
            continue;
        }
        for (int i = 1; i < choice.count(); ++i)
            report(std::memcmp(mixed.params[0].data(), mixed.params[size_t(i)].data(),
                               lenet::model().param_count() * sizeof(float)) == 0,
                   name + ": device " + std::to_string(i) + " has the same bits as device 0");
        const Trained cpus = train_epochs(DeviceKind::cpu, choice.count(), batch);
        compare_with_cpu(name + " vs as many CPU devices: parameters after one epoch", mixed.params[0], cpus.params[0]);
        report(mixed.first_bad_step == -1, name + ": the divergence watch stays quiet at lr 0.1");
    }
}

// The ring's peer copies and sum kernel on GPU replicas (several sharing a
// GPU here): every replica the same bits, and naive's parameters up to the
// order of the additions; its graph replays like queued kernels. NCCL where
// it can run (one replica per GPU), against naive.
void test_other_allreduces(int batch) {
    const int present = probe_gpus().count();
    for (int n : {2, 3}) {
        const std::string name = "ring on " + std::to_string(n) + " GPU replicas";
        const Trained naive_run = train_epochs(DeviceKind::gpu, n, batch);
        const Trained ring = train_epochs(DeviceKind::gpu, n, batch, {.allreduce = "ring"});
        for (int i = 1; i < n; ++i)
            report(std::memcmp(ring.params[0].data(), ring.params[size_t(i)].data(),
                               lenet::model().param_count() * sizeof(float)) == 0,
                   name + ": replica " + std::to_string(i) + " has the same bits as replica 0");
        compare(name + " vs naive: parameters after one epoch", ring.params[0], naive_run.params[0], 1e-5);
        const Trained replayed = train_epochs(DeviceKind::gpu, n, batch, {.graph = true, .allreduce = "ring"});
        if (!replayed.params.empty()) report(same_bits(replayed, ring), name + ": a graph replay gives the queued bits");
    }
    const std::string refused = nccl_refusal(present, {});
    if (!refused.empty()) {
        std::printf("note: nccl not checked: %s\n", refused.c_str());
        return;
    }
    const Trained nccl = train_epochs(DeviceKind::gpu, present, batch, {.allreduce = "nccl"});
    const Trained naive_run = train_epochs(DeviceKind::gpu, present, batch);
    compare("nccl on " + std::to_string(present) + " GPU(s) vs naive: parameters after one epoch", nccl.params[0],
            naive_run.params[0], 1e-5);
}

// --overlap on GPU replicas: the allreduce on a second stream of each
// replica, bucket by bucket as backward records their events, gives the bits
// of the allreduce after backward: queued, replayed from a graph (the second
// streams join the capture through those events), and beside CPU devices.
void test_overlap(int batch) {
    for (const char* allreduce : {"naive", "ring"})
        for (int kb : {0, 64}) {
            const std::string name = std::string("--overlap --bucket-kb ") + std::to_string(kb) + " --allreduce " + allreduce +
                                     " on 3 GPU replicas";
            const Trained plain = train_epochs(DeviceKind::gpu, 3, batch, {.allreduce = allreduce});
            const Trained overlapped = train_epochs(DeviceKind::gpu, 3, batch, {.allreduce = allreduce, .bucket_kb = kb});
            report(same_bits(overlapped, plain), name + ": the bits of no overlap");
            const Trained replayed =
                train_epochs(DeviceKind::gpu, 3, batch, {.graph = true, .epochs = 1, .allreduce = allreduce, .bucket_kb = kb});
            if (!replayed.params.empty()) report(same_bits(replayed, plain), name + ": a graph replay gives them too");
        }
    const DeviceChoice mixed = DeviceChoice::of(DeviceKind::gpu, 1).then(DeviceKind::cpu, 2);
    report(same_bits(train_epochs(mixed, batch, {.bucket_kb = 0}), train_epochs(mixed, batch)),
           "--overlap, " + describe(mixed) + ": the bits of no overlap");
}

// The small ResNet (batch norm, branches) on GPU replicas: against CPU
// devices of the same count with --bn local (the same function, rounding
// apart), N against 1 replica with --bn sync, every replica the same bits,
// --overlap and a graph replay the bits of queued kernels.
void test_resnet(int batch) {
    const Model* model = &testing::small_resnet();
    Trained two_replicas;  // (the defaults, --bn local)
    for (int n : {1, 2, 3}) {
        const std::string name = std::to_string(n) + " GPU replica" + (n > 1 ? "s" : "") + " of a small ResNet";
        const Trained gpu = train_epochs(DeviceKind::gpu, n, batch, {.model = model});
        if (n == 2) two_replicas = gpu;
        const Trained cpu = train_epochs(DeviceKind::cpu, n, batch, {.model = model});
        for (int i = 1; i < n; ++i)
            report(gpu.params[0] == gpu.params[size_t(i)], name + ", --bn local: replica " + std::to_string(i) +
                                                               " has the same bits as replica 0 (running statistics too)");
        compare_with_cpu(name + ", --bn local vs " + std::to_string(n) + " CPU devices", gpu.params[0], cpu.params[0]);
        const Trained sync = train_epochs(DeviceKind::gpu, n, batch, {.model = model, .bn = BatchNormMode::sync});
        const Trained one = train_epochs(DeviceKind::gpu, 1, batch, {.model = model, .bn = BatchNormMode::sync});
        if (n > 1) compare(name + ", --bn sync vs 1 GPU replica", sync.params[0], one.params[0], 1e-5);
        const Trained replayed = train_epochs(DeviceKind::gpu, n, batch, {.graph = true, .model = model, .bn = BatchNormMode::sync});
        if (!replayed.params.empty()) report(same_bits(replayed, sync), name + ", --bn sync: a graph replay gives the bits of queued kernels");
    }
    // The branches' input gradients added by the kernels that end them
    // (conv2d_backward_data 10) instead of staged and added by sum_into.
    {
        cuda::select_version("conv2d_backward_data", 10);
        const Trained added = train_epochs(DeviceKind::gpu, 2, batch, {.model = model});
        cuda::select_version("conv2d_backward_data", 0);
        report(same_bits(added, two_replicas),
               "2 GPU replicas of a small ResNet, conv2d_backward_data 10 (input gradients added in their kernels): "
               "the bits of staging and sum_into");
    }
    // A convolution wide enough for its forward product to split along k
    // (32 channels in: k = 288), then a batch norm: with batch_norm 8 the
    // statistics add its splits (finish_stats_kernel) instead of
    // finish_splits then stats_kernel; the bits of batch_norm 7, on 2
    // replicas with --bn local and --bn sync.
    static const Model wide("conv, then batch norm", {1, 28, 28}, {batch_norm(), conv(32, 3), pool(PoolKind::max, 3, 2),
                                                                 conv(32, 3, 1, 1), batch_norm(), relu(),
                                                                 pool(PoolKind::avg, 12, 12), flatten(), dense(10)});
    for (BatchNormMode bn : {BatchNormMode::local, BatchNormMode::sync}) {
        const auto under = [&](int version) {
            cuda::select_version("batch_norm", version);
            const Trained t = train_epochs(DeviceKind::gpu, 2, batch, {.model = &wide, .bn = bn});
            cuda::select_version("batch_norm", 0);
            return t;
        };
        report(same_bits(under(8), under(7)),
               std::string("2 GPU replicas, a conv then a batch norm, --bn ") +
                   (bn == BatchNormMode::sync ? "sync" : "local") +
                   ", batch_norm 8 (the statistics add the conv's splits): the bits of batch_norm 7");
    }
    for (BatchNormMode bn : {BatchNormMode::local, BatchNormMode::sync})
        report(same_bits(train_epochs(DeviceKind::gpu, 3, batch, {.bucket_kb = 0, .model = model, .bn = bn}),
                         train_epochs(DeviceKind::gpu, 3, batch, {.model = model, .bn = bn})),
               std::string("3 GPU replicas of a small ResNet, --bn ") + (bn == BatchNormMode::sync ? "sync" : "local") +
                   " --overlap: the bits of no overlap");
}

// --tf32: GPU replicas against a CPU device that rounds the same operands,
// over two steps; over an epoch, replicas equal bit for bit, a graph replay
// equal to queued kernels, and the GPU's run apart from its FP32 run (else
// --tf32 would have changed nothing).
// The horizon against the CPU is short because TF32 magnifies rounding: an
// operand that the two sides compute one FP32 ulp apart (another summation
// order; the tensor cores' own accumulation) now and then lies across a TF32
// rounding boundary, and then its products differ by TF32's step, 2^-11 of
// them; after a few steps a ReLU or max-pool input at its kink goes the
// other way and the runs fork. `gpu_tests tf32-horizons` prints the figures
// for 1 to 5 steps. After 2 steps (batch 32) no weight was beyond 1e-5 of the
// largest on an H200 (largest 2.4e-6, loss sums 2.5e-7 apart) nor on the
// emulated GPU (3.1e-6, 2e-7); against an FP32 CPU device (a twin that forgot
// to round) 9,300 of 129,000 weights were, the largest 2.1e-3, and the loss
// sums were 2.5e-6 apart. After 5 steps the H200 was 24,000 weights and
// 3.3e-3 from the rounding twin, too close to the FP32 twin to tell apart.
// Returns 1 replica's --tf32 epoch.
Trained tf32_training(int batch, const Trained& fp32, const std::string& version) {
    const EpochOptions tf32{.math = Math::tf32};
    const EpochOptions two_steps{.samples = size_t(2 * batch), .math = Math::tf32};
    const Trained cpu = train_epochs(DeviceKind::cpu, 1, batch, two_steps);
    Trained one;
    for (int n : {1, 2}) {
        const std::string name = std::to_string(n) + " GPU replica" + (n > 1 ? "s" : "") + " --tf32" + version;
        const Trained short_run = train_epochs(DeviceKind::gpu, n, batch, two_steps);
        compare_with_cpu(name + " vs 1 CPU device --tf32: parameters after 2 steps", short_run.params[0],
                         cpu.params[0]);
        report(std::abs(short_run.loss_sum - cpu.loss_sum) <= 1e-6 * std::abs(cpu.loss_sum),
               name + ": the loss sum of 2 steps matches the CPU's to 1e-6",
               std::to_string(short_run.loss_sum) + " vs " + std::to_string(cpu.loss_sum));
        const Trained gpu = train_epochs(DeviceKind::gpu, n, batch, tf32);
        if (n > 1) report(gpu.params[0] == gpu.params[1], name + ": replica 1 has the same bits as replica 0");
        double apart = 0.0;
        for (size_t i = 0; i < fp32.params[0].size(); ++i)
            apart = std::max(apart, std::abs(double(gpu.params[0][i]) - double(fp32.params[0][i])));
        report(apart > 1e-5 * largest(fp32.params[0]), name + ": apart from the FP32 run",
               "largest |diff| " + std::to_string(apart));
        if (n == 1) {
            one = gpu;
            continue;
        }
        const Trained replayed = train_epochs(DeviceKind::gpu, n, batch, {.graph = true, .math = Math::tf32});
        if (!replayed.params.empty()) report(same_bits(replayed, gpu), name + ": a graph replay gives the queued bits");
    }
    return one;
}

// Each version of the kernels that take TF32 operands (versions.cu: tf32);
// each sums in another order than version 1, so its epoch's bits differ
// (else the version never reached training).
void test_tf32_training(int batch, const Trained& fp32) {  // fp32: 1 GPU replica's epoch in FP32
    if (!has_tf32()) return;
    Trained first;
    for (int v = 1; v <= cuda::version_count("tf32"); ++v) {
        cuda::select_version("tf32", v);
        const std::string version = " (tf32 version " + std::to_string(v) + ")";
        const Trained one = tf32_training(batch, fp32, version);
        if (v == 1) {
            first = one;
            continue;
        }
        size_t differ = 0;
        for (size_t i = 0; i < one.params[0].size(); ++i) differ += one.params[0][i] != first.params[0][i];
        report(differ > 0, "1 GPU replica --tf32" + version + ": not version 1's bits after an epoch",
               std::to_string(differ) + " of " + std::to_string(one.params[0].size()) + " parameters differ");
    }
    cuda::select_default_versions();
}

// How far --tf32 runs on GPU 0 stray from the CPU's as the horizon grows, 1
// to 5 steps, against a CPU device that rounds to TF32 as the GPU does and
// one in FP32: the figures test_tf32_training's bounds come from
// (`gpu_tests tf32-horizons`; it prints, it checks nothing).
void tf32_horizons(int batch) {
    for (int steps = 1; steps <= 5; ++steps) {
        EpochOptions o{.samples = size_t(steps * batch), .math = Math::tf32};
        const Trained gpu = train_epochs(DeviceKind::gpu, 1, batch, o);
        const Trained cpu = train_epochs(DeviceKind::cpu, 1, batch, o);
        EpochOptions f = o;
        f.math = Math::fp32;
        const Trained cpu32 = train_epochs(DeviceKind::cpu, 1, batch, f);
        for (const auto& [twin, label] : {std::pair{&cpu, "tf32 cpu"}, std::pair{&cpu32, "fp32 cpu"}}) {
            const double scale = largest(twin->params[0]);
            double worst = 0;
            size_t b5 = 0, b4 = 0;
            for (size_t i = 0; i < twin->params[0].size(); ++i) {
                const double d = std::abs(double(gpu.params[0][i]) - double(twin->params[0][i]));
                worst = std::max(worst, d);
                b5 += d > 1e-5 * scale;
                b4 += d > 1e-4 * scale;
            }
            std::printf("horizon %d steps vs %s: beyond 1e-5 %zu, beyond 1e-4 %zu, largest %.3g; loss %.7f vs %.7f (%.2g)\n",
                        steps, label, b5, b4, worst / scale, gpu.loss_sum, twin->loss_sum,
                        std::abs(gpu.loss_sum - twin->loss_sum) / std::abs(twin->loss_sum));
        }
    }
}

void test_replicas() {
    const int batch = 32;
    test_resnet(batch);
    const Trained cpu = train_epochs(DeviceKind::cpu, 1, batch);
    const Trained one = train_epochs(DeviceKind::gpu, 1, batch);
    test_mixed(batch);
    test_other_allreduces(batch);
    test_overlap(batch);
    for (int n : {1, 2, 3}) {
        const std::string name = std::to_string(n) + " GPU replica" + (n > 1 ? "s" : "");
        const Trained gpu = n == 1 ? one : train_epochs(DeviceKind::gpu, n, batch);
        for (int i = 1; i < n; ++i)
            report(std::memcmp(gpu.params[0].data(), gpu.params[size_t(i)].data(),
                               lenet::model().param_count() * sizeof(float)) == 0,
                   name + ": replica " + std::to_string(i) + " has the same bits as replica 0");
        // Each sample's forward and backward is computed the same way
        // whatever the part it is in (a result element never depends on the
        // other samples), so N replicas differ from one only in the order
        // the weight gradients are summed, as CPU devices do (test_parallel).
        if (n > 1) compare(name + " vs 1 GPU replica: parameters after one epoch", gpu.params[0], one.params[0], 1e-5);
        compare_with_cpu(name + " vs 1 CPU device: parameters after one epoch", gpu.params[0], cpu.params[0]);
        report(std::abs(gpu.loss_sum - cpu.loss_sum) <= 1e-5 * std::abs(cpu.loss_sum),
               name + ": the epoch's loss sum matches the CPU's",
               std::to_string(gpu.loss_sum) + " vs " + std::to_string(cpu.loss_sum));
        // Rounding can flip a prediction only where two logits nearly tie.
        report(std::abs(gpu.correct - cpu.correct) <= 1, name + ": test predictions match the CPU's",
               std::to_string(gpu.correct) + " vs " + std::to_string(cpu.correct) + " correct of 64");

        report(gpu.first_bad_step == -1, name + ": the divergence watch stays quiet at lr 0.1");
        // lr 1e9 blows the weights up; the logits overflow within a few steps.
        const Trained cpu_blown = train_epochs(DeviceKind::cpu, n, batch, {.lr = 1e9f});
        const Trained gpu_blown = train_epochs(DeviceKind::gpu, n, batch, {.lr = 1e9f});
        report(gpu_blown.first_bad_step >= 1 && std::abs(gpu_blown.first_bad_step - cpu_blown.first_bad_step) <= 1,
               name + ": at lr 1e9 the divergence watch names the CPU's step (within one)",
               std::to_string(gpu_blown.first_bad_step) + " vs " + std::to_string(cpu_blown.first_bad_step));

        check_graph_replays(n, batch, name);
    }
    check_failed_recording(2, batch);
    check_capabilities();
    test_tf32_training(batch, one);

    // Every launcher at its latest version, the fewest kernels a step (the
    // last dense layer with the loss among them), which training runs when
    // DPTRAIN_KERNEL_VERSIONS asks: 2 replicas alike, against one CPU
    // device, and a graph's replay with the queued kernels' bits.
    for (const cuda::LauncherVersions& l : cuda::launcher_versions())
        cuda::select_version(l.launcher, int(l.versions.size()));
    const std::string name = "2 GPU replicas, every launcher at its latest version";
    const Trained latest = train_epochs(DeviceKind::gpu, 2, batch);
    report(latest.params[0] == latest.params[1], name + ": replica 1 has the same bits as replica 0");
    compare_with_cpu(name + " vs 1 CPU device: parameters after one epoch", latest.params[0], cpu.params[0]);
    report(std::abs(latest.loss_sum - cpu.loss_sum) <= 1e-5 * std::abs(cpu.loss_sum),
           name + ": the epoch's loss sum matches the CPU's",
           std::to_string(latest.loss_sum) + " vs " + std::to_string(cpu.loss_sum));
    check_graph_replays(2, batch, name);
    cuda::select_default_versions();
}

// What crosses streams, in few steps, for ThreadSanitizer on the emulated GPU
// (scripts/test.sh): a wait missing between two streams is then a reported
// race, not only wrong numbers. Replicas on two GPUs with each allreduce,
// queued and replayed; --overlap's second streams; GPUs beside CPU devices.
void test_streams() {
    // Two steps of 8 samples: ThreadSanitizer checks every access the
    // kernels make, some twenty times slower than without it.
    const int batch = 8;
    const EpochOptions few{.samples = 16};
    const auto with = [&](EpochOptions o) {
        o.samples = few.samples;
        return o;
    };
    const Trained naive_run = train_epochs(DeviceKind::gpu, 2, batch, few);
    for (const char* allreduce : {"naive", "ring"}) {
        const std::string name = "2 GPU replicas, " + std::string(allreduce);
        const Trained queued = allreduce == std::string("naive") ? naive_run
                                                                : train_epochs(DeviceKind::gpu, 2, batch, with({.allreduce = allreduce}));
        report(queued.params[0] == queued.params[1], name + ": replica 1 has the same bits as replica 0");
        const Trained replayed = train_epochs(DeviceKind::gpu, 2, batch, with({.graph = true, .allreduce = allreduce}));
        if (!replayed.params.empty()) report(same_bits(replayed, queued), name + ": a graph replay gives the queued bits");
        const Trained overlapped = train_epochs(DeviceKind::gpu, 2, batch, with({.allreduce = allreduce, .bucket_kb = 0}));
        report(same_bits(overlapped, queued), name + " --overlap --bucket-kb 0: the bits of no overlap");
    }
    for (const DeviceChoice& choice : {DeviceChoice::of(DeviceKind::gpu, 1).then(DeviceKind::cpu, 2), DeviceChoice::of(DeviceKind::gpu, 2).then(DeviceKind::cpu, 1)}) {
        const std::string name = "mixed, " + describe(choice);
        const Trained mixed = train_epochs(choice, batch, few);
        for (int i = 1; i < choice.count(); ++i)
            report(mixed.params[0] == mixed.params[size_t(i)], name + ": device " + std::to_string(i) + " has the same bits as device 0");
        report(same_bits(train_epochs(choice, batch, with({.bucket_kb = 0})), mixed), name + " --overlap: the bits of no overlap");
    }
}

// The trainer's order of events in a fresh process: devices made, parameters
// written, and the epoch recorded before any kernel has run, so every kernel
// module loads during the capture. Then the same against queued kernels.
void test_graph_first() { check_graph_replays(2, 32, "2 GPU replicas, graph recorded first"); }

// The shared-memory layout of the GEMM core's FP32 tiles: a warp's stores of
// a k-step of an operand, on each tile, take 8 passes in version 2 where
// the operand is read along k (its 32 stores in 4 banks) and 1 otherwise;
// in version 3, whose rows are padded, 1 either way.
void test_gemm_stash() {
    for (const int rows : {32, 64, 128})
        for (const bool right : {false, true})
            for (const bool k_fast : {false, true})
                for (const int version : {2, 3}) {
                    const int want = version == 2 && k_fast ? 8 : 1;
                    const int got = cuda::gemm_stash_passes(rows, right, k_fast, version);
                    report(got == want, "gemm " + std::to_string(version) + ", " + std::to_string(rows) +
                                            "-row tile, " + (right ? "B" : "A") + (k_fast ? " read along k" : " read along its side") +
                                            ": a warp's stash takes " + std::to_string(got) + " pass(es) a store");
                }
}

// The GEMM, convolution and dense checks on one version of the GEMM core.
void test_layers_on_core(int core) {
    cuda::select_version("gemm", core);
    std::printf("-- on version %d of the GEMM core\n", core);
    test_gemm();
    test_conv();
    test_conv_pool();
    test_conv_pool_conv();
    test_dense();
    test_dense_pool();
    cuda::select_default_versions();
}

}  // namespace

int main(int argc, char** argv) {
    const std::string what = argc > 1 ? argv[1] : "all";
    if (what != "kernels" && what != "replicas" && what != "tf32-horizons" && what != "graph-first" &&
        what != "streams" && what != "tf32" && what != "all") {
        std::fprintf(stderr, "usage: gpu_tests [kernels|tf32|replicas|graph-first|streams|tf32-horizons|all]\n");
        return 2;
    }
    const GpuInventory gpus = probe_gpus();
    if (gpus.count() == 0) {
        std::printf("SKIP: %s\n", gpus.why_none.c_str());
        return 77;
    }
    std::printf("GPU 0: %s (%d visible)\n", gpus.names[0].c_str(), gpus.count());
    try {
        if (what == "tf32-horizons") tf32_horizons(32);
        else if (what == "graph-first") test_graph_first();  // must be this process's first GPU work
        else if (what == "streams") test_streams();
        else if (what == "tf32") test_tf32();
        else if (what != "replicas" && what != "tf32-horizons") {
#ifdef DPTRAIN_CUDA_EMULATION
            test_thread_stacks();
#endif
            test_fastdiv();
            test_split_scratch();
            // The layers on every version of the GEMM core they run on
            // (versions.hpp).
            for (int v = 1; v <= cuda::version_count("gemm"); ++v) test_layers_on_core(v);
            test_gemm_stash();
            test_versions_same_bits();
            test_dense_loss();
            test_dense_head();
            test_conv_weight_left();
            test_conv_gathered();
            test_tf32();
            test_pool();
            test_waves();
            test_batch_norm();
            test_stats_after_conv();
            test_running_all();
            test_elementwise();
        }
        cuda::select_default_versions();
        if (what == "replicas" || what == "all") test_replicas();
    } catch (const std::exception& e) {
        report(false, "no CUDA error", e.what());
    }
    std::printf("%d of %d checks passed\n", checks - failures, checks);
    return failures == 0 ? 0 : 1;
}
