// IDX decoding with every check a damaged download could need. zlib's gzread
// reads gzip files and passes other files through unchanged, so one path
// serves both; garbage then fails the magic check.
#include "idx.hpp"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "errors.hpp"

namespace dpt {
namespace {

constexpr uint8_t type_ubyte = 0x08;
constexpr int max_rank = 4;

uint32_t be32(const uint8_t* p) {
    return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}

}  // namespace

IdxArray parse_idx(std::span<const uint8_t> bytes, const std::string& name) {
    auto fail = [&](const std::string& what) { throw InputError(name + ": " + what); };
    if (bytes.size() < 4) fail("too short to be an IDX file (" + std::to_string(bytes.size()) + " bytes)");
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
        if (expected > (uint64_t(1) << 36)) fail("dimensions are implausibly large");
    }
    const uint64_t actual = bytes.size() - header;
    if (actual < expected)
        fail("truncated: the header promises " + std::to_string(expected) + " bytes of data, the file has " +
             std::to_string(actual));
    if (actual > expected)
        fail(std::to_string(actual - expected) + " unexpected bytes after the data");
    out.data.assign(bytes.begin() + header, bytes.end());
    return out;
}

IdxArray read_idx(const std::string& path) {
    gzFile raw = gzopen(path.c_str(), "rb");
    if (!raw) throw InputError(path + ": cannot open (" + std::strerror(errno) + ")");
    std::unique_ptr<gzFile_s, int (*)(gzFile)> file(raw, gzclose);
    gzbuffer(raw, 1 << 17);

    std::vector<uint8_t> bytes;
    constexpr size_t chunk = 1 << 20;
    for (;;) {
        const size_t old = bytes.size();
        bytes.resize(old + chunk);
        const int got = gzread(raw, bytes.data() + old, unsigned(chunk));
        if (got < 0) {
            int code = 0;
            const char* msg = gzerror(raw, &code);
            throw InputError(path + ": cannot decompress (" + (code == Z_ERRNO ? std::strerror(errno) : msg) + ")");
        }
        bytes.resize(old + size_t(got));
        if (got == 0) break;
    }
    // A gzip stream cut short reads as a clean end of file with an error set.
    int code = 0;
    const char* msg = gzerror(raw, &code);
    if (code != Z_OK) throw InputError(path + ": damaged gzip data (" + msg + ")");
    return parse_idx(bytes, path);
}

}  // namespace dpt
