// What a training run tells its user: the banner, a progress bar on
// terminals, one line per epoch (and --breakdown's phases), the --metrics
// JSON Lines, and the message of a run that diverged. The epoch loop
// (trainer.cpp) decides; this file only says.
#pragma once
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/files.hpp"
#include "parallel/allreduce.hpp"
#include "parallel/parallel.hpp"
#include "model/dataset.hpp"
#include "devices/device.hpp"
#include "run/settings.hpp"

namespace dpt {

// One finished epoch, as printed.
struct EpochReport {
    int epoch = 0;
    double train_time_s = 0, samples_per_s = 0, train_loss = 0, test_acc = 0;
    // --breakdown: device 0's phases (seconds, indexed by Phase) and every
    // device's forward+backward time.
    PhaseTimes phases{};
    std::vector<PhaseTimes> device_phases{};  // --breakdown: every device's, device 0's first
    double compute_mean_s = 0, compute_slowest_s = 0;
    int slowest_device = 0;
    // CPU devices: the smallest share of a core a device's forward+backward
    // got this epoch, and which device (-1: not measured, as on GPUs).
    double least_core_share = -1;
    int least_core_device = -1;
};

// Below this share of a core, a CPU device was slowed by another program.
inline constexpr double busy_core_share = 0.85;

// Each device's core share since the last take, the least into `r`.
void take_core_shares(std::span<Device* const> devices, EpochReport& r);

// 12,345
std::string with_commas(double value);

// The lines before the first epoch: model and data, devices, batch, the
// allreduce, resume point and checkpoints.
void print_banner(const TrainConfig& c, const RunStart& start, const std::string& data_dir, const FashionMnist& data,
                  std::span<Device* const> devices, const AllreduceInfo& allreduce, const StepPlan& plan,
                  size_t steps);

// A one-line progress bar for the epoch under way, on a terminal only: logs
// and pipes get the epoch lines alone. Drawn after the first step, then at
// most 5 times a second; clear() makes room for the epoch's line.
class ProgressBar {
   public:
    explicit ProgressBar(bool enabled) : enabled_(enabled) {}

    void start(int epoch, size_t total_steps, size_t first_step) {
        epoch_ = epoch, total_ = total_steps, first_ = first_step;
        start_ = std::chrono::steady_clock::now();
        last_draw_ = start_ - std::chrono::seconds(1);  // the first step draws, however short the epoch
    }
    // `done` steps of the epoch are finished, `samples` samples of them since start().
    void update(size_t done, size_t samples);
    // Makes room for the epoch's line.
    void clear();

   private:
    const bool enabled_;
    bool drawn_ = false;
    int epoch_ = 0;
    size_t total_ = 0, first_ = 0;
    std::chrono::steady_clock::time_point start_, last_draw_;
};

// The same bar for a command's own work (drift's steps, simulate's
// timings, bench-allreduce's sizes): "what [###...] done/total  ETA", on a
// terminal only, redrawn at most 5 times a second. clear() before printing
// a line; the destructor clears it too.
class TaskProgress {
   public:
    TaskProgress(std::string what, size_t total);
    ~TaskProgress() { clear(); }
    TaskProgress(const TaskProgress&) = delete;
    TaskProgress& operator=(const TaskProgress&) = delete;
    void update(size_t done);
    void clear();

   private:
    const bool enabled_;
    bool drawn_ = false;
    std::string what_;
    size_t total_;
    std::chrono::steady_clock::time_point start_, last_draw_;
};

// --breakdown: each device's phase times since the last take, plus what was
// taken `earlier` in the epoch (one per device, or none), into `r`.
void take_breakdown(std::span<Device* const> devices, EpochReport& r, std::span<const PhaseTimes> earlier = {});

// The epoch's line (and with --breakdown its phases); resumed_at > 0: the
// epoch was resumed after that many steps.
void print_epoch(const EpochReport& r, size_t resumed_at, std::span<Device* const> devices, bool breakdown,
                 bool overlap);

// --metrics FILE: one JSON object per epoch. A resumed run appends to the
// file of the run it continues. Opening fails with an InputError; a write
// that fails, with a WriteError.
class MetricsFile {
   public:
    MetricsFile(const TrainConfig& c, bool resuming);
    void write(const EpochReport& r);

   private:
    const TrainConfig& config_;
    OutputStream out_;
};

// When a CPU device got less than busy_core_share of a core: a line that
// says so, so that nobody blames the algorithm for another program's load.
void warn_if_core_was_busy(const EpochReport& r, std::span<Device* const> devices);

// After an epoch whose loss is still about ln(classes) (or above) and whose
// test accuracy is about chance: one line on the likely cause and what to try.
void warn_if_at_chance(const TrainConfig& c, const EpochReport& r, int classes);

// Step `bad_step` (0-based, -1: unknown) of `epoch` produced a NaN or an
// infinity: what happened and which --lr to try.
std::string divergence_message(const TrainConfig& c, int epoch, int32_t bad_step, size_t steps);

}  // namespace dpt
