// SIGINT (Ctrl-C) and SIGTERM during training. The first one asks the run
// to stop: the trainer sees it between two steps, lets the queued steps
// finish, writes its checkpoint and exits 130 / 143. A second one exits at
// once, without a checkpoint (the previous one, if any, stays whole).
#pragma once

namespace dpt {

class StopRequests {
   public:
    // Installs the handlers; `say`: they say what happens on stderr (the
    // other ranks of a multi-process run keep quiet).
    explicit StopRequests(bool say = true);
    ~StopRequests();  // puts the previous handlers back
    StopRequests(const StopRequests&) = delete;
    StopRequests& operator=(const StopRequests&) = delete;

    // 0 until a signal arrives, then its number (SIGINT or SIGTERM).
    int signal() const;
};

// The signal the current StopRequests has seen (0: none), from any thread
// (a multi-process run tells the other ranks, cluster.hpp).
int stop_signal();

// "SIGINT", "SIGTERM".
const char* signal_name(int signal);

}  // namespace dpt
