// Winograd's F(3x3, 5x5) with the batch in the vector lanes: the three
// passes of LeNet's conv2 (20 -> 50 channels, 5x5, 13x13 -> 9x9). conv.cpp
// hands these shapes over. CUDA twin: kernels/cuda/conv_*.cu, which compute
// the same function directly (the twins agree to rounding).
//
// The outputs are 3x3 tiles, each from a 7x7 patch d of the input:
//   y_t[o] = A^T [ sum_c U[o][c] (.) V_t[c] ] A,  V = B^T d B,  U = G g G^T,
// 49 products per tile and channel pair where the direct sums take 225.
// Written as 49 independent sums, one per element xi of the transformed
// tile: M[xi][o][t] = sum_c U[xi][c][o] * V[xi][c][t], a register tile of 5
// output channels x 3 tiles, the transformed filters broadcast. The data
// gradient is the adjoint of each map in turn: dM = A dy_t A^T, dV[xi][c][t]
// = sum_o U[xi][c][o] * dM[xi][o][t], and each patch B dV B^T added into dx
// (the 7x7 patches of neighbouring tiles overlap by 4). The weight gradient
// is the adjoint too: dU[xi][o][c] = the sum over tiles and samples of
// dM[xi][o][t] * V[xi][c][t], then dw = G^T dU G; its per-sample sums, one
// to a lane, are added up 16 at a time by a transposition (lane_sums).
// With 16 samples in the lanes (8 with AVX2) every transform is the same
// arithmetic on whole vectors, one operation a nonzero coefficient.
//
// The matrices are Toom-Cook's at the points 0, 1, -1, 2, -2, 1/2 and
// infinity, each row of B^T scaled to its smallest integers and G the other
// way (tests/test_winograd.cpp bounds the rounding they amplify).
#include "winograd_lanes.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "conv_lanes.hpp"
#include "vectors.hpp"

