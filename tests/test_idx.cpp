// The IDX reader and data set loader: good files (raw and gzipped) load;
// every kind of damage gives an InputError that names the file and the fault.
#include <zlib.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "model/dataset.hpp"
#include "base/errors.hpp"
#include "model/idx.hpp"

using namespace dpt;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

std::vector<uint8_t> idx_bytes(std::vector<uint32_t> dims, uint8_t type = 0x08) {
    std::vector<uint8_t> b = {0, 0, type, uint8_t(dims.size())};
    size_t count = 1;
    for (uint32_t d : dims) {
        for (int shift = 24; shift >= 0; shift -= 8) b.push_back(uint8_t(d >> shift));
        count *= d;
    }
    for (size_t i = 0; i < count; ++i) b.push_back(uint8_t(i % 10));  // valid as labels too
    return b;
}

struct TempDir {
    fs::path path;
    TempDir() {
        std::string tmpl = (fs::temp_directory_path() / "dptrain-test-XXXXXX").string();
        path = mkdtemp(tmpl.data());
    }
    ~TempDir() { fs::remove_all(path); }
    std::string write(const std::string& name, const std::vector<uint8_t>& bytes) const {
        std::ofstream(path / name, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                           std::streamsize(bytes.size()));
        return (path / name).string();
    }
    std::string write_gz(const std::string& name, const std::vector<uint8_t>& bytes) const {
        const std::string p = (path / name).string();
        gzFile f = gzopen(p.c_str(), "wb");
        gzwrite(f, bytes.data(), unsigned(bytes.size()));
        gzclose(f);
        return p;
    }
};

std::vector<uint8_t> file_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace

TEST_CASE("IDX files load raw or gzipped, with dimensions and data intact", "[idx]") {
    TempDir dir;
    const auto bytes = idx_bytes({3, 28, 28});
    for (const std::string& path : {dir.write("raw", bytes), dir.write_gz("packed.gz", bytes)}) {
        CAPTURE(path);
        const IdxArray a = read_idx(path);
        CHECK(a.dims == std::vector<uint32_t>{3, 28, 28});
        REQUIRE(a.data.size() == 3 * 28 * 28);
        CHECK(a.data[0] == 0);
        CHECK(a.data[2351] == 2351 % 10);
    }
}

TEST_CASE("damaged IDX files are refused with a message naming the file and the fault", "[idx]") {
    TempDir dir;
    const auto good = idx_bytes({2, 28, 28});
    auto cut = [](std::vector<uint8_t> b, size_t size) { b.resize(size); return b; };

    SECTION("missing") {
        CHECK_THROWS_WITH(read_idx((dir.path / "absent").string()), Contains("absent") && Contains("cannot open"));
    }
    SECTION("empty") { CHECK_THROWS_WITH(read_idx(dir.write("empty", {})), Contains("empty") && Contains("too short")); }
    SECTION("wrong magic") {
        auto b = good;
        b[0] = 0x12;
        CHECK_THROWS_WITH(read_idx(dir.write("magic", b)), Contains("magic") && Contains("bad magic number"));
    }
    SECTION("not unsigned bytes") {
        CHECK_THROWS_WITH(read_idx(dir.write("floats", idx_bytes({2}, 0x0D))), Contains("not unsigned byte"));
    }
    SECTION("truncated in the header") {
        CHECK_THROWS_WITH(read_idx(dir.write("header", cut(good, 9))), Contains("truncated in its header"));
    }
    SECTION("truncated in the data") {
        CHECK_THROWS_WITH(read_idx(dir.write("data", cut(good, good.size() - 100))),
                          Contains("data") && Contains("truncated") && Contains("1568"));
    }
    SECTION("trailing bytes") {
        auto b = good;
        b.push_back(7);
        CHECK_THROWS_WITH(read_idx(dir.write("trailing", b)), Contains("unexpected bytes after the 1568 bytes"));
    }
    SECTION("a gzip bomb: a small file announcing, or holding, far more than Fashion-MNIST") {
        // 2,796,203 images of 28x28 (2.2 GB) announced: refused from the header.
        const std::vector<uint8_t> huge = {0, 0, 8, 3, 0, 0x2a, 0xaa, 0xab, 0, 0, 0, 28, 0, 0, 0, 28};
        CHECK_THROWS_WITH(read_idx(dir.write_gz("huge.gz", huge)), Contains("implausibly large"));
        // 64 MB of zeros (64 KB packed) after a header announcing 1568 bytes:
        // refused (and read only one byte past the announced data).
        std::vector<uint8_t> b = good;
        b.resize(size_t(64) << 20, 0);
        CHECK_THROWS_WITH(read_idx(dir.write_gz("long.gz", b)), Contains("unexpected bytes after the 1568 bytes"));
    }
    SECTION("a gzip stream cut short") {
        const std::string whole = dir.write_gz("whole.gz", good);
        const auto gz = file_bytes(whole);
        CHECK_THROWS_WITH(read_idx(dir.write("cut.gz", cut(gz, gz.size() / 2))), Contains("cut.gz"));
    }
    SECTION("a gzip header over garbage") {
        std::vector<uint8_t> b = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
        for (int i = 0; i < 200; ++i) b.push_back(uint8_t(i * 37));
        CHECK_THROWS_AS(read_idx(dir.write("garbage.gz", b)), InputError);
    }
    SECTION("plain garbage") {
        std::vector<uint8_t> b;
        for (int i = 0; i < 5000; ++i) b.push_back(uint8_t(i * 91 + 1));
        CHECK_THROWS_WITH(read_idx(dir.write("noise", b)), Contains("noise") && Contains("not an IDX file"));
    }
}

TEST_CASE("a data set split checks shape, label range and matching counts", "[idx]") {
    TempDir dir;
    const std::string images = dir.write("images", idx_bytes({5, 28, 28}));
    const std::string labels = dir.write("labels", idx_bytes({5}));

    SECTION("good: counts, pixels and labels") {
        const Dataset d = load_split(images, labels, 0);
        CHECK(d.count == 5);
        CHECK(d.pixels() == 784);
        CHECK(d.labels == std::vector<uint8_t>{0, 1, 2, 3, 4});
    }
    SECTION("a limit keeps the first samples") {
        const Dataset d = load_split(images, labels, 2);
        CHECK(d.count == 2);
        CHECK(d.images.size() == 2 * 784);
    }
    SECTION("count mismatch") {
        CHECK_THROWS_WITH(load_split(images, dir.write("four", idx_bytes({4})), 0),
                          Contains("5 images") && Contains("4 labels"));
    }
    SECTION("wrong image size") {
        CHECK_THROWS_WITH(load_split(dir.write("small", idx_bytes({5, 27, 28})), labels, 0),
                          Contains("(N, 28, 28)"));
    }
    SECTION("labels that are not 1-D") {
        CHECK_THROWS_WITH(load_split(images, dir.write("grid", idx_bytes({5, 1})), 0), Contains("1-D"));
    }
    SECTION("a label outside 0..9") {
        auto b = idx_bytes({5});
        b.back() = 10;
        CHECK_THROWS_WITH(load_split(images, dir.write("eleven", b), 0), Contains("label 10 at index 4"));
    }
    SECTION("a directory without the files") {
        CHECK_THROWS_WITH(load_fashion_mnist(dir.path.string(), 0, 0), Contains("train-images-idx3-ubyte"));
    }
    SECTION("a --data directory that does not exist") {
        CHECK_THROWS_WITH(find_data_dir((dir.path / "nowhere").string()), Contains("no such directory"));
    }
}
