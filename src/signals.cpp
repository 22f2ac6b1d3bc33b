#include "signals.hpp"

#include <unistd.h>

#include <csignal>
#include <cstring>

namespace dpt {
namespace {

volatile std::sig_atomic_t requested = 0;
struct sigaction previous_int, previous_term;

// Only async-signal-safe calls in here: write and _exit.
void on_signal(int signal) {
    if (requested != 0) {
        constexpr char message[] = "\ndptrain: second signal, exiting at once (no checkpoint written now)\n";
        [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, message, sizeof message - 1);
        _exit(128 + signal);
    }
    requested = signal;
    constexpr char message[] =
        "\ndptrain: stopping after the steps already queued (press Ctrl-C again to exit at once)\n";
    [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, message, sizeof message - 1);
}

}  // namespace

StopRequests::StopRequests() {
    requested = 0;
    struct sigaction action {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;  // the host's waits resume after the handler
    sigaction(SIGINT, &action, &previous_int);
    sigaction(SIGTERM, &action, &previous_term);
}

StopRequests::~StopRequests() {
    sigaction(SIGINT, &previous_int, nullptr);
    sigaction(SIGTERM, &previous_term, nullptr);
}

int StopRequests::signal() const { return requested; }

const char* signal_name(int signal) { return signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "a signal"; }

}  // namespace dpt
