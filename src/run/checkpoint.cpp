#include "run/checkpoint.hpp"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <string_view>

#include "base/errors.hpp"
#include "base/files.hpp"
#include "model/models.hpp"
#include "base/numbers.hpp"
#include "model/params_file.hpp"

namespace dpt {

static_assert(std::endian::native == std::endian::little, "checkpoints store little-endian floats");

namespace {

constexpr std::string_view magic = "dptrain-checkpoint ";
constexpr int checkpoint_format = 6;  // 6: the math line; 5: the processes line; 4: model and bn lines; 3: the split line; 2: the allreduce and warmup lines
constexpr size_t max_header_bytes = 16384;   // ours is under 600
constexpr size_t max_file_bytes = 64 << 20;  // ours: LeNet's 517 KB, ResNet-18's 11.1 MB
constexpr std::string_view crc_key = "crc32 ";
constexpr size_t trailer_bytes = crc_key.size() + 8 + 1;  // "crc32 89abcdef\n"

uint32_t crc_of(std::string_view bytes) {
    uLong crc = crc32(0L, Z_NULL, 0);
    // zlib takes the length as a uInt: feed it in pieces.
    for (size_t at = 0; at < bytes.size(); at += 1 << 30) {
        const size_t n = std::min<size_t>(bytes.size() - at, 1 << 30);
        crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + at), uInt(n));
    }
    return uint32_t(crc);
}

// A header line for a message: at most 40 characters, unprintable ones as '?'.
std::string quoted(std::string_view line) {
    std::string out = "'";
    for (char ch : line.substr(0, 40)) out += std::isprint(static_cast<unsigned char>(ch)) ? ch : '?';
    return out + (line.size() > 40 ? "...'" : "'");
}

// Reads the settings and position lines, in the order encode_checkpoint writes them.
class HeaderReader {
   public:
    HeaderReader(std::string_view lines, const std::string& name) : rest_(lines), name_(name) {}

    // The value part of the next line, which must start with `key` and a space.
    std::string_view next(std::string_view key) {
        const size_t end = rest_.find('\n');
        const std::string_view line = rest_.substr(0, end);
        rest_ = end == std::string_view::npos ? std::string_view() : rest_.substr(end + 1);
        if (line.size() <= key.size() || line.substr(0, key.size()) != key || line[key.size()] != ' ')
            fail("expected the " + std::string(key) + " line, found " + quoted(line));
        return line.substr(key.size() + 1);
    }

    template <class T>
    T number(std::string_view key, T min, T max) {
        const std::string_view text = next(key);
        T value{};
        if (!parse_exact(text, value) || !(value >= min) || !(value <= max))
            fail(std::string(key) + " " + quoted(text) + " is not a valid value");
        return value;
    }

    bool done() const { return rest_.empty(); }

    [[noreturn]] void fail(const std::string& what) const {
        throw InputError(name_ + ": corrupted header (" + what + ")");
    }

   private:
    std::string_view rest_;
    const std::string& name_;
};

}  // namespace

std::string encode_checkpoint(const Checkpoint& k) {
    const TrainConfig& c = k.settings;
    if (k.params.size() != model_of(c.model).param_count()) throw std::logic_error("encode_checkpoint: wrong parameter count");
    std::string out = std::string(magic) + std::to_string(checkpoint_format) + '\n' + tensor_lines(model_of(c.model));
    const auto line = [&](std::string_view key, const std::string& value) {
        out.append(key).append(" ").append(value).append("\n");
    };
    for (const RunSetting& setting : run_settings()) line(setting.key, setting.text(c));
    line("next-epoch", exact_text(k.position.epoch));
    line("next-step", exact_text(k.position.step));
    line("loss-sum", exact_text(k.position.loss_sum));
    line("data float32-le", exact_text(k.params.size()));
    out.append(reinterpret_cast<const char*>(k.params.data()), k.params.size() * sizeof(float));
    char trailer[32];
    std::snprintf(trailer, sizeof trailer, "%.*s%08x\n", int(crc_key.size()), crc_key.data(), crc_of(out));
    return out + trailer;
}

