// Catch2's main for the CPU test program. GCC 12 warns -Wmaybe-uninitialized
// inside libstdc++ code that Catch's implementation inlines (in the sanitizer
// build): not ours to fix, so not shown; the tests' own code keeps its warnings.
#define CATCH_CONFIG_MAIN
#if defined(__GNUC__) && !defined(__clang__)  // clang has no such warning
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <catch2/catch.hpp>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
