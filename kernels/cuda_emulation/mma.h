// The part of CUDA's warp matrix API (nvcuda::wmma) that dptrain's TF32
// kernels use, on the emulated GPU: m16n16k8 with TF32 operands and FP32
// accumulators. As on a GPU, every thread of a warp calls each operation
// with the same arguments, and a fragment's elements are spread over the
// warp's 32 threads in a layout that code must not rely on. Here element e
// of a fragment (its matrix in row-major order: 16 x 8 for A, 8 x 16 for B,
// 16 x 16 for C) is x[e % num_elements] of lane e / num_elements: a lane
// holds neighbours, as on a GPU, so a lane that reads a stored fragment back
// reads what other lanes wrote, and needs the warp to meet at __syncwarp()
// first.
//
// load_matrix_sync and store_matrix_sync read and write only the calling
// lane's elements, and check CUDA's rules: a 256-bit aligned pointer, a
// leading dimension that is a multiple of 4 floats. mma_sync is collective:
// each lane puts its A and B elements in its warp's exchange memory, the
// warp meets at __syncwarp(), and each lane computes its own elements of D
// from the whole of A and B (the 8 products of a result added to C in order
// of k, in FP32). The tensor cores add in an order of their own, so a TF32
// kernel matches its CPU twin within a tolerance, as the FP32 kernels do.
// The products of two TF32 numbers are exact in FP32 on both.
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "device_code.hpp"

namespace nvcuda::wmma {

struct row_major;
struct col_major;
struct matrix_a;
struct matrix_b;
struct accumulator;
namespace precision {
struct tf32;
}
enum layout_t { mem_row_major, mem_col_major };

// x rounded to the nearest TF32 number (10 bits of fraction), ties away
// from zero, as cvt.rna.tf32.f32 does; NaN and infinity unchanged.
inline float __float_to_tf32(float x) {
    uint32_t u = std::bit_cast<uint32_t>(x);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
    return std::bit_cast<float>(u);
}

template <class Use, int m, int n, int k, class T, class Layout = void>
class fragment;

namespace detail {
template <int rows_, int cols_>
struct Elements {
    static constexpr int rows = rows_, cols = cols_;
    enum { num_elements = rows * cols / 32 };
    float x[num_elements];
};
// Where element e of a rows x cols matrix lies, from p with leading dimension ldm.
inline const float* at(const float* p, int e, int cols, unsigned ldm, bool row_major) {
    const int r = e / cols, c = e % cols;
    return row_major ? p + size_t(r) * ldm + c : p + r + size_t(c) * ldm;
}
inline void check(const void* p, unsigned ldm) {
    if (reinterpret_cast<uintptr_t>(p) % 32 != 0)
        dpt::cuda_emulation::fail("wmma: a matrix pointer that is not 256-bit aligned");
    if (ldm % 4 != 0) dpt::cuda_emulation::fail("wmma: a leading dimension that is not a multiple of 4 floats");
}
// Each warp's exchange memory for mma_sync (a block has at most 32 warps).
struct Exchange {
    float a[16 * 8], b[8 * 16];
};
inline Exchange& exchange() {
    static thread_local DPTRAIN_EMULATION_TLS Exchange warps[32];  // like __shared__: the block's
    return warps[dpt::cuda_emulation::warp()];
}
}  // namespace detail

template <class Layout>
class fragment<matrix_a, 16, 16, 8, precision::tf32, Layout> : public detail::Elements<16, 8> {};
template <class Layout>
class fragment<matrix_b, 16, 16, 8, precision::tf32, Layout> : public detail::Elements<8, 16> {};
template <>
class fragment<accumulator, 16, 16, 8, float, void> : public detail::Elements<16, 16> {};

template <class Use, int m, int n, int k, class T, class Layout>
void fill_fragment(fragment<Use, m, n, k, T, Layout>& f, float value) {
    for (float& v : f.x) v = value;
}

template <class Use, class Layout>
void load_matrix_sync(fragment<Use, 16, 16, 8, precision::tf32, Layout>& f, const float* p, unsigned ldm) {
    detail::check(p, ldm);
    const int lane = int(dpt::cuda_emulation::lane());
    for (int t = 0; t < f.num_elements; ++t)
        f.x[t] = *detail::at(p, lane * f.num_elements + t, f.cols, ldm, std::is_same_v<Layout, row_major>);
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 8, float>& f, const float* p, unsigned ldm,
                             layout_t layout) {
    detail::check(p, ldm);
    const int lane = int(dpt::cuda_emulation::lane());
    for (int t = 0; t < f.num_elements; ++t)
        f.x[t] = *detail::at(p, lane * f.num_elements + t, 16, ldm, layout == mem_row_major);
}
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 8, float>& f, unsigned ldm,
                              layout_t layout) {
    detail::check(p, ldm);
    const int lane = int(dpt::cuda_emulation::lane());
    for (int t = 0; t < f.num_elements; ++t)
        *const_cast<float*>(detail::at(p, lane * f.num_elements + t, 16, ldm, layout == mem_row_major)) = f.x[t];
}

// d = a . b + c, by the whole warp.
template <class LayoutA, class LayoutB>
void mma_sync(fragment<accumulator, 16, 16, 8, float>& d, const fragment<matrix_a, 16, 16, 8, precision::tf32, LayoutA>& a,
              const fragment<matrix_b, 16, 16, 8, precision::tf32, LayoutB>& b,
              const fragment<accumulator, 16, 16, 8, float>& c) {
    const int lane = int(dpt::cuda_emulation::lane());
    detail::Exchange& x = detail::exchange();
    for (int t = 0; t < a.num_elements; ++t) x.a[lane * a.num_elements + t] = a.x[t];
    for (int t = 0; t < b.num_elements; ++t) x.b[lane * b.num_elements + t] = b.x[t];
    __syncwarp();
    // A lane's elements of D lie in one row i, columns j0 on: k outside,
    // so that the compiler keeps the row in vector registers (each element
    // still adds its 8 products in order of k).
    static_assert(16 % c.num_elements == 0);
    const int i = lane * c.num_elements / 16, j0 = lane * c.num_elements % 16;
    float result[c.num_elements];
    for (int t = 0; t < c.num_elements; ++t) result[t] = c.x[t];
    for (int kk = 0; kk < 8; ++kk) {
        const float a_ik = x.a[i * 8 + kk];
        for (int t = 0; t < c.num_elements; ++t) result[t] += a_ik * x.b[kk * 16 + j0 + t];
    }
    __syncwarp();  // every lane has read the exchange before any writes it again
    for (int t = 0; t < d.num_elements; ++t) d.x[t] = result[t];
}

}  // namespace nvcuda::wmma