namespace dpt::cpu {
namespace {

using detail::lanes, detail::load, detail::splat, detail::store, detail::vf;

constexpr int K = 5, M = 3, N = M + K - 1;  // 3x3 outputs from 7x7 patches
constexpr int xis = N * N;                  // elements of a transformed tile
constexpr float AT[M][N] = {{1, 1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0.5f, 0}, {0, 1, 1, 4, 4, 0.25f, 1}};
constexpr float G[N][K] = {{1.0f / 4, 0, 0, 0, 0},
                           {1.0f / 6, 1.0f / 6, 1.0f / 6, 1.0f / 6, 1.0f / 6},
                           {1.0f / 18, -1.0f / 18, 1.0f / 18, -1.0f / 18, 1.0f / 18},
                           {1.0f / 72, 1.0f / 36, 1.0f / 18, 1.0f / 9, 2.0f / 9},
                           {1.0f / 120, -1.0f / 60, 1.0f / 30, -1.0f / 15, 2.0f / 15},
                           {32.0f / 45, 16.0f / 45, 8.0f / 45, 4.0f / 45, 2.0f / 45},
                           {0, 0, 0, 0, 1.0f / 2}};
constexpr float BT[N][N] = {{4, -8, -5, 10, 1, -2, 0},  {0, -4, 4, 9, -1, -2, 0}, {0, -4, 12, -7, -3, 2, 0},
                            {0, 2, -3, -4, 3, 2, 0},    {0, 2, -5, 0, 5, -2, 0},  {0, 4, 0, -5, 0, 1, 0},
                            {0, -4, 8, 5, -10, -1, 2}};

template <int R, int C>
struct Matrix {
    float a[R][C];
};
template <int R, int C>
constexpr Matrix<C, R> transposed(const float (&m)[R][C]) {
    Matrix<C, R> t{};
    for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) t.a[j][i] = m[i][j];
    return t;
}
constexpr auto A = transposed<M, N>(AT);  // the adjoints' matrices
constexpr auto B = transposed<N, N>(BT);

// out[i * out_stride] = sum_j m[i][j] * in[j * in_stride], over the nonzero
// coefficients alone (the loops unrolled, the tests on m fold away).
template <int Rows, int Cols>
[[gnu::always_inline]] inline void transform(vf* out, int out_stride, const vf* in, int in_stride,
                                             const float (&m)[Rows][Cols]) {
#pragma GCC unroll 8
    for (int i = 0; i < Rows; ++i) {
        vf sum{};
        bool first = true;
#pragma GCC unroll 8
        for (int j = 0; j < Cols; ++j) {
            if (m[i][j] == 0) continue;
            const vf term = m[i][j] == 1 ? in[j * in_stride] : m[i][j] * in[j * in_stride];
            sum = first ? term : sum + term;
            first = false;
        }
        out[i * out_stride] = sum;
    }
}

constexpr int OB = 5;  // the forward products' tile: output channels x TB tiles
constexpr int CB = 5;  // the data gradient's: input channels x TB tiles
constexpr int TB = 3;
constexpr int WC = 4, WO = lanes / WC;  // the weight gradient's: output x input channels, a sum a lane

int rounded_up(int n, int to) { return (n + to - 1) / to * to; }

// Vectors rounded up to an odd count: the 49 slices V[xi] and M[xi] a
// transform writes or reads, one vector each, then fall in different sets
// of the L1 cache (a slice of 64 x 9 vectors, 36 KB, put all 49 in one set
// of 12 ways: 4 KB apart, a multiple of 64 lines).
int odd(int vectors) { return vectors | 1; }

// The counts the scratch's parts are made of.
struct Sizes {
    int ocp, tiles, oblocks, cblocks, v_slice, m_slice;  // v_slice, m_slice: vectors a slice V[xi], M[xi]
    explicit Sizes(const ConvShape& s)
        : ocp(rounded_up(s.oc, lanes)),
          tiles(s.oh() / M * (s.ow() / M)),
          oblocks((s.oc + WO - 1) / WO),
          cblocks((s.c + WC - 1) / WC),
          v_slice(odd(s.c * tiles)),
          m_slice(odd(ocp * tiles)) {}
};

// The scratch, from its first cache line: the transformed filters U
// [xi][c][oc rounded up to whole vectors], a group's images and outputs in
// the lanes, V [xi][c][tile] and M [xi][oc rounded up][tile] (vectors), the
// weight gradient's dU sums and bias sums, a group's pooled outputs. Each
// part's offset in floats from the first cache line, the last one's the
// end.
struct Layout : Sizes {
    size_t in, out, v, m, du, bias, pooled, end;
    explicit Layout(const ConvShape& s)
        : Sizes(s),
          in(size_t(rounded_up(xis * s.c * ocp, lanes))),
          out(in + size_t(s.c) * s.h * s.w * lanes),
          v(out + size_t(s.oc) * s.oh() * s.ow() * lanes),
          m(v + size_t(xis) * v_slice * lanes),
          du(m + size_t(xis) * m_slice * lanes),
          bias(du + size_t(xis) * oblocks * cblocks * lanes),
          pooled(bias + size_t(s.oc) * lanes),
          end(pooled + size_t(s.oc) * (s.oh() / 2) * (s.ow() / 2) * lanes) {}
};

struct Work : Sizes {
    int tiles_w;
    float *u, *in, *out, *du, *pooled;
    vf *v, *m, *bias;
    Work(const ConvShape& s, float* scratch) : Sizes(s), tiles_w(s.ow() / M) {
        const Layout at(s);
        const auto address = reinterpret_cast<std::uintptr_t>(scratch);
        u = scratch + (64 - address % 64) % 64 / sizeof(float);
        in = u + at.in, out = u + at.out, du = u + at.du, pooled = u + at.pooled;
        v = reinterpret_cast<vf*>(u + at.v), m = reinterpret_cast<vf*>(u + at.m);
        bias = reinterpret_cast<vf*>(u + at.bias);
    }
    static size_t floats(const ConvShape& s) { return 64 / sizeof(float) + Layout(s).end; }
    // Where tile t's 3x3 outputs start: row and column.
    int row(int t) const { return t / tiles_w * M; }
    int col(int t) const { return t % tiles_w * M; }
};

// U[xi][c][o] = (G g G^T)[xi] for every filter g = w[o][c]: for each input
// channel, 16 output channels' filters at a time in the lanes, stored as
// one vector a transformed element.
void filter_transform(const Work& k, const float* w, const ConvShape& s) {
    float* lanes_w = k.in;  // (the images' room, free until the group's images arrive)
    for (int c = 0; c < s.c; ++c)
        for (int o0 = 0; o0 < s.oc; o0 += lanes) {
            lanes_transpose_in(lanes_w, w + (size_t(o0) * s.c + c) * K * K, K * K, std::min(lanes, s.oc - o0),
                               size_t(s.c) * K * K);
            vf g[K][K], gg[N][K], out[N][N];
            for (int i = 0; i < K; ++i)
                for (int j = 0; j < K; ++j) g[i][j] = load(lanes_w + (i * K + j) * lanes);
            for (int j = 0; j < K; ++j) transform(&gg[0][j], K, &g[0][j], K, G);   // columns: G g
            for (int i = 0; i < N; ++i) transform(&out[i][0], 1, &gg[i][0], 1, G);  // rows: (G g) G^T
            for (int xi = 0; xi < xis; ++xi)  // (the channels past s.oc: zeros)
                store(k.u + (size_t(xi) * s.c + c) * k.ocp + o0, out[xi / N][xi % N]);
        }
}

// V[xi][c][t] = (B^T d B)[xi] for every input channel and tile of the group in k.in.
void input_transform(const Work& k, const ConvShape& s) {
    for (int c = 0; c < s.c; ++c)
        for (int t = 0; t < k.tiles; ++t) {
            vf d[N][N], bd[N][N], out[N][N];
            for (int i = 0; i < N; ++i)
                for (int j = 0; j < N; ++j)
                    d[i][j] = load(k.in + ((size_t(c) * s.h + k.row(t) + i) * s.w + k.col(t) + j) * lanes);
            for (int j = 0; j < N; ++j) transform(&bd[0][j], N, &d[0][j], N, BT);    // columns: B^T d
            for (int i = 0; i < N; ++i) transform(&out[i][0], 1, &bd[i][0], 1, BT);  // rows: (B^T d) B
            for (int i = 0; i < N; ++i)
                for (int j = 0; j < N; ++j) k.v[size_t(i * N + j) * k.v_slice + c * k.tiles + t] = out[i][j];
        }
}

// sums[xi][a][t] = sum over b < depth of U[xi][..] * in[xi][b][t], for
// Rows rows a (output channels: U[xi][b][a]; input channels: U[xi][a][b])
// x TB tiles at a time; rows past `rows` and tiles past k.tiles repeat the
// last (their sums are not stored).
template <bool Forward>
void products(const Work& k, const ConvShape& s) {
    const int rows = Forward ? s.oc : s.c, depth = Forward ? s.c : s.oc;
    const vf* from = Forward ? k.v : k.m;
    vf* to = Forward ? k.m : k.v;
    const int from_slice = Forward ? k.v_slice : k.m_slice, to_slice = Forward ? k.m_slice : k.v_slice;
    constexpr int R = Forward ? OB : CB;
    for (int xi = 0; xi < xis; ++xi) {
        const float* u = k.u + size_t(xi) * s.c * k.ocp;
        const vf* in = from + size_t(xi) * from_slice;
        vf* sums = to + size_t(xi) * to_slice;
        for (int a0 = 0; a0 < rows; a0 += R)
            for (int t0 = 0; t0 < k.tiles; t0 += TB) {
                int tile[TB], row[R];
#pragma GCC unroll 4
                for (int j = 0; j < TB; ++j) tile[j] = std::min(t0 + j, k.tiles - 1);
#pragma GCC unroll 8
                for (int a = 0; a < R; ++a) row[a] = std::min(a0 + a, rows - 1);
                vf acc[R][TB] = {};
                for (int b = 0; b < depth; ++b) {
                    vf x[TB];
#pragma GCC unroll 4
                    for (int j = 0; j < TB; ++j) x[j] = in[b * k.tiles + tile[j]];
#pragma GCC unroll 8
                    for (int a = 0; a < R; ++a) {
                        const vf uv = splat(Forward ? u[b * k.ocp + row[a]] : u[row[a] * k.ocp + b]);
#pragma GCC unroll 4
                        for (int j = 0; j < TB; ++j) acc[a][j] += uv * x[j];
                    }
                }
                for (int a = 0; a < R && a0 + a < rows; ++a)
                    for (int j = 0; j < TB && t0 + j < k.tiles; ++j) sums[(a0 + a) * k.tiles + t0 + j] = acc[a][j];
            }
    }
}

// Each output tile = A^T M A + bias (then the ReLU, where asked), into k.out.
void output_transform(const Work& k, const float* bias, const ConvShape& s, bool relu) {
    const int oh = s.oh(), ow = s.ow();
    for (int o = 0; o < s.oc; ++o) {
        const vf b = splat(bias[o]);
        for (int t = 0; t < k.tiles; ++t) {
            vf mm[N][N], am[M][N], out[M][M];
            for (int i = 0; i < N; ++i)
                for (int j = 0; j < N; ++j) mm[i][j] = k.m[size_t(i * N + j) * k.m_slice + o * k.tiles + t];
            for (int j = 0; j < N; ++j) transform(&am[0][j], N, &mm[0][j], N, AT);  // columns: A^T M
            for (int i = 0; i < M; ++i) transform(&out[i][0], 1, &am[i][0], 1, AT);  // rows: (A^T M) A
            for (int i = 0; i < M; ++i)
                for (int j = 0; j < M; ++j) {
                    vf value = out[i][j] + b;
                    if (relu) value = value > 0.0f ? value : vf{};  // relu_forward's test: NaN gives 0
                    store(k.out + ((size_t(o) * oh + k.row(t) + i) * ow + k.col(t) + j) * lanes, value);
                }
        }
    }
}

// The 2x2 averages (stride 2) of the group's outputs in k.out, into
// k.pooled: pool.cpp's sums, taps in row order from 0, then the scale.
void pool_outputs(const Work& k, const ConvShape& s) {
    const int oh = s.oh(), ow = s.ow(), ph = oh / 2, pw = ow / 2;
    for (int o = 0; o < s.oc; ++o)
        for (int py = 0; py < ph; ++py)
            for (int px = 0; px < pw; ++px) {
                const float* top = k.out + ((size_t(o) * oh + 2 * py) * ow + 2 * px) * lanes;
                const float* bottom = top + size_t(ow) * lanes;
                const vf sum = (((0.0f + load(top)) + load(top + lanes)) + load(bottom)) + load(bottom + lanes);
                store(k.pooled + ((size_t(o) * ph + py) * pw + px) * lanes, sum * 0.25f);
            }
}

// M[xi][o][t] = (A dy_t A^T)[xi] for every output gradient tile of the group in k.out.
void gradient_transform(const Work& k, const ConvShape& s) {
    const int oh = s.oh(), ow = s.ow();
    for (int o = 0; o < s.oc; ++o)
        for (int t = 0; t < k.tiles; ++t) {
            vf g[M][M], ag[N][M], out[N][N];
            for (int i = 0; i < M; ++i)
                for (int j = 0; j < M; ++j)
                    g[i][j] = load(k.out + ((size_t(o) * oh + k.row(t) + i) * ow + k.col(t) + j) * lanes);
            for (int j = 0; j < M; ++j) transform(&ag[0][j], M, &g[0][j], M, A.a);   // columns: A dy
            for (int i = 0; i < N; ++i) transform(&out[i][0], 1, &ag[i][0], 1, A.a);  // rows: (A dy) A^T
            for (int i = 0; i < N; ++i)
                for (int j = 0; j < N; ++j) k.m[size_t(i * N + j) * k.m_slice + o * k.tiles + t] = out[i][j];
        }
}

// dx's patches B dV B^T, added up into k.in (cleared first).
void patch_transform(const Work& k, const ConvShape& s) {
    std::fill_n(k.in, size_t(s.c) * s.h * s.w * lanes, 0.0f);
    for (int c = 0; c < s.c; ++c)
        for (int t = 0; t < k.tiles; ++t) {
            vf dv[N][N], bd[N][N], out[N][N];
            for (int i = 0; i < N; ++i)
                for (int j = 0; j < N; ++j) dv[i][j] = k.v[size_t(i * N + j) * k.v_slice + c * k.tiles + t];
            for (int j = 0; j < N; ++j) transform(&bd[0][j], N, &dv[0][j], N, B.a);   // columns: B dV
            for (int i = 0; i < N; ++i) transform(&out[i][0], 1, &bd[i][0], 1, B.a);  // rows: (B dV) B^T
            for (int i = 0; i < N; ++i)
                for (int j = 0; j < N; ++j) {
                    float* at = k.in + ((size_t(c) * s.h + k.row(t) + i) * s.w + k.col(t) + j) * lanes;
                    store(at, load(at) + out[i][j]);
                }
        }
}

// The weight gradient's products, added into du: for each transformed
// element xi, dU[xi][o][c] = the sum over the group's tiles and lanes of
// M[xi][o][t] * V[xi][c][t] (M: the output gradient's transform), WO x WC
// of them at a time, one per accumulator; their lanes are added up
// together by lane_sums, into one vector of du, [xi][o block][c block]
// [WO x WC]. Rows and columns past the channels repeat the last ones (their
// sums are not read).
void weight_products(const Work& k, const ConvShape& s) {
    for (int xi = 0; xi < xis; ++xi) {
        const vf* m = k.m + size_t(xi) * k.m_slice;
        const vf* v = k.v + size_t(xi) * k.v_slice;
        float* du = k.du + size_t(xi) * k.oblocks * k.cblocks * lanes;
        for (int ob = 0; ob < k.oblocks; ++ob) {
            const vf* rows[WO];
#pragma GCC unroll 8
            for (int a = 0; a < WO; ++a) rows[a] = m + size_t(std::min(ob * WO + a, s.oc - 1)) * k.tiles;
            for (int cb = 0; cb < k.cblocks; ++cb) {
                const vf* cols[WC];
#pragma GCC unroll 4
                for (int b = 0; b < WC; ++b) cols[b] = v + size_t(std::min(cb * WC + b, s.c - 1)) * k.tiles;
                vf acc[WO * WC] = {};
                for (int t = 0; t < k.tiles; ++t) {
                    vf in[WC];
#pragma GCC unroll 4
                    for (int b = 0; b < WC; ++b) in[b] = cols[b][t];
#pragma GCC unroll 4
                    for (int a = 0; a < WO; ++a) {
                        const vf g = rows[a][t];
#pragma GCC unroll 4
                        for (int b = 0; b < WC; ++b) acc[a * WC + b] += g * in[b];
                    }
                }
                float* sums = du + (size_t(ob) * k.cblocks + cb) * lanes;
                store(sums, load(sums) + detail::lane_sums(acc));
            }
        }
    }
}

// dw += G^T dU G for every filter, WO x WC of them in the lanes of du's vectors.
void weight_transform(float* dw, const Work& k, const ConvShape& s) {
    constexpr auto GT = transposed<N, K>(G);
    for (int ob = 0; ob < k.oblocks; ++ob)
        for (int cb = 0; cb < k.cblocks; ++cb) {
            vf du[N][N], gu[K][N], out[K][K];
            for (int xi = 0; xi < xis; ++xi)
                du[xi / N][xi % N] = load(k.du + ((size_t(xi) * k.oblocks + ob) * k.cblocks + cb) * lanes);
            for (int j = 0; j < N; ++j) transform(&gu[0][j], N, &du[0][j], N, GT.a);  // columns: G^T dU
            for (int i = 0; i < K; ++i) transform(&out[i][0], 1, &gu[i][0], 1, GT.a);  // rows: (G^T dU) G
            for (int a = 0; a < WO && ob * WO + a < s.oc; ++a)
                for (int b = 0; b < WC && cb * WC + b < s.c; ++b) {
                    float* filter = dw + (size_t(ob * WO + a) * s.c + cb * WC + b) * K * K;
                    for (int i = 0; i < K * K; ++i) filter[i] += out[i / K][i % K][a * WC + b];
                }
        }
}

}  // namespace

