// conv2d on the CPU: im2col + GEMM, or, for the 3x3 convolutions it fits,
// Winograd's F(m x m, 3x3) (winograd.cpp), direct sums for a one-channel
// input (conv_direct.cpp), or, for 5x5 filters, the batch in the vector
// lanes (winograd_lanes.cpp, conv_lanes.cpp); the dispatch is at the end of
// this file.
// CUDA twin: kernels/cuda/conv_forward.cu, conv_backward_data.cu and
// conv_backward_weight.cu (conv.cuh says which holds what).
//
// The unfolded matrix need not exist: its element (tap r, column j) is
// x[tap_offset[r] + pixel_offset[j]], so the GEMM's B operand is packed
// straight from the images ("implicit GEMM"), saving a write and a read of a
// matrix 25x the size of the input (for LeNet's conv2, 9x for ResNet's 3x3
// convs). A padded convolution first copies its group of images into a
// zero-bordered buffer and runs as the unpadded one over it (the same
// products in the same order: the same bits). Forward and weight gradient
// take that path; the data gradient folds an explicit matrix back (col2im).
//
// Samples are taken in groups (conv_group_size) so that one GEMM sees
// ~640 output pixels: enough columns for the packed weights to be reused
// well, while the unfolded group (for LeNet's conv2: 500 x 567 floats)
// stays near L2. The GEMM writes (oc, pixels of the group); a copy puts the
// result back into NCHW.
#include <algorithm>
#include <cstring>

#include "conv_direct.hpp"
#include "conv_lanes.hpp"
#include "winograd_lanes.hpp"
#include "gemm_driver.hpp"
#include "kernels.hpp"
#include "winograd.hpp"

namespace dpt::cpu {
namespace {

// Samples unfolded together for one GEMM.
int conv_group_size(const ConvShape& s) { return std::clamp(640 / s.col_cols(), 1, std::max(s.n, 1)); }

// The implicit GEMM's scratch: the unfolded group (c*kh*kw, cols) or the
// group's zero-padded images, the output matrix (oc, cols), and the
// offsets (c*kh*kw + cols ints), with cols = group * oh*ow.
size_t conv2d_gemm_scratch_floats(const ConvShape& s) {
    const size_t group = size_t(conv_group_size(s)), cols = group * s.col_cols();
    const size_t padded = group * s.c * size_t(s.h + 2 * s.pad) * size_t(s.w + 2 * s.pad);
    return std::max(cols * size_t(s.col_rows()), padded) + cols * size_t(s.oc) + s.col_rows() + cols;
}

// Output columns ox whose tap (ki, kj) lands inside the image row: [lo, hi).
void inside_range(const ConvShape& s, int kj, int& lo, int& hi) {
    // ix = ox * stride - pad + kj must lie in [0, w).
    const int first = s.pad - kj;  // smallest ox * stride allowed
    lo = first <= 0 ? 0 : (first + s.stride - 1) / s.stride;
    const int last = s.w - 1 + s.pad - kj;  // largest ox * stride allowed
    hi = last < 0 ? 0 : std::min(s.ow(), last / s.stride + 1);
    if (hi < lo) hi = lo;
}

// dst[0:count) += src[0:count), the two apart (lets the compiler drop its
// overlap checks: LeNet's conv2 folds runs of 9).
[[gnu::always_inline]] inline void add_run(float* __restrict dst, const float* __restrict src, int count) {
    for (int i = 0; i < count; ++i) dst[i] += src[i];
}

// The adjoint of unfolding: dx (c, h, w) += folded dcol (c*kh*kw, oh*ow; row stride ld).
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
                        add_run(dst + lo, in + lo, hi - lo);
                    else
                        for (int ox = lo; ox < hi; ++ox) dst[ox * s.stride] += in[ox];
                }
            }
}

// col2im where an input row and an output row fit a vector (LeNet's conv2
// folds 13-pixel rows, ResNet-18's stride-2 convolutions 12- and 6-pixel
// ones): each row of dx is summed in a register over the taps that reach
// it, in col2im's order (ki, then kj: the same sums, the same bits), and
// stored once, instead of read and written again for each of the kh * kw
// taps. A tap's run of outputs is moved onto the columns it lands on by
// one permutation (for stride 2, every other lane). The whole of dx (c, h,
// w) is written.
constexpr int fold_widest_filter = 8;
bool fold_in_registers(const ConvShape& s) {
    return s.w <= detail::lanes && s.ow() <= detail::lanes && s.kw <= fold_widest_filter;
}

