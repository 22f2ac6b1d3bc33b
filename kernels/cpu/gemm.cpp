// A cache-blocked single-precision GEMM for one CPU core: the engine under
// conv2d and dense on CPU devices. On the GPU the layers run tiles.cuh's
// tiled::gemm; kernels/cuda/gemm.cu runs it on plain matrices, which is what
// the GPU tests compare with this one.
//
// The structure is the classic one (Goto/BLIS): copy ("pack") a block of A and
// a block of B into buffers laid out in the exact order the inner kernel reads
// them, so the inner kernel streams through contiguous memory, and size the
// blocks so that they stay in L1 (a micro-panel of B), L2 (the block of A) and
// L3 (the block of B). Packing also absorbs transposition and ragged edges
// (padded with zeros), so one micro-kernel serves every case. One departure:
// a panel is read in place where its rows already run as the micro-kernel
// reads them and a copy would cost as much as the products (Winograd's
// products, 64 to 256 rows and columns: gemm_driver.hpp says which); the
// sums are the same, in the same order.
//
// The micro-kernel keeps a tile of C two vectors wide in registers and does
// 2 x rows fused multiply-adds per step of k: with AVX2, up to 6x16 in
// twelve 8-wide registers (of 16); where the build targets AVX-512, up to
// 12x32 in twenty-four 16-wide ones (of 32), the shape of BLIS's Skylake-X
// kernel (transposed: C's rows here are its columns). The rows are chosen
// per product (gemm_driver.hpp: tile_rows) so that the last tile is not
// mostly empty. It is written with GCC/Clang vector extensions, not
// intrinsics; built with -O3 -march=native -ffp-contract=fast it compiles
// to vbroadcastss + vfmadd231ps.
#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <utility>

#include "gemm_driver.hpp"
#include "kernels.hpp"

