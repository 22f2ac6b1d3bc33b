// The allreduce algorithms dptrain knows, by name: the one table to extend.
#include "parallel/allreduce.hpp"

#include <array>

#include "base/errors.hpp"

namespace dpt {

const Allreduce& naive_allreduce();  // allreduce_naive.cpp
const Allreduce& ring_allreduce();   // allreduce_ring.cpp
const Allreduce& nccl_allreduce();   // allreduce_nccl.cpp

namespace {

struct Entry {
    std::string_view name;
    const Allreduce& (*algorithm)();
};
constexpr std::array entries = {
    Entry{"naive", naive_allreduce},
    Entry{"ring", ring_allreduce},
    Entry{"nccl", nccl_allreduce},
};

}  // namespace

std::string Allreduce::refusal(const DeviceChoice& choice) const {
    if (!choice.mixed()) return "";
    return "it cannot run GPUs and CPU devices together: in it CPU devices would copy from GPUs, and only a GPU "
           "reaches across kinds (use --allreduce naive)";
}

const Allreduce* find_allreduce(std::string_view name) {
    for (const Entry& e : entries)
        if (e.name == name) return &e.algorithm();
    return nullptr;
}

const Allreduce& allreduce_named(std::string_view name) {
    if (const Allreduce* found = find_allreduce(name)) return *found;
    throw InputError("--allreduce must be one of " + allreduce_names() + " (got '" + std::string(name) + "')");
}

std::vector<const Allreduce*> all_allreduces() {
    std::vector<const Allreduce*> all;
    for (const Entry& e : entries) all.push_back(&e.algorithm());
    return all;
}

std::vector<std::string> allreduce_names_for(const DeviceChoice& choice) {
    std::vector<std::string> names;
    for (const Entry& e : entries)
        if (e.algorithm().refusal(choice).empty()) names.emplace_back(e.name);
    return names;
}

std::string allreduce_names() {
    std::string names;
    for (const Entry& e : entries) names += (names.empty() ? "" : ", ") + std::string(e.name);
    return names;
}

}  // namespace dpt
