// Winograd's F(m x m, 3x3): ResNet-18's 3x3 convolutions of stride 1 and
// padding 1 with (m + 2)^2 multiplications per m x m output tile and channel
// pair instead of 9 m^2: for m = 2, 3, 4, that is 16 for 4 outputs, 25 for 9
// and 36 for 16. Called by conv.cpp, which takes the implicit GEMM for every
// other shape. CUDA twin: none needed, the CUDA conv computes the same
// function directly (the twins agree to rounding, not to the bit).
//
// Forward, per output tile t (an m x m block of y) and channel pair (i in,
// o out), with n = m + 2:
//   y_t[o] = A^T [ sum_i V_t[i] (.) U[i][o] ] A,  V = B^T d B,  U = G g G^T,
// with d the n x n input patch around the tile, g the 3x3 filter w[o][i] and
// (.) the elementwise product. Written as n^2 GEMMs, one per element xi of
// the transformed tile: M_xi (tiles, out) = V_xi (tiles, in) . U_xi (in, out).
//   - the data gradient is the same convolution of dy with every filter
//     turned by 180 degrees and the channels swapped (stride 1, padding 1);
//   - the weight gradient follows from the adjoint of each linear map:
//     dU_xi (in, out) = V_xi^T . dM_xi, dM = A dy_t A^T, and dg = G^T dU G.
//
// The matrices (struct Tiles below) come from Toom-Cook: the product of two
// polynomials evaluated at n points (the last one infinity) and interpolated
// back. The points set how far the transforms amplify rounding, so each
// tile uses small ones: 0, 1, -1 for m = 2 (additions and halvings only);
// then -2 for m = 3; 1/2 and -2 for m = 4 (rounding about 5 and 7 times the
// m = 2 case's; tests/test_winograd.cpp bounds each against the direct sums).
// Of these points' alternatives (2, -1/2, 1/2 for m = 3; +-2, +-1/2, 2 and
// -1/2 for m = 4), none measured smaller rounding in float.
//
// The transforms run over a vector of channels at a time: every step of a
// transform is the same arithmetic over a contiguous run of channels, one
// vector instruction for 16 channels (combine). (Over NCHW images the tiles
// step through every row m columns at a time, and the same transforms, left
// scalar, took as long as half the GEMMs.) So a group of input images is
// first copied to (sample, row, column, channel) with a zero border; the
// outputs (and the output gradients, for the weight gradient) are written
// (read) in NCHW a tile at a time, each block of channels transposed in
// registers (TileRows). (The input patches overlap and, on ResNet-18's
// 12x12 maps, 8 tiles of 9 touch the border: read from NCHW the same way,
// they took longer than the copy.)
#include "winograd.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>

#include "gemm_driver.hpp"
#include "kernels.hpp"

