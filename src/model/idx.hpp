// Reader for IDX files, the format of (Fashion-)MNIST: a 4-byte magic
// (0, 0, type, rank), `rank` big-endian uint32 dimensions, then the data.
// dptrain reads only unsigned-byte arrays (type 0x08), gzipped or not.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace dpt {

struct IdxArray {
    std::vector<uint32_t> dims;
    std::vector<uint8_t> data;  // row-major, product(dims) bytes
};

// Reads and checks a whole file. Throws InputError naming `path` and what is
// wrong: missing, unreadable, corrupt gzip, bad magic, wrong size.
IdxArray read_idx(const std::string& path);

}  // namespace dpt
