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
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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

// Every --help has one layout: what the command does, its usage, a few
// examples, its options (those a first run needs first), and last what its
// exit status says and where the docs are. These write the parts that the
// commands share.

// "Examples:" and each command beside what it shows (under it, where a
// command is too long for both to fit a line), then a blank line.
inline std::string help_examples(const std::vector<std::pair<std::string, std::string>>& examples) {
    size_t width = 0;
    for (const auto& [command, shows] : examples) width = std::max(width, command.size());
    std::string text = "Examples:\n";
    for (const auto& [command, shows] : examples) {
        text.append("  ").append(command);
        if (width <= 44) text.append(width + 3 - command.size(), ' ');
        else text.append("\n").append(8, ' ');
        text.append(shows).append("\n");
    }
    return text.append("\n");
}

// cxxopts' text of the option groups, in this order (without its usage line).
inline std::string help_options(cxxopts::Options& options, const std::vector<std::string>& groups) {
    options.custom_help("");  // (else cxxopts writes "[OPTION...]" where its usage line was)
    options.set_width(92);
    std::string text = options.help(groups, false);
    return text.substr(text.find_first_not_of('\n'));
}

// The exit status and the docs. `failure`: what status 1 means for the
// command; `stops`: whether Ctrl-C and SIGTERM stop it with a status of its own.
inline std::string help_end(const std::string& failure, bool stops) {
    std::string text = "\nExit status:\n"
                       "  0         done (and after --help)\n"
                       "  1         " + failure + "\n"
                       "  2         bad input: an option, a value or a file, named in the message\n";
    if (stops) text += "  130, 143  stopped by Ctrl-C (SIGINT) or SIGTERM\n";
    return text + "\nDocs: README.md and docs/ in the source tree; once installed, man dptrain and\n"
                  "PREFIX/share/doc/dptrain/.\n";
}

// The value given for `name`, or "" when it was not given.
inline std::string given(const cxxopts::ParseResult& r, const std::string& name) {
    return r.count(name) ? r[name].as<std::string>() : std::string();
}

}  // namespace dpt