// v's lanes in the order `from` gives: one permutation instruction with
// GCC's __builtin_shuffle; Clang has no shuffle whose order is known only
// at run time, so there a lane at a time.
template <class V, class I>
V permuted(V v, I from) {
#if defined(__clang__)
    V r;
    for (int l = 0; l < detail::lanes; ++l) r[l] = v[from[l]];
    return r;
#else
    return __builtin_shuffle(v, from);
#endif
}

// dx (count, c, h, w) from the folded dcol (c*kh*kw, count*oh*ow; row
// stride ld) of `count` samples, sample j's columns from j*oh*ow. A run
// read as a whole vector past dcol's end is copied first, the lanes past
// it zeros.
void col2im_rows(float* dx, const float* dcol, int count, const ConvShape& s, int ld) {
    using vf = float __attribute__((vector_size(detail::lanes * sizeof(float))));
    using vi = int __attribute__((vector_size(detail::lanes * sizeof(int))));
    const int oh = s.oh(), ow = s.ow();
    const size_t in = size_t(s.c) * s.h * s.w;
    const float* end = dcol + size_t(s.col_rows()) * ld;
    // Lane x of a row of dx takes, from tap column kj, output column
    // (x + pad - kj) / stride, where that is whole and inside the row.
    vi from[fold_widest_filter] = {}, takes[fold_widest_filter] = {};
    for (int kj = 0; kj < s.kw; ++kj)
        for (int x = 0; x < s.w; ++x) {
            const int q = x + s.pad - kj;
            if (q < 0 || q % s.stride != 0 || q / s.stride >= ow) continue;
            from[kj][x] = q / s.stride;
            takes[kj][x] = -1;
        }
    for (int j = 0; j < count; ++j)
        for (int ch = 0; ch < s.c; ++ch)
            for (int iy = 0; iy < s.h; ++iy) {
                vf sum = {};
                for (int ki = 0; ki < s.kh; ++ki) {
                    const int q = iy + s.pad - ki;  // oy * stride
                    if (q < 0 || q % s.stride != 0 || q / s.stride >= oh) continue;
                    const float* run = dcol + size_t((ch * s.kh + ki) * s.kw) * ld + size_t(j) * oh * ow +
                                       (q / s.stride) * ow;
                    for (int kj = 0; kj < s.kw; ++kj, run += ld) {
                        vf v = {};
                        std::memcpy(&v, run, end - run >= detail::lanes ? sizeof v : size_t(ow) * sizeof(float));
                        sum = takes[kj] ? sum + permuted(v, from[kj]) : sum;
                    }
                }
                // The whole vector where it ends inside this sample's dx (past
                // the row: the next rows', written after it), else the row alone.
                const size_t at = (size_t(ch) * s.h + iy) * s.w;
                const bool room = at + detail::lanes <= in;
                std::memcpy(dx + j * in + at, &sum, room ? sizeof sum : size_t(s.w) * sizeof(float));
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
    // The output matrix follows the larger of the unfolded group and the padded images.
    const size_t first_part = conv2d_gemm_scratch_floats(s) - size_t(size) * pixels * size_t(s.oc + 1) - s.col_rows();
    for (int first = 0; first < s.n; first += size) {
        const int count = std::min(size, s.n - first), cols = count * pixels;
        body(Group{first, count, cols, scratch, scratch + first_part});
    }
}

// Where the implicit GEMM's offsets go: the end of the scratch space.
float* offsets_room(const ConvShape& s, float* scratch) {
    return scratch + conv2d_gemm_scratch_floats(s) - s.col_rows() - size_t(conv_group_size(s)) * s.col_cols();
}

// The same convolution over the input zero-padded by s.pad on every side.
ConvShape unpadded(const ConvShape& s) {
    return {s.n, s.c, s.h + 2 * s.pad, s.w + 2 * s.pad, s.oc, s.kh, s.kw, s.stride, 0};
}

// The group's images (count, c, h, w) with a zero border of s.pad into
// padded (count, c, h + 2 pad, w + 2 pad); x itself when there is no padding.
const float* padded_group(float* padded, const float* x, const ConvShape& s, int count) {
    if (s.pad == 0) return x;
    const int pw = s.w + 2 * s.pad, ph = s.h + 2 * s.pad;
    std::fill(padded, padded + size_t(count) * s.c * ph * pw, 0.0f);
    for (size_t plane = 0; plane < size_t(count) * s.c; ++plane)
        for (int iy = 0; iy < s.h; ++iy)
            std::copy_n(x + (plane * s.h + iy) * s.w, s.w, padded + (plane * ph + iy + s.pad) * pw + s.pad);
    return padded;
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
// They live at the end of the scratch space (see conv2d_gemm_scratch_floats).
struct Unfolded {
    int *tap, *pixel;

    // s: the convolution as run (unpadded); `room`: the last c*kh*kw + cols
    // floats of the scratch space.
    Unfolded(const ConvShape& s, int count, float* room) {
        tap = reinterpret_cast<int*>(room);
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

// A whole panel's row: NR floats, each from its own offset. A loop of a
// fixed count over unaliased pointers, which the compiler turns into vector
// gathers where the target has them (AVX2, AVX-512): the scalar copy took
// a sixth of LeNet's step on a CPU device, the gathers half of that
// (perf's samples, bench/layers_cpu).
[[gnu::always_inline]] inline void gather_row(float* __restrict d, const float* __restrict src,
                                              const int* __restrict co) {
    for (int c = 0; c < detail::NR; ++c) d[c] = src[co[c]];
}

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
        if (cols == NR) {
            for (int kk = 0; kk < kc; ++kk) gather_row(dst + kk * NR, x + row_off[k0 + kk], co);
            continue;
        }
        for (int kk = 0; kk < kc; ++kk) {
            const float* src = x + row_off[k0 + kk];
            float* d = dst + kk * NR;
            for (int c = 0; c < cols; ++c) d[c] = src[co[c]];
            for (int c = cols; c < NR; ++c) d[c] = 0.0f;
        }
    }
}

}  // namespace

void conv2d_forward_gemm(float* y, const float* x, const float* w, const float* b,
                         const ConvShape& s, float* scratch) {
    const int rows = s.col_rows(), pixels = s.col_cols();
    const size_t in_stride = size_t(s.c) * s.h * s.w;
    const Unfolded offsets(unpadded(s), conv_group_size(s), offsets_room(s, scratch));
    for_each_group(s, scratch, [&](const Group& g) {
        const float* xg = padded_group(g.col, x + g.first * in_stride, s, g.count);
        // out (oc, cols) = or += w (oc, K) . unfolded group (K, cols)
        auto product = [&](float* out, bool accumulate) {
            detail::gemm_driver(out, w, false, s.oc, g.cols, rows,
                                [&](float* dst, int k0, int kc, int j0, int nc) {
                                    pack_gathered(dst, xg, offsets.tap, offsets.pixel, k0, kc, j0, nc);
                                },
                                accumulate);
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

void conv2d_backward_data_gemm(float* dx, const float* dy, const float* w,
                               const ConvShape& s, float* scratch) {
    const int rows = s.col_rows(), pixels = s.col_cols();
    const size_t in_stride = size_t(s.c) * s.h * s.w;
    const bool in_registers = fold_in_registers(s);
    if (!in_registers) std::memset(dx, 0, s.in_size() * sizeof(float));
    for_each_group(s, scratch, [&](const Group& g) {
        const float* dyg = group_dy(dy, s, g);
        gemm(g.col, w, dyg, rows, g.cols, s.oc, true, false, false);  // dcol (K, cols) = w^T (K, oc) . dy (oc, cols)
        if (in_registers) return col2im_rows(dx + g.first * in_stride, g.col, g.count, s, g.cols);
        for (int j = 0; j < g.count; ++j) col2im(dx + (g.first + j) * in_stride, g.col + size_t(j) * pixels, s, g.cols);
    });
}

void conv2d_backward_weight_gemm(float* dw, float* db, const float* dy, const float* x,
                                 const ConvShape& s, float* scratch) {
    const int rows = s.col_rows();
    const size_t in_stride = size_t(s.c) * s.h * s.w;
    const Unfolded offsets(unpadded(s), conv_group_size(s), offsets_room(s, scratch));
    for_each_group(s, scratch, [&](const Group& g) {
        const float* xg = padded_group(g.col, x + g.first * in_stride, s, g.count);
        const float* dyg = group_dy(dy, s, g);
        // dw (oc, K) += dy (oc, cols) . unfolded^T (cols, K)
        detail::gemm_driver(dw, dyg, false, s.oc, rows, g.cols,
                            [&](float* dst, int k0, int kc, int j0, int nc) {
                                pack_gathered(dst, xg, offsets.pixel, offsets.tap, k0, kc, j0, nc);
                            },
                            true);
        for (int o = 0; o < s.oc; ++o) {
            const float* row = dyg + size_t(o) * g.cols;
            float sum = 0.0f;
            for (int p = 0; p < g.cols; ++p) sum += row[p];
            db[o] += sum;
        }
    });
}

namespace {
// Math::tf32: the rounded operands' room, after the FP32 kernels' scratch.
size_t tf32_operand_floats(const ConvShape& s) { return s.in_size() + s.out_size() + s.weight_size() + size_t(s.oc); }
}  // namespace

// The three kernels take Winograd's F(m x m, 3x3) where it fits, with the
// largest tile that does (winograd.cpp), direct sums over a one-channel
// input (conv_direct.cpp), for 5x5 filters Winograd's F(3x3, 5x5) in the
// vector lanes where the outputs are whole 3x3 tiles (winograd_lanes.cpp)
// and direct sums in the lanes elsewhere (conv_lanes.cpp), the implicit
// GEMM for the rest. The scratch space also holds the smaller tiles'
// and the lanes' needs, so that the tests and the benchmarks can run every
// algorithm that fits over the same buffer.
size_t conv2d_scratch_floats(const ConvShape& s) {
    size_t floats = conv2d_gemm_scratch_floats(s);
    if (direct_conv_fits(s)) floats = std::max(floats, direct_conv_scratch_floats(s));
    if (lanes_conv_fits(s, ConvPass::data)) floats = std::max(floats, lanes_conv_scratch_floats(s));
    if (winograd5_fits(s)) floats = std::max(floats, winograd5_scratch_floats(s));
    for (int tile : {2, 3, 4})
        if (winograd_tile_fits(s, tile)) floats = std::max(floats, winograd_scratch_floats(s, tile));
    if (s.math == Math::tf32) floats += tf32_operand_floats(s);
    return floats;
}

// Math::tf32 (kernels.hpp): the operands rounded into the end of scratch,
// the FP32 kernel on them, its own scratch first.
namespace {
struct Tf32Operands {
    ConvShape fp32;
    float *x, *dy, *w, *bias;  // rounded x, rounded dy, rounded w, a bias gradient to discard
    Tf32Operands(const ConvShape& s, float* scratch) : fp32(s) {
        fp32.math = Math::fp32;
        x = scratch + conv2d_scratch_floats(fp32);
        dy = x + s.in_size();
        w = dy + s.out_size();
        bias = w + s.weight_size();
    }
};
}  // namespace

namespace {
// conv2d_forward, and with relu its ReLU: applied as each output is stored
// where the convolution runs as direct sums, else in a pass after it.
void forward(float* y, const float* x, const float* w, const float* b, const ConvShape& s, float* scratch,
             bool relu) {
    if (s.math == Math::tf32) {
        const Tf32Operands r(s, scratch);
        round_to_tf32(r.x, x, s.in_size());
        round_to_tf32(r.w, w, s.weight_size());
        return forward(y, r.x, r.w, b, r.fp32, scratch, relu);
    }
    if (const int tile = winograd_tile(s)) winograd_forward(y, x, w, b, s, scratch, tile);
    else if (direct_conv_fits(s)) return direct_conv_forward(y, x, w, b, s, relu);
    else if (winograd5_fits(s)) return winograd5_forward(y, x, w, b, s, scratch, relu);
    else if (lanes_conv_fits(s, ConvPass::forward)) return lanes_conv_forward(y, x, w, b, s, scratch, relu);
    else conv2d_forward_gemm(y, x, w, b, s, scratch);
    if (relu) relu_forward(y, y, s.out_size());
}
}  // namespace

void conv2d_forward(float* y, const float* x, const float* w, const float* b, const ConvShape& s, float* scratch) {
    forward(y, x, w, b, s, scratch, false);
}

void conv2d_forward_relu(float* y, const float* x, const float* w, const float* b, const ConvShape& s,
                         float* scratch) {
    forward(y, x, w, b, s, scratch, true);
}

void conv2d_forward_relu_pool(float* y, float* pooled, const float* x, const float* w, const float* b,
                              const ConvShape& s, PoolKind kind, const PoolShape& ps, float* scratch) {
    if (s.math == Math::fp32 && direct_pool_fits(s, kind, ps)) return direct_conv_forward_relu_pool(y, pooled, x, w, b, s);
    if (s.math == Math::fp32 && winograd5_fits(s) && averages_by_two(s, kind, ps))
        return winograd5_forward(y, x, w, b, s, scratch, true, pooled);
    conv2d_forward_relu(y, x, w, b, s, scratch);
    pool2d_forward(pooled, y, kind, ps);
}

void conv2d_backward_data(float* dx, const float* dy, const float* w, const ConvShape& s, float* scratch) {
    if (s.math == Math::tf32) {
        const Tf32Operands r(s, scratch);
        round_to_tf32(r.dy, dy, s.out_size());
        round_to_tf32(r.w, w, s.weight_size());
        return conv2d_backward_data(dx, r.dy, r.w, r.fp32, scratch);
    }
    if (const int tile = winograd_tile(s)) return winograd_backward_data(dx, dy, w, s, scratch, tile);
    if (direct_conv_fits(s)) return direct_conv_backward_data(dx, dy, w, s, scratch);
    if (winograd5_fits(s)) return winograd5_backward_data(dx, dy, w, s, scratch);
    if (lanes_conv_fits(s, ConvPass::data)) return lanes_conv_backward_data(dx, dy, w, s, scratch);
    conv2d_backward_data_gemm(dx, dy, w, s, scratch);
}

void conv2d_backward_weight(float* dw, float* db, const float* dy, const float* x, const ConvShape& s,
                            float* scratch) {
    if (s.math == Math::tf32) {
        const Tf32Operands r(s, scratch);
        round_to_tf32(r.dy, dy, s.out_size());
        round_to_tf32(r.x, x, s.in_size());
        std::fill(r.bias, r.bias + s.oc, 0.0f);
        conv2d_backward_weight(dw, r.bias, r.dy, r.x, r.fp32, scratch);
        const size_t pixels = size_t(s.oh()) * s.ow();
        for (int o = 0; o < s.oc; ++o) {  // the bias from the unrounded dy, sample by sample
            float sum = 0.0f;
            for (int i = 0; i < s.n; ++i) {
                const float* row = dy + (size_t(i) * s.oc + o) * pixels;
                for (size_t p = 0; p < pixels; ++p) sum += row[p];
            }
            db[o] += sum;
        }
        return;
    }
    if (const int tile = winograd_tile(s)) return winograd_backward_weight(dw, db, dy, x, s, scratch, tile);
    if (direct_conv_fits(s)) return direct_conv_backward_weight(dw, db, dy, x, s);
    if (winograd5_fits(s)) return winograd5_backward_weight(dw, db, dy, x, s, scratch);
    if (lanes_conv_fits(s, ConvPass::weight)) return lanes_conv_backward_weight(dw, db, dy, x, s, scratch);
    conv2d_backward_weight_gemm(dw, db, dy, x, s, scratch);
}

void conv2d_backward_weight_pool(float* dw, float* db, float* dy, const float* d_pooled, const float* x,
                                 const float* y, const float* pooled, const ConvShape& s, PoolKind kind,
                                 const PoolShape& ps, float* scratch) {
    if (s.math == Math::fp32 && direct_pool_fits(s, kind, ps))
        return direct_conv_backward_weight_pool(dw, db, d_pooled, x, y, s);
    pool2d_backward_relu(dy, d_pooled, y, pooled, kind, ps);
    conv2d_backward_weight(dw, db, dy, x, s, scratch);
}

}  // namespace dpt::cpu