namespace dpt::cpu {
namespace detail {

// Packing buffers, one pair per thread (each CPU device runs on its own thread),
// allocated on first use and reused: no allocation per call.
struct PackBuffers {
    std::unique_ptr<float[]> a{new float[MC * KC]};  // (tile_rows divides at most MC of them)
    std::unique_ptr<float[]> b{new float[KC * NC]};
};
PackBuffers& pack_buffers() {
    thread_local PackBuffers buffers;
    return buffers;
}
float* pack_buffer_a() { return pack_buffers().a.get(); }
float* pack_buffer_b() { return pack_buffers().b.get(); }

// Packs op(A)[i0 : i0+mc, k0 : k0+kc] = A^T[...] as consecutive mr-row
// panels, each stored column by column (mr floats per k), rows past mc
// zero-filled. (An untransposed A is read in place: gemm_driver.hpp.) Rows
// of op(A) are columns of A: each k reads mr neighbours.
void pack_a(float* dst, const float* a, int m, int i0, int mc, int k0, int kc, int mr) {
    for (int ip = 0; ip < mc; ip += mr, dst += mr * kc) {
        const int rows = std::min(mr, mc - ip);
        for (int kk = 0; kk < kc; ++kk) {
            const float* src = a + size_t(k0 + kk) * m + i0 + ip;
            for (int r = 0; r < mr; ++r) dst[kk * mr + r] = r < rows ? src[r] : 0.0f;
        }
    }
}

// Packs op(B)[k0 : k0+kc, j0 : j0+nc] as consecutive NR-column panels, each
// stored row by row (NR floats per k), columns past nc zero-filled.
void pack_b(float* dst, const float* b, bool trans, int k, int n, int k0, int kc,
            int j0, int nc) {
    for (int jp = 0; jp < nc; jp += NR, dst += NR * kc) {
        const int cols = std::min(NR, nc - jp);
        if (trans) {  // columns of op(B) are rows of B: walk each along k
            for (int c = 0; c < NR; ++c) {
                const float* src = b + size_t(j0 + jp + c) * k + k0;
                for (int kk = 0; kk < kc; ++kk) dst[kk * NR + c] = c < cols ? src[kk] : 0.0f;
            }
        } else {  // each k is a contiguous run of NR floats
            for (int kk = 0; kk < kc; ++kk) {
                const float* src = b + size_t(k0 + kk) * n + j0 + jp;
                if (cols == NR)
                    std::memcpy(dst + kk * NR, src, NR * sizeof(float));
                else
                    for (int c = 0; c < NR; ++c) dst[kk * NR + c] = c < cols ? src[c] : 0.0f;
            }
        }
    }
}

// C[0:rows, 0:cols] (row stride ldc) = or += the product of an MR-row A
// panel and an NR-column B panel of depth kc: A's element (r, k) at
// a[k * lda + r] (packed, lda = MR, or a transposed A read in place) or,
// RowPointers, at a[r * lda + k] (an untransposed A read in place); B's row
// k at b + k * ldb (packed, ldb = NR, or read in place). One function from
// the sums' start to their store, its loops over the tile's rows unrolled,
// so that the sums stay in registers throughout: with the products in a
// function of their own, the sums went through memory and every call began
// by clearing them with a call to memset.
template <int MR, bool RowPointers>
[[gnu::always_inline]] inline void tile_product(float* c, int ldc, const float* a, size_t lda, const float* b,
                                                size_t ldb, int kc, int rows, int cols, bool accumulate) {
    vf acc[MR][2] = {};
    const float* row[MR] = {};
    // Row pointers past the matrix's last row repeat it: their sums are never stored.
    if constexpr (RowPointers)
#pragma GCC unroll 12
        for (int r = 0; r < MR; ++r) row[r] = a + size_t(std::min(r, rows - 1)) * lda;
    // Four steps of k a pass: the row pointers then advance once every
    // four steps, not each step (eight of them in place: their increments
    // took the ports the FMAs need).
#pragma GCC unroll 4
    for (int kk = 0; kk < kc; ++kk) {
        const vf b0 = load(b), b1 = load(b + lanes);
#pragma GCC unroll 12
        for (int r = 0; r < MR; ++r) {
            const vf ar = splat(RowPointers ? row[r][kk] : a[r]);
            acc[r][0] += ar * b0;
            acc[r][1] += ar * b1;
        }
        if constexpr (!RowPointers) a += lda;
        b += ldb;
    }
    if (cols == NR) {  // whole rows of the tile (all MR of them but at A's last rows)
#pragma GCC unroll 12
        for (int r = 0; r < MR; ++r) {
            if (r >= rows) break;
            float* out = c + size_t(r) * ldc;
            store(out, accumulate ? load(out) + acc[r][0] : acc[r][0]);
            store(out + lanes, accumulate ? load(out + lanes) + acc[r][1] : acc[r][1]);
        }
        return;
    }
    float tile[MR][NR];
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) {
        store(tile[r], acc[r][0]);
        store(tile[r] + lanes, acc[r][1]);
    }
    for (int r = 0; r < rows; ++r)
        for (int j = 0; j < cols; ++j)
            c[size_t(r) * ldc + j] = (accumulate ? c[size_t(r) * ldc + j] : 0.0f) + tile[r][j];
}

template <int MR>
void tile_product_any(float* c, int ldc, const Operand& a, const Operand& b, int kc, int rows, int cols,
                      bool accumulate) {
    if (a.row_pointers)
        tile_product<MR, true>(c, ldc, a.at, a.stride, b.at, b.stride, kc, rows, cols, accumulate);
    else
        tile_product<MR, false>(c, ldc, a.at, a.stride, b.at, b.stride, kc, rows, cols, accumulate);
}

// The kernel for each tile height from 1 to MR_MAX.
using TileKernel = void (*)(float*, int, const Operand&, const Operand&, int, int, int, bool);
template <int... R>
constexpr std::array<TileKernel, sizeof...(R)> tile_kernels(std::integer_sequence<int, R...>) {
    return {&tile_product_any<R + 1>...};
}
constexpr auto kernels_by_rows = tile_kernels(std::make_integer_sequence<int, MR_MAX>{});

void micro_kernel(int mr, float* c, int ldc, const Operand& a, const Operand& b, int kc, int rows, int cols,
                  bool accumulate) {
    kernels_by_rows[size_t(mr - 1)](c, ldc, a, b, kc, rows, cols, accumulate);
}

}  // namespace detail

void gemm(float* c, const float* a, const float* b, int m, int n, int k,
          bool trans_a, bool trans_b, bool accumulate) {
    detail::gemm_driver(c, a, trans_a, m, n, k,
                        [&](float* dst, int k0, int kc, int j0, int nc) {
                            detail::pack_b(dst, b, trans_b, k, n, k0, kc, j0, nc);
                        },
                        accumulate, trans_b ? nullptr : b);
}

}  // namespace dpt::cpu
