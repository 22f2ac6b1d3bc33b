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
// The widest operands read in place (transposed A: m; B: n), in floats
// between rows: a panel's rows further apart fall in few of L1's sets and
// evict each other. Reading a transposed A in place took ResNet-18's
// 64-channel Winograd weight gradient from 5.81 to 5.22 ms
// (build/bench/conv_cpu 128, F(4x4)); at 256 channels it was slower, and B
// in place helped at 64 columns only.
constexpr int IN_PLACE_ROWS_A = 128, IN_PLACE_ROWS_B = 64;
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

// Packs op(B)[k0 : k0+kc, j0 : j0+nc] (B stored (k, n), or (n, k) when
// trans) as NR-column panels, zero-filled past nc.
void pack_b(float* dst, const float* b, bool trans, int k, int n, int k0, int kc, int j0, int nc);

// Floats that a B of k x n packed whole (pack_b over all of it) takes; it
// serves gemm_driver's b_packed where k <= KC and n <= NC (one block).
constexpr size_t packed_b_floats(int k, int n) { return size_t(k) * ((n + NR - 1) / NR * NR); }

// Where the micro-kernel reads an operand panel: A's element (r, k) at
// at[k * stride + r], or with row_pointers at at[r * stride + k]; B's row k
// at at + k * stride. A packed panel has stride mr (A) or NR (B).
struct Operand {
    const float* at;
    size_t stride;
    bool row_pointers = false;
};

// C[0:rows, 0:cols] (row stride ldc) = or += an mr-row A panel times an
// NR-column B panel, both of depth kc.
void micro_kernel(int mr, float* c, int ldc, const Operand& a, const Operand& b, int kc, int rows, int cols,
                  bool accumulate);

// C (m, n) = or += op(A) (m, k) . B (k, n), where pack_b(dst, k0, kc, j0, nc)
// writes B[k0 : k0+kc, j0 : j0+nc] as consecutive NR-column panels, each row
// by row (NR floats per k), columns past nc zero-filled.
//
// Packing copies each operand once a block, so it pays where a panel is
// read many times; Winograd's products (64 to 256 rows and columns, depth
// 64 to 256, or depth 256 tiles for the weight gradient) read each panel
// a few times, and copying both cost about as much as the products. So
// whole panels are read in place where they can be: an untransposed A
// always, by its rows (a pointer each); a transposed A as if packed (its
// rows are neighbours at each k) and B, when given as b_in_place (row
// stride n), by its rows, where they are narrow enough (IN_PLACE_ROWS_*).
// Panels past an edge are packed, zero-filled. A B packed whole beforehand
// (b_packed: pack_b over all of it, k <= KC, n <= NC) is read as it is:
// Winograd's filters, the same for every group of samples. The sums are
// the same either way, in the same order.
template <class PackB>
void gemm_driver(float* c, const float* a, bool trans_a, int m, int n, int k, PackB&& pack_b, bool accumulate,
                 const float* b_in_place = nullptr, const float* b_packed = nullptr) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        if (!accumulate) std::fill(c, c + size_t(m) * n, 0.0f);
        return;
    }
    const int mr = tile_rows(m, trans_a ? MR_MAX : MR_IN_PLACE), mc_max = MC / mr * mr;
    const bool a_in_place = trans_a && m <= IN_PLACE_ROWS_A;
    if (n > IN_PLACE_ROWS_B) b_in_place = nullptr;
    const int whole_rows = m / mr * mr;  // where A's last whole panel ends
    float* const packed_a = pack_buffer_a();
    float* const packed_b = pack_buffer_b();
    for (int j0 = 0; j0 < n; j0 += NC) {
        const int nc = std::min(NC, n - j0), whole_cols = nc / NR * NR;
        for (int k0 = 0; k0 < k; k0 += KC) {
            const int kc = std::min(KC, k - k0);
            // The first depth block writes C (unless accumulating); later ones add to it.
            const bool acc = accumulate || k0 > 0;
            if (!b_packed) {  // all of the block, or the panel past B's edge
                if (!b_in_place) pack_b(packed_b, k0, kc, j0, nc);
                else if (whole_cols < nc) pack_b(packed_b, k0, kc, j0 + whole_cols, nc - whole_cols);
            }
            if (a_in_place && whole_rows < m) pack_a(packed_a, a, m, whole_rows, m - whole_rows, k0, kc, mr);
            const auto b_panel = [&](int jp) {
                if (b_packed) return Operand{b_packed + size_t(jp) * kc, NR};
                if (!b_in_place) return Operand{packed_b + size_t(jp) * kc, NR};
                if (jp < whole_cols) return Operand{b_in_place + size_t(k0) * n + j0 + jp, size_t(n)};
                return Operand{packed_b, NR};
            };
            const auto a_panel = [&](int i) {
                if (!trans_a) return Operand{a + size_t(i) * k + k0, size_t(k), true};
                if (!a_in_place) return Operand{packed_a + size_t(i % mc_max) * kc, size_t(mr)};
                if (i < whole_rows) return Operand{a + size_t(k0) * m + i, size_t(m)};
                return Operand{packed_a, size_t(mr)};
            };
            for (int i0 = 0; i0 < m; i0 += mc_max) {
                const int mc = std::min(mc_max, m - i0);
                if (trans_a && !a_in_place) pack_a(packed_a, a, m, i0, mc, k0, kc, mr);
                for (int jp = 0; jp < nc; jp += NR)
                    for (int ip = 0; ip < mc; ip += mr)
                        micro_kernel(mr, c + size_t(i0 + ip) * n + j0 + jp, n, a_panel(i0 + ip), b_panel(jp), kc,
                                     std::min(mr, mc - ip), std::min(NR, nc - jp), acc);
            }
        }
    }
}

}  // namespace dpt::cpu::detail
