// Fully connected layer on the CPU: three GEMMs. CUDA twin: kernels/cuda/dense.cu.
#include <algorithm>

#include "kernels.hpp"

namespace dpt::cpu {

void dense_forward(float* y, const float* x, const float* w, const float* b,
                   int n, int in, int out, float*) {
    for (int i = 0; i < n; ++i) std::copy(b, b + out, y + size_t(i) * out);
    gemm(y, x, w, n, out, in, false, true, true);  // y (n, out) += x (n, in) . w^T (in, out)
}

void dense_backward(float* dx, float* dw, float* db, const float* dy,
                    const float* x, const float* w, int n, int in, int out, float*) {
    gemm(dw, dy, x, out, in, n, true, false, true);  // dw (out, in) += dy^T (out, n) . x (n, in)
    for (int i = 0; i < n; ++i)
        for (int o = 0; o < out; ++o) db[o] += dy[size_t(i) * out + o];
    if (dx) gemm(dx, dy, w, n, in, out, false, false, false);  // dx (n, in) = dy (n, out) . w (out, in)
}

}  // namespace dpt::cpu
