// 2-D average and max pooling on the CPU. CUDA twin: kernels/cuda/pool.cu.
#include <cstring>

#include "kernels.hpp"

namespace dpt::cpu {

void pool2d_forward(float* y, const float* x, PoolKind kind, const PoolShape& s) {
    const int oh = s.oh(), ow = s.ow();
    const float inv_area = 1.0f / float(s.k * s.k);
    for (size_t plane = 0; plane < size_t(s.n) * s.c; ++plane) {
        const float* xp = x + plane * s.h * s.w;
        float* yp = y + plane * oh * ow;
        for (int oy = 0; oy < oh; ++oy)
            for (int ox = 0; ox < ow; ++ox) {
                const float* win = xp + (oy * s.stride) * s.w + ox * s.stride;
                float acc = kind == PoolKind::max ? win[0] : 0.0f;
                for (int i = 0; i < s.k; ++i)
                    for (int j = 0; j < s.k; ++j) {
                        const float v = win[i * s.w + j];
                        acc = kind == PoolKind::max ? (v > acc ? v : acc) : acc + v;
                    }
                yp[oy * ow + ox] = kind == PoolKind::max ? acc : acc * inv_area;
            }
    }
}

void pool2d_backward(float* dx, const float* dy, const float* x, const float* y,
                     PoolKind kind, const PoolShape& s) {
    const int oh = s.oh(), ow = s.ow();
    const float inv_area = 1.0f / float(s.k * s.k);
    std::memset(dx, 0, s.in_size() * sizeof(float));
    for (size_t plane = 0; plane < size_t(s.n) * s.c; ++plane) {
        const float* xp = x + plane * s.h * s.w;
        float* dxp = dx + plane * s.h * s.w;
        const size_t out0 = plane * oh * ow;
        for (int oy = 0; oy < oh; ++oy)
            for (int ox = 0; ox < ow; ++ox) {
                const float g = dy[out0 + oy * ow + ox];
                const int base = (oy * s.stride) * s.w + ox * s.stride;
                if (kind == PoolKind::avg) {
                    for (int i = 0; i < s.k; ++i)
                        for (int j = 0; j < s.k; ++j) dxp[base + i * s.w + j] += g * inv_area;
                    continue;
                }
                // Max: the whole gradient goes to the first tap equal to the max.
                const float m = y[out0 + oy * ow + ox];
                bool done = false;
                for (int i = 0; i < s.k && !done; ++i)
                    for (int j = 0; j < s.k && !done; ++j)
                        if (xp[base + i * s.w + j] == m) {
                            dxp[base + i * s.w + j] += g;
                            done = true;
                        }
            }
    }
}

}  // namespace dpt::cpu
