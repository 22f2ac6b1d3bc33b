// Command-line parsing shared by dptrain and its subcommands (cxxopts).
#pragma once
#include <cstdio>
// cxxopts without std::regex: its own parser reads option names, numbers and
// booleans instead. With <regex>, each file including this one compiled in
// about twice the time (src/commands/drift.cpp: 19.7 s against 11.0 at -O3).
#define CXXOPTS_NO_REGEX
// GCC 12 warns -Wmaybe-uninitialized deep inside libstdc++'s headers, which
// cxxopts uses, when it inlines them into our code (in the sanitizer build):
// not ours to fix, so not shown. Warnings stay on for dptrain's own code.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no such warning
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <cxxopts.hpp>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#include <optional>
#include <string>

#include "base/errors.hpp"
#include "base/numbers.hpp"

namespace dpt {

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
    // `--save ""` from a script's unset variable would otherwise keep nothing, silently.
    for (const cxxopts::KeyValue& kv : r.arguments())
        if (kv.value().empty())
            throw InputError("--" + kv.key() + ": an empty value (see " + command + " --help)");
    return r;
}

// The value given for `name`, or "" when it was not given.
inline std::string given(const cxxopts::ParseResult& r, const std::string& name) {
    return r.count(name) ? r[name].as<std::string>() : std::string();
}

}  // namespace dpt
