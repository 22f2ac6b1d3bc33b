// Catch2's main for the CPU test program.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
