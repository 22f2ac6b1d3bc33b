// 2-D convolution on the GPU, forward and both backwards, as implicit GEMMs
// on the tiled SGEMM of tiles.cuh. CPU twin: kernels/cpu/conv.cpp, which
// unfolds the image into a matrix first (im2col); here the loaders compute
// each element of that matrix when a tile needs it, so nothing is unfolded
// in memory, and the epilogues write NCHW directly.
//
//   forward          y (oc, n*oh*ow)  = w (oc, c*kh*kw)   . unfold(x) (c*kh*kw, n*oh*ow)
//   backward-data    dx (c, n*h*w)    = w^T (c, oc*kh*kw) . spread(dy) (oc*kh*kw, n*h*w)
//   backward-weight  dw (oc, c*kh*kw) += dy (oc, n*oh*ow)  . unfold(x)^T (n*oh*ow, c*kh*kw)
//
// spread(dy) holds, for input pixel (y, x) and filter tap (o, ky, kx), the
// output gradient that tap carried from (y, x): dy[o][(y+pad-ky)/stride][...]
// when that is a whole output position, else 0. Backward-data is then a plain
// product, each dx element written once: no atomics, the same bits every run.
#include "kernels.hpp"
#include "launch.cuh"
#include "tiles.cuh"

namespace dpt::cuda {
namespace {

// ConvShape's sizes, precomputed on the host for the device code.
struct Geometry {
    int n, c, h, w, oc, kh, kw, stride, pad, oh, ow;
    explicit Geometry(const ConvShape& s)
        : n(s.n), c(s.c), h(s.h), w(s.w), oc(s.oc), kh(s.kh), kw(s.kw), stride(s.stride), pad(s.pad),
          oh(s.oh()), ow(s.ow()) {}
    __device__ int taps() const { return kh * kw; }
};

// unfold(x) (c*kh*kw, n*oh*ow): the input pixel that filter tap q sees at output column col.
__device__ inline float unfolded(const float* x, const Geometry& g, int q, int col) {
    const int ch = q / g.taps(), t = q - ch * g.taps(), ky = t / g.kw, kx = t - ky * g.kw;
    const int pixels = g.oh * g.ow, s = col / pixels, p = col - s * pixels, oy = p / g.ow, ox = p - oy * g.ow;
    const int iy = oy * g.stride - g.pad + ky, ix = ox * g.stride - g.pad + kx;
    if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) return 0.0f;  // padding
    return x[((size_t(s) * g.c + ch) * g.h + iy) * g.w + ix];
}

struct Weights {  // w as (oc, c*kh*kw), row-major
    const float* w;
    int k;
    static constexpr bool k_fast = true;
    __device__ float operator()(int o, int q) const { return w[size_t(o) * k + q]; }
};
struct Unfold {  // unfold(x) (c*kh*kw, n*oh*ow)
    const float* x;
    Geometry g;
    static constexpr bool k_fast = false;  // consecutive columns are neighbouring pixels
    __device__ float operator()(int q, int col) const { return unfolded(x, g, q, col); }
};
template <bool relu>
struct StoreOutput {  // y (n, oc, oh, ow) = value + b[o], then ReLU
    float* y;
    const float* b;
    int oc, pixels;
    __device__ void operator()(int, int o, int col, float v) const {
        const int s = col / pixels, p = col - s * pixels;
        v += b[o];
        if (relu) v = v > 0.0f ? v : 0.0f;  // as cpu::relu_forward (NaN -> 0)
        y[(size_t(s) * oc + o) * pixels + p] = v;
    }
};

struct WeightsTransposed {  // w^T as (c, oc*kh*kw)
    const float* w;
    int c, taps;
    static constexpr bool k_fast = true;  // along the taps of one filter
    __device__ float operator()(int ch, int q) const {
        const int o = q / taps, t = q - o * taps;
        return w[(size_t(o) * c + ch) * taps + t];
    }
};
struct Spread {  // spread(dy) (oc*kh*kw, n*h*w)
    const float* dy;
    Geometry g;
    static constexpr bool k_fast = false;
    __device__ float operator()(int q, int col) const {
        const int o = q / g.taps(), t = q - o * g.taps(), ky = t / g.kw, kx = t - ky * g.kw;
        const int pixels = g.h * g.w, s = col / pixels, p = col - s * pixels, iy = p / g.w, ix = p - iy * g.w;
        const int ty = iy + g.pad - ky, tx = ix + g.pad - kx;
        if (ty < 0 || tx < 0 || ty % g.stride != 0 || tx % g.stride != 0) return 0.0f;
        const int oy = ty / g.stride, ox = tx / g.stride;
        if (oy >= g.oh || ox >= g.ow) return 0.0f;
        return dy[((size_t(s) * g.oc + o) * g.oh + oy) * g.ow + ox];
    }
};
struct StoreInputGrad {  // dx (n, c, h, w) = value
    float* dx;
    int c, pixels;
    __device__ void operator()(int, int ch, int col, float v) const {
        const int s = col / pixels, p = col - s * pixels;
        dx[(size_t(s) * c + ch) * pixels + p] = v;
    }
};

struct OutputGrad {  // dy as (oc, n*oh*ow)
    const float* dy;
    int oc, pixels;
    static constexpr bool k_fast = true;
    __device__ float operator()(int o, int col) const {
        const int s = col / pixels, p = col - s * pixels;
        return dy[(size_t(s) * oc + o) * pixels + p];
    }
};
struct UnfoldTransposed {  // unfold(x)^T (n*oh*ow, c*kh*kw)
    const float* x;
    Geometry g;
    static constexpr bool k_fast = true;  // k runs along the output pixels
    __device__ float operator()(int col, int q) const { return unfolded(x, g, q, col); }
};
struct StorePartial {  // split z of (m, n) partial sums, or dw += value when unsplit
    float* out;
    size_t size;  // m * n
    int n;
    bool accumulate;
    __device__ void operator()(int z, int i, int j, float v) const {
        float& dst = out[size_t(z) * size + size_t(i) * n + j];
        dst = accumulate ? dst + v : v;
    }
};

// dw[i] += partial[0][i] + partial[1][i] + ..., in split order.
__global__ void add_partials(float* dw, const float* partial, int splits, size_t size) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < size; i += size_t(gridDim.x) * blockDim.x) {
        float sum = 0.0f;
        for (int z = 0; z < splits; ++z) sum += partial[size_t(z) * size + i];
        dw[i] += sum;
    }
}

