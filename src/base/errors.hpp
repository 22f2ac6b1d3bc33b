// Errors a user can cause: a bad command line or bad input data. main() turns
// them into a message on stderr and exit status 2; anything else is exit 1.
#pragma once
#include <stdexcept>
#include <string>

namespace dpt {

struct InputError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A failure every rank of a multi-process run meets at the same point, as
// one process would (the run diverged, replicas differ): rank 0 reports it,
// every rank exits 1. (Any other failure on one rank ends the whole job.)
struct EveryRankError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

}  // namespace dpt
