// conv2d on the CPU: im2col + GEMM. CUDA twin: kernels/cuda/conv.cu.
//
// Without padding the unfolded matrix need not exist: its element (tap r,
// column j) is x[tap_offset[r] + pixel_offset[j]], so the GEMM's B operand
// is packed straight from the images ("implicit GEMM"), saving a write and a
// read of a matrix 25x the size of the input (for LeNet's conv2). Forward
// and weight gradient take that path; the data gradient, and padded
// convolutions, unfold explicitly (im2col / col2im).
//
// Samples are taken in groups (conv_group_size) so that one GEMM sees
// ~640 output pixels: enough columns for the packed weights to be reused
// well, while the unfolded group (for LeNet's conv2: 500 x 567 floats)
// stays near L2. The GEMM writes (oc, pixels of the group); a copy puts the
// result back into NCHW.
#include <algorithm>
#include <cstring>

#include "gemm_driver.hpp"
#include "kernels.hpp"

namespace dpt::cpu {
namespace {

// Samples unfolded together for one GEMM.
int conv_group_size(const ConvShape& s) { return std::clamp(640 / s.col_cols(), 1, std::max(s.n, 1)); }

}  // namespace

// The unfolded group (c*kh*kw, cols), the output matrix (oc, cols), and the
// implicit GEMM's offsets (c*kh*kw + cols ints), with cols = group * oh*ow.
size_t conv2d_scratch_floats(const ConvShape& s) {
    const size_t cols = size_t(conv_group_size(s)) * s.col_cols();
    return cols * size_t(s.col_rows() + s.oc) + s.col_rows() + cols;
}

namespace {

// Output columns ox whose tap (ki, kj) lands inside the image row: [lo, hi).
void inside_range(const ConvShape& s, int kj, int& lo, int& hi) {
    // ix = ox * stride - pad + kj must lie in [0, w).
    const int first = s.pad - kj;  // smallest ox * stride allowed
    lo = first <= 0 ? 0 : (first + s.stride - 1) / s.stride;
    const int last = s.w - 1 + s.pad - kj;  // largest ox * stride allowed
    hi = last < 0 ? 0 : std::min(s.ow(), last / s.stride + 1);
    if (hi < lo) hi = lo;
}

// Unfolds one image (c, h, w) into col (c*kh*kw rows of oh*ow, row stride ld);
// zeros where a tap falls into padding.
void im2col(float* col, const float* x, const ConvShape& s, int ld) {  // x (c, h, w) -> col (c*kh*kw, ld)
    const int oh = s.oh(), ow = s.ow();
    for (int ch = 0; ch < s.c; ++ch)
        for (int ki = 0; ki < s.kh; ++ki)
            for (int kj = 0; kj < s.kw; ++kj, col += ld) {
                const float* plane = x + size_t(ch) * s.h * s.w;
                int lo, hi;
                inside_range(s, kj, lo, hi);
                for (int oy = 0; oy < oh; ++oy) {
                    float* out = col + oy * ow;
                    const int iy = oy * s.stride - s.pad + ki;
                    if (iy < 0 || iy >= s.h) {
                        std::fill(out, out + ow, 0.0f);
                        continue;
                    }
                    // Plain loops: rows are short (9 floats in LeNet's conv2),
                    // too short for a memcpy call to pay.
                    const float* src = plane + iy * s.w - s.pad + kj;
                    for (int ox = 0; ox < lo; ++ox) out[ox] = 0.0f;
                    if (s.stride == 1)
                        for (int ox = lo; ox < hi; ++ox) out[ox] = src[ox];
                    else
                        for (int ox = lo; ox < hi; ++ox) out[ox] = src[ox * s.stride];
                    for (int ox = hi; ox < ow; ++ox) out[ox] = 0.0f;
                }
            }
}

// The adjoint of im2col: dx (c, h, w) += folded dcol (c*kh*kw, oh*ow; row stride ld).
void col2im(float* dx, const float* dcol, const ConvShape& s, int ld) {
    const int oh = s.oh(), ow = s.ow();
    for (int ch = 0; ch < s.c; ++ch)
        for (int ki = 0; ki < s.kh; ++ki)
            for (int kj = 0; kj < s.kw; ++kj, dcol += ld) {
                float* plane = dx + size_t(ch) * s.h * s.w;
                int lo, hi;
                inside_range(s, kj, lo, hi);
                for (int oy = 0; oy < oh; ++oy) {
                    const int iy = oy * s.stride - s.pad + ki;
                    if (iy < 0 || iy >= s.h) continue;
                    const float* in = dcol + oy * ow;
                    float* dst = plane + iy * s.w - s.pad + kj;
                    if (s.stride == 1)  // contiguous: vectorises
                        for (int ox = lo; ox < hi; ++ox) dst[ox] += in[ox];
                    else
                        for (int ox = lo; ox < hi; ++ox) dst[ox * s.stride] += in[ox];
                }
            }
}

// Group layout shared by the three kernels: scratch holds the unfolded group
// col (c*kh*kw, cols) followed by a matrix (oc, cols) of outputs or output
// gradients, with cols = samples in the group * oh*ow. A group of one sample
// uses y / dy in place instead of the second matrix.

struct Group {
    int first, count, cols;
    float *col, *out;
};

template <class Body>
void for_each_group(const ConvShape& s, float* scratch, Body body) {
    const int size = conv_group_size(s), pixels = s.col_cols();
    for (int first = 0; first < s.n; first += size) {
        const int count = std::min(size, s.n - first), cols = count * pixels;
        body(Group{first, count, cols, scratch, scratch + size_t(s.col_rows()) * cols});
    }
}

// The group's dy as one (oc, cols) matrix: for a single sample that is dy
// itself (NCHW holds it so); for several, gathered into g.out.
const float* group_dy(const float* dy, const ConvShape& s, const Group& g) {
    const int pixels = s.col_cols();
    if (g.count == 1) return dy + size_t(g.first) * s.oc * pixels;
    float* out = g.out;
    for (int j = 0; j < g.count; ++j)
        for (int o = 0; o < s.oc; ++o) {
            const float* src = dy + (size_t(g.first + j) * s.oc + o) * pixels;
            std::copy(src, src + pixels, out + size_t(o) * g.cols + size_t(j) * pixels);
        }
    return out;
}

// Offsets that address the unfolded matrix of an unpadded convolution for
// `count` samples inside x: tap r of output column j is at x[tap[r] + pixel[j]].
// They live at the end of the scratch space (see conv2d_scratch_floats).
struct Unfolded {
    int *tap, *pixel;

