// dptrain: data-parallel LeNet training. Exit status: 0 success, 2 bad command
// line or bad input data, 1 any other failure.
#include <cstdio>
#include <exception>

#include "cli.hpp"
#include "errors.hpp"
#include "trainer.hpp"

int main(int argc, char** argv) {
    try {
        const auto config = dpt::parse_command_line(argc, argv);
        if (config) dpt::train(*config);
        return 0;
    } catch (const dpt::InputError& e) {
        std::fprintf(stderr, "dptrain: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "dptrain: error: %s\n", e.what());
        return 1;
    }
}