namespace dpt::cpu {
namespace {

template <size_t Rows, size_t Cols>
using Matrix = std::array<std::array<float, Cols>, Rows>;

template <size_t Rows, size_t Cols>
constexpr Matrix<Cols, Rows> transposed(const Matrix<Rows, Cols>& a) {
    Matrix<Cols, Rows> t{};
    for (size_t r = 0; r < Rows; ++r)
        for (size_t c = 0; c < Cols; ++c) t[c][r] = a[r][c];
    return t;
}

// F(M x M, 3x3): the input transform B^T (n x n), the filter transform G
// (n x 3) and the output transform A^T (M x n), with n = M + 2 points.
template <int M>
struct Tiles;

template <>
struct Tiles<2> {  // points 0, 1, -1, infinity
    static constexpr int m = 2, n = 4;
    static constexpr Matrix<4, 4> BT{{{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}}};
    static constexpr Matrix<4, 3> G{{{1, 0, 0}, {.5f, .5f, .5f}, {.5f, -.5f, .5f}, {0, 0, 1}}};
    static constexpr Matrix<2, 4> AT{{{1, 1, 1, 0}, {0, 1, -1, -1}}};
};

template <>
struct Tiles<3> {  // points 0, 1, -1, -2, infinity
    static constexpr int m = 3, n = 5;
    static constexpr Matrix<5, 5> BT{
        {{2, 1, -2, -1, 0}, {0, 2, 3, 1, 0}, {0, -2, 1, 1, 0}, {0, -1, 0, 1, 0}, {0, -2, -1, 2, 1}}};
    static constexpr Matrix<5, 3> G{{{.5f, 0, 0},
                                     {1.0f / 6, 1.0f / 6, 1.0f / 6},
                                     {.5f, -.5f, .5f},
                                     {-1.0f / 6, 1.0f / 3, -2.0f / 3},
                                     {0, 0, 1}}};
    static constexpr Matrix<3, 5> AT{{{1, 1, 1, 1, 0}, {0, 1, -1, -2, 0}, {0, 1, 1, 4, 1}}};
};

template <>
struct Tiles<4> {  // points 0, 1, -1, 1/2, -2, infinity
    static constexpr int m = 4, n = 6;
    static constexpr Matrix<6, 6> BT{{{1, -1.5f, -2, 1.5f, 1, 0},
                                      {0, -1, .5f, 2.5f, 1, 0},
                                      {0, 1, -2.5f, .5f, 1, 0},
                                      {0, -2, -1, 2, 1, 0},
                                      {0, .5f, -1, -.5f, 1, 0},
                                      {0, 1, -1.5f, -2, 1.5f, 1}}};
    static constexpr Matrix<6, 3> G{{{1, 0, 0},
                                     {1.0f / 3, 1.0f / 3, 1.0f / 3},
                                     {-1.0f / 3, 1.0f / 3, -1.0f / 3},
                                     {-16.0f / 15, -8.0f / 15, -4.0f / 15},
                                     {1.0f / 15, -2.0f / 15, 4.0f / 15},
                                     {0, 0, 1}}};
    static constexpr Matrix<4, 6> AT{{{1, 1, 1, 1, 1, 0}, {0, 1, -1, .5f, -2, 0}, {0, 1, 1, .25f, 4, 0},
                                      {0, 1, -1, .125f, -8, 1}}};
};

// The adjoints' matrices: A (n x m) and G^T (3 x n). Static, like the
// others: a matrix local to a function is read from the stack at run time,
// every test on its entries with it.
template <class T>
struct Transposed {
    static constexpr auto A = transposed(T::AT);
    static constexpr auto GT = transposed(T::G);
};

// Each transform below walks the tiles and, for each, runs one small kernel
// over blocks of `lanes` channels (a compile-time count: combine then works
// on whole vectors), then over the channels left over, one at a time.
constexpr int lanes = detail::lanes;

template <class Kernel>
void over_channel_blocks(int channels, Kernel kernel) {
    int ch = 0;
    for (; ch + lanes <= channels; ch += lanes) kernel(ch, std::integral_constant<int, lanes>{});
    if (ch < channels) kernel(ch, channels - ch);
}

// `lanes` floats as one vector register (GCC's vector extension), read
// and written where a float may be (aligned as a float; through a float
// type, so that the compiler still knows a store cannot change an int or a
// pointer: memcpy would have it reload every captured variable).
typedef float Vector __attribute__((vector_size(lanes * sizeof(float)), aligned(alignof(float))));

// A vector (`block`) or a float at p.
template <bool block>
[[gnu::always_inline]] inline auto load(const float* p) {
    if constexpr (block) return *reinterpret_cast<const Vector*>(p);
    else return *p;
}
template <bool block, class Value>
[[gnu::always_inline]] inline void store(float* p, Value value) {
    if constexpr (block) *reinterpret_cast<Vector*>(p) = value;
    else *p = value;
}

// out(r)[l] = sum over k of a[r][k] * in(k)[l], for every row r of a and
// l < count (at most `lanes`): one row of a matrix product, over a run of
// channels. Zero entries are skipped, the first term starts the sum, and
// entries of 1 and -1 add and subtract: once inlined and unrolled, `a` is a
// constant and every test on its entries disappears. A whole block of
// `lanes` channels is computed in the vector type, so that each step is one
// instruction whatever the vectoriser makes of the loops around it.
template <size_t Rows, size_t Cols, class In, class Out, class Count>
[[gnu::always_inline]] inline void combine(const Matrix<Rows, Cols>& a, In in, Out out, Count count) {
    constexpr bool block = std::is_same_v<Count, std::integral_constant<int, lanes>>;
    using Value = decltype(load<block>(nullptr));  // what a step computes: the block or one channel
    for (int l = 0; l < (block ? 1 : int(count)); ++l) {
#pragma GCC unroll 8
        for (size_t r = 0; r < Rows; ++r) {
            Value sum{};
            bool started = false;
#pragma GCC unroll 8
            for (size_t k = 0; k < Cols; ++k) {
                const float c = a[r][k];
                if (c == 0) continue;
                const Value x = load<block>(in(k) + l);
                if (!started) sum = c == 1 ? x : c == -1 ? -x : c * x;
                else if (c == 1) sum += x;
                else if (c == -1) sum -= x;
                else sum += c * x;
                started = true;
            }
            store<block>(out(r) + l, sum);
        }
    }
}

template <class T>
int tiles_per_sample(const ConvShape& s) {
    return (s.h / T::m) * (s.w / T::m);
}

// Samples transformed together. Each group's GEMMs read all of U (the
// transformed filters) once, and its transformed inputs and outputs (V
// and M) twice; so a group's V and M take about as much room as U, and at
// least 512 KB: 27 tiles of ResNet-18's 64-channel 12x12 maps (whose U,
// 590 KB, stays in L2 while the group's 0.5 MB do), 64 of its 128-channel
// 6x6 maps, 128 of its 256-channel 3x3 maps (U 6.5 MB). With 256 tiles for
// every shape the 64-channel products ran from L3 (build/bench/conv_cpu
// 128, F(4x4): 4.06, 4.04, 4.82 ms forward, data and weight gradient;
// 3.36, 3.32, 3.72 so), and with 0.5 MB for every shape the 256-channel
// ones read U from L3 once a few samples (5.25 ms forward instead of 4.1).
template <class T>
int group_size(const ConvShape& s) {
    constexpr long points = long(T::n) * T::n, least = 512 * 1024;
    const long per_tile = points * (s.c + s.oc) * long(sizeof(float));
    const long room = std::max(least, points * s.c * s.oc * long(sizeof(float)));
    const int tiles = int(std::clamp(room / std::max(per_tile, 1L), 16L, 256L));
    return std::clamp(tiles / tiles_per_sample<T>(s), 1, std::max(s.n, 1));
}

// The distance between two of the n^2 planes of a transformed tensor, for
// planes of `floats`: a multiple of 4,096 bytes plus 256. The transforms
// read or write all planes at once, and planes 4,096 bytes apart would all fall
// in the same L1 cache set (8 ways) and evict each other.
size_t plane_stride(size_t floats) { return (floats + 1023) / 1024 * 1024 + 64; }

// The scratch space's parts: the transformed filters u (n^2 planes of in x
// out channels) and, where they fit one block of the GEMM's B (at most
// KC = 256 channels in), the same packed as its panels (`packed`: packed
// once a call, not once a group); the transformed inputs v (n^2 planes of
// tiles x in channels), the transformed outputs m (n^2 planes of tiles x
// out channels), a group's input images channels last with their zero
// border, the filters' taps (in, 9, out), output channels along a row, and
// the bias gradient's sums. `filters`, `panels` and `planes` are the plane
// strides (`panels` 0 where u is not packed).
template <class T>
struct Layout {
    static constexpr int points = T::n * T::n;
    float *u, *packed, *v, *m, *images, *taps, *bias;
    size_t filters, planes, panels;
    Layout(const ConvShape& s, float* scratch)
        : filters(filter_stride(s)), planes(tile_stride(s)), panels(panel_stride(s)) {
        u = scratch;
        packed = u + points * filters;
        v = packed + points * panels;
        m = v + points * planes;
        images = m + points * planes;
        taps = images + image_floats(s);
        bias = taps + 9 * size_t(s.oc) * s.c;
    }
    // The parts' sizes for shape s, which the constructor lays out in turn.
    static size_t filter_stride(const ConvShape& s) { return plane_stride(size_t(s.oc) * s.c); }
    static size_t panel_stride(const ConvShape& s) {  // either direction: ins and outs swap
        const int most = std::max(s.c, s.oc);
        return most <= detail::KC ? plane_stride(detail::packed_b_floats(most, most)) : 0;
    }
    static size_t tile_stride(const ConvShape& s) {
        return plane_stride(size_t(group_size<T>(s)) * tiles_per_sample<T>(s) * std::max(s.c, s.oc));
    }
    static size_t image_floats(const ConvShape& s) {
        return size_t(group_size<T>(s)) * (s.h + 2) * (s.w + 2) * std::max(s.c, s.oc);
    }
    static size_t floats(const ConvShape& s) {
        return points * (filter_stride(s) + panel_stride(s) + 2 * tile_stride(s)) + image_floats(s) +
               9 * size_t(s.oc) * s.c + s.oc;
    }
};

// to (cols, rows) = or += from (rows, cols) transposed: whole blocks of
// `lanes` x `lanes` transposed in registers, the edges a float at a time.
template <bool add>
void transpose(float* to, const float* from, int rows, int cols) {
    const int whole_rows = rows / lanes * lanes, whole_cols = cols / lanes * lanes;
    for (int r0 = 0; r0 < whole_rows; r0 += lanes)
        for (int c0 = 0; c0 < whole_cols; c0 += lanes) {
            detail::vf v[lanes];
#pragma GCC unroll 16
            for (int r = 0; r < lanes; ++r) v[r] = detail::load(from + size_t(r0 + r) * cols + c0);
            detail::transpose(v);
#pragma GCC unroll 16
            for (int c = 0; c < lanes; ++c) {
                float* out = to + size_t(c0 + c) * rows + r0;
                detail::store(out, add ? detail::load(out) + v[c] : v[c]);
            }
        }
    const auto one = [&](int r, int c) {
        float& out = to[size_t(c) * rows + r];
        out = add ? out + from[size_t(r) * cols + c] : from[size_t(r) * cols + c];
    };
    for (int r = 0; r < whole_rows; ++r)
        for (int c = whole_cols; c < cols; ++c) one(r, c);
    for (int r = whole_rows; r < rows; ++r)
        for (int c = 0; c < cols; ++c) one(r, c);
}

// U_xi[i][o] = (G g G^T)_xi for the filter g = w[o][i] (3x3), or, when
// `turned`, for w[i][o] turned by 180 degrees (the data gradient's filters:
// `outs` is then the forward's input channels, `ins` its output channels).
// The taps are first laid out (ins, 9, outs), so that the transforms take
// `lanes` output channels at a time from one vector load.
template <class T>
void transform_filters(float* u, size_t plane, float* taps, const float* w, int outs, int ins, bool turned) {
    constexpr int n = T::n;
    if (!turned)
        transpose<false>(taps, w, outs, ins * 9);
    else
        for (int i = 0; i < ins; ++i)
            for (int o = 0; o < outs; ++o)
                for (int t = 0; t < 9; ++t)  // tap t of the turned filter is tap 8 - t of w[i][o]
                    taps[(size_t(i) * 9 + t) * outs + o] = w[(size_t(i) * outs + o) * 9 + 8 - t];
    for (int i = 0; i < ins; ++i)
        over_channel_blocks(outs, [&](int o, auto count) {
            const float* g = taps + size_t(i) * 9 * outs + o;  // tap (r, c) at g + (r * 3 + c) * outs
            float p[n][3][lanes];  // G g, a column at a time
            for (int c = 0; c < 3; ++c)
                combine(T::G, [&](int k) { return g + (k * 3 + c) * outs; }, [&](int r) { return p[r][c]; }, count);
            float* dst = u + size_t(i) * outs + o;
            for (int r = 0; r < n; ++r)  // (G g) G^T
                combine(T::G, [&](int k) { return p[r][k]; }, [&](int c) { return dst + (r * n + c) * plane; }, count);
        });
}

// dst (count, h + 2, w + 2, channels) = x (count, channels, h, w) with a
// zero border: blocks of `lanes` channels x `lanes` pixels transposed in
// registers, so that both sides are read and written a vector at a time
// (the channels past the last whole block, one at a time). A block's
// pixels may run into the next channel's (reads, never stored), except at
// x's end.
void to_channels_last(float* dst, const float* x, int count, int channels, int h, int w) {
    constexpr int border = 1;
    const int ph = h + 2 * border, pw = w + 2 * border, pixels = h * w;
    const size_t row = size_t(pw) * channels, end = size_t(count) * channels * pixels;
    for (int j = 0; j < count; ++j) {
        float* image = dst + size_t(j) * ph * row;
        const auto at = [&](int p) { return image + (size_t(p / w + border) * pw + p % w + border) * channels; };
        std::fill_n(image, border * row, 0.0f);  // the border: first and last rows, then both ends of the others
        std::fill_n(image + (ph - border) * row, border * row, 0.0f);
        for (int r = border; r < ph - border; ++r) {
            std::fill_n(image + r * row, size_t(border) * channels, 0.0f);
            std::fill_n(image + r * row + size_t(pw - border) * channels, size_t(border) * channels, 0.0f);
        }
        const size_t first = size_t(j) * channels * pixels;  // x's offset of this sample
        int ch = 0;
        for (; ch + lanes <= channels; ch += lanes) {
            const size_t block = first + size_t(ch) * pixels;
            const float* src = x + block;
            int p = 0;
            for (; p < pixels && block + size_t(lanes - 1) * pixels + p + lanes <= end; p += lanes) {
                detail::vf r[lanes];
#pragma GCC unroll 16
                for (int l = 0; l < lanes; ++l) r[l] = detail::load(src + size_t(l) * pixels + p);
                detail::transpose(r);
                for (int i = 0; i < std::min(lanes, pixels - p); ++i) detail::store(at(p + i) + ch, r[i]);
            }
            for (; p < pixels; ++p)
                for (int l = 0; l < lanes; ++l) at(p)[ch + l] = src[size_t(l) * pixels + p];
        }
        for (; ch < channels; ++ch)
            for (int p = 0; p < pixels; ++p) at(p)[ch] = x[first + size_t(ch) * pixels + p];
    }
}

// V_xi[t][ch] = (B^T d B)_xi from padded images (count, h + 2, w + 2,
// channels), tile t = sample * tiles_per_sample + ty * (w / m) + tx, whose
// patch d starts at padded row m ty, column m tx.
template <class T>
void transform_inputs(float* v, size_t plane, const float* images, int count, int channels, int h, int w) {
    constexpr int m = T::m, n = T::n;
    const int th = h / m, tw = w / m;
    const size_t row = size_t(w + 2) * channels;
    for (int j = 0; j < count; ++j)
        for (int ty = 0; ty < th; ++ty)
            for (int tx = 0; tx < tw; ++tx) {
                const float* d = images + (size_t(j) * (h + 2) + m * ty) * row + size_t(m * tx) * channels;
                float* out = v + (size_t(j) * th * tw + size_t(ty) * tw + tx) * channels;
                over_channel_blocks(channels, [&](int ch, auto count) {
                    float t[n][n][lanes];  // B^T d: row combinations, a column at a time
                    for (int c = 0; c < n; ++c)
                        combine(T::BT, [&](int k) { return d + k * row + c * channels + ch; },
                                [&](int r) { return t[r][c]; }, count);
                    for (int r = 0; r < n; ++r)  // (B^T d) B: column combinations
                        combine(T::BT, [&](int k) { return t[r][k]; },
                                [&](int c) { return out + size_t(r * n + c) * plane + ch; }, count);
                });
            }
}

// A tile's Side x Side pixels of `lanes` channels, t[r][c] a vector over
// the channels, to or from NCHW images whose channel planes are hw floats
// apart, starting at the tile's first pixel of the first channel: each
// block of `lanes` pixels is transposed in registers, so that every
// channel's tile row goes as one short copy (from_tile adds the channel's
// bias). The transform's outputs and output gradients are read and written
// in NCHW so, not through channels-last images of their own.
template <int Side>
struct TileRows {
    static constexpr int pixels = Side * Side, blocks = (pixels + lanes - 1) / lanes;
    float rows[lanes][blocks * lanes] = {};  // channel l's pixels, row by row (past `pixels`: zeros)

