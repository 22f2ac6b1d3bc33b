// Fully connected layer on the CPU: three GEMMs. CUDA twin: kernels/cuda/dense.cu.
#include <algorithm>

#include "kernels.hpp"

namespace dpt::cpu {

void dense_forward(float* y, const float* x, const float* w, const float* b,
                   int n, int in, int out, float* scratch, Math math) {
    if (math == Math::tf32) {  // x and w rounded, into scratch
        float* rx = scratch;
        float* rw = rx + size_t(n) * in;
        round_to_tf32(rx, x, size_t(n) * in);
        round_to_tf32(rw, w, size_t(in) * out);
        x = rx, w = rw;
    }
    if (!scratch || out <= n) {
        for (int i = 0; i < n; ++i) std::copy(b, b + out, y + size_t(i) * out);
        return gemm(y, x, w, n, out, in, false, true, true);  // y (n, out) += x (n, in) . w^T (in, out)
    }
    // More outputs than samples (LeNet's dense1: 128 against a chunk of 32):
    // y^T = w . x^T, so that the GEMM packs x^T (n x in floats) instead of
    // w^T (out x in), then y^T turned back. The same sums, in the same order.
    float* yt = scratch + (math == Math::tf32 ? size_t(n) * in + size_t(in) * out : 0);
    for (int o = 0; o < out; ++o) std::fill(yt + size_t(o) * n, yt + size_t(o + 1) * n, b[o]);
    gemm(yt, w, x, out, n, in, false, true, true);  // y^T (out, n) += w (out, in) . x^T (in, n)
    for (int i = 0; i < n; ++i)
        for (int o = 0; o < out; ++o) y[size_t(i) * out + o] = yt[size_t(o) * n + i];
}

void dense_backward_weight(float* dw, float* db, const float* dy, const float* x, int n, int in, int out,
                           float* scratch, Math math) {
    for (int i = 0; i < n; ++i)  // (the bias sums the unrounded dy)
        for (int o = 0; o < out; ++o) db[o] += dy[size_t(i) * out + o];
    if (math == Math::tf32) {  // dy and x rounded, into scratch
        float* rx = scratch;
        float* rdy = rx + size_t(n) * in + size_t(in) * out;
        round_to_tf32(rx, x, size_t(n) * in);
        round_to_tf32(rdy, dy, size_t(n) * out);
        x = rx, dy = rdy;
    }
    gemm(dw, dy, x, out, in, n, true, false, true);  // dw (out, in) += dy^T (out, n) . x (n, in)
}

void dense_backward_data(float* dx, const float* dy, const float* w, int n, int in, int out, float* scratch,
                         Math math) {
    if (!dx) return;
    if (math == Math::tf32) {  // dy and w rounded, into scratch
        float* rw = scratch + size_t(n) * in;
        float* rdy = rw + size_t(in) * out;
        round_to_tf32(rw, w, size_t(in) * out);
        round_to_tf32(rdy, dy, size_t(n) * out);
        w = rw, dy = rdy;
    }
    gemm(dx, dy, w, n, in, out, false, false, false);  // dx (n, in) = dy (n, out) . w (out, in)
}

void dense_backward(float* dx, float* dw, float* db, const float* dy,
                    const float* x, const float* w, int n, int in, int out, float* scratch, Math math) {
    dense_backward_weight(dw, db, dy, x, n, in, out, scratch, math);
    dense_backward_data(dx, dy, w, n, in, out, scratch, math);
}

}  // namespace dpt::cpu
