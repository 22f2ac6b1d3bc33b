#include "parallel/device_factory.hpp"

#include <algorithm>
#include <stdexcept>

#include "base/errors.hpp"
#include "devices/kinds.hpp"
#include "base/numbers.hpp"

namespace dpt {

int parse_device_count(const std::string& option, const std::string& text) {
    return parse_number<int>(option, text, 1, max_devices,
                             ("a whole number from 1 to " + std::to_string(max_devices)).c_str());
}

namespace {

// "; train on CPU devices with --cpus N": where to go when a kind is missing.
std::string instead() {
    const DeviceKindInfo& anywhere = kind_made_on_demand();
    return std::string("; train on ") + anywhere.many + " with --" + anywhere.option + " N";
}

}  // namespace

void require_present(DeviceKind kind, const std::string& what) {
    const Presence present = kind_info(kind).probe();
    if (present.count == 0) throw InputError(what + ": " + present.why_none + instead());
}

std::vector<KindGiven> kinds_given(const GivenText& given) {
    std::vector<KindGiven> found;
    for (const DeviceKindInfo& row : device_kinds())
        if (std::string text = given(row.option); !text.empty()) found.push_back({row.kind, row.option, std::move(text)});
    return found;
}

std::string count_options(const std::string& value, const std::string& joiner) {
    std::string text;
    for (const DeviceKindInfo& row : device_kinds())
        text.append(text.empty() ? "" : joiner).append("--").append(row.option).append(" ").append(value);
    return text;
}

std::optional<KindGiven> one_kind_given(const GivenText& given, const std::string& command) {
    const std::vector<KindGiven> found = kinds_given(given);
    if (found.size() > 1)
        throw InputError(command + " takes one kind of device, not both --" + found[0].option + " and --" + found[1].option);
    if (found.empty()) return std::nullopt;
    return found.front();
}

DeviceChoice choose_devices(const GivenText& given, DeviceChoice fallback, bool mixed_ok) {
    const std::vector<KindGiven> found = kinds_given(given);
    if (found.size() > 1 && !mixed_ok)
        throw InputError("--" + found[0].option + " and --" + found[1].option +
                         " cannot be combined here: pick one kind (training takes several)");
    if (found.empty()) return fallback;
    DeviceChoice choice;
    std::string typed;
    for (const KindGiven& g : found) {
        typed.append(typed.empty() ? "" : " ").append("--" + g.option + " " + g.text);
        choice = choice.then(g.kind, parse_device_count(g.option, g.text));
        require_present(g.kind, "--" + g.option + " " + g.text);
    }
    if (choice.count() > max_devices)
        throw InputError(typed + ": at most " + std::to_string(max_devices) + " devices in all");
    return choice;
}

namespace {

// "gpu:I, cuda:I or cpu:I": what --devices takes.
std::string spellings() {
    std::vector<std::string> all;
    for (const DeviceKindInfo& row : device_kinds())
        for (const char* spelling : row.spellings) all.push_back(std::string(spelling) + ":I");
    std::string text;
    for (size_t i = 0; i < all.size(); ++i) text += (i == 0 ? "" : i + 1 == all.size() ? " or " : ", ") + all[i];
    return text;
}

}  // namespace

DeviceChoice parse_device_list(const std::string& text) {
    const std::vector<DeviceKindInfo>& kinds = device_kinds();
    std::vector<std::vector<int>> numbers(kinds.size());  // per kind, as listed
    for (const std::string& item : comma_list(text)) {
        const size_t colon = item.find(':');
        const std::string spelling = item.substr(0, colon);
        size_t k = 0;
        while (k < kinds.size() && std::find(kinds[k].spellings.begin(), kinds[k].spellings.end(), spelling) ==
                                       kinds[k].spellings.end())
            ++k;
        if (colon == std::string::npos || k == kinds.size())
            throw InputError("--devices " + text + ": '" + item + "' is not " + spellings());
        numbers[k].push_back(parse_number<int>("devices", item.substr(colon + 1), 0, max_devices - 1,
                                               ("a device number from 0 after " + spelling + ":").c_str()));
    }
    DeviceChoice choice;
    for (size_t k = 0; k < kinds.size(); ++k) {
        const DeviceKindInfo& row = kinds[k];
        std::vector<int>& listed = numbers[k];
        if (listed.empty()) continue;
        const std::string name = row.spellings.front();
        if (row.numbered_in_order) {
            // Made here, not found: any order, but each number once from 0. Only their count matters.
            std::sort(listed.begin(), listed.end());
            for (size_t i = 0; i < listed.size(); ++i)
                if (listed[i] != int(i))
                    throw InputError("--devices " + text + ": " + row.many + " are numbered " + name + ":0, " + name +
                                     ":1, ... each once (" +
                                     (listed.size() == 1 ? std::string("1 ") + row.one + " is " + name + ":0"
                                                         : std::to_string(listed.size()) + " " + row.many + " are " +
                                                               name + ":0 to " + name + ":" +
                                                               std::to_string(listed.size() - 1)) +
                                     ")");
            for (size_t i = 0; i < listed.size(); ++i) choice.places.push_back({row.kind});
        } else {
            for (int number : listed) choice.places.push_back({row.kind, number});
        }
    }
    if (choice.count() > max_devices)
        throw InputError("--devices " + text + ": at most " + std::to_string(max_devices) + " devices");
    for (size_t k = 0; k < kinds.size(); ++k) {
        const DeviceKindInfo& row = kinds[k];
        if (numbers[k].empty() || row.numbered_in_order) continue;
        const Presence present = row.probe();
        if (present.count == 0)
            throw InputError("--devices " + text + ": " + present.why_none + instead());
        const std::string name = row.spellings.front(), unit = row.hardware;
        for (int number : numbers[k])
            if (number >= present.count)
                throw InputError("--devices " + text + ": there is no " + name + ":" + std::to_string(number) + " (" +
                                 std::to_string(present.count) + " " + unit + (present.count == 1 ? "" : "s") +
                                 " visible: " + name + ":0" +
                                 (present.count > 1 ? " to " + name + ":" + std::to_string(present.count - 1) : "") +
                                 ")");
    }
    return choice;
}

DeviceChoice default_devices(std::string& why) {
    // Every unit of the first kind of hardware present, else one device the host makes.
    std::string none;
    for (const DeviceKindInfo& row : device_kinds()) {
        const Presence present = row.probe();
        if (present.count > 0) {
            why = std::string("all visible ") + row.hardware + "s (choose with --" + row.option + " N or --cpus N)";
            return DeviceChoice::of(row.kind, present.count);
        }
        if (present.unlimited()) {
            why = none + ", so 1 " + row.one + " (choose with --" + row.option + " N)";
            return DeviceChoice::of(row.kind, 1);
        }
        if (none.empty()) none = present.why_none;
    }
    throw std::logic_error("devices/kinds.cpp has no kind made on demand");
}

std::vector<std::unique_ptr<Device>> make_devices(const DeviceChoice& choice, const ReplicaSetup& setup,
                                                  const Allreduce& allreduce) {
    const std::string refusal = allreduce.refusal(choice);
    if (!refusal.empty()) throw InputError("--allreduce " + std::string(allreduce.info().name) + ": " + refusal);
    const int n = choice.count();
    std::vector<size_t> staging;
    const size_t floats = setup.grad_floats();
    for (int i = 0; i < n; ++i) staging.push_back(allreduce.staging_floats(i, n, floats));
    // Devices of several kinds reach each other's gradients and marks
    // through host memory that all of them map (device.hpp).
    std::shared_ptr<SharedHostMemory> shared;
    if (choice.mixed())
        for (const DeviceKindInfo& row : device_kinds())
            if (!shared && row.host_memory && choice.count(row.kind) > 0) shared = row.host_memory();
    if (choice.mixed() && !shared) throw std::logic_error("devices of several kinds, and none maps host memory");
    std::vector<std::unique_ptr<Device>> devices;
    const std::span<const size_t> all(staging);
    for (const DeviceKindInfo& row : device_kinds()) {
        const int first = int(devices.size()), count = choice.count(row.kind);
        if (count == 0) continue;
        // Where each stands: as listed, else the kind's own order (hardware in turn, i % present).
        std::vector<int> ordinals = choice.ordinals(row.kind);
        if (ordinals.empty()) {
            const int present = row.numbered_in_order ? count : row.probe().count;
            for (int i = 0; i < count; ++i) ordinals.push_back(present > 0 ? i % present : i);
        }
        for (auto& d : row.make(setup, all.subspan(size_t(first), size_t(count)), ordinals, shared))
            devices.push_back(std::move(d));
    }
    return devices;
}

std::unique_ptr<Recording> record_work(std::span<Device* const> devices, const std::function<void()>& enqueue,
                                       std::string& why) {
    for (Device* d : devices)
        if (!d->capabilities().records_graphs) {
            why = d->name() + " does not record its work";
            return nullptr;
        }
    if (devices.empty()) {
        why = "no devices";
        return nullptr;
    }
    const DeviceKindInfo& row = kind_info(devices.front()->kind());
    for (Device* d : devices)
        if (d->kind() != row.kind) {
            why = "devices of several kinds record their work apart";
            return nullptr;
        }
    if (!row.record) throw std::logic_error(std::string(row.many) + " record graphs without their row saying how (devices/kinds.cpp)");
    return row.record(devices, enqueue, why);
}

DeviceChoice placed_on_this_machine(DeviceChoice choice, int processes, int local_rank) {
    if (processes == 1) return choice;
    for (const DeviceKindInfo& row : device_kinds()) {
        const int count = choice.count(row.kind);
        if (row.numbered_in_order || count == 0 || !choice.ordinals(row.kind).empty()) continue;
        if (const int present = row.probe().count; present > 0) {
            int i = 0;
            for (DevicePlace& p : choice.places)
                if (p.kind == row.kind) p.ordinal = (local_rank * count + i++) % present;
        }
    }
    return choice;
}

std::vector<Device*> pointers(const std::vector<std::unique_ptr<Device>>& devices) {
    std::vector<Device*> plain;
    for (const auto& d : devices) plain.push_back(d.get());
    return plain;
}

}  // namespace dpt
