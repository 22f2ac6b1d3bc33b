#include "run/report.hpp"

#include "base/json.hpp"
#include "base/numbers.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <unistd.h>

#include "base/errors.hpp"
#include "devices/gpu.hpp"
#include "devices/kinds.hpp"
#include "model/models.hpp"
#include "run/schedule.hpp"

namespace dpt {

std::string with_commas(double value) {
    const std::string digits = std::to_string(std::llabs(std::llround(value)));
    std::string out = value < 0 ? "-" : "";
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return out;
}

void print_banner(const TrainConfig& c, const RunStart& start, const std::string& dir, const FashionMnist& data,
                  std::span<Device* const> devices, const AllreduceInfo& allreduce, const StepPlan& plan,
                  size_t steps) {
    const int n = c.devices_in_all();  // of every process
    const int capacity = (c.batch + n - 1) / n;
    const bool resuming = start.resuming();
    const std::string origin = resuming                     ? "parameters from the checkpoint " + start.resume_path
                               : !c.load_path.empty()       ? "parameters from " + c.load_path
                               : c.init == InitKind::xavier ? "xavier init"
                                                            : "normal init";
    const Model& model = model_of(c.model);
    if (c.model == ModelKind::lenet)
        std::printf("dptrain: LeNet (%s pool, %s) on Fashion-MNIST from %s: %zu train, %zu test samples\n",
                    c.pool == PoolKind::avg ? "avg" : "max", origin.c_str(), dir.c_str(), data.train.count,
                    data.test.count);
    else
        std::printf("dptrain: %s (%s) on Fashion-MNIST from %s: %zu train, %zu test samples\n",
                    model.name().c_str(), origin.c_str(), dir.c_str(), data.train.count, data.test.count);
    if (model.batch_norms() > 0) {
        std::printf("model: %zu parameters (%.1f MB of gradients a step), %.0f MFLOP a sample forward, "
                    "%d batch norms, ",
                    model.trained_count(), double(model.trained_count()) * sizeof(float) / 1e6,
                    model.forward_flops() / 1e6, model.batch_norms());
        if (n == 1)
            std::printf("normalising over the batch\n");
        else if (c.bn == BatchNormMode::sync)
            std::printf("--bn sync: over the whole batch (per-channel sums allreduced %d times a step)\n",
                        2 * model.batch_norms());
        else
            std::printf("--bn local: each device normalises over its own part, so %d devices compute another "
                        "function than 1 (--bn sync: the same)\n", n);
    }
    const std::string note = start.devices_note.empty() ? "" : "; " + start.devices_note;
    if (c.devices.mixed()) {
        // Kinds meet in the host memory of the run's first kind that has its
        // own (kinds.hpp: host_memory), which the others reach (device.hpp: reach()).
        std::string names, first, mapped_by;
        for (Device* d : devices) names += (names.empty() ? "" : ", ") + d->name();
        for (const DeviceKindInfo& row : device_kinds())
            if (c.devices.count(row.kind) > 0) {
                if (first.empty()) first = row.many;
                if (mapped_by.empty() && row.host_memory) mapped_by = std::string(" that the ") + row.many + " map";
            }
        std::printf("devices: %s (%s), the %s first: %s sums the gradients; what crosses kinds goes through "
                    "host memory%s; the steps are queued one by one, not recorded%s\n",
                    describe(c.devices).c_str(), names.c_str(), first.c_str(), devices[0]->name().c_str(),
                    mapped_by.c_str(), note.c_str());
    } else {
        std::printf("%s", kind_info(c.devices.kind()).banner(c.devices.count(), note).c_str());
    }
    if (c.processes > 1)
        std::printf("processes: %d (mpirun), each with the devices above: %d devices in all, rank r's parts of each "
                    "batch the r-th; each sums its devices' gradients (--allreduce %s), then device 0 of each sums "
                    "across the processes (--across %s%s); rank 0 prints, evaluates and writes files\n",
                    c.processes, n, c.allreduce.c_str(), to_string(c.across),
                    c.across == AcrossKind::nccl ? ": one NCCL communicator of their GPUs, GPU to GPU"
                    : c.across == AcrossKind::ring ? ": a ring over MPI send and receive"
                                                   : ": MPI_Allreduce");
    char per_device[64];  // "256 per device", or "170-171 per device" when the parts differ by one
    std::snprintf(per_device, sizeof per_device, c.batch % n ? "%d-%d per device" : "%d per device", c.batch / n,
                  capacity);
    const std::string parts = c.split.mode == SplitMode::even      ? std::string(per_device)
                              : c.split.mode == SplitMode::weights ? "split " + describe_split(c.split, c.batch) + " by --split"
                              : c.split.measured() ? "split " + describe_split(c.split, c.batch) + ", as --split auto measured"
                                                   : "split " + describe_split(c.split, c.batch);
    std::printf("batch %d (%s), lr %g, %d epoch%s, seed %llu\n", c.batch, parts.c_str(),
                double(c.lr), c.epochs, c.epochs == 1 ? "" : "s", (unsigned long long)c.seed);
    if (c.split.mode == SplitMode::automatic && !c.split.measured()) {
        const AutoSplitWindow w = auto_split_window(start.position.step, steps);
        std::printf("split auto: steps %zu-%zu go even and are timed; from step %zu on each device's part is in "
                    "proportion to its samples/s\n",
                    w.from + 1, w.end, w.end + 1);
    }
    if (c.math == Math::tf32)
        std::printf("tf32: the conv and dense products take TF32 operands (10 bits of fraction) and sum in FP32%s\n",
                    c.devices.count(DeviceKind::gpu) == 0 ? "; CPU devices round the operands and compute in FP32 (no speed gained)"
                    : c.devices.mixed() ? ": tensor cores on the GPUs; the CPU devices round the same operands"
                                        : ", on the GPUs' tensor cores");
    for (const TrainConfig::Slowdown& s : c.slowdowns)
        std::printf("slowdown: %s computes each part %d times over (--slowdown: the same result, %dx the time)\n",
                    s.device.c_str(), s.factor, s.factor);
    if (c.warmup > 0)
        std::printf("warm-up: the rate rises linearly from %g to %g over the first %zu steps (%g epoch%s)\n",
                    double(lr_at(c, steps, 1, 0)), double(c.lr), warmup_steps(c, steps), c.warmup,
                    c.warmup == 1 ? "" : "s");
    if (n > 1) std::printf("allreduce: %s (%s)\n", c.allreduce.c_str(), std::string(allreduce.summary).c_str());
    if (c.overlap) {
        std::string sizes;
        for (const Range& b : plan.buckets) {
            char kb[32];
            std::snprintf(kb, sizeof kb, "%s%.1f", sizes.empty() ? "" : " + ", double(b.count * sizeof(float)) / bytes_per_kb);
            sizes += kb;
        }
        sizes += " KB, the last layers' first";
        std::printf("overlap: the gradients go in %zu bucket%s (%s; --bucket-kb %d), each allreduced on a second "
                    "stream per device as soon as backward has it\n",
                    plan.buckets.size(), plan.buckets.size() == 1 ? "" : "s", sizes.c_str(),
                    c.bucket_kb);
    }
    if (resuming)
        std::printf("resuming at epoch %d, step %zu of %zu\n", start.position.epoch, start.position.step, steps);
    if (!c.checkpoint_path.empty())
        std::printf("checkpoint: %s, every %d epoch%s and when stopped by SIGINT or SIGTERM\n",
                    c.checkpoint_path.c_str(), c.checkpoint_every, c.checkpoint_every == 1 ? "" : "s");
    if (!c.checkpoint_path.empty() || resuming)
        std::printf("resume keeps: %s\n", kept_settings_text(c).c_str());
    std::fflush(stdout);
}

namespace {

// "[#########.....................]": `done` of `total` in 30 characters.
std::string bar(size_t done, size_t total) {
    constexpr size_t width = 30;
    const size_t filled = width * std::min(done, total) / std::max<size_t>(total, 1);
    std::string text(width + 2, '.');
    text.front() = '[', text.back() = ']';
    std::fill_n(text.begin() + 1, filled, '#');
    return text;
}

// Wipes a drawn bar's line. Flushed: a message on stderr next (a stop, an
// error) must not land on the bar's line.
void wipe(bool& drawn) {
    if (drawn) {
        std::printf("\r\033[K");
        std::fflush(stdout);
    }
    drawn = false;
}

}  // namespace

void ProgressBar::update(size_t done, size_t samples) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_draw_ < std::chrono::milliseconds(200)) return;
    last_draw_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double rate = double(samples) / elapsed;
    const double eta = done > first_ ? elapsed * double(total_ - done) / double(done - first_) : 0.0;
    std::printf("\repoch %d %s %zu/%zu batches  %s samples/s  ETA %.0f s\033[K", epoch_, bar(done, total_).c_str(), done,
                total_, with_commas(rate).c_str(), eta);
    std::fflush(stdout);
    drawn_ = true;
}

