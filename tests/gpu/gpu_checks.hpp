// What the GPU tests' sources share (tests/gpu/test_gpu.cpp: what they
// test, and main): the count of checks and failures and how each is
// reported; device buffers, poisoned or fenced by NaNs; the comparisons
// with the CPU twins; and the tests each source holds, which main runs.
#pragma once
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/rng.hpp"
#include "cpu/kernels.hpp"
#include "cuda/check.hpp"
#include "cuda/splits.hpp"
#include "testing.hpp"

namespace dpt::gpu_test {

// The checks made so far in this process, and how many failed.
inline int failures = 0, checks = 0;

inline void report(bool ok, const std::string& what, const std::string& detail = "") {
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
inline void compare(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                    double tol) {
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

inline std::vector<float> random(size_t n, uint64_t seed) { return testing::random_vector(n, seed); }

// The tickets of the launchers' split products (splits.hpp: Workspace),
// zeroed as a device's are.
struct Tickets : Buffer<unsigned> {
    Tickets() : Buffer<unsigned>(size_t(cuda::workspace_tickets)) { zero(); }
};

// Every ticket is back at 0 after a launcher ran: else the next split
// product's blocks would not know which of them is last.
inline void check_tickets(const Tickets& t, const std::string& what) {
    const auto host = t.download();
    const auto left = std::count_if(host.begin(), host.end(), [](unsigned v) { return v != 0; });
    report(left == 0, what + ": every ticket back at 0", std::to_string(left) + " not");
}

// Integers in [-3, 3]: many ties, for max pooling's and argmax's first-wins rules.
inline std::vector<float> small_integers(size_t n, uint64_t seed) {
    std::vector<float> v = random(n, seed);
    for (float& x : v) x = std::round(3.0f * x);
    return v;
}

inline std::string describe(const ConvShape& s) {
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

// TF32 tensor cores need compute capability 8.0 (on an older GPU the
// kernels trap, and dptrain refuses --tf32).
inline bool has_tf32() {
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major >= 8) return true;
    std::printf("SKIP the --tf32 checks: GPU 0 has compute capability %d.%d, TF32 needs 8.0\n", prop.major, prop.minor);
    return false;
}

// Random inputs of the last layer with the loss (seeds seed to seed + 5):
// x (a ReLU's output, a third of it zero, where relu), w, b, the gradients
// it adds to, and the labels.
struct LossInputs {
    std::vector<float> x, w, b, dw0, db0;
    std::vector<int32_t> labels;
};

inline LossInputs loss_inputs(int n, int in, int classes, bool relu, uint64_t seed) {
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

// ---- the tests, by source ----

// test_gpu_core.cpp
#ifdef DPTRAIN_CUDA_EMULATION
void test_thread_stacks();  // (the emulated GPU's threads)
#endif
void test_fastdiv();
void test_split_scratch();
void test_many_splits();
void test_layers();

// test_gpu_conv.cpp
void test_conv();
void test_conv_pool();
void test_conv_weight_left();
void test_conv_gathered();

// test_gpu_dense.cpp
void test_dense();
void test_dense_pool();
void test_dense_loss();
void test_dense_head();

// test_gpu_layers.cpp
void test_pool();
void test_stats_after_conv();
void test_batch_norm();
void test_running_all();
void test_elementwise();

// test_gpu_tf32.cpp
void test_tf32();

// test_gpu_training.cpp
void tf32_horizons(int batch);
void test_replicas();
void test_streams();
void test_graph_first();

}  // namespace dpt::gpu_test