Checkpoint decode_checkpoint(std::span<const uint8_t> bytes, const std::string& name) {
    const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    const auto fail = [&](const std::string& what) -> void { throw InputError(name + ": " + what); };
    const std::string size_text = std::to_string(text.size()) + (text.size() == 1 ? " byte" : " bytes");

    // 1. What kind of file, and which format version.
    if (text.substr(0, magic.size()) != magic) {
        if (text.size() < magic.size() && magic.substr(0, text.size()) == text)
            fail("truncated (" + size_text + ", it ends inside its first line)");
        if (text.starts_with("dptrain-params "))
            fail("is a parameters file (from --save), not a checkpoint; start a run from it with --load");
        fail("not a dptrain checkpoint (it does not start with \"dptrain-checkpoint\")");
    }
    const size_t first_end = text.find('\n');
    if (first_end == std::string_view::npos || first_end > 64) {
        if (text.size() <= 64) fail("truncated (" + size_text + ", it ends inside its first line)");
        fail("not a dptrain checkpoint (its first line is not a version line)");
    }
    const std::string_view version_text = text.substr(magic.size(), first_end - magic.size());
    int version = 0;
    if (!parse_exact(version_text, version)) fail("not a dptrain checkpoint (bad version " + quoted(version_text) + ")");
    if (version < 1 || version > checkpoint_format)
        fail("checkpoint format version " + std::to_string(version) + "; this dptrain reads versions 1 to " +
             std::to_string(checkpoint_format));

    // 2. Its length, from the header's data line, then the checksum.
    constexpr std::string_view data_key = "\ndata float32-le ";
    const size_t data_line = text.substr(0, max_header_bytes).find(data_key);
    if (data_line == std::string_view::npos) {
        if (text.size() < max_header_bytes) fail("truncated (" + size_text + ", it ends inside its header)");
        fail("corrupted header (no data line in its first " + std::to_string(max_header_bytes) + " bytes)");
    }
    const size_t count_at = data_line + data_key.size();
    const size_t header_end = text.find('\n', count_at);
    if (header_end == std::string_view::npos) fail("truncated (" + size_text + ", it ends inside its header)");
    size_t count = 0;
    const std::string_view count_text = text.substr(count_at, header_end - count_at);
    if (!parse_exact(count_text, count) || count > max_file_bytes / sizeof(float))
        fail("corrupted header (data line " + quoted(count_text) + ")");
    const size_t data_at = header_end + 1, crc_at = data_at + count * sizeof(float);
    const size_t expected = crc_at + trailer_bytes;
    if (text.size() < expected)
        fail("truncated (" + size_text + " of the " + std::to_string(expected) + " its header announces)");
    if (text.size() > expected)
        fail("corrupted (" + std::to_string(text.size() - expected) + " unexpected bytes after its end)");
    const std::string_view trailer = text.substr(crc_at);
    uint32_t stored = 0;
    const std::string_view stored_text = trailer.substr(crc_key.size(), 8);
    const auto [end, err] = std::from_chars(stored_text.data(), stored_text.data() + 8, stored, 16);
    if (trailer.substr(0, crc_key.size()) != crc_key || err != std::errc() || end != stored_text.data() + 8 ||
        trailer.back() != '\n')
        fail("corrupted (no checksum line at its end)");
    if (crc_of(text.substr(0, crc_at)) != stored)
        fail("corrupted (its CRC-32 does not match: the file was changed or damaged after it was written)");

    // 3. The model: one whose tensors it lists, with their shapes.
    const std::optional<ModelKind> model = model_with_tensors(text.substr(first_end + 1, data_line - first_end));
    if (!model || count != model_of(*model).param_count())
        fail("written for another model (its tensors are none of " + model_names() + "'s)");
    const std::string tensors = tensor_lines(model_of(*model));

    // 4. The settings and the position.
    const size_t settings_at = first_end + 1 + tensors.size();
    HeaderReader h(settings_at <= data_line ? text.substr(settings_at, data_line + 1 - settings_at)
                                            : std::string_view(),
                   name);
    Checkpoint k;
    TrainConfig& c = k.settings;
    c.model = *model;  // what a header before version 4 leaves
    for (const RunSetting& setting : run_settings()) {
        if (setting.since > version) continue;  // the default: what a run of that dptrain had
        const std::string_view value = h.next(setting.key);
        if (const char* why = setting.read(value, c)) h.fail(std::string(setting.key) + " " + quoted(value) + " " + why);
    }
    // Between settings.
    const auto line_of = [&](std::string_view key) {
        for (const RunSetting& setting : run_settings())
            if (setting.key == key) return setting.text(c);
        throw std::logic_error("no setting " + std::string(key));
    };
    if (version < 3 && c.devices.mixed()) h.fail("devices " + quoted(std::string_view(line_of("devices"))) + " is not a valid value");
    if (c.model != *model) h.fail("model line does not name the model of its tensors");
    if (int64_t(c.batch) < int64_t(c.devices.count()) * c.processes)  // a sample for each device, at least
        h.fail("batch " + quoted(std::string_view(std::to_string(c.batch))) + " is not a valid value");
    const int64_t parts = std::accumulate(c.split.counts.begin(), c.split.counts.end(), int64_t(0));
    if (!c.split.counts.empty() && (int(c.split.counts.size()) != c.devices.count() || parts != c.batch))
        h.fail("split " + quoted(std::string_view(line_of("split"))) + " is not a valid value for " + std::to_string(c.devices.count()) +
               " devices and a batch of " + std::to_string(c.batch));
    const int max_int = std::numeric_limits<int>::max();
    k.position.epoch = h.number<int>("next-epoch", 1, 1000001);
    k.position.step = h.number<size_t>("next-step", 0, max_int);
    k.position.loss_sum = h.number<double>("loss-sum", 0.0, std::numeric_limits<double>::max());
    if (!h.done()) h.fail("unexpected lines before the data");

    k.params.resize(count);
    std::memcpy(k.params.data(), text.data() + data_at, count * sizeof(float));
    return k;
}

void save_checkpoint(const std::string& path, const Checkpoint& checkpoint) {
    write_file_atomically(path, encode_checkpoint(checkpoint), "--checkpoint");
}

Checkpoint load_checkpoint(const std::string& path) {
    const std::string name = "--resume " + path;
    check_input_file("--resume", path);
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) throw InputError(name + ": cannot open (" + std::strerror(errno) + ")");
    const std::streamoff size = in.tellg();
    if (size < 0) throw InputError(name + ": cannot read (not a regular file?)");
    if (size_t(size) > max_file_bytes)
        throw InputError(name + ": " + std::to_string(size) + " bytes, too large to be a dptrain checkpoint");
    std::vector<uint8_t> bytes(static_cast<size_t>(size));
    in.seekg(0);
    in.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(bytes.size()));
    if (in.gcount() != size) throw InputError(name + ": cannot read (" + std::strerror(errno) + ")");
    return decode_checkpoint(bytes, name);
}

}  // namespace dpt