void ProgressBar::clear() { wipe(drawn_); }

TaskProgress::TaskProgress(std::string what, size_t total)
    : enabled_(isatty(STDOUT_FILENO) == 1), what_(std::move(what)), total_(std::max<size_t>(total, 1)) {
    start_ = std::chrono::steady_clock::now();
    last_draw_ = start_ - std::chrono::seconds(1);  // the first update draws
}

void TaskProgress::update(size_t done) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_draw_ < std::chrono::milliseconds(200) && done < total_) return;
    last_draw_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    std::printf("\r%s %s %zu/%zu", what_.c_str(), bar(done, total_).c_str(), done, total_);
    if (done > 0 && done < total_) std::printf("  ETA %.0f s", elapsed * double(total_ - done) / double(done));
    std::printf("\033[K");
    std::fflush(stdout);
    drawn_ = true;
}

void TaskProgress::clear() { wipe(drawn_); }

// --breakdown: device 0's timeline (the step's critical path: it waits for
// every peer, sums, and sends the sum back), every device's phases, and
// their compute times' mean and slowest.
void take_breakdown(std::span<Device* const> devices, EpochReport& r, std::span<const PhaseTimes> earlier) {
    r.device_phases.resize(devices.size());
    for (size_t i = 0; i < devices.size(); ++i) {
        PhaseTimes t = devices[i]->take_phase_times();
        if (i < earlier.size())
            for (int p = 0; p < phase_count; ++p) t[size_t(p)] += earlier[i][size_t(p)];
        r.device_phases[i] = t;
        if (i == 0) r.phases = t;
        const double compute = t[size_t(Phase::compute)];
        r.compute_mean_s += compute / double(devices.size());
        if (compute > r.compute_slowest_s) r.compute_slowest_s = compute, r.slowest_device = int(i);
    }
}

