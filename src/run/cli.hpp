// dptrain's command line: flags -> the run's settings (TrainConfig) and what it
// starts from (RunStart), with every check a user can fail named by its option.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "run/settings.hpp"

namespace dpt {

// --pool avg|max and --init xavier|normal, as typed.
PoolKind parse_pool(const std::string& text);
InitKind parse_init(const std::string& text);

// The parsed run, or nothing when --help was asked for (and printed).
// Throws InputError with a message naming the option and the problem.
// `processes`: of the run, when mpirun started several (cluster.hpp).
std::optional<TrainRequest> parse_command_line(int argc, const char* const* argv, int processes = 1);

}  // namespace dpt