bool winograd5_fits(const ConvShape& s) {
#if defined(__AVX512F__) || defined(__AVX2__)
    return s.kh == K && s.kw == K && s.stride == 1 && s.pad == 0 && s.oh() >= M && s.ow() >= M && s.oh() % M == 0 &&
           s.ow() % M == 0;
#else
    (void)s;
    return false;
#endif
}

size_t winograd5_scratch_floats(const ConvShape& s) { return Work::floats(s); }

void winograd5_forward(float* y, const float* x, const float* w, const float* b, const ConvShape& s, float* scratch,
                       bool relu, float* pooled) {
    const Work k(s, scratch);
    filter_transform(k, w, s);
    const size_t in_planes = size_t(s.c) * s.h * s.w, out_planes = size_t(s.oc) * s.oh() * s.ow();
    const size_t pooled_planes = size_t(s.oc) * (s.oh() / 2) * (s.ow() / 2);
    for (int first = 0; first < s.n; first += lanes) {
        const int count = std::min(lanes, s.n - first);
        lanes_transpose_in(k.in, x + first * in_planes, in_planes, count);
        input_transform(k, s);
        products<true>(k, s);
        output_transform(k, b, s, relu);
        lanes_transpose_out(y + first * out_planes, k.out, out_planes, count);
        if (!pooled) continue;
        pool_outputs(k, s);
        lanes_transpose_out(pooled + first * pooled_planes, k.pooled, pooled_planes, count);
    }
}