namespace {

// "split_and_load 0.02 s (0%)": a phase of device 0's epoch.
std::string phase_part(const EpochReport& r, Phase p) {
    const double seconds = r.phases[size_t(p)];
    char text[96];
    std::snprintf(text, sizeof text, "%s %.2f s (%.0f%%)", phase_name(p), seconds, 100.0 * seconds / r.train_time_s);
    return text;
}

// Several devices: a row each, so that every device's waiting and allreduce
// show (device 0's line above is the critical path; a trace shows the same).
void print_device_rows(const EpochReport& r, std::span<Device* const> devices, std::span<const Phase> columns) {
    const auto width = [](Phase p) { return int(std::max<size_t>(std::strlen(phase_name(p)), 6)); };  // the name's
    std::printf("  %-8s", "seconds");
    for (Phase p : columns) std::printf("  %*s", width(p), phase_name(p));
    std::printf("\n");
    for (size_t i = 0; i < devices.size() && i < r.device_phases.size(); ++i) {
        std::printf("  %-8s", devices[i]->name().c_str());
        for (Phase p : columns) std::printf("  %*.2f", width(p), r.device_phases[i][size_t(p)]);
        std::printf("\n");
    }
}

void print_breakdown(const EpochReport& r, std::span<Device* const> devices, bool overlap) {
    const auto part = [&](Phase p) { return r.phases[size_t(p)]; };
    std::printf("  phases on %s: %s, %s %.2f s (%.0f%%", devices[0]->name().c_str(), phase_part(r, Phase::load).c_str(),
                phase_name(Phase::compute), part(Phase::compute), 100.0 * part(Phase::compute) / r.train_time_s);
    if (devices.size() > 1)
        std::printf("; mean of the devices %.2f s, slowest %s %.2f s", r.compute_mean_s,
                    devices[size_t(r.slowest_device)]->name().c_str(), r.compute_slowest_s);
    // Without --overlap every phase is the main stream's; with it, the
    // allreduce's own stream ran alongside backward, and only the time the
    // update waited for it (exposed) is the epoch's.
    const std::vector<Phase> main_stream = overlap ? std::vector{Phase::load, Phase::compute, Phase::exposed, Phase::update}
                                                   : std::vector{Phase::load, Phase::compute, Phase::wait, Phase::allreduce,
                                                                 Phase::update};
    double sum = 0;
    for (Phase p : main_stream) sum += part(p);
    std::printf(")");
    for (size_t k = 2; k < main_stream.size(); ++k) std::printf(", %s", phase_part(r, main_stream[k]).c_str());
    std::printf("; sum %.2f s of the epoch's %.2f s\n", sum, r.train_time_s);
    if (overlap) {
        const double busy = part(Phase::wait) + part(Phase::allreduce);
        const double hidden = std::max(0.0, busy - part(Phase::exposed));
        std::printf("  allreduce stream on %s (--overlap): %s %.2f s, %s %.2f s; of those %.2f s, "
                    "%.2f s (%.0f%%) were hidden behind %s\n",
                    devices[0]->name().c_str(), phase_name(Phase::wait), part(Phase::wait), phase_name(Phase::allreduce),
                    part(Phase::allreduce), busy, hidden, busy > 0 ? 100.0 * hidden / busy : 100.0,
                    phase_name(Phase::compute));
    }
    if (devices.size() > 1) {
        std::vector<Phase> columns = main_stream;
        if (overlap) columns.insert(columns.end(), {Phase::wait, Phase::allreduce});
        print_device_rows(r, devices, columns);
    }
}

}  // namespace

