// LeNet's conv2 forward by the trainer's tiled rows kernel with one output
// channel a thread, not two (rows_forward_tiled_single).
//
// Against the trainer's (kernels/cuda/conv_forward.cu: rows_forward_tiled,
// a thread 2 output channels of one row, 225 threads in 8 warps a sample,
// its last warp one thread): 450 threads in 15 warps a sample, for twice
// the warps to issue from; each thread half the registers (two blocks of
// 480 fit a multiprocessor's 65,536 registers at 64 a thread). The same
// sums in the same order, bit for bit.
//
// Measured: not yet timed on a GPU.
#include "cuda/conv.cuh"
#include "dev.hpp"

#include <cstdint>

DEV_REPLACES(conv2d_forward_relu_pool)

namespace {

using namespace dpt;
using namespace dpt::cuda;
using namespace dpt::cuda::conv;

// (Copied from the trainer's conv_forward.cu, whose G is 2.)
template <int G_>
struct TiledRows {
    static constexpr int K = 5, KK = K * K, H = 13, OW = H - K + 1, G = G_, CH = 4;
    static constexpr int OCP = 50, groups = OCP / G;  // the most output channels (those past oc staged as zeros)
    static constexpr int XS = 20;                     // a staged input row: 13 values, padded
    static constexpr int threads = (OW * groups + 31) / 32 * 32;
    static constexpr int filter_fours = CH * KK / 4 * OCP;  // 16-byte loads of a chunk's filters: 25 a channel
    static constexpr int input_fours = CH * H * H / 4;      // and of its inputs
    static constexpr int filter_loads = (filter_fours + threads - 1) / threads;
    static constexpr int input_loads = (input_fours + threads - 1) / threads;
    static constexpr int sw_floats = CH * KK * OCP, sx_floats = CH * H * XS;
    static_assert(OCP % G == 0 && OCP * OW * OW <= sw_floats + sx_floats && (CH * H * H) % 4 == 0);

    struct Chunk {  // a thread's share of a chunk, in registers between its loads and its stores
        Floats<4> w[filter_loads], x[input_loads];
    };

    // Loads chunk c0's filters (as 16-byte runs of one output channel's
    // taps, the channels fastest; zeros for the channels past oc) and inputs.
    __device__ static void load_chunk(Chunk& to, const float* x_sample, const float* w, int c, int oc, int c0) {
        const int t = int(threadIdx.x);
#pragma unroll
        for (int i = 0; i < filter_loads; ++i) {
            const int q = t + i * threads, run = q / OCP, co = q - run * OCP;
            to.w[i] = q < filter_fours && co < oc ? load_floats<4>(w + (size_t(co) * c + c0) * KK + 4 * run)
                                                  : Floats<4>{};
        }
#pragma unroll
        for (int i = 0; i < input_loads; ++i) {
            const int q = t + i * threads;
            to.x[i] = q < input_fours ? load_floats<4>(x_sample + size_t(c0) * H * H + 4 * q) : Floats<4>{};
        }
    }

    // Stores a chunk from registers: filter tap r (channel, row, column
    // within the chunk) of output channel co at sw[r * OCP + co]; input value
    // e (channel, row, column) at sx[(channel * H + row) * XS + column]; each
    // an operand of g's arithmetic (FP32: as it is).
    __device__ static void store_chunk(float* sw, float* sx, const Chunk& from, bool tf32) {
        const int t = int(threadIdx.x);
#pragma unroll
        for (int i = 0; i < filter_loads; ++i) {
            const int q = t + i * threads, run = q / OCP, co = q - run * OCP;
            if (q < filter_fours) {
#pragma unroll
                for (int j = 0; j < 4; ++j) sw[(4 * run + j) * OCP + co] = operand(from.w[i].v[j], tf32);
            }
        }
#pragma unroll
        for (int i = 0; i < input_loads; ++i) {
            const int q = t + i * threads;
            if (q < input_fours) {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int e = 4 * q + j, row = e / H;  // (channel * H + row)
                    sx[row * XS + (e - row * H)] = operand(from.x[i].v[j], tf32);
                }
            }
        }
    }
};