    void from_tile(float* y, size_t hw, int w, const float (&t)[Side][Side][lanes], const float* bias) {
        for (int b = 0; b < blocks; ++b) {
            detail::vf r[lanes];
#pragma GCC unroll 16
            for (int i = 0; i < lanes; ++i) {
                const int p = b * lanes + i;
                r[i] = p < pixels ? detail::load(t[p / Side][p % Side]) : detail::vf{};
            }
            detail::transpose(r);
#pragma GCC unroll 16
            for (int l = 0; l < lanes; ++l) detail::store(rows[l] + b * lanes, r[l] + (bias ? bias[l] : 0.0f));
        }
        for (int l = 0; l < lanes; ++l)
            for (int row = 0; row < Side; ++row)
                std::memcpy(y + l * hw + size_t(row) * w, rows[l] + row * Side, Side * sizeof(float));
    }
    void to_tile(float (&t)[Side][Side][lanes], const float* y, size_t hw, int w) {
        for (int l = 0; l < lanes; ++l)
            for (int row = 0; row < Side; ++row)
                std::memcpy(rows[l] + row * Side, y + l * hw + size_t(row) * w, Side * sizeof(float));
        for (int b = 0; b < blocks; ++b) {
            detail::vf r[lanes];
#pragma GCC unroll 16
            for (int l = 0; l < lanes; ++l) r[l] = detail::load(rows[l] + b * lanes);
            detail::transpose(r);
#pragma GCC unroll 16
            for (int i = 0; i < lanes; ++i) {
                const int p = b * lanes + i;
                if (p < pixels) detail::store(t[p / Side][p % Side], r[i]);
            }
        }
    }
};

// y (count, channels, h, w) = A^T M_t A for every tile, plus bias if given.
template <class T>
void transform_outputs(float* y, const float* m, size_t plane, int count, int channels, int h, int w,
                       const float* bias) {
    constexpr int side = T::m, n = T::n;
    const int th = h / side, tw = w / side;
    const size_t hw = size_t(h) * w;
    TileRows<side> rows;
    for (int j = 0; j < count; ++j)
        for (int ty = 0; ty < th; ++ty)
            for (int tx = 0; tx < tw; ++tx) {
                const float* src = m + (size_t(j) * th * tw + size_t(ty) * tw + tx) * channels;
                float* out = y + size_t(j) * channels * hw + size_t(side * ty) * w + side * tx;
                over_channel_blocks(channels, [&](int ch, auto count) {
                    float q[side][n][lanes];  // A^T M
                    for (int c = 0; c < n; ++c)
                        combine(T::AT, [&](int k) { return src + size_t(k * n + c) * plane + ch; },
                                [&](int r) { return q[r][c]; }, count);
                    float t[side][side][lanes];  // (A^T M) A
                    for (int r = 0; r < side; ++r)
                        combine(T::AT, [&](int k) { return q[r][k]; }, [&](int c) { return t[r][c]; }, count);
                    float* first = out + size_t(ch) * hw;
                    if constexpr (std::is_same_v<decltype(count), std::integral_constant<int, lanes>>)
                        rows.from_tile(first, hw, w, t, bias ? bias + ch : nullptr);
                    else
                        for (int l = 0; l < count; ++l)
                            for (int r = 0; r < side; ++r)
                                for (int c = 0; c < side; ++c)
                                    first[l * hw + size_t(r) * w + c] = t[r][c][l] + (bias ? bias[ch + l] : 0.0f);
                });
            }
}

// dM_xi[t][ch] = (A dy_t A^T)_xi from dy (count, channels, h, w): the
// adjoint of transform_outputs; and bias[ch] += the sum of channel ch's dy,
// a tile at a time (the tiles cover the maps), while the tile is in registers.
template <class T>
void transform_output_gradients(float* dm, float* bias, size_t plane, const float* dy, int count, int channels, int h,
                                int w) {
    constexpr int side = T::m, n = T::n;
    constexpr const auto& A = Transposed<T>::A;
    const int th = h / side, tw = w / side;
    const size_t hw = size_t(h) * w;
    TileRows<side> rows;
    for (int j = 0; j < count; ++j)
        for (int ty = 0; ty < th; ++ty)
            for (int tx = 0; tx < tw; ++tx) {
                const float* in = dy + size_t(j) * channels * hw + size_t(side * ty) * w + side * tx;
                float* out = dm + (size_t(j) * th * tw + size_t(ty) * tw + tx) * channels;
                over_channel_blocks(channels, [&](int ch, auto count) {
                    float d[side][side][lanes];  // the tile of dy
                    const float* first = in + size_t(ch) * hw;
                    if constexpr (std::is_same_v<decltype(count), std::integral_constant<int, lanes>>) {
                        rows.to_tile(d, first, hw, w);
                        detail::vf sum = detail::load(bias + ch);
                        for (int r = 0; r < side; ++r)
                            for (int c = 0; c < side; ++c) sum += detail::load(d[r][c]);
                        detail::store(bias + ch, sum);
                    } else {
                        for (int l = 0; l < count; ++l)
                            for (int r = 0; r < side; ++r)
                                for (int c = 0; c < side; ++c) {
                                    d[r][c][l] = first[l * hw + size_t(r) * w + c];
                                    bias[ch + l] += d[r][c][l];
                                }
                    }
                    float p[n][side][lanes];  // A dy
                    for (int c = 0; c < side; ++c)
                        combine(A, [&](int k) { return d[k][c]; }, [&](int r) { return p[r][c]; }, count);
                    for (int r = 0; r < n; ++r)  // (A dy) A^T
                        combine(A, [&](int k) { return p[r][k]; },
                                [&](int c) { return out + size_t(r * n + c) * plane + ch; }, count);
                });
            }
}

// dw[o][i] += G^T dU_(i,o) G: the adjoint of transform_filters, `lanes`
// output channels at a time into taps (ins, 9, outs), then added to dw.
template <class T>
void add_filter_gradients(float* dw, float* taps, const float* du, size_t plane, int outs, int ins) {
    constexpr int n = T::n;
    constexpr const auto& GT = Transposed<T>::GT;
    for (int i = 0; i < ins; ++i)
        over_channel_blocks(outs, [&](int o, auto count) {
            const float* src = du + size_t(i) * outs + o;
            float q[3][n][lanes];  // G^T dU, a column at a time
            for (int c = 0; c < n; ++c)
                combine(GT, [&](int k) { return src + (k * n + c) * plane; }, [&](int r) { return q[r][c]; }, count);
            float* g = taps + size_t(i) * 9 * outs + o;
            for (int r = 0; r < 3; ++r)  // (G^T dU) G
                combine(GT, [&](int k) { return q[r][k]; }, [&](int c) { return g + (r * 3 + c) * outs; }, count);
        });
    transpose<true>(dw, taps, ins * 9, outs);
}

// U_xi (ins, outs) packed as the GEMM's B panels, once a call rather than
// once a group of samples (where Layout has room for them).
template <class T>
void pack_filters(const Layout<T>& at, int ins, int outs) {
    if (!at.panels) return;
    for (int xi = 0; xi < at.points; ++xi)
        detail::pack_b(at.packed + xi * at.panels, at.u + xi * at.filters, false, ins, outs, 0, ins, 0, outs);
}

// out (n, outs, h, w) = the 3x3 stride-1 padding-1 convolution of in (n, ins,
// h, w) whose transformed filters are in at.u, plus bias if given.
template <class T>
void convolve(float* out, const float* in, const float* bias, int outs, int ins, const ConvShape& s,
              const Layout<T>& at) {
    const int size = group_size<T>(s), per_sample = tiles_per_sample<T>(s), pixels = s.h * s.w;
    for (int first = 0; first < s.n; first += size) {
        const int count = std::min(size, s.n - first), tiles = count * per_sample;
        to_channels_last(at.images, in + size_t(first) * ins * pixels, count, ins, s.h, s.w);
        transform_inputs<T>(at.v, at.planes, at.images, count, ins, s.h, s.w);
        for (int xi = 0; xi < at.points; ++xi) {  // M_xi (tiles, outs) = V_xi (tiles, ins) . U_xi (ins, outs)
            float* c = at.m + xi * at.planes;
            const float* a = at.v + xi * at.planes;
            if (at.panels)
                detail::gemm_driver(c, a, false, tiles, outs, ins, [](float*, int, int, int, int) {}, false, nullptr,
                                    at.packed + xi * at.panels);
            else
                gemm(c, a, at.u + xi * at.filters, tiles, outs, ins, false, false, false);
        }
        transform_outputs<T>(out + size_t(first) * outs * pixels, at.m, at.planes, count, outs, s.h, s.w, bias);
    }
}

template <class T>
void forward(float* y, const float* x, const float* w, const float* b, const ConvShape& s, float* scratch) {
    const Layout<T> at(s, scratch);
    transform_filters<T>(at.u, at.filters, at.taps, w, s.oc, s.c, false);
    pack_filters(at, s.c, s.oc);
    convolve<T>(y, x, b, s.oc, s.c, s, at);
}

template <class T>
void backward_data(float* dx, const float* dy, const float* w, const ConvShape& s, float* scratch) {
    const Layout<T> at(s, scratch);
    transform_filters<T>(at.u, at.filters, at.taps, w, s.c, s.oc, true);
    pack_filters(at, s.oc, s.c);
    convolve<T>(dx, dy, nullptr, s.c, s.oc, s, at);
}

template <class T>
void backward_weight(float* dw, float* db, const float* dy, const float* x, const ConvShape& s, float* scratch) {
    if (s.n <= 0) return;
    const Layout<T> at(s, scratch);
    const int size = group_size<T>(s), per_sample = tiles_per_sample<T>(s), pixels = s.h * s.w;
    std::fill_n(at.bias, s.oc, 0.0f);
    for (int first = 0; first < s.n; first += size) {
        const int count = std::min(size, s.n - first), tiles = count * per_sample;
        to_channels_last(at.images, x + size_t(first) * s.c * pixels, count, s.c, s.h, s.w);
        transform_inputs<T>(at.v, at.planes, at.images, count, s.c, s.h, s.w);
        transform_output_gradients<T>(at.m, at.bias, at.planes, dy + size_t(first) * s.oc * pixels, count, s.oc, s.h,
                                      s.w);
        // dU_xi (c, oc) (+)= V_xi^T (c, tiles) . dM_xi (tiles, oc), summed over the groups.
        for (int xi = 0; xi < at.points; ++xi)
            gemm(at.u + xi * at.filters, at.v + xi * at.planes, at.m + xi * at.planes, s.c, s.oc, tiles, true, false,
                 first > 0);
    }
    add_filter_gradients<T>(dw, at.taps, at.u, at.filters, s.oc, s.c);
    for (int o = 0; o < s.oc; ++o) db[o] += at.bias[o];
}

// Runs body(Tiles<tile>{}) for the tile side chosen at run time.
template <class Body>
void with_tiles(int tile, Body body) {
    switch (tile) {
        case 2: return body(Tiles<2>{});
        case 3: return body(Tiles<3>{});
        default: return body(Tiles<4>{});
    }
}

}  // namespace

bool winograd_tile_fits(const ConvShape& s, int tile) {
    return (tile == 2 || tile == 3 || tile == 4) && s.kh == 3 && s.kw == 3 && s.stride == 1 && s.pad == 1 &&
           s.h > 0 && s.w > 0 && s.h % tile == 0 && s.w % tile == 0;
}

int winograd_tile(const ConvShape& s) {
    for (int tile : {4, 3, 2})
        if (winograd_tile_fits(s, tile)) return tile;
    return 0;
}

size_t winograd_scratch_floats(const ConvShape& s, int tile) {
    size_t floats = 0;
    with_tiles(tile, [&](auto t) { floats = Layout<decltype(t)>::floats(s); });
    return floats;
}

void winograd_forward(float* y, const float* x, const float* w, const float* b, const ConvShape& s, float* scratch,
                      int tile) {
    with_tiles(tile, [&](auto t) { forward<decltype(t)>(y, x, w, b, s, scratch); });
}

void winograd_backward_data(float* dx, const float* dy, const float* w, const ConvShape& s, float* scratch, int tile) {
    with_tiles(tile, [&](auto t) { backward_data<decltype(t)>(dx, dy, w, s, scratch); });
}

void winograd_backward_weight(float* dw, float* db, const float* dy, const float* x, const ConvShape& s,
                              float* scratch, int tile) {
    with_tiles(tile, [&](auto t) { backward_weight<decltype(t)>(dw, db, dy, x, s, scratch); });
}

}  // namespace dpt::cpu
