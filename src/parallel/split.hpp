// How each batch is divided among the devices (--split): the gluon
// tutorial's closing exercise asks what to do when the devices are not
// equally fast. Whatever the split, the devices' gradients are summed and the
// step divides by the whole batch, so every split gives the same update up to
// float summation order; only the time spent waiting for the slowest device
// changes.
//
//   even      every device gets B / N samples (the first B % N one more): the tutorial's split
//   weights   --split 3,1: parts in proportion to the numbers given, one per device
//   auto      the first steps of the run go even and are timed; from then on each device's
//             part is proportional to its measured samples/s (auto_split_window)
//
// Parts are whole samples: a full batch's parts (`counts`, summing to B) are
// fixed once, and a short last batch is divided in proportion to them. The
// parts change at one point only, where `auto` has measured; a checkpoint
// records them, so a resumed run divides exactly as the run it continues.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace dpt {

enum class SplitMode { even, weights, automatic };

struct SplitChoice {
    SplitMode mode = SplitMode::even;
    // A full batch's part on each device, summing to the batch: set for
    // weights, and for auto once measured; empty for even.
    std::vector<int> counts;
    bool measured() const { return mode != SplitMode::automatic || !counts.empty(); }
};

// The steps that `auto` times at the even split: [from, end) of the epoch,
// counted from 0. The run's first `auto_split_settle` steps go untimed (they
// warm caches, touch fresh memory and, on GPUs, load the kernels: on CPU
// devices steps 1 and 2 both take about twice as long as later ones); the
// next ones up to `auto_split_after` are timed, and the parts change after
// `end`. The median of 8 timed steps still holds when 3 of them were slowed
// by something else on the machine. A shorter run leaves at most its first
// half untimed.
inline constexpr size_t auto_split_settle = 2;
inline constexpr size_t auto_split_after = 10;
struct AutoSplitWindow {
    size_t from, end;
};
// For a run that starts at step `first` of an epoch of `steps` steps.
AutoSplitWindow auto_split_window(size_t first, size_t steps);

// --split TEXT for `devices` devices and a batch of `batch`: "even", "auto",
// or one positive number per device. Bad text is an InputError naming --split.
SplitChoice parse_split(const std::string& text, int devices, int batch);

// "even", "auto, even until measured" or "192 + 64 of 256": the split in words.
std::string describe_split(const SplitChoice& split, int batch);

// `size` whole samples divided in proportion to `weights` (each >= 0, not
// all 0) by largest remainders, ties to the lower index; then any device
// below `at_least` takes samples from the largest part, where size allows.
// Equal weights give the tutorial's even parts; weights that sum to `size`
// come back as they are.
std::vector<int> apportion(int size, std::span<const int64_t> weights, int at_least = 0);

// Positive real weights as whole numbers for apportion (millionths of the largest).
std::vector<int64_t> whole_weights(std::span<const double> weights);

// The full batch's counts for devices measured at `samples_per_s` each
// (every device at least one sample).
std::vector<int> counts_for_speeds(int batch, std::span<const double> samples_per_s);

struct Part {
    int first;  // offset within the batch
    int count;
};

// The parts of every batch of an epoch of `samples` samples in batches of
// `batch`, made once so that queuing a step looks them up: the full batch's
// and the short last batch's.
class BatchParts {
   public:
    BatchParts(const SplitChoice& split, int devices, int batch, size_t samples);
    // The parts of a batch of `size` samples: `batch`, or the epoch's short last batch.
    std::span<const Part> of(int size) const;
    // The most samples any device gets in a batch.
    int largest() const;

   private:
    int batch_, last_size_ = 0;
    std::vector<Part> full_, last_;
};

}  // namespace dpt
