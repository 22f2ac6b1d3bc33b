// The count options of every kind of device (--gpus N, --cpus N, ...: a
// row's `option` in devices/kinds.hpp), as a command's cxxopts options take
// them. A new kind's option then reaches training and every subcommand.
#pragma once
#include <string>

#include "base/options.hpp"
#include "devices/kinds.hpp"
#include "parallel/device_factory.hpp"

namespace dpt {

// Adds --OPTION VALUE for every kind to `group` of `options`: with the
// kind's count_help after `lead` ("train on "), or no help where the
// command prints its own (`lead` null).
inline void add_count_options(cxxopts::Options& options, const std::string& group, const std::string& value,
                              const char* lead = nullptr) {
    for (const DeviceKindInfo& row : device_kinds())
        options.add_options(group)(row.option, lead ? lead + count_help(row) : "", cxxopts::value<std::string>(), value);
}

// What `r` gave each count option (GivenText, device_factory.hpp).
inline GivenText counts_in(const cxxopts::ParseResult& r) {
    return [&r](const std::string& option) { return given(r, option); };
}

}  // namespace dpt
