// LeNet's conv2 input gradient by the trainer's tiled rows kernel with one
// input channel a thread, not two (input_grad_rows_tiled_single, and
// _single_finishing where it first adds the weight gradient's slices).
//
// Against the trainer's (kernels/cuda/conv_backward_data.cu:
// input_grad_rows_tiled_wide, a thread 2 input channels of one row, 130
// threads in 5 warps a sample, its last warp two threads): 260 threads in 9
// warps a sample, for twice the warps to issue from. The same sums in the
// same order, bit for bit.
//
// Measured: not yet timed on a GPU.
#include "cuda/conv.cuh"
#include "dev.hpp"

#include <cstdint>

DEV_REPLACES(conv2d_backward_data)

namespace {

using namespace dpt;
using namespace dpt::cuda;
using namespace dpt::cuda::conv;

// (Copied from the trainer's conv_backward_data.cu, whose G is 2.)
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

using Tiled = TiledInputGrad<10, 1>;
__global__ void __launch_bounds__(Tiled::threads)
    input_grad_rows_tiled_single(float* dx, const float* dy, const float* w, Geometry g) {
    __shared__ __align__(16) float staged[Tiled::sw_floats + Tiled::sdy_floats];
    input_grad_rows_tiled_sums<Tiled::CH, Tiled::G>(staged, dx, dy, w, g);
}
__global__ void __launch_bounds__(Tiled::threads)
    input_grad_rows_tiled_single_finishing(float* dx, const float* dy, const float* w, Geometry g,
                                           UnfinishedWeightGrad weight) {
    finish_weight_slices(weight);
    __shared__ __align__(16) float staged[Tiled::sw_floats + Tiled::sdy_floats];
    input_grad_rows_tiled_sums<Tiled::CH, Tiled::G>(staged, dx, dy, w, g);
}

// Whether the tiled kernel takes s (and w at a 16-byte boundary).
bool input_grad_rows_tiled_fits(const ConvShape& s, const float* w) {
    using T = Tiled;
    constexpr int K = T::K, H = T::H, CP = T::CP;
    return s.n > 0 && s.stride == 1 && s.pad == 0 &&
           s.kh == K && s.kw == K && s.h == H && s.w == H && s.c <= CP && s.c % 4 == 0 &&
           reinterpret_cast<std::uintptr_t>(w) % 16 == 0;
}

}  // namespace

namespace DEV_NAMESPACE {

void conv2d_backward_data(float* dx, const float* dy, const float* w, const ConvShape& s, float* scratch,
                          cudaStream_t stream, const UnfinishedWeightGrad& weight) {
    if (!input_grad_rows_tiled_fits(s, w)) return TRAINER(conv2d_backward_data)(dx, dy, w, s, scratch, stream, weight);
    const Geometry g(s);
    if (weight.dw)
        return launch::kernel("input_grad_rows_tiled_single_finishing", input_grad_rows_tiled_single_finishing,
                              unsigned(s.n), unsigned(Tiled::threads), stream, dx, dy, w, g, weight);
    launch::kernel("input_grad_rows_tiled_single", input_grad_rows_tiled_single, unsigned(s.n),
                   unsigned(Tiled::threads), stream, dx, dy, w, g);
}

}  // namespace DEV_NAMESPACE

DEV_VERSION("conv2d_backward_data/12_rows_single",
            "LeNet's conv2 input gradient (and the weight gradient's slices it adds first), a thread one input "
            "channel of a row (260 threads a sample, 9 warps) where the trainer's takes two (130, 5 warps): the same "
            "sums, bit for bit",
            "not yet timed", l.conv2d_backward_data = &DEV_NAMESPACE::conv2d_backward_data)
