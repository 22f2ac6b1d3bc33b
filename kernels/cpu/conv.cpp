// conv2d on the CPU: im2col + GEMM, one sample at a time so that the unfolded
// image (for LeNet's conv2: 500 x 81 floats, 160 KiB) stays in L2 while the
// GEMM reads it. CUDA twin: kernels/cuda/conv.cu.
#include <algorithm>
#include <cstring>

#include "kernels.hpp"

namespace dpt::cpu {

void im2col(float* col, const float* x, const ConvShape& s) {  // x (c, h, w) -> col (c*kh*kw, oh*ow)
    const int oh = s.oh(), ow = s.ow();
    for (int ch = 0; ch < s.c; ++ch)
        for (int ki = 0; ki < s.kh; ++ki)
            for (int kj = 0; kj < s.kw; ++kj) {
                const float* plane = x + size_t(ch) * s.h * s.w;
                for (int oy = 0; oy < oh; ++oy) {
                    const int iy = oy * s.stride - s.pad + ki;
                    for (int ox = 0; ox < ow; ++ox) {
                        const int ix = ox * s.stride - s.pad + kj;
                        const bool inside = iy >= 0 && iy < s.h && ix >= 0 && ix < s.w;
                        *col++ = inside ? plane[iy * s.w + ix] : 0.0f;
                    }
                }
            }
}

void col2im(float* dx, const float* dcol, const ConvShape& s) {  // dx (c, h, w) += fold(dcol)
    const int oh = s.oh(), ow = s.ow();
    for (int ch = 0; ch < s.c; ++ch)
        for (int ki = 0; ki < s.kh; ++ki)
            for (int kj = 0; kj < s.kw; ++kj) {
                float* plane = dx + size_t(ch) * s.h * s.w;
                for (int oy = 0; oy < oh; ++oy) {
                    const int iy = oy * s.stride - s.pad + ki;
                    for (int ox = 0; ox < ow; ++ox, ++dcol) {
                        const int ix = ox * s.stride - s.pad + kj;
                        if (iy >= 0 && iy < s.h && ix >= 0 && ix < s.w) plane[iy * s.w + ix] += *dcol;
                    }
                }
            }
}

void conv2d_forward(float* y, const float* x, const float* w, const float* b,
                    const ConvShape& s, float* col) {
    const int rows = s.col_rows(), pixels = s.col_cols();
    const size_t in_stride = size_t(s.c) * s.h * s.w, out_stride = size_t(s.oc) * pixels;
    for (int i = 0; i < s.n; ++i) {
        float* yi = y + i * out_stride;  // (oc, oh*ow)
        // Start from the bias and let the GEMM accumulate onto it.
        for (int o = 0; o < s.oc; ++o) std::fill(yi + size_t(o) * pixels, yi + size_t(o + 1) * pixels, b[o]);
        im2col(col, x + i * in_stride, s);
        gemm(yi, w, col, s.oc, pixels, rows, false, false, true);
    }
}

void conv2d_backward_data(float* dx, const float* dy, const float* w,
                          const ConvShape& s, float* dcol) {
    const int rows = s.col_rows(), pixels = s.col_cols();
    const size_t in_stride = size_t(s.c) * s.h * s.w, out_stride = size_t(s.oc) * pixels;
    std::memset(dx, 0, s.in_size() * sizeof(float));
    for (int i = 0; i < s.n; ++i) {
        // dcol (c*kh*kw, oh*ow) = w^T (c*kh*kw, oc) . dy_i (oc, oh*ow)
        gemm(dcol, w, dy + i * out_stride, rows, pixels, s.oc, true, false, false);
        col2im(dx + i * in_stride, dcol, s);
    }
}

void conv2d_backward_weight(float* dw, float* db, const float* dy, const float* x,
                            const ConvShape& s, float* col) {
    const int rows = s.col_rows(), pixels = s.col_cols();
    const size_t in_stride = size_t(s.c) * s.h * s.w, out_stride = size_t(s.oc) * pixels;
    for (int i = 0; i < s.n; ++i) {
        const float* dyi = dy + i * out_stride;
        im2col(col, x + i * in_stride, s);
        // dw (oc, c*kh*kw) += dy_i (oc, oh*ow) . col^T (oh*ow, c*kh*kw)
        gemm(dw, dyi, col, s.oc, rows, pixels, false, true, true);
        for (int o = 0; o < s.oc; ++o) {
            float sum = 0.0f;
            for (int p = 0; p < pixels; ++p) sum += dyi[size_t(o) * pixels + p];
            db[o] += sum;
        }
    }
}

}  // namespace dpt::cpu
