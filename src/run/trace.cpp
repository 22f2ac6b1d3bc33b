#include "run/trace.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/errors.hpp"
#include "base/json.hpp"
#include "base/options.hpp"

namespace dpt {

StepRange parse_step_range(const std::string& text) {
    const size_t dash = text.find('-');
    const auto step = [&](const std::string& part) {
        return parse_number<size_t>("trace-steps", part, 1, size_t(1) << 40, "A-B, two step numbers from 1 (or one)");
    };
    if (dash == std::string::npos) {
        const size_t s = step(text);
        return {s, s};
    }
    const StepRange r{step(text.substr(0, dash)), step(text.substr(dash + 1))};
    if (r.last < r.first)
        throw InputError("--trace-steps " + text + ": the range ends before it begins (A-B with A <= B)");
    return r;
}

const char* trace_name(Phase phase) { return phase == Phase::compute ? "forward" : phase_name(phase); }

namespace {

// Microseconds, to the nanosecond: a span's end is the next one's start
// to that precision.
double micros(double seconds) { return std::round(seconds * 1e9) / 1e3; }

}  // namespace

TraceFile::TraceFile(const std::string& path, std::span<Device* const> devices, bool overlap, StepRange range,
                     size_t steps_an_epoch, size_t step_bytes, int rank, int processes)
    : path_(processes > 1 ? path + ".rank" + std::to_string(rank) : path),
      range_(range),
      steps_an_epoch_(steps_an_epoch),
      step_bytes_(step_bytes),
      pid_base_(rank * int(devices.size())) {
    out_ = OutputStream("--trace", path_, false);
    out_.write("[\n");
    // Metadata ("M") events: the names of each device's process and threads.
    const auto metadata = [&](const char* name, int pid, int tid, Json args) {
        write(Json{{"name", name}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}}.dump());
    };
    const std::string prefix = processes > 1 ? "rank " + std::to_string(rank) + " " : "";
    for (size_t i = 0; i < devices.size(); ++i) {
        const int pid = pid_base_ + int(i);
        metadata("process_name", pid, 0, {{"name", prefix + devices[i]->name()}});
        metadata("process_sort_index", pid, 0, {{"sort_index", pid}});
        metadata("thread_name", pid, 0, {{"name", overlap ? "main stream" : "stream"}});
        if (overlap) metadata("thread_name", pid, 1, {{"name", "allreduce stream"}});
    }
    out_.flush();
}

TraceFile::~TraceFile() {
    if (finished_) return;
    try {
        finish();
    } catch (const WriteError&) {  // the run is ending on another error: that one is said
    }
}

void TraceFile::finish() {
    if (finished_) return;
    finished_ = true;
    out_.write("\n]\n");
    out_.close();
}

void TraceFile::write(const std::string& event) {
    out_.write(first_ ? "" : ",\n");
    out_.write(event);
    first_ = false;
}

std::chrono::steady_clock::time_point trace_origin(Cluster& cluster) {
    using Clock = std::chrono::steady_clock;
    if (cluster.size() == 1) return Clock::now();
    const std::string_view during = "the trace's start";
    const bool beside_rank0 = cluster.leader_text(cluster.host(), during) == cluster.host();
    cluster.max(0, during);  // every process leaves it at about the same moment
    const Clock::time_point mine = Clock::now();
    // Nanoseconds as two doubles (whole seconds, the rest), each exact.
    const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(mine.time_since_epoch()).count();
    const double parts[2] = {double(ns / 1000000000), double(ns % 1000000000)};
    const std::vector<double> all = cluster.all_gather(parts, during);
    if (!beside_rank0) return mine;
    return Clock::time_point(std::chrono::duration_cast<Clock::duration>(
        std::chrono::nanoseconds(int64_t(all[0]) * 1000000000 + int64_t(all[1]))));
}

void TraceFile::start(std::span<Device* const> devices, std::chrono::steady_clock::time_point origin) {
    origin_ = origin;
    for (Device* d : devices) d->trace_phases(origin_);
}

void TraceFile::add(int epoch, size_t first_step, std::span<Device* const> devices) {
    const size_t epoch_base = size_t(epoch - 1) * steps_an_epoch_ + first_step;  // the first step's, counted from 0
    for (size_t i = 0; i < devices.size(); ++i) {
        const std::vector<PhaseSpan> spans = devices[i]->take_phase_spans();
        // Where each step began on the main stream: its load marks, in order.
        std::vector<double> step_starts;
        for (const PhaseSpan& s : spans)
            if (s.stream == 0 && s.phase == Phase::load) step_starts.push_back(s.start);
        std::sort(step_starts.begin(), step_starts.end());
        for (const PhaseSpan& s : spans) {
            const auto after = std::upper_bound(step_starts.begin(), step_starts.end(), s.start);
            const size_t within = after == step_starts.begin() ? 0 : size_t(after - step_starts.begin()) - 1;
            const size_t step = epoch_base + within + 1;  // counted from 1 over the run
            if (!range_.contains(step)) continue;
            const double ts = micros(s.start);
            Json event{{"name", trace_name(s.phase)}, {"cat", "phase"}, {"ph", "X"},
                       {"pid", pid_base_ + int(i)}, {"tid", int(s.stream)},
                       {"ts", ts}, {"dur", std::max(0.0, std::round((micros(s.end) - ts) * 1e3) / 1e3)},
                       {"args", {{"epoch", epoch}, {"step", step}}}};
            if (s.phase == Phase::allreduce || s.phase == Phase::copy) event["args"]["gradient_bytes_a_step"] = step_bytes_;
            write(event.dump());
            ++events_;
        }
    }
    out_.flush();
}

}  // namespace dpt
