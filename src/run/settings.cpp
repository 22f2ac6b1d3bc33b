#include "run/settings.hpp"

#include <limits>

#include "devices/kinds.hpp"
#include "parallel/allreduce.hpp"
#include "parallel/device_factory.hpp"
#include "base/numbers.hpp"

namespace dpt {

namespace {

constexpr const char* invalid = "is not a valid value";
constexpr int max_int = std::numeric_limits<int>::max();

template <class T>
const char* number_in(std::string_view text, T& field, T min, T max) {
    T value{};
    if (!parse_exact(text, value) || !(value >= min) || !(value <= max)) return invalid;
    field = value;
    return nullptr;
}

// One of two words for a two-valued field.
template <class T>
const char* one_of(std::string_view text, T& field, std::string_view a, T a_value, std::string_view b, T b_value) {
    if (text != a && text != b) return invalid;
    field = text == a ? a_value : b_value;
    return nullptr;
}

// "cpu 2", "cuda 4", or a mixed run's "cuda 1 cpu 2": each kind's name and
// count, in the kinds' order (devices/kinds.hpp; format version 3 on for
// several). Which GPUs is not recorded: a resumed run may use others.
std::string devices_text(const TrainConfig& c) {
    std::string text;
    for (const DeviceKindInfo& row : device_kinds())
        if (const int n = c.devices.count(row.kind); n > 0)
            text.append(text.empty() ? "" : " ").append(row.name).append(" ").append(exact_text(n));
    return text;
}

const char* read_devices(std::string_view text, TrainConfig& c) {
    const std::vector<std::string> words = items_of(std::string(text), ' ');
    if (words.empty() || words.size() % 2 != 0) return invalid;
    DeviceChoice d;
    size_t next_kind = 0;  // the kinds in table order, each once
    const std::vector<DeviceKindInfo>& kinds = device_kinds();
    for (size_t at = 0; at < words.size(); at += 2) {
        while (next_kind < kinds.size() && words[at] != kinds[next_kind].name) ++next_kind;
        int n = 0;
        // The command line's limit: a crafted header cannot ask for more threads or memory than --cpus could.
        if (next_kind == kinds.size() || !parse_exact(words[at + 1], n) || n < 1 || n > max_devices - d.count())
            return invalid;
        d = d.then(kinds[next_kind++].kind, n);
    }
    c.devices = d;
    return nullptr;
}

// "even", "weights 192 64", "auto" (not measured yet) or "auto 192 64": one
// part per device, each at least 1 (that they sum to the batch, one per
// device, is checked with the batch and devices).
std::string split_text(const TrainConfig& c) {
    std::string text = c.split.mode == SplitMode::even ? "even" : c.split.mode == SplitMode::weights ? "weights" : "auto";
    for (int part : c.split.counts) text.append(" ").append(exact_text(part));
    return text;
}

const char* read_split(std::string_view text, TrainConfig& c) {
    const std::vector<std::string> words = items_of(std::string(text), ' ');
    SplitChoice split;
    if (words[0] == "weights") split.mode = SplitMode::weights;
    else if (words[0] == "auto") split.mode = SplitMode::automatic;
    else if (words[0] != "even") return invalid;
    for (size_t i = 1; i < words.size(); ++i) {
        int part = 0;
        if (!parse_exact(words[i], part) || part < 1) return invalid;
        split.counts.push_back(part);
    }
    const bool counted = !split.counts.empty();
    if ((split.mode == SplitMode::even && counted) || (split.mode == SplitMode::weights && !counted)) return invalid;
    c.split = std::move(split);
    return nullptr;
}

// The rows. A field's range is what a run can have; `since` is the format
// version that added the line (checkpoint.cpp keeps the versions' history).
const RunSetting settings[] = {
    {"devices", "", 1, OnResume::decided, devices_text, read_devices},
    {"processes", "", 5, OnResume::decided, [](const TrainConfig& c) { return exact_text(c.processes); },
     [](std::string_view t, TrainConfig& c) { return number_in(t, c.processes, 1, max_devices); }},
    {"allreduce", "", 2, OnResume::decided, [](const TrainConfig& c) { return c.allreduce; },
     [](std::string_view t, TrainConfig& c) -> const char* {
         if (!find_allreduce(t)) return "is not an algorithm this dptrain knows";
         c.allreduce = std::string(t);
         return nullptr;
     }},
    {"split", "", 3, OnResume::decided, split_text, read_split},
    {"model", "", 4, OnResume::kept, [](const TrainConfig& c) { return std::string(to_string(c.model)); },
     [](std::string_view t, TrainConfig& c) -> const char* {
         const std::optional<ModelKind> model = find_model(t);
         if (!model) return invalid;
         c.model = *model;
         return nullptr;
     }},
    {"bn", "", 4, OnResume::kept, [](const TrainConfig& c) { return std::string(to_string(c.bn)); },
     [](std::string_view t, TrainConfig& c) {
         return one_of(t, c.bn, "local", BatchNormMode::local, "sync", BatchNormMode::sync);
     }},
    {"math", "tf32", 6, OnResume::kept,
     [](const TrainConfig& c) { return std::string(c.math == Math::tf32 ? "tf32" : "fp32"); },
     [](std::string_view t, TrainConfig& c) { return one_of(t, c.math, "fp32", Math::fp32, "tf32", Math::tf32); }},
    {"batch", "", 1, OnResume::kept, [](const TrainConfig& c) { return exact_text(c.batch); },
     [](std::string_view t, TrainConfig& c) { return number_in(t, c.batch, 1, max_int); }},
    {"lr", "", 1, OnResume::kept, [](const TrainConfig& c) { return exact_text(c.lr); },
     [](std::string_view t, TrainConfig& c) {
         return number_in(t, c.lr, std::numeric_limits<float>::min(), std::numeric_limits<float>::max());
     }},
    {"warmup", "", 2, OnResume::kept, [](const TrainConfig& c) { return exact_text(c.warmup); },
     [](std::string_view t, TrainConfig& c) { return number_in(t, c.warmup, 0.0, 1000.0); }},
    {"seed", "", 1, OnResume::kept, [](const TrainConfig& c) { return exact_text(c.seed); },
     [](std::string_view t, TrainConfig& c) {
         return number_in(t, c.seed, uint64_t(0), std::numeric_limits<uint64_t>::max());
     }},
    {"pool", "", 1, OnResume::kept,
     [](const TrainConfig& c) { return std::string(c.pool == PoolKind::avg ? "avg" : "max"); },
     [](std::string_view t, TrainConfig& c) { return one_of(t, c.pool, "avg", PoolKind::avg, "max", PoolKind::max); }},
    {"init", "", 1, OnResume::kept,
     [](const TrainConfig& c) { return std::string(c.init == InitKind::xavier ? "xavier" : "normal"); },
     [](std::string_view t, TrainConfig& c) {
         return one_of(t, c.init, "xavier", InitKind::xavier, "normal", InitKind::normal);
     }},
    {"limit-train", "", 1, OnResume::kept, [](const TrainConfig& c) { return exact_text(c.limit_train); },
     [](std::string_view t, TrainConfig& c) { return number_in(t, c.limit_train, size_t(0), size_t(max_int)); }},
    {"limit-test", "", 1, OnResume::kept, [](const TrainConfig& c) { return exact_text(c.limit_test); },
     [](std::string_view t, TrainConfig& c) { return number_in(t, c.limit_test, size_t(0), size_t(max_int)); }},
    {"epochs", "", 1, OnResume::given, [](const TrainConfig& c) { return exact_text(c.epochs); },
     [](std::string_view t, TrainConfig& c) { return number_in(t, c.epochs, 0, 1000000); }},
    {"checkpoint-every", "", 1, OnResume::given, [](const TrainConfig& c) { return exact_text(c.checkpoint_every); },
     [](std::string_view t, TrainConfig& c) { return number_in(t, c.checkpoint_every, 1, max_int); }},
};

}  // namespace

std::span<const RunSetting> run_settings() { return settings; }

std::string kept_settings_text(const TrainConfig& c) {
    std::string text;
    for (const RunSetting& s : settings)
        if (s.on_resume == OnResume::kept) text += (text.empty() ? "" : ", ") + std::string(s.key) + " " + s.text(c);
    return text;
}

}  // namespace dpt
