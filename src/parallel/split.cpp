#include "parallel/split.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <numeric>

#include "base/errors.hpp"
#include "base/numbers.hpp"

namespace dpt {

std::vector<int64_t> whole_weights(std::span<const double> weights) {
    const double top = *std::max_element(weights.begin(), weights.end());
    assert(top > 0);
    std::vector<int64_t> w;
    for (double x : weights) w.push_back(std::llround(x / top * 1e6));
    return w;
}

std::vector<int> apportion(int size, std::span<const int64_t> w, int at_least) {
    const size_t n = w.size();
    assert(n > 0 && size >= 0);
    const int64_t total = std::accumulate(w.begin(), w.end(), int64_t(0));

    std::vector<int> parts(n);
    std::vector<int64_t> remainder(n);
    int given = 0;
    for (size_t i = 0; i < n; ++i) {
        parts[i] = int(int64_t(size) * w[i] / total);
        remainder[i] = int64_t(size) * w[i] % total;
        given += parts[i];
    }
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return remainder[a] > remainder[b]; });
    for (size_t k = 0; given < size; ++k, ++given) ++parts[order[k % n]];

    if (int64_t(at_least) * int64_t(n) <= size)
        for (size_t i = 0; i < n; ++i)
            while (parts[i] < at_least) {
                const auto largest = std::max_element(parts.begin(), parts.end());
                --*largest;
                ++parts[i];
            }
    return parts;
}

std::vector<int> counts_for_speeds(int batch, std::span<const double> samples_per_s) {
    return apportion(batch, whole_weights(samples_per_s), 1);
}

AutoSplitWindow auto_split_window(size_t first, size_t steps) {
    const size_t end = std::min(steps, first + auto_split_after);
    return {first + std::min(auto_split_settle, (end - first) / 2), end};
}

SplitChoice parse_split(const std::string& text, int devices, int batch) {
    if (text == "even") return {};
    if (text == "auto") return {SplitMode::automatic, {}};
    std::vector<double> weights;
    for (const std::string& item : comma_list(text))
        weights.push_back(parse_number<double>("split", item, 1e-6, 1e6,
                                               "even, auto, or one positive number per device (e.g. 3,1)"));
    if (int(weights.size()) != devices)
        throw InputError("--split " + text + " gives " + std::to_string(weights.size()) + " share" +
                         (weights.size() == 1 ? "" : "s") + " for " + std::to_string(devices) + " device" +
                         (devices == 1 ? "" : "s") + ": give one number per device, in device order");
    return {SplitMode::weights, apportion(batch, whole_weights(weights), 1)};
}

std::string describe_split(const SplitChoice& split, int batch) {
    if (split.mode == SplitMode::even) return "even";
    if (!split.measured()) return "auto, even until measured";
    std::string parts;
    for (int c : split.counts) parts += (parts.empty() ? "" : " + ") + std::to_string(c);
    return parts + " of " + std::to_string(batch);
}

namespace {

std::vector<Part> contiguous(const std::vector<int>& counts) {
    std::vector<Part> parts;
    int first = 0;
    for (int c : counts) {
        parts.push_back({first, c});
        first += c;
    }
    return parts;
}

}  // namespace

BatchParts::BatchParts(const SplitChoice& split, int devices, int batch, size_t samples) : batch_(batch) {
    assert(split.counts.empty() || int(split.counts.size()) == devices);
    const std::vector<int64_t> weights = split.counts.empty()
                                             ? std::vector<int64_t>(size_t(devices), 1)
                                             : std::vector<int64_t>(split.counts.begin(), split.counts.end());
    full_ = contiguous(apportion(batch, weights, 1));
    last_size_ = int(samples % size_t(batch));
    if (last_size_ > 0) last_ = contiguous(apportion(last_size_, weights));
}

std::span<const Part> BatchParts::of(int size) const {
    assert(size == batch_ || size == last_size_);
    return size == batch_ ? std::span<const Part>(full_) : std::span<const Part>(last_);
}

int BatchParts::largest() const {
    int most = 0;
    for (const Part& p : full_) most = std::max(most, p.count);
    return most;
}

}  // namespace dpt