void winograd5_backward_data(float* dx, const float* dy, const float* w, const ConvShape& s, float* scratch) {
    const Work k(s, scratch);
    filter_transform(k, w, s);
    const size_t in_planes = size_t(s.c) * s.h * s.w, out_planes = size_t(s.oc) * s.oh() * s.ow();
    for (int first = 0; first < s.n; first += lanes) {
        const int count = std::min(lanes, s.n - first);
        lanes_transpose_in(k.out, dy + first * out_planes, out_planes, count);
        gradient_transform(k, s);
        products<false>(k, s);
        patch_transform(k, s);
        lanes_transpose_out(dx + first * in_planes, k.in, in_planes, count);
    }
}

void winograd5_backward_weight(float* dw, float* db, const float* dy, const float* x, const ConvShape& s,
                               float* scratch) {
    const Work k(s, scratch);
    std::fill_n(k.du, size_t(xis) * k.oblocks * k.cblocks * lanes, 0.0f);
    std::fill_n(k.bias, s.oc, vf{});
    const size_t in_planes = size_t(s.c) * s.h * s.w, out_planes = size_t(s.oc) * s.oh() * s.ow();
    const int pixels = s.oh() * s.ow();
    for (int first = 0; first < s.n; first += lanes) {  // (the lanes past the samples: zeros)
        const int count = std::min(lanes, s.n - first);
        lanes_transpose_in(k.in, x + first * in_planes, in_planes, count);
        input_transform(k, s);
        lanes_transpose_in(k.out, dy + first * out_planes, out_planes, count);
        gradient_transform(k, s);
        weight_products(k, s);
        for (int o = 0; o < s.oc; ++o)
            for (int p = 0; p < pixels; ++p) k.bias[o] += load(k.out + (size_t(o) * pixels + p) * lanes);
    }
    weight_transform(dw, k, s);
    for (int o = 0; o < s.oc; ++o) db[o] += detail::lane_sum(k.bias[o]);
}

}  // namespace dpt::cpu