template <int G, bool relu, bool pooled, PoolKind kind>
__device__ inline void rows_forward_tiled_sums(float* staged, float* y, float* pooled_y, const float* x, const float* w,
                                               const float* b, const Geometry& g, const PoolGeometry& pg) {
    using T = TiledRows<G>;
    constexpr int K = T::K, H = T::H, OW = T::OW, CH = T::CH, XS = T::XS, OCP = T::OCP;
    float* const sw = staged;
    float* const sx = staged + T::sw_floats;
    const int sample = int(blockIdx.x), t = int(threadIdx.x);
    const int oy = t / T::groups, group = t - oy * T::groups, co0 = G * group;
    const bool active = oy < OW;
    const float* x_sample = x + size_t(sample) * g.c * H * H;
    float acc[G][OW] = {};
    typename T::Chunk next;
    T::load_chunk(next, x_sample, w, g.c, g.oc, 0);
    for (int c0 = 0; c0 < g.c; c0 += CH) {
        __syncthreads();  // the previous chunk's sums are done
        T::store_chunk(sw, sx, next, g.tf32);
        __syncthreads();
        if (c0 + CH < g.c) T::load_chunk(next, x_sample, w, g.c, g.oc, c0 + CH);
        if (!active) continue;
#pragma unroll 1
        for (int cc = 0; cc < CH; ++cc) {
#pragma unroll
            for (int ky = 0; ky < K; ++ky) {
                float xr[16];  // the row's 13 values and 3 no sum reads
                load_row<16>(xr, sx + (cc * H + oy + ky) * XS);
                Floats<G> wv[K];
#pragma unroll
                for (int kx = 0; kx < K; ++kx) wv[kx] = load_floats<G>(sw + ((cc * K + ky) * K + kx) * OCP + co0);
#pragma unroll
                for (int kx = 0; kx < K; ++kx)
#pragma unroll
                    for (int o = 0; o < G; ++o)
#pragma unroll
                        for (int ox = 0; ox < OW; ++ox) acc[o][ox] = fmaf(xr[ox + kx], wv[kx].v[o], acc[o][ox]);
            }
        }
    }
    constexpr int plane = OW * OW;
#pragma unroll
    for (int o = 0; o < G; ++o) {
        const int co = co0 + o;
        if (!active || co >= g.oc) continue;
        float* row = y + (size_t(sample) * g.oc + co) * plane + oy * OW;
#pragma unroll
        for (int ox = 0; ox < OW; ++ox) {
            float v = acc[o][ox] + b[co];
            if (relu) v = v > 0.0f ? v : 0.0f;
            acc[o][ox] = v;
            row[ox] = v;
        }
    }
    if (!pooled) return;
    __syncthreads();  // the last chunk's reads are done: its space holds the planes now
#pragma unroll
    for (int o = 0; o < G; ++o) {
        const int co = co0 + o;
        if (!active || co >= g.oc) continue;
#pragma unroll
        for (int ox = 0; ox < OW; ++ox) staged[co * plane + oy * OW + ox] = acc[o][ox];
    }
    __syncthreads();
    pool_staged_planes<kind, OW>(pooled_y, staged, sample, g, pg, 0, g.oc, plane);
}

template <bool relu, bool pooled, PoolKind kind>
__global__ void __launch_bounds__(TiledRows<1>::threads, 2)
    rows_forward_tiled_single(float* y, float* pooled_y, const float* x, const float* w, const float* b, Geometry g,
                              PoolGeometry pg) {
    __shared__ __align__(16) float staged[TiledRows<1>::sw_floats + TiledRows<1>::sx_floats];
    rows_forward_tiled_sums<1, relu, pooled, kind>(staged, y, pooled_y, x, w, b, g, pg);
}

// Whether the tiled kernel takes s (and x and w at 16-byte boundaries): FP32.
bool rows_forward_tiled_fits(const ConvShape& s, const float* x, const float* w) {
    using T = TiledRows<1>;
    return s.math == Math::fp32 && s.n > 0 &&
           s.stride == 1 && s.pad == 0 && s.kh == T::K && s.kw == T::K && s.h == T::H && s.w == T::H &&
           s.c % T::CH == 0 && s.oc <= T::OCP && reinterpret_cast<std::uintptr_t>(x) % 16 == 0 &&
           reinterpret_cast<std::uintptr_t>(w) % 16 == 0;
}

}  // namespace

namespace DEV_NAMESPACE {

void conv2d_forward_relu_pool(float* y, float* pooled, const float* x, const float* w, const float* b,
                              const ConvShape& s, PoolKind kind, const PoolShape& ps, float* scratch,
                              cudaStream_t stream) {
    if (!rows_forward_tiled_fits(s, x, w))
        return TRAINER(conv2d_forward_relu_pool)(y, pooled, x, w, b, s, kind, ps, scratch, stream);
    check_pooling(s, ps, "conv2d_forward_relu_pool");
    const PoolGeometry pg{ps.k, ps.stride, ps.oh(), ps.ow()};
    const auto kernel = kind == PoolKind::max ? rows_forward_tiled_single<true, true, PoolKind::max>
                                              : rows_forward_tiled_single<true, true, PoolKind::avg>;
    launch::kernel("rows_forward_tiled_single", kernel, unsigned(s.n), unsigned(TiledRows<1>::threads), stream, y,
                   pooled, x, w, b, Geometry(s), pg);
}

}  // namespace DEV_NAMESPACE

DEV_VERSION("conv2d_forward/12_rows_single",
            "LeNet's conv2 forward with its ReLU and pooling, a thread one output channel of a row (450 threads a "
            "sample, 15 warps) where the trainer's takes two (225, 8 warps): the same sums, bit for bit",
            "not yet timed", l.conv2d_forward_relu_pool = &DEV_NAMESPACE::conv2d_forward_relu_pool)
