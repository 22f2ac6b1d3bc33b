// A cache-blocked single-precision GEMM for one CPU core: the engine under
// conv2d and dense on CPU devices. CUDA twin: kernels/cuda/gemm.cu.
//
// The structure is the classic one (Goto/BLIS): copy ("pack") a block of A and
// a block of B into buffers laid out in the exact order the inner kernel reads
// them, so the inner kernel streams through contiguous memory, and size the
// blocks so that they stay in L1 (a micro-panel of B), L2 (the block of A) and
// L3 (the block of B). Packing also absorbs transposition and ragged edges
// (padded with zeros), so one micro-kernel serves every case.
//
// The micro-kernel keeps a 6x16 tile of C in twelve 8-wide vector registers
// and does 12 fused multiply-adds per step of k: the shape that fits the 16
// AVX2 registers. It is written with GCC/Clang vector extensions, not
// intrinsics; built with -O3 -march=native -ffp-contract=fast it compiles to
// vbroadcastss + vfmadd231ps.
#include <algorithm>
#include <cstring>
#include <memory>

#include "kernels.hpp"

namespace dpt::cpu {
namespace {

constexpr int MR = 6;     // rows of the register tile
constexpr int NR = 16;    // columns of the register tile (two 8-float vectors)
constexpr int KC = 256;   // depth of a packed block: a 6x256 A panel and a 256x16 B panel fit L1
constexpr int MC = 144;   // rows of a packed A block (144 x 256 floats = 144 KiB, fits L2)
constexpr int NC = 2048;  // columns of a packed B block (2 MiB, meant for L3)

using v8f = float __attribute__((vector_size(32)));

inline v8f load8(const float* p) {
    v8f v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
inline void store8(float* p, v8f v) { std::memcpy(p, &v, sizeof v); }

// Packing buffers, one pair per thread (each CPU device runs on its own thread),
// allocated on first use and reused: no allocation per call.
struct PackBuffers {
    std::unique_ptr<float[]> a{new float[MC * KC]};
    std::unique_ptr<float[]> b{new float[KC * NC]};
};
PackBuffers& pack_buffers() {
    thread_local PackBuffers buffers;
    return buffers;
}

// op(A)(i, k) for A stored (m, k), or (k, m) when transposed.
inline float elem(const float* a, bool trans, int rows, int cols, int i, int k) {
    return trans ? a[size_t(k) * rows + i] : a[size_t(i) * cols + k];
}

// Packs op(A)[i0 : i0+mc, k0 : k0+kc] as consecutive MR-row panels, each stored
// column by column (MR floats per k), rows past mc zero-filled.
void pack_a(float* dst, const float* a, bool trans, int m, int k, int i0, int mc,
            int k0, int kc) {
    for (int ip = 0; ip < mc; ip += MR) {
        const int rows = std::min(MR, mc - ip);
        for (int kk = 0; kk < kc; ++kk) {
            for (int r = 0; r < rows; ++r)
                dst[r] = elem(a, trans, m, k, i0 + ip + r, k0 + kk);
            for (int r = rows; r < MR; ++r) dst[r] = 0.0f;
            dst += MR;
        }
    }
}

// Packs op(B)[k0 : k0+kc, j0 : j0+nc] as consecutive NR-column panels, each
// stored row by row (NR floats per k), columns past nc zero-filled.
void pack_b(float* dst, const float* b, bool trans, int k, int n, int k0, int kc,
            int j0, int nc) {
    for (int jp = 0; jp < nc; jp += NR) {
        const int cols = std::min(NR, nc - jp);
        for (int kk = 0; kk < kc; ++kk) {
            if (!trans && cols == NR) {
                std::memcpy(dst, b + size_t(k0 + kk) * n + j0 + jp, NR * sizeof(float));
            } else {
                for (int c = 0; c < cols; ++c)
                    dst[c] = elem(b, trans, k, n, k0 + kk, j0 + jp + c);
                for (int c = cols; c < NR; ++c) dst[c] = 0.0f;
            }
            dst += NR;
        }
    }
}

// C[0:rows, 0:cols] (row stride ldc) = or += the product of an MR-row A panel
// and an NR-column B panel of depth kc.
void micro_kernel(float* c, int ldc, const float* a, const float* b, int kc,
                  int rows, int cols, bool accumulate) {
    v8f acc[MR][2] = {};
    for (int kk = 0; kk < kc; ++kk) {
        const v8f b0 = load8(b), b1 = load8(b + 8);
        for (int r = 0; r < MR; ++r) {
            const v8f ar = v8f{} + a[r];  // broadcast
            acc[r][0] += ar * b0;
            acc[r][1] += ar * b1;
        }
        a += MR;
        b += NR;
    }
    if (rows == MR && cols == NR) {
        for (int r = 0; r < MR; ++r) {
            float* row = c + size_t(r) * ldc;
            if (accumulate) {
                store8(row, load8(row) + acc[r][0]);
                store8(row + 8, load8(row + 8) + acc[r][1]);
            } else {
                store8(row, acc[r][0]);
                store8(row + 8, acc[r][1]);
            }
        }
        return;
    }
    float tile[MR][NR];
    for (int r = 0; r < MR; ++r) {
        store8(tile[r], acc[r][0]);
        store8(tile[r] + 8, acc[r][1]);
    }
    for (int r = 0; r < rows; ++r)
        for (int j = 0; j < cols; ++j)
            c[size_t(r) * ldc + j] = (accumulate ? c[size_t(r) * ldc + j] : 0.0f) + tile[r][j];
}

}  // namespace

void gemm(float* c, const float* a, const float* b, int m, int n, int k,
          bool trans_a, bool trans_b, bool accumulate) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        if (!accumulate) std::fill(c, c + size_t(m) * n, 0.0f);
        return;
    }
    PackBuffers& buf = pack_buffers();
    for (int j0 = 0; j0 < n; j0 += NC) {
        const int nc = std::min(NC, n - j0);
        for (int k0 = 0; k0 < k; k0 += KC) {
            const int kc = std::min(KC, k - k0);
            // The first depth block writes C (unless accumulating); later ones add to it.
            const bool acc = accumulate || k0 > 0;
            pack_b(buf.b.get(), b, trans_b, k, n, k0, kc, j0, nc);
            for (int i0 = 0; i0 < m; i0 += MC) {
                const int mc = std::min(MC, m - i0);
                pack_a(buf.a.get(), a, trans_a, m, k, i0, mc, k0, kc);
                for (int jp = 0; jp < nc; jp += NR) {
                    const float* bp = buf.b.get() + size_t(jp) * kc;
                    for (int ip = 0; ip < mc; ip += MR) {
                        micro_kernel(c + size_t(i0 + ip) * n + j0 + jp, n,
                                     buf.a.get() + size_t(ip) * kc, bp, kc,
                                     std::min(MR, mc - ip), std::min(NR, nc - jp), acc);
                    }
                }
            }
        }
    }
}

}  // namespace dpt::cpu