// resumed_at > 0: the epoch was resumed after that many steps, so its time
// and samples/s cover only the steps run since.
void print_epoch(const EpochReport& s, size_t resumed_at, std::span<Device* const> devices, bool breakdown,
                 bool overlap) {
    std::printf("epoch %d  time %.2f s  %s samples/s  loss %.4f  test_acc %.4f", s.epoch, s.train_time_s,
                with_commas(s.samples_per_s).c_str(), s.train_loss, s.test_acc);
    if (resumed_at > 0) std::printf("  (resumed after step %zu: time and samples/s cover the rest)", resumed_at);
    const bool on_gpu = std::any_of(devices.begin(), devices.end(), [](Device* d) { return d->kind() == DeviceKind::gpu; });
    if (on_gpu && gpus_emulated()) std::printf("  (emulated GPUs: CPU time)");
    std::printf("\n");
    if (breakdown) print_breakdown(s, devices, overlap);
    std::fflush(stdout);
}

void take_core_shares(std::span<Device* const> devices, EpochReport& r) {
    for (size_t i = 0; i < devices.size(); ++i) {
        const double share = devices[i]->take_core_share();
        if (share >= 0 && (r.least_core_device < 0 || share < r.least_core_share))
            r.least_core_share = share, r.least_core_device = int(i);
    }
}

void warn_if_core_was_busy(const EpochReport& r, std::span<Device* const> devices) {
    if (r.least_core_device < 0 || r.least_core_share >= busy_core_share) return;
    std::printf("note: %s got %.0f%% of a core for its forward+backward in epoch %d: another program is using "
                "this machine's cores, so the time and speed-up are not the algorithm's\n",
                devices[size_t(r.least_core_device)]->name().c_str(), 100.0 * r.least_core_share, r.epoch);
    std::fflush(stdout);
}

// A network that predicts one class for every input scores 1 / classes
// (0.10) and, once its outputs are uniform, has loss ln(classes) (2.3026).
// Healthy runs are far from both after an epoch. Two ways to get stuck there,
// with different cures (measured with bench/warmup_seeds.sh, README
// "Initialisation"): sensible weights (xavier) pushed by the first large steps
// into dead ReLUs, which a warm-up avoids; and tiny weights (normal, std 0.01)
// whose signal is too small to learn from yet, which a warm-up prolongs.
void warn_if_at_chance(const TrainConfig& c, const EpochReport& r, int classes) {
    const double chance = 1.0 / classes, uniform_loss = std::log(double(classes));
    // The epoch's mean loss includes its first steps, which may overshoot
    // above ln 10 before the collapse (README: epoch 1 at 2.3653, accuracy
    // 0.10; epoch 2 at 2.3029, 0.1387): not below ln 10 by more than 0.05,
    // and no better than chance by more than 0.05.
    if (r.train_loss < uniform_loss - 0.05 || r.test_acc > chance + 0.05) return;
    std::printf("note: epoch %d is at chance (loss %.4f, where uniform guessing gives ln %d = %.4f; test accuracy "
                "%.4f): ", r.epoch, r.train_loss, classes, uniform_loss, r.test_acc);
    if (c.init == InitKind::normal)
        std::printf("the tutorial's tiny initial weights (--init normal) give the gradients too little to work with "
                    "yet%s; try --init xavier, or more epochs\n",
                    c.warmup > 0 ? ", and a warm-up's small first steps prolong that" : "");
    else
        std::printf("the first steps at lr %g likely pushed the network into predicting one class (dead ReLUs); "
                    "try %s, a smaller --lr, or another --seed\n",
                    double(c.lr), c.warmup > 0 ? "a longer --warmup" : "--warmup 1");
    std::fflush(stdout);
}

