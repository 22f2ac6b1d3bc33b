// `dptrain compare`: trains the same model on 1, 2, ... devices in turn and
// shows, from measured phase times, what the extra devices bought and what
// the allreduce and the load imbalance cost.
#pragma once

namespace dpt {

// argv[0] is "compare". Returns the exit status; throws InputError for a bad
// command line (exit 2).
int run_compare(int argc, const char* const* argv);

}  // namespace dpt
