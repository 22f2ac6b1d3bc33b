// Numbers typed on the command line, checked with a message that names the
// option (every command's parser and device_factory.cpp use it).
#pragma once
#include <charconv>
#include <cmath>
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

}  // namespace dpt
