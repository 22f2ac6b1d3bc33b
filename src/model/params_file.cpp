#include "model/params_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include "base/errors.hpp"
#include "base/files.hpp"

namespace dpt {

static_assert(std::endian::native == std::endian::little, "the params file stores little-endian floats");

namespace {

constexpr const char* magic = "dptrain-params 1";

std::string header(const Model& model) {
    return std::string(magic) + '\n' + tensor_lines(model) + "data float32-le " + std::to_string(model.param_count()) + '\n';
}

}  // namespace

std::string tensor_lines(const Model& model) {
    std::ostringstream lines;
    for (const ParamTensor& t : model.tensors()) {
        lines << t.name;
        for (int d : t.shape) lines << ' ' << d;
        lines << '\n';
    }
    return lines.str();
}

std::optional<ModelKind> model_with_tensors(std::string_view text) {
    for (ModelKind kind : all_models())
        if (text.starts_with(tensor_lines(model_of(kind)))) return kind;
    return std::nullopt;
}

void save_params(const std::string& path, std::span<const float> params, ModelKind model) {
    if (params.size() != model_of(model).param_count()) throw std::logic_error("save_params: wrong parameter count");
    std::string bytes = header(model_of(model));
    bytes.append(reinterpret_cast<const char*>(params.data()), params.size_bytes());
    write_file_atomically(path, bytes, "--save");
}

std::vector<float> load_params(const std::string& path, ModelKind model) {
    check_input_file("--load", path);
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError("--load " + path + ": cannot open (" + std::strerror(errno) + ")");
    const std::string expected = header(model_of(model));
    std::string got(expected.size(), '\0');
    in.read(got.data(), std::streamsize(got.size()));
    got.resize(size_t(in.gcount()));
    if (got.compare(0, std::strlen(magic), magic) != 0)
        throw InputError("--load " + path + ": not a dptrain parameters file");
    if (got != expected) {
        // Whose tensors, then? Read on: a file of another model names them first.
        std::string more(1 << 16, '\0');
        in.read(more.data(), std::streamsize(more.size()));
        more.resize(size_t(in.gcount()));
        const std::string head = got + more;
        const std::optional<ModelKind> other = model_with_tensors(std::string_view(head).substr(std::strlen(magic) + 1));
        if (other && *other != model)
            throw InputError("--load " + path + ": it holds " + to_string(*other) + "'s parameters, not " +
                             to_string(model) + "'s (give --model " + to_string(*other) + ")");
        throw InputError("--load " + path + ": its tensors do not match " + to_string(model) +
                         "'s (names, shapes or count differ)");
    }
    std::vector<float> params(model_of(model).param_count());
    in.read(reinterpret_cast<char*>(params.data()), std::streamsize(params.size() * sizeof(float)));
    if (size_t(in.gcount()) != params.size() * sizeof(float))
        throw InputError("--load " + path + ": truncated (" + std::to_string(in.gcount()) + " of " +
                         std::to_string(params.size() * sizeof(float)) + " data bytes)");
    if (in.peek() != std::char_traits<char>::eof())
        throw InputError("--load " + path + ": unexpected bytes after the parameters");
    return params;
}

}  // namespace dpt
