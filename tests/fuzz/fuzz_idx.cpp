// libFuzzer target: the IDX reader (read_idx) on any bytes, gzipped or not.
// Every input must end in a decoded array or an InputError: never a crash,
// an overflow, a hang or an unbounded allocation. The bytes are handed over
// as a memory-backed file, so zlib's path is the one the trainer uses.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/errors.hpp"
#include "model/idx.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const int fd = memfd_create("idx", 0);
    if (fd < 0 || ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != ssize_t(size)) std::abort();
    try {
        const dpt::IdxArray array = dpt::read_idx("/proc/self/fd/" + std::to_string(fd));
        // What it accepts is consistent: the dimensions account for every byte.
        size_t expected = 1;
        for (uint32_t d : array.dims) expected *= d;
        if (array.dims.empty() || expected != array.data.size()) std::abort();
    } catch (const dpt::InputError&) {
    }
    return 0;
}
