// --trace FILE: where each device spent its time, step by step, as a
// Chrome trace (the trace event format's JSON array, which Perfetto and
// chrome://tracing open): a process per device, a thread per stream (the
// main one, and with --overlap the allreduce's), and a complete event per
// phase span (devices/device.hpp: PhaseSpan) with its epoch and step.
//
// The spans come from the phase marks --breakdown uses, taken from each
// device at the end of an epoch (and where a run stops), so the file grows
// an epoch at a time and the steps queue nothing more than the marks. The
// array is closed however the run ends (a stop request, an error), and an
// array cut short still opens: the format allows a missing "]".
#pragma once
#include <chrono>
#include <cstddef>
#include <span>
#include <string>

#include "base/files.hpp"
#include "devices/device.hpp"
#include "parallel/cluster.hpp"

namespace dpt {

// --trace-steps A-B: the run's steps A to B, counted from 1 over every
// epoch (step s of epoch e is (e - 1) x steps-an-epoch + s).
struct StepRange {
    size_t first = 1, last = size_t(-1);
    bool contains(size_t step) const { return step >= first && step <= last; }
};
// "A-B" or "A" (one step); InputError naming --trace-steps otherwise.
StepRange parse_step_range(const std::string& text);

// How a phase is named in the trace.
const char* trace_name(Phase phase);

// A trace's time 0, taken by every process of the run at once, so that
// their files share one clock: they leave a collective together, and on
// rank 0's machine take rank 0's moment (a machine's steady clock is every
// process's there); a process on another machine takes its own moment as
// it leaves the collective. One process: now.
std::chrono::steady_clock::time_point trace_origin(Cluster& cluster);

class TraceFile {
   public:
    // Opens `path` for writing (InputError naming --trace when it cannot)
    // and names each device's process and streams. `rank`: this process's,
    // under mpirun (its devices' processes are named "rank R cpu:0", ...).
    TraceFile(const std::string& path, std::span<Device* const> devices, bool overlap, StepRange range,
              size_t steps_an_epoch, size_t step_bytes, int rank, int processes);
    ~TraceFile();  // closes the array, if finish() has not
    // Closes the array and the file (once); a WriteError if the file is not whole.
    void finish();
    TraceFile(const TraceFile&) = delete;
    TraceFile& operator=(const TraceFile&) = delete;

    // The trace's time 0, `origin` (trace_origin); from here on the devices keep their spans.
    void start(std::span<Device* const> devices, std::chrono::steady_clock::time_point origin);
    // The spans each device kept since the last take: steps first_step,
    // first_step + 1, ... of `epoch` (from 0 within the epoch), in the order
    // of their load marks; an allreduce stream's span goes to the step whose
    // load began last before it. Written and flushed (a WriteError when
    // that fails).
    void add(int epoch, size_t first_step, std::span<Device* const> devices);
    // Spans written so far (for the run's closing line).
    size_t events() const { return events_; }
    const std::string& path() const { return path_; }

   private:
    void write(const std::string& event);
    std::string path_;
    OutputStream out_;
    bool finished_ = false;
    StepRange range_;
    size_t steps_an_epoch_, step_bytes_;
    int pid_base_;  // this rank's first device's process
    size_t events_ = 0;  // spans written
    bool first_ = true;
    std::chrono::steady_clock::time_point origin_;
};

}  // namespace dpt
