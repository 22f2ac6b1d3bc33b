// LeNet's conv2 by tiled rows, its forward (conv_forward.cu:
// rows_forward_tiled) and its input gradient (conv_backward_data.cu:
// input_grad_rows_tiled_wide): what a block stages and the sums a thread
// keeps, G channels of a row, with G a template argument (the trainer's
// kernels take 2; dev/cuda/'s versions run them with another).
#pragma once
#include <cstdint>

#include "conv.cuh"

namespace dpt::cuda::conv {

// The forward of LeNet's conv2 alone (5x5 filters, stride 1, no padding,
// 13x13 inputs, input channels a multiple of 4, at most 50 output
// channels): the rows kernel's sums in its order, bit for bit, with more of
// them a thread and the loads of a chunk in flight while the one before is
// summed. A thread of the rows kernel sums one output row of one channel:
// 45 FFMA for 6 shared-memory loads, and 15 warps a sample that all stop at
// each chunk's barrier while its copy, one load in flight at a time, comes
// in. Here:
// - a thread sums G = 2 output channels of one output row (18 sums in
//   registers, thread = row * 25 + group): 90 FFMA for 9 loads (4 of 16
//   bytes of the input row, 5 of 8 bytes, the two channels' taps), a block
//   of 256 threads a sample. (4 channels a thread, 180 FFMA for 9 loads
//   with 128 threads a sample, took 6% longer on an H200: half the warps.)
// - the filters of a chunk of CH = 4 input channels are staged transposed,
//   a tap's 50 output channels side by side (those past oc zero), so that a
//   thread's 2 channels of a tap are one load; the input's rows are 20
//   floats apart, so that the rows a warp reads fall in different banks;
// - each thread loads its share of the next chunk (5 + 1 loads of 16 bytes,
//   all issued before any is used) into registers before it sums the
//   current one, and stores them after: the copy's latency hides behind the
//   sums, and the only stalls are two barriers a chunk.
// The sums run over input channels, filter rows, filter columns, then add
// the bias, as the rows kernel's; ReLU and the pooling after it as there.
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

// Whether the tiled forward takes s (and x and w at 16-byte boundaries): FP32.
inline bool rows_forward_tiled_fits(const ConvShape& s, const float* x, const float* w) {
    using T = TiledRows<2>;
    return s.math == Math::fp32 && s.n > 0 &&
           s.stride == 1 && s.pad == 0 && s.kh == T::K && s.kw == T::K && s.h == T::H && s.w == T::H &&
           s.c % T::CH == 0 && s.oc <= T::OCP && reinterpret_cast<std::uintptr_t>(x) % 16 == 0 &&
           reinterpret_cast<std::uintptr_t>(w) % 16 == 0;
}

// The input gradient of LeNet's conv2 alone (5x5 filters, stride 1, no
// padding, 13x13 inputs, at most 20 input channels and a multiple of 4):
// the staged kernel's sums in its order (input_grad_rows'), bit for bit,
// with two input channels a thread and the loads of a chunk in flight while
// the one before is summed, as the forward's tiled kernel does:
// - a thread sums G = 2 input channels of one input row (26 sums in
//   registers, thread = row * 10 + group): 90 FFMA for 3 loads of 16 bytes
//   (the output gradient's row) and 5 of 8 (the two channels' taps), a block
//   of 160 threads a sample;
// - the filters of a chunk of CH = 10 output channels are staged
//   transposed, a tap's 20 input channels side by side (5 chunks, two
//   barriers each, 25 KB of shared memory a block; chunks of 5 took 1.05x
//   the time on an H200);
// - each thread loads its share of the next chunk into registers before it
//   sums the current one.
// The sums run over output channels, filter rows, filter columns, as the
// staged kernel's; with --tf32 each operand is rounded as it is stored, as
// there.
template <int CH_, int G_>
struct TiledInputGrad {
    static constexpr int K = 5, KK = K * K, H = 13, OW = H - K + 1, G = G_, CP = 20, groups = CP / G, CH = CH_;
    static constexpr int DS = 12;  // a staged dy row: 9 values, padded to 12 floats
    static constexpr int threads = (H * groups + 31) / 32 * 32;  // G = 2: 130 threads, 160 in whole warps
    static constexpr int filter_fours = CH * CP * KK / 4;  // 16-byte loads of a chunk's filters, at most
    static constexpr int dy_floats = CH * OW * OW;         // and loads of its dy
    static constexpr int filter_loads = (filter_fours + threads - 1) / threads;
    static constexpr int dy_loads = (dy_floats + threads - 1) / threads;
    static constexpr int sw_floats = CH * KK * CP, sdy_floats = CH * OW * DS;
    static_assert(H * groups <= threads && CP % G == 0);

    struct Chunk {
        Floats<4> w[filter_loads];
        float dy[dy_loads];
    };

