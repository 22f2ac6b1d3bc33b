// IDX decoding with every check a damaged download could need. zlib's gzread
// reads gzip files and passes other files through unchanged, so one path
// serves both; garbage then fails the magic check.
#include "model/idx.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>

#include "base/errors.hpp"

namespace dpt {
namespace {

constexpr uint8_t type_ubyte = 0x08;
constexpr int max_rank = 4;
// Fashion-MNIST's largest file holds 47 MB; anything past 1 GB is damage
// (or a gzip bomb), refused before it is read into memory.
constexpr uint64_t max_data_bytes = 1'000'000'000;

uint32_t be32(const uint8_t* p) {
    return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}

// Header plus data plus one, once the header has been read and looks like an
// IDX header; SIZE_MAX before that; the bytes so far when the header is bad
// (parse_idx then says what is wrong).
size_t announced_size(std::span<const uint8_t> bytes) {
    if (bytes.size() < 4) return SIZE_MAX;
    const int rank = bytes[3];
    if (bytes[0] != 0 || bytes[1] != 0 || rank < 1 || rank > max_rank) return bytes.size();
    const size_t header = 4 + 4 * size_t(rank);
    if (bytes.size() < header) return SIZE_MAX;
    uint64_t data = 1;
    for (int i = 0; i < rank && data <= max_data_bytes; ++i) data *= be32(&bytes[4 + 4 * i]);
    return data > max_data_bytes ? bytes.size() : header + size_t(data) + 1;
}

// Checks and decodes the bytes of an IDX file (already decompressed);
// `name` is used in messages.
IdxArray parse_idx(std::span<const uint8_t> bytes, const std::string& name) {
    auto fail = [&](const std::string& what) { throw InputError(name + ": " + what); };
    if (bytes.size() < 4) fail("too short to be an IDX file (" + std::to_string(bytes.size()) + (bytes.size() == 1 ? " byte)" : " bytes)"));
    if (bytes[0] != 0 || bytes[1] != 0) fail("not an IDX file (bad magic number)");
    if (bytes[2] != type_ubyte) fail("IDX element type " + std::to_string(bytes[2]) + " is not unsigned byte (8)");
    const int rank = bytes[3];
    if (rank < 1 || rank > max_rank) fail("IDX rank " + std::to_string(rank) + " is not between 1 and 4");
    const size_t header = 4 + 4 * size_t(rank);
    if (bytes.size() < header) fail("truncated in its header");

    IdxArray out;
    uint64_t expected = 1;
    for (int i = 0; i < rank; ++i) {
        out.dims.push_back(be32(&bytes[4 + 4 * i]));
        expected *= out.dims.back();
        if (expected > max_data_bytes) fail("dimensions are implausibly large (over 1 GB of data)");
    }
    const uint64_t actual = bytes.size() - header;
    if (actual < expected)
        fail("truncated: the header promises " + std::to_string(expected) + " bytes of data, the file has " +
             std::to_string(actual));
    if (actual > expected)
        fail("unexpected bytes after the " + std::to_string(expected) + " bytes of data its header announces");
    out.data.assign(bytes.begin() + header, bytes.end());
    return out;
}

}  // namespace

IdxArray read_idx(const std::string& path) {
    gzFile raw = gzopen(path.c_str(), "rb");
    if (!raw) throw InputError(path + ": cannot open (" + std::strerror(errno) + ")");
    std::unique_ptr<gzFile_s, int (*)(gzFile)> file(raw, gzclose);
    gzbuffer(raw, 1 << 17);

    // Reads until the end, or one byte past what the header announces (enough
    // for parse_idx to report extra bytes), whichever comes first.
    std::vector<uint8_t> bytes;
    size_t limit = SIZE_MAX;
    for (size_t chunk = size_t(1) << 16;; chunk = std::min(2 * chunk, size_t(1) << 24)) {
        const size_t old = bytes.size();
        if (old >= limit) break;
        chunk = std::min(chunk, limit - old);
        bytes.resize(old + chunk);
        const int got = gzread(raw, bytes.data() + old, unsigned(chunk));
        if (got < 0) {
            int code = 0;
            const char* msg = gzerror(raw, &code);
            throw InputError(path + ": cannot decompress (" + (code == Z_ERRNO ? std::strerror(errno) : msg) + ")");
        }
        bytes.resize(old + size_t(got));
        if (got == 0) break;
        if (limit == SIZE_MAX) limit = announced_size(bytes);
    }
    // A gzip stream cut short reads as a clean end of file with an error set.
    int code = 0;
    const char* msg = gzerror(raw, &code);
    if (code != Z_OK) throw InputError(path + ": damaged gzip data (" + msg + ")");
    return parse_idx(bytes, path);
}

}  // namespace dpt
