// Winograd's F(2x2, 3x3): ResNet-18's 3x3 convolutions of stride 1 and
// padding 1 on 12x12 and 6x6 maps in 16 multiplications per 2x2 output tile
// and channel pair instead of 36. Called by conv.cpp, which takes the implicit
// GEMM for every other shape. CUDA twin: none needed, the CUDA conv computes
// the same function directly (the twins agree to rounding, not to the bit).
//
// Forward, per output tile t (a 2x2 block of y) and channel pair (i in, o out):
//   y_t[o] = A^T [ sum_i V_t[i] (.) U[i][o] ] A,  V = B^T d B,  U = G g G^T,
// with d the 4x4 input patch around the tile, g the 3x3 filter w[o][i] and
// (.) the elementwise product. Written as 16 GEMMs, one per element xi of
// the 4x4 transformed tile: M_xi (tiles, out) = V_xi (tiles, in) . U_xi (in, out).
//   - the data gradient is the same convolution of dy with every filter
//     turned by 180 degrees and the channels swapped (stride 1, padding 1);
//   - the weight gradient follows from the adjoint of each linear map:
//     dU_xi (in, out) = V_xi^T . dM_xi, dM = A dy_t A^T, and dg = G^T dU G.
// With B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], G = [1 0 0; .5 .5 .5;
// .5 -.5 .5; 0 0 1] and A^T = [1 1 1 0; 0 1 -1 -1], every transform is
// additions and halvings, so the results stay within a few float roundings
// of the direct sums (tests/test_winograd.cpp bounds the difference).
//
// The transforms run channels last: a group of images is first copied to
// (sample, row, column, channel) with a zero border, so that every step of
// a transform is the same arithmetic over a contiguous run of channels, which
// the compiler turns into vector instructions. (Over NCHW images the 2x2
// tiles step through every row two columns at a time, and the same
// transforms, left scalar, took as long as half the GEMMs.)
#include "winograd.hpp"

#include <algorithm>
#include <type_traits>

#include "gemm_driver.hpp"
#include "kernels.hpp"

