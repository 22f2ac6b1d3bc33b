// The weight gradient's implicit GEMM (ResNet-18's convolutions; --tf32's
// too) loading each element of the unfolded input on one predicate.
//
// Against the trainer's (kernels/cuda/conv_backward_weight.cu: the product
// dy . [unfold(x)^T | 1], whose loader tests the window's rows and columns
// and which the core branches around at the k-step's edge, the element's
// address rebuilt from its sample's index): the window's corner is a
// pointer held in registers and each load one multiply-add from it on a
// 32-bit offset; the edge, the rows and the columns one predicate, the
// load predicated on it (dev/cuda/gemm/core.cuh: LoadsIf); for a 1x1
// convolution without padding (the shortcuts), whose taps all fall inside
// the image, the edge alone. The same elements, the same sums, the same
// bits. The product's path otherwise the trainer's
// (conv2d_backward_weight/product.cuh).
//
// Measured: not yet timed on a GPU.
#include "conv2d_backward_weight/product.cuh"
#include "dev.hpp"
#include "gemm/core.cuh"

DEV_REPLACES(conv2d_backward_weight)

namespace {

using namespace dpt;
using namespace dpt::cuda;
using namespace dpt::cuda::conv;
using namespace dpt::cuda::dev::weight_product;

struct UnfoldTransposedPredicated : UnfoldTransposed {
    // The element at `offset` from the corner: one multiply-add, from a 32-bit
    // offset. (Left to itself nvcc keeps every load's offset widened to 64
    // bits across the loop: two registers a load, and a 64-bit add.)
    __device__ static float at(const float* corner, int offset) {
#ifdef __CUDA_ARCH__
        asm volatile("" : "+r"(offset));
#endif
        return __ldg(corner + offset);
    }
    __device__ Step step(int col) const {
        Step pixel = UnfoldTransposed::step(col);
#ifdef __CUDA_ARCH__
        asm("" : "+l"(pixel.corner));  // a pointer in registers: a load is one multiply-add from it
#endif
        return pixel;
    }
    // Whether the load is wanted and the tap (ky, kx) falls inside the image at the pixel.
    template <class Tap>
    __device__ static bool inside(bool wanted, const Geometry& g, const Tap& tap, const Step& pixel) {
        return wanted & (unsigned(pixel.iy0 + tap.ky) < unsigned(g.h)) & (unsigned(pixel.ix0 + tap.kx) < unsigned(g.w));
    }
    __device__ float load_if(bool wanted, const Fixed& tap, const Step& pixel) const {
        return inside(wanted, g, tap, pixel) ? at(pixel.corner, tap.offset) : 0.0f;
    }
};
// The same for a 1x1 convolution without padding, whose every tap falls
// inside the image: the k-step's edge alone.
struct UnfoldTransposedPointwise : UnfoldTransposedPredicated {
    __device__ float load_if(bool wanted, const Fixed& tap, const Step& pixel) const {
        return wanted ? at(pixel.corner, tap.offset) : 0.0f;
    }
};
struct UnfoldTransposedAndOnesPredicated : UnfoldTransposedAndOnes {
    __device__ Step step(int col) const { return UnfoldTransposedPredicated{unfold}.step(col); }
    __device__ float load_if(bool wanted, const Fixed& tap, const Step& pixel) const {
        using U = UnfoldTransposedPredicated;
        float v = wanted ? tap.outside : 0.0f;
        if (U::inside(wanted, unfold.g, tap, pixel)) v = U::at(pixel.corner, tap.offset);
        return v;
    }
};
// f(dy, unfold(x)^T, [unfold(x)^T | 1]), the last two predicated.
struct PredicatedOperands {
    template <class F>
    void operator()(const float* dy, const float* x, const ConvShape& s, F&& f) const {
        const OutputGrad dy_rows{dy, s.oc, FastDiv(s.col_cols())};
        const UnfoldTransposed unfold{x, Geometry(s)};
        const UnfoldTransposedAndOnesPredicated with_ones{{unfold, s.col_rows()}};
        if (s.kh == 1 && s.kw == 1 && s.pad == 0) f(dy_rows, UnfoldTransposedPointwise{{unfold}}, with_ones);
        else f(dy_rows, UnfoldTransposedPredicated{unfold}, with_ones);
    }
};

}  // namespace

namespace DEV_NAMESPACE {

void conv2d_backward_weight(float* dw, float* db, const float* dy, const float* x, const ConvShape& s, Workspace ws,
                            cudaStream_t stream) {
    if (trainer_kernel_takes(s)) return TRAINER(conv2d_backward_weight)(dw, db, dy, x, s, ws, stream);
    product(dw, db, dy, x, s, ws, stream, conv2d_weight_grad_splits(s), PredicatedOperands{}, DevGemm{});
}

}  // namespace DEV_NAMESPACE

DEV_VERSION("conv2d_backward_weight/14_predicated",
            "the weight gradient's implicit GEMM (ResNet-18's) loads each element of the unfolded input on one "
            "predicate (the k-step's edge, the window's rows and columns; the edge alone for a 1x1 without padding) "
            "from a pointer to the window's corner in registers, where the trainer's branches twice around each load "
            "and rebuilds its address: the same bits",
            "not yet timed", l.conv2d_backward_weight = &DEV_NAMESPACE::conv2d_backward_weight)
