// Numbers and lists typed on the command line, checked with a message that
// names the option (every command's parser and device_factory.cpp use them),
// and the median of measured times.
#pragma once
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "base/errors.hpp"

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

// The shortest text that reads back to the same value: integers, and
// floats bit for bit (what checkpoints write).
template <class T>
std::string exact_text(T value) {
    char buf[64];
    const auto [end, err] = std::to_chars(buf, buf + sizeof buf, value);
    return std::string(buf, end);
}

// `text` as a number, all of it, as exact_text() writes it; false otherwise.
template <class T>
bool parse_exact(std::string_view text, T& out) {
    const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), out);
    return err == std::errc() && end == text.data() + text.size();
}

// The items of `text` between `separator`s, as typed (an empty item stays,
// for the item's parser to name): "1,2,4" -> {"1", "2", "4"}.
inline std::vector<std::string> items_of(const std::string& text, char separator) {
    std::vector<std::string> items;
    for (size_t at = 0; at <= text.size();) {
        const size_t end = std::min(text.find(separator, at), text.size());
        items.push_back(text.substr(at, end - at));
        at = end + 1;
    }
    return items;
}

// A comma-separated list typed for an option.
inline std::vector<std::string> comma_list(const std::string& text) { return items_of(text, ','); }

// One number as `fmt` (a printf format taking one double) writes it: "12%".
inline std::string format(const char* fmt, double value) {
    char text[64];
    std::snprintf(text, sizeof text, fmt, value);
    return text;
}

// Sizes, in one system everywhere: decimal, as bandwidths in GB/s are
// (1 KB = 1,000 bytes, 1 MB = 1e6, 1 GB = 1e9). --bucket-kb counts KB.
inline constexpr size_t bytes_per_kb = 1000;
// "100 B", "4 KB", "516.3 KB", "11.17 MB", "1 GB": four significant digits.
inline std::string size_text(double bytes) {
    char text[32];
    if (bytes >= 1e9) std::snprintf(text, sizeof text, "%.4g GB", bytes / 1e9);
    else if (bytes >= 1e6) std::snprintf(text, sizeof text, "%.4g MB", bytes / 1e6);
    else if (bytes >= 1e3) std::snprintf(text, sizeof text, "%.4g KB", bytes / 1e3);
    else std::snprintf(text, sizeof text, "%.0f B", bytes);
    return text;
}

// The median of timings (0 for none): one disturbed timing does not move it.
inline double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace dpt