MetricsFile::MetricsFile(const TrainConfig& c, bool resuming) : config_(c) {
    if (c.metrics_path.empty()) return;
    // A resumed run goes on with the metrics of the run it continues.
    out_ = OutputStream("--metrics", c.metrics_path, resuming);
}

void MetricsFile::write(const EpochReport& s) {
    if (!out_.is_open()) return;
    const TrainConfig& c = config_;
    Json line = {{"epoch", s.epoch},
                 {"train_time_s", decimals(s.train_time_s, 6)},
                 {"samples_per_s", decimals(s.samples_per_s, 1)},
                 {"train_loss", decimals(s.train_loss, 6)},
                 {"test_acc", decimals(s.test_acc, 4)},
                 {"devices", c.devices_in_all()},
                 {"device_kind", kind_names(c.devices)},
                 {"batch", c.batch},
                 {"lr", significant(c.lr)}};
    if (c.breakdown) {
        line["load_s"] = decimals(s.phases[size_t(Phase::load)], 6);
        line["compute_s"] = decimals(s.phases[size_t(Phase::compute)], 6);
        line["compute_mean_s"] = decimals(s.compute_mean_s, 6);
        line["compute_slowest_s"] = decimals(s.compute_slowest_s, 6);
        line["wait_s"] = decimals(s.phases[size_t(Phase::wait)], 6);
        line["allreduce_s"] = decimals(s.phases[size_t(Phase::allreduce)], 6);
        line["update_s"] = decimals(s.phases[size_t(Phase::update)], 6);
    }
    if (c.breakdown && c.overlap) {  // wait_s and allreduce_s are then the allreduce stream's
        line["overlap"] = true;
        line["exposed_s"] = decimals(s.phases[size_t(Phase::exposed)], 6);
    }
    if (s.least_core_device >= 0) line["least_core_share"] = decimals(s.least_core_share, 3);
    if (c.processes > 1) {  // "devices" counts every process's
        line["processes"] = c.processes;
        line["across"] = to_string(c.across);
    }
    line["model"] = to_string(c.model);
    if (model_of(c.model).batch_norms() > 0) line["bn"] = to_string(c.bn);
    if (c.math == Math::tf32) line["math"] = "tf32";
    out_.write(line.dump() + "\n");
    out_.flush();
}

// The advice names the learning rate the tutorial's linear scaling
// rule gives for this batch: 0.3 at 256, in proportion.
std::string divergence_message(const TrainConfig& c, int epoch, int32_t bad_step, size_t steps) {
    char text[512];
    const std::string where = bad_step >= 0 ? " at step " + std::to_string(bad_step + 1) + " of " +
                                                  std::to_string(steps) : "";
    const double rule = 0.3 * double(c.batch) / 256.0;
    std::snprintf(text, sizeof text,
                  "training diverged in epoch %d%s: the loss or the gradients are no longer finite (NaN or "
                  "infinity) with --lr %g. Try a smaller --lr; for --batch %d the linear scaling rule (lr 0.3 "
                  "at batch 256, growing with the batch%s) suggests --lr %g.%s",
                  epoch, where.c_str(), double(c.lr), c.batch,
                  c.devices.count() > 1 ? ", as when going from 1 device to N" : "", rule,
                  c.checkpoint_path.empty() ? "" : " No checkpoint was written for this epoch.");
    return text;
}

}  // namespace dpt
