// The twin kind, a device kind that exists only in the tests: each twin
// device is a CPU device under a kind of its own ("twin:0"), made by its own
// row. It shows what docs/architecture.md says a new kind costs: this file
// and twin_device.cpp (the class and the function that makes N of them),
// a DeviceKind value (here twin_kind, as the tests cannot add to the enum),
// its row (add_twin_kind(): a kind outside src/ adds its row at run time)
// and its line in tests/meson.build. Between kinds it follows reach()
// (device.hpp): its gradients and marks are in host memory, so CPU devices
// reach it there, and it reaches them through its CPU device.
#pragma once
#include "devices/device.hpp"

namespace dpt::testing {

inline constexpr DeviceKind twin_kind = static_cast<DeviceKind>(100);

// Adds the twin kind's row to the table (once; later calls do nothing).
void add_twin_kind();

}  // namespace dpt::testing
