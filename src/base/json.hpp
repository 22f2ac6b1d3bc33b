// The JSON that dptrain writes (--metrics, compare --out, drift --out),
// through nlohmann-json: keys in the order they are set, strings escaped,
// one object a line where the file is JSON Lines. Numbers are rounded first
// to the digits worth reading, as printf's %.Nf or %.Ng would show them, so
// a time is 1.234568 and not 1.2345678901234, and lr 0.3 and not the float's
// 0.30000001192092896.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>

namespace dpt {

using Json = nlohmann::ordered_json;

// x with `places` decimals (%.Nf).
inline double decimals(double x, int places) {
    char text[64];
    std::snprintf(text, sizeof text, "%.*f", places, x);
    return std::strtod(text, nullptr);
}
// x to `digits` significant digits (%.Ng).
inline double significant(double x, int digits = 6) {
    char text[64];
    std::snprintf(text, sizeof text, "%.*g", digits, x);
    return std::strtod(text, nullptr);
}

}  // namespace dpt
