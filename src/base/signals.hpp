// SIGINT (Ctrl-C) and SIGTERM during training. The first one asks the run
// to stop: the trainer sees it between two steps, lets the queued steps
// finish, writes its checkpoint and exits 130 / 143. A second one exits at
// once, without a checkpoint (the previous one, if any, stays whole).
//
// Once a run has finished, the handling stays until the process exits: a
// signal that comes after it (while devices and threads are torn down, or
// between the runs of `dptrain compare`) is said and noted, never a silent
// death. A finished run stays finished (exit 0); a run still to start stops
// at once. A run that fails instead (an exception) puts the default handlers
// back, so that a signal ends the failing process at once, as mpirun expects
// of a job it is ending.
#pragma once

namespace dpt {

class StopRequests {
   public:
    // Installs the handlers (the first time); `say`: they say what happens
    // on stderr (the other ranks of a multi-process run keep quiet).
    explicit StopRequests(bool say = true);
    // After finished(): a signal from now on is noted while the process
    // closes down. Without it: the default handlers again.
    ~StopRequests();
    void finished() { finished_ = true; }
    StopRequests(const StopRequests&) = delete;
    StopRequests& operator=(const StopRequests&) = delete;

    // 0 until a signal arrives, then its number (SIGINT or SIGTERM).
    int signal() const;

   private:
    bool finished_ = false;
};

// While one lives, the file it names is a temporary file being written
// (files.cpp): a second signal, which exits at once, removes it first.
class TemporaryFile {
   public:
    explicit TemporaryFile(const char* path);
    ~TemporaryFile();
    TemporaryFile(const TemporaryFile&) = delete;
    TemporaryFile& operator=(const TemporaryFile&) = delete;
};

// The signal this process has seen (0: none), from any thread (a
// multi-process run tells the other ranks, cluster.hpp).
int stop_signal();

// "SIGINT", "SIGTERM".
const char* signal_name(int signal);

}  // namespace dpt