    // Loads output channels co0 to co0 + count's filters (count * c * KK
    // floats from w, where they lie side by side) and dy rows.
    __device__ static void load_chunk(Chunk& to, const float* dy_sample, const float* w, int c, int co0, int count) {
        const int t = int(threadIdx.x), fours = count * c * KK / 4;
        const float* w_chunk = w + size_t(co0) * c * KK;
#pragma unroll
        for (int i = 0; i < filter_loads; ++i) {
            const int q = t + i * threads;
            if (q < fours) to.w[i] = load_floats<4>(w_chunk + 4 * q);
        }
        const float* dy_chunk = dy_sample + size_t(co0) * OW * OW;
#pragma unroll
        for (int i = 0; i < dy_loads; ++i) {
            const int e = t + i * threads;
            if (e < count * OW * OW) to.dy[i] = dy_chunk[e];
        }
    }

    // Stores a chunk from registers: tap t of output channel cc (within the
    // chunk) and input channel ch at sw[(cc * KK + t) * CP + ch]; dy value e
    // (channel, row, column) at sdy[(channel * OW + row) * DS + column]; each
    // an operand (rounded to TF32 with --tf32).
    __device__ static void store_chunk(float* sw, float* sdy, const Chunk& from, const Geometry& g, int count) {
        const int t = int(threadIdx.x), fours = count * g.c * KK / 4;
#pragma unroll
        for (int i = 0; i < filter_loads; ++i) {
            const int q = t + i * threads;
            if (q < fours) {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int e = 4 * q + j, row = e / KK, tap = e - row * KK;  // row: cc * c + ch
                    const int cc = g.by_c.div(row), ch = g.by_c.rest(row, cc);
                    sw[(cc * KK + tap) * CP + ch] = operand(from.w[i].v[j], g.tf32);
                }
            }
        }
#pragma unroll
        for (int i = 0; i < dy_loads; ++i) {
            const int e = t + i * threads;
            if (e < count * OW * OW) {
                const int row = e / OW;
                sdy[row * DS + (e - row * OW)] = operand(from.dy[i], g.tf32);
            }
        }
    }
};

template <int CH, int G>
__device__ inline void input_grad_rows_tiled_sums(float* staged, float* dx, const float* dy, const float* w,
                                                  Geometry g) {
    using T = TiledInputGrad<CH, G>;
    constexpr int K = T::K, KK = T::KK, H = T::H, OW = T::OW, CP = T::CP, DS = T::DS, groups = T::groups;
    float* const sw = staged;
    float* const sdy = staged + T::sw_floats;
    const int sample = int(blockIdx.x), t = int(threadIdx.x);
    const int iy = t / groups, group = t - iy * groups, ch0 = G * group;
    const bool active = iy < H && ch0 < g.c;
    const float* dy_sample = dy + size_t(sample) * g.oc * OW * OW;
    float acc[G][H] = {};
    typename T::Chunk next;
    T::load_chunk(next, dy_sample, w, g.c, 0, min(CH, g.oc));
    for (int co0 = 0; co0 < g.oc; co0 += CH) {
        const int count = min(CH, g.oc - co0);
        __syncthreads();  // the previous chunk's sums are done
        T::store_chunk(sw, sdy, next, g, count);
        __syncthreads();
        if (co0 + CH < g.oc) T::load_chunk(next, dy_sample, w, g.c, co0 + CH, min(CH, g.oc - co0 - CH));
        if (!active) continue;
#pragma unroll 1
        for (int cc = 0; cc < count; ++cc) {
#pragma unroll
            for (int ky = 0; ky < K; ++ky) {
                const int oy = iy - ky;
                if (oy < 0 || oy >= OW) continue;  // this filter row misses the thread's row
                float d[DS];
                load_row<DS>(d, sdy + (cc * OW + oy) * DS);
                Floats<G> wv[K];
#pragma unroll
                for (int kx = 0; kx < K; ++kx) wv[kx] = load_floats<G>(sw + (cc * KK + ky * K + kx) * CP + ch0);
#pragma unroll
                for (int kx = 0; kx < K; ++kx)
#pragma unroll
                    for (int o = 0; o < G; ++o)
#pragma unroll
                        for (int ox = 0; ox < OW; ++ox) acc[o][ox + kx] = fmaf(d[ox], wv[kx].v[o], acc[o][ox + kx]);
            }
        }
    }
    if (!active) return;
#pragma unroll
    for (int o = 0; o < G; ++o) {
        if (ch0 + o >= g.c) continue;
        float* row = dx + ((size_t(sample) * g.c + ch0 + o) * H + iy) * H;
#pragma unroll
        for (int ix = 0; ix < H; ++ix) row[ix] = acc[o][ix];
    }
}

// Whether the tiled input gradient takes s (and w at a 16-byte boundary).
inline bool input_grad_rows_tiled_fits(const ConvShape& s, const float* w) {
    using T = TiledInputGrad<10, 2>;
    constexpr int K = T::K, H = T::H, CP = T::CP;
    return s.n > 0 && s.stride == 1 && s.pad == 0 &&
           s.kh == K && s.kw == K && s.h == H && s.w == H && s.c <= CP && s.c % 4 == 0 &&
           reinterpret_cast<std::uintptr_t>(w) % 16 == 0;
}

}  // namespace dpt::cuda::conv
