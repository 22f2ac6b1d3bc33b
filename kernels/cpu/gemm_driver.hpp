// The blocked GEMM's driver, shared by gemm() (kernels/cpu/gemm.cpp) and the
// implicit-GEMM convolutions (kernels/cpu/conv.cpp), which differ only in how
// the B operand is packed: from a matrix, or gathered straight from images.
// See gemm.cpp for the blocking scheme.
#pragma once
#include <algorithm>
#include <cstddef>

#include "vectors.hpp"

namespace dpt::cpu::detail {

constexpr int NR = 2 * lanes;  // columns of the register tile (two vectors)
// Rows of the register tile, at most: its 2 * MR sums, the two vectors of
// B and a broadcast of A must fit the vector registers (32 with AVX-512,
// 16 with AVX2).
constexpr int MR_MAX = lanes == 16 ? 12 : 6;
// At most, where A is read in place: each of its rows is a pointer of its
// own, and 12 of them with the loop's own leave x86-64's 16 general
// registers short (the loop reloads one from the stack every step); 8 rows
// ran ResNet-18's Winograd products 5-10% faster than 12
// (build/bench/conv_cpu).
constexpr int MR_IN_PLACE = lanes == 16 ? 8 : 6;
constexpr int KC = 256;   // depth of a packed block: a 12x256 A panel and a 256x32 B panel fit L1
constexpr int MC = 144;   // rows of a packed A block (144 x 256 floats = 147.5 KB, fits L2)
constexpr int NC = 2048;  // columns of a packed B block (2.1 MB, meant for L3)

// The tile's rows for a product of m rows, at most `most`: m itself when it
// fits; else the count from two thirds of `most` to `most` that leaves the
// fewest rows of the last tile empty (the larger on a tie): 50 output
// channels take 5 tiles of 10 rather than 5 of 12, 10 rows computed for
// nothing.
constexpr int tile_rows(int m, int most = MR_MAX) {
    if (m <= most) return m;
    int best = most;
    for (int mr = most; mr >= most * 2 / 3; --mr)
        if ((m + mr - 1) / mr * mr - m < (m + best - 1) / best * best - m) best = mr;
    return best;
}

// This thread's packing buffers: MC*KC floats for A, KC*NC for B.
float* pack_buffer_a();
float* pack_buffer_b();

// Packs A^T[i0 : i0+mc, k0 : k0+kc] (A stored (k, m)) as mr-row panels,
// zero-filled past mc.
void pack_a(float* dst, const float* a, int m, int i0, int mc, int k0, int kc, int mr);

// C[0:rows, 0:cols] (row stride ldc) = or += an mr-row A panel times an
// NR-column B panel, both of depth kc. The A panel is packed (mr floats per
// k) when lda is 0; otherwise it is read in place, row r at a + r * lda.
void micro_kernel(int mr, float* c, int ldc, const float* a, size_t lda, const float* b, int kc, int rows, int cols,
                  bool accumulate);

// C (m, n) = or += op(A) (m, k) . B (k, n), where pack_b(dst, k0, kc, j0, nc)
// writes B[k0 : k0+kc, j0 : j0+nc] as consecutive NR-column panels, each row
// by row (NR floats per k), columns past nc zero-filled. An untransposed A
// is not packed: each of its rows already runs along k, as the micro-kernel
// reads it, and a copy would cost as much as the products when n is small
// (Winograd's 16 GEMMs of 64 or 128 columns).
template <class PackB>
void gemm_driver(float* c, const float* a, bool trans_a, int m, int n, int k, PackB&& pack_b, bool accumulate) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        if (!accumulate) std::fill(c, c + size_t(m) * n, 0.0f);
        return;
    }
    const bool in_place = !trans_a;
    const int mr = tile_rows(m, in_place ? MR_IN_PLACE : MR_MAX), mc_max = MC / mr * mr;
    float* const packed_a = pack_buffer_a();
    float* const packed_b = pack_buffer_b();
    for (int j0 = 0; j0 < n; j0 += NC) {
        const int nc = std::min(NC, n - j0);
        for (int k0 = 0; k0 < k; k0 += KC) {
            const int kc = std::min(KC, k - k0);
            // The first depth block writes C (unless accumulating); later ones add to it.
            const bool acc = accumulate || k0 > 0;
            pack_b(packed_b, k0, kc, j0, nc);
            for (int i0 = 0; i0 < m; i0 += mc_max) {
                const int mc = std::min(mc_max, m - i0);
                if (!in_place) pack_a(packed_a, a, m, i0, mc, k0, kc, mr);
                for (int jp = 0; jp < nc; jp += NR)
                    for (int ip = 0; ip < mc; ip += mr) {
                        const float* panel = in_place ? a + size_t(i0 + ip) * k + k0 : packed_a + size_t(ip) * kc;
                        micro_kernel(mr, c + size_t(i0 + ip) * n + j0 + jp, n, panel, in_place ? size_t(k) : 0,
                                     packed_b + size_t(jp) * kc, kc, std::min(mr, mc - ip), std::min(NR, nc - jp),
                                     acc);
                    }
            }
        }
    }
}

}  // namespace dpt::cpu::detail