// db[o] += sum of dy over samples and pixels of channel o: one block per channel.
__global__ void conv_bias_grad(float* db, const float* dy, int n, int oc, int pixels) {
    const int o = blockIdx.x;
    float sum = 0.0f;
    for (int s = 0; s < n; ++s) {
        const float* plane = dy + (size_t(s) * oc + o) * pixels;
        for (int p = threadIdx.x; p < pixels; p += blockDim.x) sum += plane[p];
    }
    sum = launch::block_sum(sum);
    if (threadIdx.x == 0) db[o] += sum;
}

int weight_grad_splits(const ConvShape& s) {
    return tiled::splits_for(s.oc, s.col_rows(), s.n * s.col_cols());
}

template <bool relu>
void forward(float* y, const float* x, const float* w, const float* b, const ConvShape& s, cudaStream_t stream) {
    const Geometry g(s);
    tiled::gemm(s.oc, s.n * s.col_cols(), s.col_rows(), Weights{w, s.col_rows()}, Unfold{x, g},
                StoreOutput<relu>{y, b, s.oc, s.col_cols()}, stream);
}

}  // namespace

size_t conv2d_scratch_floats(const ConvShape& s) {
    const int splits = weight_grad_splits(s);
    return splits > 1 ? size_t(splits) * s.weight_size() : 0;
}

void conv2d_forward(float* y, const float* x, const float* w, const float* b, const ConvShape& s, float*,
                    cudaStream_t stream) {
    forward<false>(y, x, w, b, s, stream);
}

void conv2d_forward_relu(float* y, const float* x, const float* w, const float* b, const ConvShape& s, float*,
                         cudaStream_t stream) {
    forward<true>(y, x, w, b, s, stream);
}

void conv2d_backward_data(float* dx, const float* dy, const float* w, const ConvShape& s, float*,
                          cudaStream_t stream) {
    const Geometry g(s);
    tiled::gemm(s.c, s.n * s.h * s.w, s.oc * s.kh * s.kw, WeightsTransposed{w, s.c, s.kh * s.kw}, Spread{dy, g},
                StoreInputGrad{dx, s.c, s.h * s.w}, stream);
}

void conv2d_backward_weight(float* dw, float* db, const float* dy, const float* x, const ConvShape& s,
                            float* scratch, cudaStream_t stream) {
    const Geometry g(s);
    const int m = s.oc, n = s.col_rows(), k = s.n * s.col_cols(), splits = weight_grad_splits(s);
    const OutputGrad a{dy, s.oc, s.col_cols()};
    const UnfoldTransposed b{x, g};
    if (splits == 1) {
        tiled::gemm(m, n, k, a, b, StorePartial{dw, s.weight_size(), n, true}, stream);
    } else {
        tiled::gemm(m, n, k, a, b, StorePartial{scratch, s.weight_size(), n, false}, stream, splits);
        launch::kernel("add_partials", add_partials, launch::grid_for(s.weight_size()), launch::threads, stream,
            dw, scratch, splits, s.weight_size());
    }
    if (s.n > 0) {
        launch::kernel("conv_bias_grad", conv_bias_grad, unsigned(s.oc), launch::threads, stream,
            db, dy, s.n, s.oc, s.col_cols());
    }
}

}  // namespace dpt::cuda