namespace dpt::cpu {
namespace {

constexpr int kTile = 16;  // elements of a transformed 4x4 tile

// 2x2 output tiles of a sample (the output is as large as the input).
int tiles_per_sample(const ConvShape& s) { return (s.h / 2) * (s.w / 2); }

// Samples transformed together: about 256 tiles, so that the GEMMs see
// enough rows while one group's transformed tensors stay near L2 (64
// to 1024 tiles measured; 128 and 256 were best).
int group_size(const ConvShape& s) { return std::clamp(256 / tiles_per_sample(s), 1, std::max(s.n, 1)); }

// The distance between two of the 16 planes of a transformed tensor, for
// planes of `floats`: a multiple of 4 KiB plus 256 bytes. The transforms
// read or write all 16 planes at once, and planes 4 KiB apart would all fall
// in the same L1 cache set (8 ways) and evict each other.
size_t plane_stride(size_t floats) { return (floats + 1023) / 1024 * 1024 + 64; }

// The scratch space's parts: the transformed filters u (16 planes of in x
// out channels), the transformed inputs v (16 planes of tiles x in
// channels), the transformed outputs m (16 planes of tiles x out channels),
// and a group's images channels last (inputs with their zero border, later
// outputs). `filters` and `planes` are the plane strides.
struct Layout {
    float *u, *v, *m, *images;
    size_t filters, planes;
    Layout(const ConvShape& s, float* scratch) {
        const size_t tiles = size_t(group_size(s)) * tiles_per_sample(s);
        filters = plane_stride(size_t(s.oc) * s.c);
        planes = plane_stride(tiles * std::max(s.c, s.oc));
        u = scratch;
        v = u + kTile * filters;
        m = v + kTile * planes;
        images = m + kTile * planes;
    }
    static size_t image_floats(const ConvShape& s) {
        return size_t(group_size(s)) * (s.h + 2) * (s.w + 2) * std::max(s.c, s.oc);
    }
};

// U_xi[i][o] = (G g G^T)_xi for the filter g = w[o][i] (3x3), or, when
// `turned`, for w[i][o] turned by 180 degrees (the data gradient's filters:
// `outs` is then the forward's input channels, `ins` its output channels).
void transform_filters(float* u, size_t plane, const float* w, int outs, int ins, bool turned) {
    for (int o = 0; o < outs; ++o)
        for (int i = 0; i < ins; ++i) {
            float g[3][3];
            const float* src = turned ? w + (size_t(i) * outs + o) * 9 : w + (size_t(o) * ins + i) * 9;
            for (int r = 0; r < 3; ++r)
                for (int c = 0; c < 3; ++c) g[r][c] = turned ? src[(2 - r) * 3 + (2 - c)] : src[r * 3 + c];
            float p[4][3];  // G g
            for (int c = 0; c < 3; ++c) {
                p[0][c] = g[0][c];
                p[1][c] = 0.5f * (g[0][c] + g[1][c] + g[2][c]);
                p[2][c] = 0.5f * (g[0][c] - g[1][c] + g[2][c]);
                p[3][c] = g[2][c];
            }
            float* dst = u + size_t(i) * outs + o;
            for (int r = 0; r < 4; ++r) {  // (G g) G^T
                dst[(r * 4 + 0) * plane] = p[r][0];
                dst[(r * 4 + 1) * plane] = 0.5f * (p[r][0] + p[r][1] + p[r][2]);
                dst[(r * 4 + 2) * plane] = 0.5f * (p[r][0] - p[r][1] + p[r][2]);
                dst[(r * 4 + 3) * plane] = p[r][2];
            }
        }
}

// dst (count, h + 2 border, w + 2 border, channels) = x (count, channels, h, w),
// border zero; border 0 copies without one.
void to_channels_last(float* dst, const float* x, int count, int channels, int h, int w, int border) {
    const int ph = h + 2 * border, pw = w + 2 * border;
    if (border) std::fill(dst, dst + size_t(count) * ph * pw * channels, 0.0f);
    for (int j = 0; j < count; ++j)
        for (int ch = 0; ch < channels; ++ch) {
            const float* src = x + (size_t(j) * channels + ch) * h * w;
            float* out = dst + (size_t(j) * ph + border) * pw * channels + size_t(border) * channels + ch;
            for (int y = 0; y < h; ++y)
                for (int col = 0; col < w; ++col) out[(size_t(y) * pw + col) * channels] = src[y * w + col];
        }
}

// y (count, channels, h, w) = images (count, h, w, channels) + bias.
void from_channels_last(float* y, const float* images, const float* bias, int count, int channels, int h, int w) {
    const int pixels = h * w;
    for (int j = 0; j < count; ++j)
        for (int ch = 0; ch < channels; ++ch) {
            const float b = bias ? bias[ch] : 0.0f;
            const float* src = images + size_t(j) * pixels * channels + ch;
            float* out = y + (size_t(j) * channels + ch) * pixels;
            for (int p = 0; p < pixels; ++p) out[p] = src[size_t(p) * channels] + b;
        }
}

// Each transform below walks the tiles and, for each, runs one small kernel
// over blocks of `lanes` channels (a compile-time count, so each of its
// loops is one vector instruction), then over the channels left over.
constexpr int lanes = detail::lanes;

template <class Kernel>
void over_channel_blocks(int channels, Kernel kernel) {
    int ch = 0;
    for (; ch + lanes <= channels; ch += lanes) kernel(ch, std::integral_constant<int, lanes>{});
    if (ch < channels) kernel(ch, channels - ch);
}

// V_xi[t][ch] = (B^T d B)_xi from padded images (count, h + 2, w + 2,
// channels), tile t = sample * tiles_per_sample + ty * (w / 2) + tx, whose
// patch d starts at padded row 2ty, column 2tx.
void transform_inputs(float* v, size_t plane, const float* images, int count, int channels, int h, int w) {
    const int th = h / 2, tw = w / 2;
    const size_t row = size_t(w + 2) * channels;
    for (int j = 0; j < count; ++j)
        for (int ty = 0; ty < th; ++ty)
            for (int tx = 0; tx < tw; ++tx) {
                const float* d = images + (size_t(j) * (h + 2) + 2 * ty) * row + size_t(2 * tx) * channels;
                float* out = v + (size_t(j) * th * tw + size_t(ty) * tw + tx) * channels;
                over_channel_blocks(channels, [&](int ch, auto n) {
                    float t[4][4][lanes];  // B^T d: row combinations
                    for (int c = 0; c < 4; ++c) {
                        const float* d0 = d + c * channels + ch;
                        const float *d1 = d0 + row, *d2 = d0 + 2 * row, *d3 = d0 + 3 * row;
                        for (int l = 0; l < n; ++l) {
                            t[0][c][l] = d0[l] - d2[l];
                            t[1][c][l] = d1[l] + d2[l];
                            t[2][c][l] = d2[l] - d1[l];
                            t[3][c][l] = d1[l] - d3[l];
                        }
                    }
                    for (int r = 0; r < 4; ++r) {  // (B^T d) B: column combinations
                        float* o = out + size_t(r * 4) * plane + ch;
                        for (int l = 0; l < n; ++l) {
                            o[l] = t[r][0][l] - t[r][2][l];
                            o[plane + l] = t[r][1][l] + t[r][2][l];
                            o[2 * plane + l] = t[r][2][l] - t[r][1][l];
                            o[3 * plane + l] = t[r][1][l] - t[r][3][l];
                        }
                    }
                });
            }
}

// images (count, h, w, channels) = A^T M_t A for every tile.
void transform_outputs(float* images, const float* m, size_t plane, int count, int channels, int h, int w) {
    const int th = h / 2, tw = w / 2;
    const size_t row = size_t(w) * channels;
    for (int j = 0; j < count; ++j)
        for (int ty = 0; ty < th; ++ty)
            for (int tx = 0; tx < tw; ++tx) {
                const float* src = m + (size_t(j) * th * tw + size_t(ty) * tw + tx) * channels;
                float* out = images + (size_t(j) * h + 2 * ty) * row + size_t(2 * tx) * channels;
                over_channel_blocks(channels, [&](int ch, auto n) {
                    float q[2][4][lanes];  // A^T M
                    for (int c = 0; c < 4; ++c) {
                        const float* e0 = src + c * plane + ch;
                        const float *e1 = e0 + 4 * plane, *e2 = e0 + 8 * plane, *e3 = e0 + 12 * plane;
                        for (int l = 0; l < n; ++l) {
                            q[0][c][l] = e0[l] + e1[l] + e2[l];
                            q[1][c][l] = e1[l] - e2[l] - e3[l];
                        }
                    }
                    for (int r = 0; r < 2; ++r) {  // (A^T M) A
                        float* o = out + r * row + ch;
                        for (int l = 0; l < n; ++l) {
                            o[l] = q[r][0][l] + q[r][1][l] + q[r][2][l];
                            o[channels + l] = q[r][1][l] - q[r][2][l] - q[r][3][l];
                        }
                    }
                });
            }
}

// dM_xi[t][ch] = (A dy_t A^T)_xi from dy channels last (count, h, w,
// channels): the adjoint of transform_outputs.
void transform_output_gradients(float* dm, size_t plane, const float* images, int count, int channels, int h,
                                int w) {
    const int th = h / 2, tw = w / 2;
    const size_t row = size_t(w) * channels;
    for (int j = 0; j < count; ++j)
        for (int ty = 0; ty < th; ++ty)
            for (int tx = 0; tx < tw; ++tx) {
                const float* dy = images + (size_t(j) * h + 2 * ty) * row + size_t(2 * tx) * channels;
                float* out = dm + (size_t(j) * th * tw + size_t(ty) * tw + tx) * channels;
                over_channel_blocks(channels, [&](int ch, auto n) {
                    const float *a = dy + ch, *b = a + channels, *c = a + row, *d = c + channels;
                    float p[4][2][lanes];  // A dy
                    for (int l = 0; l < n; ++l) {
                        p[0][0][l] = a[l];
                        p[0][1][l] = b[l];
                        p[1][0][l] = a[l] + c[l];
                        p[1][1][l] = b[l] + d[l];
                        p[2][0][l] = a[l] - c[l];
                        p[2][1][l] = b[l] - d[l];
                        p[3][0][l] = -c[l];
                        p[3][1][l] = -d[l];
                    }
                    for (int r = 0; r < 4; ++r) {  // (A dy) A^T
                        float* o = out + size_t(r * 4) * plane + ch;
                        for (int l = 0; l < n; ++l) {
                            o[l] = p[r][0][l];
                            o[plane + l] = p[r][0][l] + p[r][1][l];
                            o[2 * plane + l] = p[r][0][l] - p[r][1][l];
                            o[3 * plane + l] = -p[r][1][l];
                        }
                    }
                });
            }
}

// dw[o][i] += G^T dU_(i,o) G: the adjoint of transform_filters.
void add_filter_gradients(float* dw, const float* du, size_t plane, int outs, int ins) {
    for (int o = 0; o < outs; ++o)
        for (int i = 0; i < ins; ++i) {
            const float* src = du + size_t(i) * outs + o;
            float e[16];
            for (int xi = 0; xi < kTile; ++xi) e[xi] = src[xi * plane];
            float q[3][4];  // G^T dU
            for (int c = 0; c < 4; ++c) {
                q[0][c] = e[c] + 0.5f * (e[4 + c] + e[8 + c]);
                q[1][c] = 0.5f * (e[4 + c] - e[8 + c]);
                q[2][c] = 0.5f * (e[4 + c] + e[8 + c]) + e[12 + c];
            }
            float* g = dw + (size_t(o) * ins + i) * 9;
            for (int r = 0; r < 3; ++r) {  // (G^T dU) G
                g[r * 3 + 0] += q[r][0] + 0.5f * (q[r][1] + q[r][2]);
                g[r * 3 + 1] += 0.5f * (q[r][1] - q[r][2]);
                g[r * 3 + 2] += 0.5f * (q[r][1] + q[r][2]) + q[r][3];
            }
        }
}

// out (n, outs, h, w) = the 3x3 stride-1 padding-1 convolution of in (n, ins,
// h, w) whose transformed filters are in at.u, plus bias if given.
void convolve(float* out, const float* in, const float* bias, int outs, int ins, const ConvShape& s,
              const Layout& at) {
    const int size = group_size(s), per_sample = tiles_per_sample(s), pixels = s.h * s.w;
    for (int first = 0; first < s.n; first += size) {
        const int count = std::min(size, s.n - first), tiles = count * per_sample;
        to_channels_last(at.images, in + size_t(first) * ins * pixels, count, ins, s.h, s.w, 1);
        transform_inputs(at.v, at.planes, at.images, count, ins, s.h, s.w);
        for (int xi = 0; xi < kTile; ++xi)  // M_xi (tiles, outs) = V_xi (tiles, ins) . U_xi (ins, outs)
            gemm(at.m + xi * at.planes, at.v + xi * at.planes, at.u + xi * at.filters, tiles, outs, ins, false,
                 false, false);
        transform_outputs(at.images, at.m, at.planes, count, outs, s.h, s.w);
        from_channels_last(out + size_t(first) * outs * pixels, at.images, bias, count, outs, s.h, s.w);
    }
}

}  // namespace

bool winograd_fits(const ConvShape& s) {
    // Even sides: whole tiles, 16 products for 4 pixels against 36. On an odd
    // side the last tiles hang over the edge and both the saving and the
    // transforms' overhead go the wrong way: ResNet-18's 3x3 maps (4 tiles,
    // 64 products against 81, the transformed tensors 7 times the input)
    // measured 1.3x slower than the implicit GEMM.
    return s.kh == 3 && s.kw == 3 && s.stride == 1 && s.pad == 1 && s.h > 0 && s.w > 0 && s.h % 2 == 0 &&
           s.w % 2 == 0;
}

size_t winograd_scratch_floats(const ConvShape& s) {
    const size_t tiles = size_t(group_size(s)) * tiles_per_sample(s);
    return kTile * (plane_stride(size_t(s.oc) * s.c) + 2 * plane_stride(tiles * std::max(s.c, s.oc))) +
           Layout::image_floats(s);
}

void winograd_forward(float* y, const float* x, const float* w, const float* b, const ConvShape& s, float* scratch) {
    const Layout at(s, scratch);
    transform_filters(at.u, at.filters, w, s.oc, s.c, false);
    convolve(y, x, b, s.oc, s.c, s, at);
}

void winograd_backward_data(float* dx, const float* dy, const float* w, const ConvShape& s, float* scratch) {
    const Layout at(s, scratch);
    transform_filters(at.u, at.filters, w, s.c, s.oc, true);
    convolve(dx, dy, nullptr, s.c, s.oc, s, at);
}

void winograd_backward_weight(float* dw, float* db, const float* dy, const float* x, const ConvShape& s,
                              float* scratch) {
    if (s.n <= 0) return;
    const Layout at(s, scratch);
    const int size = group_size(s), per_sample = tiles_per_sample(s), pixels = s.h * s.w;
    for (int first = 0; first < s.n; first += size) {
        const int count = std::min(size, s.n - first), tiles = count * per_sample;
        to_channels_last(at.images, x + size_t(first) * s.c * pixels, count, s.c, s.h, s.w, 1);
        transform_inputs(at.v, at.planes, at.images, count, s.c, s.h, s.w);
        to_channels_last(at.images, dy + size_t(first) * s.oc * pixels, count, s.oc, s.h, s.w, 0);
        transform_output_gradients(at.m, at.planes, at.images, count, s.oc, s.h, s.w);
        // dU_xi (c, oc) (+)= V_xi^T (c, tiles) . dM_xi (tiles, oc), summed over the groups.
        for (int xi = 0; xi < kTile; ++xi)
            gemm(at.u + xi * at.filters, at.v + xi * at.planes, at.m + xi * at.planes, s.c, s.oc, tiles, true, false,
                 first > 0);
    }
    add_filter_gradients(dw, at.u, at.filters, s.oc, s.c);
    for (int o = 0; o < s.oc; ++o) {
        float sum = 0.0f;
        for (int j = 0; j < s.n; ++j) {
            const float* plane = dy + (size_t(j) * s.oc + o) * pixels;
            for (int p = 0; p < pixels; ++p) sum += plane[p];
        }
        db[o] += sum;
    }
}

}  // namespace dpt::cpu
