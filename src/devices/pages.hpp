// A CPU device's activation memory, zeroed, on 2 MB pages where Linux
// gives them on request (transparent huge pages in "madvise" mode, Debian's
// default; /sys/kernel/mm/transparent_hugepage/enabled says which), on
// ordinary 4 KB pages elsewhere. ResNet-18's Winograd transforms write and
// read 25 or 36 planes of a tensor at once, each a page or more from the
// next: with 4 KB pages those accesses miss the TLB. On 2 MB pages
// ResNet-18's CPU step ran 3-4% faster (bench/layers_cpu, which holds its
// activations the same way); LeNet's is unchanged.
#pragma once
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include <sys/mman.h>

namespace dpt {

class PageFloats {
   public:
    explicit PageFloats(size_t floats) {
        constexpr size_t huge = size_t(2) << 20;
        const size_t bytes = (floats * sizeof(float) + huge - 1) / huge * huge;
        if (bytes == 0) return;
        data_.reset(static_cast<float*>(std::aligned_alloc(huge, bytes)));
        if (!data_) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
        madvise(data_.get(), bytes, MADV_HUGEPAGE);  // advice only: refused, the pages stay small
#endif
        std::memset(data_.get(), 0, bytes);  // after the advice: the first touch sets the page size
    }
    float* data() const { return data_.get(); }

   private:
    struct Free {
        void operator()(float* p) const { std::free(p); }
    };
    std::unique_ptr<float[], Free> data_;
};

}  // namespace dpt