    Unfolded(const ConvShape& s, int count, float* scratch) {
        const size_t cols = size_t(conv_group_size(s)) * s.col_cols();
        tap = reinterpret_cast<int*>(scratch + cols * size_t(s.col_rows() + s.oc));
        pixel = tap + s.col_rows();
        int* t = tap;
        for (int ch = 0; ch < s.c; ++ch)
            for (int ki = 0; ki < s.kh; ++ki)
                for (int kj = 0; kj < s.kw; ++kj) *t++ = (ch * s.h + ki) * s.w + kj;
        int* p = pixel;
        for (int j = 0; j < count; ++j)
            for (int oy = 0; oy < s.oh(); ++oy)
                for (int ox = 0; ox < s.ow(); ++ox) *p++ = j * s.c * s.h * s.w + (oy * s.w + ox) * s.stride;
    }
};

// Packs rows [k0, k0+kc) x columns [j0, j0+nc) of the matrix whose (row q,
// column c) element is x[row_off[q] + col_off[c]], as the GEMM driver wants:
// NR-column panels, NR floats per row, zero-filled past nc. With rows = taps
// and columns = pixels this is the unfolded matrix; swapped, its transpose.
void pack_gathered(float* dst, const float* x, const int* row_off, const int* col_off, int k0, int kc, int j0,
                   int nc) {
    constexpr int NR = detail::NR;
    for (int jp = 0; jp < nc; jp += NR, dst += NR * kc) {
        const int cols = std::min(NR, nc - jp);
        const int* co = col_off + j0 + jp;
        for (int kk = 0; kk < kc; ++kk) {
            const float* src = x + row_off[k0 + kk];
            float* d = dst + kk * NR;
            for (int c = 0; c < cols; ++c) d[c] = src[co[c]];
            for (int c = cols; c < NR; ++c) d[c] = 0.0f;
        }
    }
}

}  // namespace

void conv2d_forward(float* y, const float* x, const float* w, const float* b,
                    const ConvShape& s, float* scratch) {
    const int rows = s.col_rows(), pixels = s.col_cols();
    const size_t in_stride = size_t(s.c) * s.h * s.w;
    const bool implicit = s.pad == 0;
    const Unfolded offsets(s, implicit ? conv_group_size(s) : 0, scratch);
    for_each_group(s, scratch, [&](const Group& g) {
        const float* xg = x + g.first * in_stride;
        // out (oc, cols) = or += w (oc, K) . unfolded group (K, cols)
        auto product = [&](float* out, bool accumulate) {
            if (implicit)
                detail::gemm_driver(out, w, false, s.oc, g.cols, rows,
                                    [&](float* dst, int k0, int kc, int j0, int nc) {
                                        pack_gathered(dst, xg, offsets.tap, offsets.pixel, k0, kc, j0, nc);
                                    },
                                    accumulate);
            else {
                for (int j = 0; j < g.count; ++j) im2col(g.col + size_t(j) * pixels, xg + j * in_stride, s, g.cols);
                gemm(out, w, g.col, s.oc, g.cols, rows, false, false, accumulate);
            }
        };
        if (g.count == 1) {  // the output is already (oc, pixels): start from the bias and accumulate
            float* yi = y + size_t(g.first) * s.oc * pixels;
            for (int o = 0; o < s.oc; ++o) std::fill(yi + size_t(o) * pixels, yi + size_t(o + 1) * pixels, b[o]);
            product(yi, true);
            return;
        }
        product(g.out, false);
        for (int j = 0; j < g.count; ++j)
            for (int o = 0; o < s.oc; ++o) {
                const float* src = g.out + size_t(o) * g.cols + size_t(j) * pixels;
                float* dst = y + (size_t(g.first + j) * s.oc + o) * pixels;
                for (int p = 0; p < pixels; ++p) dst[p] = src[p] + b[o];
            }
    });
}

void conv2d_backward_data(float* dx, const float* dy, const float* w,
                          const ConvShape& s, float* scratch) {
    const int rows = s.col_rows(), pixels = s.col_cols();
    const size_t in_stride = size_t(s.c) * s.h * s.w;
    std::memset(dx, 0, s.in_size() * sizeof(float));
    for_each_group(s, scratch, [&](const Group& g) {
        const float* dyg = group_dy(dy, s, g);
        gemm(g.col, w, dyg, rows, g.cols, s.oc, true, false, false);  // dcol (K, cols) = w^T (K, oc) . dy (oc, cols)
        for (int j = 0; j < g.count; ++j) col2im(dx + (g.first + j) * in_stride, g.col + size_t(j) * pixels, s, g.cols);
    });
}

void conv2d_backward_weight(float* dw, float* db, const float* dy, const float* x,
                            const ConvShape& s, float* scratch) {
    const int rows = s.col_rows(), pixels = s.col_cols();
    const size_t in_stride = size_t(s.c) * s.h * s.w;
    const bool implicit = s.pad == 0;
    const Unfolded offsets(s, implicit ? conv_group_size(s) : 0, scratch);
    for_each_group(s, scratch, [&](const Group& g) {
        const float* xg = x + g.first * in_stride;
        const float* dyg = group_dy(dy, s, g);
        // dw (oc, K) += dy (oc, cols) . unfolded^T (cols, K)
        if (implicit)
            detail::gemm_driver(dw, dyg, false, s.oc, rows, g.cols,
                                [&](float* dst, int k0, int kc, int j0, int nc) {
                                    pack_gathered(dst, xg, offsets.pixel, offsets.tap, k0, kc, j0, nc);
                                },
                                true);
        else {
            for (int j = 0; j < g.count; ++j) im2col(g.col + size_t(j) * pixels, xg + j * in_stride, s, g.cols);
            gemm(dw, dyg, g.col, s.oc, rows, g.cols, false, true, true);
        }
        for (int o = 0; o < s.oc; ++o) {
            const float* row = dyg + size_t(o) * g.cols;
            float sum = 0.0f;
            for (int p = 0; p < g.cols; ++p) sum += row[p];
            db[o] += sum;
        }
    });
}

}  // namespace dpt::cpu
