// The GPU tests of what every launcher stands on: the GEMM core (with the
// convolution and dense checks), fast division, the split products'
// scratch, and products split many ways.
#include <array>
#include <thread>
#include <utility>

#ifdef DPTRAIN_CUDA_EMULATION
#include <pthread.h>

#include "device_code.hpp"
#endif
#include "cuda/fastdiv.cuh"
#include "cuda/kernels.hpp"
#include "gpu_checks.hpp"

namespace dpt::gpu_test {

namespace {

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

}  // namespace

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
           "stack " + std::to_string(stack) + " bytes, thread-local storage " + std::to_string(tls) + " bytes");
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
// gradient's with the bias's column of ones), at capacities
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

// Products split along k many ways, small enough for the emulated GPU: a
// weight gradient of 65 one-tap filters over 17,920 pixels (140 splits of
// one 128-row tile) and a forward of one filter of 896 taps over 7,296
// pixels (7 splits of 57 tiles), against the CPU.
void test_many_splits() {
    const ConvShape weight{20, 1, 28, 32, 65, 1, 1, 1, 0}, forward{57, 896, 16, 8, 1, 1, 1, 1, 0};
    const int got_splits[2] = {cuda::conv2d_weight_grad_splits(weight), cuda::conv2d_forward_splits(forward)};
    report(got_splits[0] == 140 && got_splits[1] == 7, "the weight gradient's and the forward's splits",
           std::to_string(got_splits[0]) + " and " + std::to_string(got_splits[1]) + ", expected 140 and 7");
    {
        const ConvShape& s = weight;
        const auto x = random(s.in_size(), 90), dy = random(s.out_size(), 91);
        const auto dw0 = random(s.weight_size(), 92), db0 = random(size_t(s.oc), 93);
        std::vector<float> want_dw = dw0, want_db = db0, cpu_scratch(cpu::conv2d_scratch_floats(s));
        cpu::conv2d_backward_weight_gemm(want_dw.data(), want_db.data(), dy.data(), x.data(), s, cpu_scratch.data());
        Buffer<float> gx(x), gdy(dy), gw(dw0), gb(db0), scratch(cuda::conv2d_scratch_floats(s));
        Tickets tickets;
        scratch.poison();
        cuda::conv2d_backward_weight(gw.p, gb.p, gdy.p, gx.p, s, {scratch.p, tickets.p}, nullptr);
        compare("conv2d_backward_weight dw " + describe(s), gw.download(), want_dw, gemm_tol);
        compare("conv2d_backward_weight db " + describe(s), gb.download(), want_db, gemm_tol);
        check_tickets(tickets, "conv2d_backward_weight " + describe(s));
    }
    {
        const ConvShape& s = forward;
        const auto x = random(s.in_size(), 94), w = random(s.weight_size(), 95), b = random(size_t(s.oc), 96);
        std::vector<float> want(s.out_size()), cpu_scratch(cpu::conv2d_scratch_floats(s));
        cpu::conv2d_forward_gemm(want.data(), x.data(), w.data(), b.data(), s, cpu_scratch.data());
        Buffer<float> gx(x), gw(w), gb(b), y(s.out_size()), scratch(cuda::conv2d_scratch_floats(s));
        y.poison();
        cuda::conv2d_forward(y.p, gx.p, gw.p, gb.p, s, scratch.p, nullptr);
        compare("conv2d_forward " + describe(s), y.download(), want, gemm_tol);
    }
}

// The GEMM, convolution and dense checks.
void test_layers() {
    test_gemm();
    test_conv();
    test_conv_pool();
    test_dense();
    test_dense_pool();
}

}  // namespace dpt::gpu_test
