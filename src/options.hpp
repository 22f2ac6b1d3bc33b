// Command-line parsing shared by dptrain and its subcommands (cxxopts).
#pragma once
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cxxopts.hpp>
#include <optional>
#include <string>
#include <type_traits>

#include "errors.hpp"

namespace dpt {

// The number given as `text` for --option, within [min, max]; otherwise an
// InputError naming the option and what it must be.
template <class T>
T parse_number(const std::string& option, const std::string& text, T min, T max, const char* what) {
    T value{};
    const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), value);
    const bool ok = err == std::errc() && end == text.data() + text.size() && !(value < min) && !(value > max);
    if (!ok || (std::is_floating_point_v<T> && !std::isfinite(double(value))))
        throw InputError("--" + option + " must be " + what + " (got '" + text + "')");
    return value;
}

// argv parsed by `options`. A bad option or a leftover argument is an
// InputError that points to `command` --help (e.g. "dptrain inspect"). Empty
// when --help (declared by the caller as "h,help") was asked for: `help` has
// then been printed.
inline std::optional<cxxopts::ParseResult> parse_options(cxxopts::Options& options, int argc, const char* const* argv,
                                                         const std::string& command, const std::string& help) {
    cxxopts::ParseResult r;
    try {
        r = options.parse(argc, argv);
    } catch (const cxxopts::exceptions::exception& e) {
        throw InputError(std::string(e.what()) + " (see " + command + " --help)");
    }
    if (r.count("help")) {
        std::fputs(help.c_str(), stdout);
        return std::nullopt;
    }
    if (!r.unmatched().empty())
        throw InputError("unexpected argument '" + r.unmatched().front() + "' (see " + command + " --help)");
    return r;
}

// The value given for `name`, or "" when it was not given.
inline std::string given(const cxxopts::ParseResult& r, const std::string& name) {
    return r.count(name) ? r[name].as<std::string>() : std::string();
}

}  // namespace dpt
