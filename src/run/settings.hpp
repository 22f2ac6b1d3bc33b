// A training run's settings (what the command line and a checkpoint's
// header hold) and the point a run stands at between two steps. Below the
// trainer, the checkpoint and the command line, which all speak of them.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "parallel/cluster.hpp"
#include "devices/device.hpp"
#include "model/models.hpp"
#include "parallel/split.hpp"
#include "run/trace.hpp"

namespace dpt {

enum class InitKind { normal, xavier };

// --bucket-kb's default (README: "Overlap" says how it was chosen).
inline constexpr int default_bucket_kb = 64;

// Where a run stands between two steps: what a checkpoint restores.
struct Position {
    int epoch = 1;          // the epoch to run next (1-based)
    size_t step = 0;        // of its steps, those already done
    double loss_sum = 0.0;  // their training losses, summed
};

struct TrainConfig {
    DeviceChoice devices;      // GPU replicas first, then CPU devices (device.hpp)
    int batch = 256;
    float lr = 0.3f;
    double warmup = 0;         // --warmup E: epochs over which the rate rises linearly to lr (0: constant)
    int epochs = 5;
    uint64_t seed = 0;
    std::string data_dir;      // empty: the default search
    size_t limit_train = 0;    // 0: all
    size_t limit_test = 0;
    std::string metrics_path, save_path, load_path;
    std::string trace_path;    // --trace: a Chrome trace of every step's phases (empty: none)
    StepRange trace_steps;     // --trace-steps: the steps it keeps
    ModelKind model = ModelKind::lenet;
    BatchNormMode bn = BatchNormMode::local;  // --bn: for a model with batch norm
    Math math = Math::fp32;                   // --tf32: Math::tf32
    PoolKind pool = PoolKind::avg;            // LeNet's pooling (ResNet's are fixed)
    InitKind init = InitKind::xavier;
    bool graphs = true;        // GPU: record the epoch's steps as a CUDA graph and replay it
    bool breakdown = false;    // time each phase of the steps (split, compute, wait, allreduce, update)
    SplitChoice split;         // --split: how each batch is divided among the devices
    // --slowdown NAME=K: device NAME computes each part K times (the same
    // result, K times the time), to try --split on identical devices.
    struct Slowdown {
        std::string device;
        int factor = 1;
    };
    std::vector<Slowdown> slowdowns;
    std::string allreduce = "naive";  // the algorithm's name (allreduce.hpp)
    // --overlap: allreduce each bucket of gradients (layers adding up to at
    // least bucket_kb KB) while backward computes the next; the same sums.
    bool overlap = false;
    int bucket_kb = default_bucket_kb;
    // A run of several processes under mpirun (cluster.hpp): how many there
    // are (each with `devices`), how they sum gradients, and how long a rank
    // waits for the others before it ends the job.
    int processes = 1;
    AcrossKind across = AcrossKind::automatic;
    double collective_timeout = default_collective_timeout;
    int devices_in_all() const { return processes * devices.count(); }
    std::string checkpoint_path;  // empty: no checkpoints
    int checkpoint_every = 1;     // epochs
};

// What a run starts from besides its settings: the checkpoint --resume goes
// on from (its file, where it stopped, its parameters; its settings are
// already in TrainConfig), and why the devices are these when the command
// line did not name them. The command line makes it and train() reads it;
// no checkpoint records it.
struct RunStart {
    std::string resume_path;    // empty: a new run
    Position position;          // where the resumed run stopped
    std::vector<float> params;  // the checkpoint's parameters
    std::string devices_note;   // e.g. "as in the checkpoint"
    bool resuming() const { return !resume_path.empty(); }
    void note(const std::string& text) { devices_note += (devices_note.empty() ? "" : "; ") + text; }
};

// A command line's run: the settings it asks for and what it starts from.
struct TrainRequest {
    TrainConfig settings;
    RunStart start;
};

// What --resume does when the command line gives a setting again.
enum class OnResume {
    kept,     // it fixes the trajectory: refused unless it repeats the checkpoint's value
    given,    // the command line's value if given, else the checkpoint's (epochs, checkpoint-every)
    decided,  // the devices, processes, allreduce and split change only the order floats are
              // summed in: the command line decides, and the banner says what that costs
};

// One setting a checkpoint records. The table of them (run_settings()) is
// the one list: the checkpoint header is written and read from it, --resume
// checks and restores from it, and the banner shows what a resumed run
// keeps. A new setting is a field above and a row in settings.cpp (and its
// option in cli.cpp).
struct RunSetting {
    std::string_view key;     // the header's key; the option's name too, unless `flag` says
    std::string_view flag;    // a setting given by a flag of another name (math: --tf32), or ""
    int since;                // the checkpoint format version that first wrote it (older: the default)
    OnResume on_resume;
    std::string (*text)(const TrainConfig& c);
    // Sets the field from `text` as text() writes it. Returns why it is not
    // a value ("is not a valid value"), or nullptr when it was one. Checks
    // between settings (the batch against the devices) are the reader's.
    const char* (*read)(std::string_view text, TrainConfig& c);
    std::string_view option() const { return flag.empty() ? key : flag; }
};

// Every setting, in the order checkpoint headers have them.
std::span<const RunSetting> run_settings();

// The settings a resumed run keeps, as "model lenet, bn local, ...".
std::string kept_settings_text(const TrainConfig& c);

}  // namespace dpt
