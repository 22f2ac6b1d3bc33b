// dptrain's command line: flags -> TrainConfig, with every check a user can
// fail named by its option.
#pragma once
#include <charconv>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "errors.hpp"
#include "trainer.hpp"

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

// --pool avg|max and --init xavier|normal, as typed.
PoolKind parse_pool(const std::string& text);
InitKind parse_init(const std::string& text);

// The devices of a subcommand (inspect, demo): --cpus N or --gpus N as typed
// (empty when not given), checked as for a training run; `fallback` CPU
// devices when neither is given.
struct DeviceChoice {
    DeviceKind kind = DeviceKind::cpu;
    int count = 1;
};
DeviceChoice choose_devices(const std::string& cpus, const std::string& gpus, int fallback);
std::vector<std::unique_ptr<Device>> make_devices(const DeviceChoice& choice, const ReplicaSetup& setup);

// The parsed configuration, or nothing when --help was asked for (and printed).
// Throws InputError with a message naming the option and the problem.
std::optional<TrainConfig> parse_command_line(int argc, const char* const* argv);

}  // namespace dpt
