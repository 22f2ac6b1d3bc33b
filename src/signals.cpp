#include "signals.hpp"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>

namespace dpt {
namespace {

// Lock-free, so safe in a handler, and read by other threads.
std::atomic<int> requested{0};
static_assert(std::atomic<int>::is_always_lock_free);
bool say_it = true;
struct sigaction previous_int, previous_term;

// Only async-signal-safe calls in here: write and _exit.
void on_signal(int signal) {
    if (requested != 0) {
        if (!say_it) _exit(128 + signal);
        constexpr char message[] = "\ndptrain: second signal, exiting at once (no checkpoint written now)\n";
        [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, message, sizeof message - 1);
        _exit(128 + signal);
    }
    requested = signal;
    if (!say_it) return;
    constexpr char message[] =
        "\ndptrain: stopping after the steps already queued (press Ctrl-C again to exit at once)\n";
    [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, message, sizeof message - 1);
}

}  // namespace

StopRequests::StopRequests(bool say) {
    requested = 0;
    say_it = say;
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

int stop_signal() { return requested; }

const char* signal_name(int signal) { return signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "a signal"; }

}  // namespace dpt
