// Division by a number that is fixed for a whole launch (a layer's width, its
// filter's taps) as a multiply-high, an add and a shift instead of the ~20
// instructions of an integer division: the implicit-GEMM loaders divide
// several times for every element they load. The method of Granlund and
// Montgomery (1994), as in CUTLASS's FastDivmod: for a divisor d with
// 2^(s-1) < d <= 2^s, m = floor(2^32 (2^s - d) / d) + 1, and then
// n / d = (umulhi(n, m) + n) >> s for every 0 <= n < 2^31.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

namespace dpt::cuda {

class FastDiv {
   public:
    FastDiv() = default;
    explicit FastDiv(int divisor) : d_(divisor) {
        while ((uint64_t(1) << shift_) < uint64_t(divisor)) ++shift_;
        mul_ = unsigned(((uint64_t(1) << 32) * ((uint64_t(1) << shift_) - uint64_t(divisor))) / uint64_t(divisor) + 1);
    }
    __host__ __device__ int divisor() const { return d_; }
    // n / d, for 0 <= n < 2^31.
    __host__ __device__ int div(int n) const {
#ifdef __CUDA_ARCH__
        const unsigned high = __umulhi(unsigned(n), mul_);
#else
        const unsigned high = unsigned((uint64_t(unsigned(n)) * mul_) >> 32);
#endif
        return int((high + unsigned(n)) >> shift_);
    }
    // n % d, given q = n / d.
    __host__ __device__ int rest(int n, int q) const { return n - q * d_; }

   private:
    int d_ = 1;
    unsigned mul_ = 1, shift_ = 0;
};

}  // namespace dpt::cuda
