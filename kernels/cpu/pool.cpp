// 2-D average and max pooling on the CPU. CUDA twin: kernels/cuda/pool.cu.
//
// One generic loop serves any window and stride; the pooling kind is a
// template parameter so no branch on it runs per pixel, and the compiler
// specialises LeNet's 2x2 stride-2 windows with the window's loops
// unrolled. ResNet-18's 3x3 stride-2 max pool (44 MB of input at 256
// samples) runs a vector of windows at a time, its backward writing each
// value of dx once (build/bench/layers_cpu resnet18: forward 6.7 -> 5.6 ms,
// backward 14.7 -> 10.5 ms a step); the same bits as the generic loops.
#include <algorithm>
#include <cstring>
#include <utility>

#include "kernels.hpp"
#include "vectors.hpp"

namespace dpt::cpu {
namespace {

// 3x3 windows of stride 2 (ResNet-18's max pool), `lanes` windows of an
// output row a vector: window ox's tap (i, j) is column 2 ox + j of input
// row i, so each tap is the even or the odd columns of two vectors loaded
// from the windows' first column (j = 0, 1) or two columns on (j = 2).
// The taps are taken in the scalar loops' order, with the same compare,
// so ties and NaNs resolve as there: the same bits. A plane whose loads
// would run past the tensor's end takes the scalar loops.
namespace windows3x3 {

using detail::lanes, detail::load, detail::vf;
typedef int Ints __attribute__((vector_size(lanes * sizeof(int))));

template <size_t First, size_t... L>
inline vf every_other(vf a, vf b, std::index_sequence<L...>) {
    return __builtin_shufflevector(a, b, (First + 2 * L)...);
}
// v's lanes one up, `before`'s last lane first.
template <size_t... L>
inline vf shifted_in(vf before, vf v, std::index_sequence<L...>) {
    return __builtin_shufflevector(before, v, (lanes - 1 + L)...);
}
// Lanes First, First + 1, ... of a and b, alternately.
template <size_t First, size_t... L>
inline vf interleave(vf a, vf b, std::index_sequence<L...>) {
    return __builtin_shufflevector(a, b, (L % 2 ? lanes + First + L / 2 : First + L / 2)...);
}

// Whether every vector loaded for plane's windows stays inside x, and a
// vector of y or dy from any of its output rows inside those: each load
// reads at most 2 lanes + 1 floats past the plane's last window's first
// column (2 (oh - 1) w + 2 (ow - 1) < h w), and lanes past an output row.
inline bool plane_fits(size_t plane, const PoolShape& s) {
    const size_t planes = size_t(s.n) * s.c, in = size_t(s.h) * s.w, out = size_t(s.oh()) * s.ow();
    return (plane + 1) * in + 2 * lanes + 2 <= planes * in && (plane + 1) * out + lanes <= planes * out;
}

// Calls f(tap index, the windows' values of that tap) for the 9 taps in
// row-major order.
template <class F>
[[gnu::always_inline]] inline void for_taps(const float* first, int w, F&& f) {
    constexpr auto all = std::make_index_sequence<lanes>{};
#pragma GCC unroll 3
    for (int i = 0; i < 3; ++i) {
        const float* row = first + i * w;
        const vf a = load(row), b = load(row + lanes), c = load(row + 2), d = load(row + 2 + lanes);
        f(3 * i, every_other<0>(a, b, all));
        f(3 * i + 1, every_other<1>(a, b, all));
        f(3 * i + 2, every_other<0>(c, d, all));
    }
}

// The windows' maxima, as forward<max> finds each: its first tap, then
// every tap greater than the maximum so far.
inline vf maxima(const float* first, int w) {
    vf most{};
    for_taps(first, w, [&](int t, vf v) { most = t == 0 ? v : (v > most ? v : most); });
    return most;
}

// The windows' winning taps, as max_backward finds each: the first equal
// to the window's maximum m, or 9 where none is (a NaN).
inline Ints winners(const float* first, int w, vf m) {
    Ints found = Ints{} + 9;
    for_taps(first, w, [&](int t, vf v) { found = ((v == m) & (found == 9)) ? Ints{} + t : found; });
    return found;
}

}  // namespace windows3x3

template <PoolKind kind, int K, int S>  // K, S = 0: window and stride from the shape
void forward_plane(float* y, const float* x, const PoolShape& s, size_t plane) {
    const int k = K ? K : s.k, stride = S ? S : s.stride, oh = s.oh(), ow = s.ow();
    const float inv_area = 1.0f / float(k * k);
    const float* xp = x + plane * s.h * s.w;
    float* yp = y + plane * oh * ow;
    for (int oy = 0; oy < oh; ++oy)
        for (int ox = 0; ox < ow; ++ox) {
            const float* win = xp + oy * stride * s.w + ox * stride;
            float acc = kind == PoolKind::max ? win[0] : 0.0f;
            for (int i = 0; i < k; ++i)
                for (int j = 0; j < k; ++j) {
                    const float v = win[i * s.w + j];
                    if constexpr (kind == PoolKind::max) acc = v > acc ? v : acc;
                    else acc += v;
                }
            yp[oy * ow + ox] = kind == PoolKind::max ? acc : acc * inv_area;
        }
}

template <PoolKind kind, int K, int S>
void forward(float* y, const float* x, const PoolShape& s) {
    for (size_t plane = 0; plane < size_t(s.n) * s.c; ++plane) forward_plane<kind, K, S>(y, x, s, plane);
}

// relu_x: the pooling's input is a ReLU's output, whose mask goes on dx
// too: each plane is masked as soon as its gradient is done, while it is in
// L1 (relu_backward's test: dx = 0 where relu_x <= 0), rather than in a
// pass of its own over the whole of dx.
void mask_plane(float* dxp, const float* relu_x, size_t plane, size_t count) {
    if (!relu_x) return;
    const float* xp = relu_x + plane * count;
    for (size_t i = 0; i < count; ++i) dxp[i] = xp[i] > 0.0f ? dxp[i] : 0.0f;
}

// One plane at a time: cleared, added to and masked while it is in L1.
template <int K, int S>
void avg_backward(float* dx, const float* dy, const float* relu_x, const PoolShape& s) {
    const int k = K ? K : s.k, stride = S ? S : s.stride, oh = s.oh(), ow = s.ow();
    const float inv_area = 1.0f / float(k * k);
    for (size_t plane = 0; plane < size_t(s.n) * s.c; ++plane) {
        float* dxp = dx + plane * s.h * s.w;
        const float* dyp = dy + plane * oh * ow;
        std::fill(dxp, dxp + s.h * s.w, 0.0f);
        for (int oy = 0; oy < oh; ++oy)
            for (int ox = 0; ox < ow; ++ox) {
                const float g = dyp[oy * ow + ox] * inv_area;
                const int base = oy * stride * s.w + ox * stride;
                for (int i = 0; i < k; ++i)
                    for (int j = 0; j < k; ++j) dxp[base + i * s.w + j] += g;
            }
        mask_plane(dxp, relu_x, plane, size_t(s.h) * s.w);
    }
}

// 2x2 windows of stride 2 do not overlap: a pixel of a whole window gets
// the window's gradient / 4 alone (0 + g, the loop above's bits), one in
// an odd plane's last row or column none; then the mask. Four windows (8
// pixels) a vector, each window's gradient loaded once and duplicated.
void avg_backward_2x2(float* dx, const float* dy, const float* relu_x, const PoolShape& s) {
    typedef float V __attribute__((vector_size(8 * sizeof(float))));
    typedef float Q __attribute__((vector_size(4 * sizeof(float))));
    const int oh = s.oh(), ow = s.ow(), covered = 2 * ow;
    const V zero = {};
    for (size_t plane = 0; plane < size_t(s.n) * s.c; ++plane) {
        float* dxp = dx + plane * s.h * s.w;
        const float* dyp = dy + plane * oh * ow;
        const float* xp = relu_x ? relu_x + plane * s.h * s.w : nullptr;
        for (int iy = 0; iy < s.h; ++iy) {
            float* row = dxp + size_t(iy) * s.w;
            const float* mask = xp ? xp + size_t(iy) * s.w : nullptr;
            int ix = 0;
            if (iy < 2 * oh) {
                const float* g = dyp + size_t(iy / 2) * ow;
                for (; ix + 8 <= covered; ix += 8) {
                    Q q;
                    std::memcpy(&q, g + ix / 2, sizeof q);
                    V v = 0.0f + __builtin_shufflevector(q, q, 0, 0, 1, 1, 2, 2, 3, 3) * 0.25f;
                    if (mask) {
                        V m;
                        std::memcpy(&m, mask + ix, sizeof m);
                        v = m > zero ? v : zero;
                    }
                    std::memcpy(row + ix, &v, sizeof v);
                }
                for (; ix < covered; ++ix) {
                    const float v = 0.0f + g[ix / 2] * 0.25f;
                    row[ix] = mask && !(mask[ix] > 0.0f) ? 0.0f : v;
                }
            }
            for (; ix < s.w; ++ix) row[ix] = 0.0f;
        }
    }
}

// The whole gradient of a window goes to its first tap (row by row) equal
// to the max; none when the window holds a NaN. One plane at a time, so
// its dx is cleared and then added to while it is in L1, and one output row
// in two passes: first every window's winning tap, a loop of compares and
// selects without stores that the compiler vectorises, then the adds, one
// per window, in order (windows overlap).
template <int K, int S>
void max_backward_plane(float* dx, const float* dy, const float* x, const float* y, const float* relu_x,
                        const PoolShape& s, size_t plane) {
    const int k = K ? K : s.k, stride = S ? S : s.stride, oh = s.oh(), ow = s.ow();
    const int none = k * k;
    constexpr int chunk = 64;  // windows searched before their adds; on the stack, not allocated
    int winner[chunk];
    const float* xp = x + plane * s.h * s.w;
    float* dxp = dx + plane * s.h * s.w;
    const float* dyp = dy + plane * oh * ow;
    const float* yp = y + plane * oh * ow;
    std::fill(dxp, dxp + s.h * s.w, 0.0f);
    for (int oy = 0; oy < oh; ++oy)
        for (int first = 0; first < ow; first += chunk) {
            const int count = std::min(chunk, ow - first);
            const float* row = xp + oy * stride * s.w + first * stride;
            for (int i = 0; i < count; ++i) {
                const float m = yp[oy * ow + first + i];
                int at = none;
                for (int t = none - 1; t >= 0; --t)  // from the last tap, so the first equal one wins
                    at = row[(t / k) * s.w + i * stride + t % k] == m ? t : at;
                winner[i] = at;
            }
            float* dst = dxp + oy * stride * s.w + first * stride;
            const float* g = dyp + oy * ow + first;
            for (int i = 0; i < count; ++i)
                if (winner[i] != none) dst[(winner[i] / k) * s.w + i * stride + winner[i] % k] += g[i];
        }
    mask_plane(dxp, relu_x, plane, size_t(s.h) * s.w);
}

// 3x3 windows of stride 2, a row of dx at a time, each value written once:
// row r takes the windows of output row r / 2 - 1 (their taps' row 2, when
// r is even) and then of r / 2 (row r % 2), `lanes` windows a vector (their
// winners as windows3x3::winners finds them), column 2 ox from window
// ox - 1's tap 2 and then window ox's tap 0, column 2 ox + 1 from window
// ox's tap 1: the adds max_backward_plane makes, in its order (by window),
// onto 0, adding 0 where a window does not win (which changes no sum that
// starts from +0). The same bits, without clearing dx and adding to it in
// memory: ResNet-18's pool input is 44 MB at 256 samples. Planes whose
// loads would run past the tensor's end, or wider than `most` windows,
// take max_backward_plane.
void max_backward_3x3_stride2(float* dx, const float* dy, const float* x, const float* y, const float* relu_x,
                              const PoolShape& s) {
    using detail::lanes, detail::vf, windows3x3::Ints;
    constexpr int most = 4;  // chunks of `lanes` windows a row, at most
    const int oh = s.oh(), ow = s.ow(), chunks = ow / lanes + 1;  // one past the last window: column 2 ow
    const size_t planes = size_t(s.n) * s.c;
    Ints lane{};
    for (int l = 0; l < lanes; ++l) lane[l] = l;
    Ints at[2][most];  // output row oy's winners and gradients, at [oy % 2]
    vf g[2][most];
    float line[2 * most * lanes];
    constexpr auto all = std::make_index_sequence<lanes>{};
    for (size_t plane = 0; plane < planes; ++plane) {
        if (chunks > most || !windows3x3::plane_fits(plane, s)) {
            max_backward_plane<3, 2>(dx, dy, x, y, relu_x, s, plane);
            continue;
        }
        const float* xp = x + plane * s.h * s.w;
        const float* yp = y + plane * oh * ow;
        const float* dyp = dy + plane * oh * ow;
        float* dxp = dx + plane * s.h * s.w;
        for (int r = 0; r < s.h; ++r) {
            if (r % 2 == 0 && r / 2 < oh)  // output row r / 2's winners, first needed here
                for (int q = 0; q < chunks; ++q) {
                    const int ox = q * lanes, count = ow - ox, oy = r / 2;
                    Ints& won = at[oy % 2][q];
                    vf& grad = g[oy % 2][q];
                    if (count <= 0) {
                        won = Ints{} + 9;
                        grad = vf{};
                        continue;
                    }
                    won = windows3x3::winners(xp + size_t(r) * s.w + 2 * ox, s.w, detail::load(yp + oy * ow + ox));
                    grad = lane < count ? detail::load(dyp + oy * ow + ox) : vf{};
                }
            vf even[most], odd[most];
            for (int q = 0; q < chunks; ++q) even[q] = odd[q] = vf{};
            const auto add_row = [&](int oy, int i) {  // output row oy's windows, their taps' row i
                vf carried{};  // the previous chunk's tap-2 gradients
                for (int q = 0; q < chunks; ++q) {
                    const Ints& won = at[oy % 2][q];
                    const vf& grad = g[oy % 2][q];
                    const vf right = won == 3 * i + 2 ? grad : vf{};
                    even[q] += windows3x3::shifted_in(carried, right, all);
                    carried = right;
                    even[q] += won == 3 * i ? grad : vf{};
                    odd[q] += won == 3 * i + 1 ? grad : vf{};
                }
            };
            if (r % 2 == 0 && r / 2 - 1 >= 0 && r / 2 - 1 < oh) add_row(r / 2 - 1, 2);
            if (r / 2 < oh) add_row(r / 2, r % 2);
            for (int q = 0; q < chunks; ++q) {
                detail::store(line + 2 * q * lanes, windows3x3::interleave<0>(even[q], odd[q], all));
                detail::store(line + 2 * q * lanes + lanes, windows3x3::interleave<lanes / 2>(even[q], odd[q], all));
            }
            std::memcpy(dxp + size_t(r) * s.w, line, size_t(s.w) * sizeof(float));
        }
        mask_plane(dxp, relu_x, plane, size_t(s.h) * s.w);
    }
}

template <int K, int S>
void max_backward(float* dx, const float* dy, const float* x, const float* y, const float* relu_x,
                  const PoolShape& s) {
    if constexpr (K == 3 && S == 2) return max_backward_3x3_stride2(dx, dy, x, y, relu_x, s);
    for (size_t plane = 0; plane < size_t(s.n) * s.c; ++plane) max_backward_plane<K, S>(dx, dy, x, y, relu_x, s, plane);
}

template <PoolKind kind, int K, int S>
void backward(float* dx, const float* dy, const float* x, const float* y, const float* relu_x, const PoolShape& s) {
    if constexpr (kind == PoolKind::max) max_backward<K, S>(dx, dy, x, y, relu_x, s);
    else if constexpr (K == 2 && S == 2) avg_backward_2x2(dx, dy, relu_x, s);
    else avg_backward<K, S>(dx, dy, relu_x, s);
}

// forward<max, 3, 2>, `lanes` windows at a time where their loads fit.
void max_forward_3x3_stride2(float* y, const float* x, const PoolShape& s) {
    const int oh = s.oh(), ow = s.ow();
    for (size_t plane = 0; plane < size_t(s.n) * s.c; ++plane) {
        if (!windows3x3::plane_fits(plane, s)) {
            forward_plane<PoolKind::max, 3, 2>(y, x, s, plane);
            continue;
        }
        const float* xp = x + plane * s.h * s.w;
        float* yp = y + plane * oh * ow;
        for (int oy = 0; oy < oh; ++oy)
            for (int ox = 0; ox < ow; ox += detail::lanes) {
                const detail::vf most = windows3x3::maxima(xp + size_t(2 * oy) * s.w + 2 * ox, s.w);
                for (int l = 0; l < std::min(detail::lanes, ow - ox); ++l) yp[oy * ow + ox + l] = most[l];
            }
    }
}

template <PoolKind kind>
void forward_any(float* y, const float* x, const PoolShape& s) {
    if (kind == PoolKind::max && s.k == 3 && s.stride == 2) max_forward_3x3_stride2(y, x, s);
    else if (s.k == 2 && s.stride == 2) forward<kind, 2, 2>(y, x, s);
    else if (s.k == 3 && s.stride == 2) forward<kind, 3, 2>(y, x, s);
    else forward<kind, 0, 0>(y, x, s);
}

template <PoolKind kind>
void backward_any(float* dx, const float* dy, const float* x, const float* y, const float* relu_x,
                  const PoolShape& s) {
    if (s.k == 2 && s.stride == 2) backward<kind, 2, 2>(dx, dy, x, y, relu_x, s);
    else if (s.k == 3 && s.stride == 2) backward<kind, 3, 2>(dx, dy, x, y, relu_x, s);
    else backward<kind, 0, 0>(dx, dy, x, y, relu_x, s);
}

}  // namespace

void pool2d_forward(float* y, const float* x, PoolKind kind, const PoolShape& s) {
    if (kind == PoolKind::avg) forward_any<PoolKind::avg>(y, x, s);
    else forward_any<PoolKind::max>(y, x, s);
}

void pool2d_backward(float* dx, const float* dy, const float* x, const float* y,
                     PoolKind kind, const PoolShape& s) {
    if (kind == PoolKind::avg) backward_any<PoolKind::avg>(dx, dy, x, y, nullptr, s);
    else backward_any<PoolKind::max>(dx, dy, x, y, nullptr, s);
}

void pool2d_backward_relu(float* dx, const float* dy, const float* x, const float* y, PoolKind kind,
                          const PoolShape& s) {
    if (kind == PoolKind::avg) backward_any<PoolKind::avg>(dx, dy, x, y, x, s);
    else backward_any<PoolKind::max>(dx, dy, x, y, x, s);
}

}  // namespace dpt::cpu
