#include "base/signals.hpp"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>

namespace dpt {
namespace {

// Lock-free, so safe in a handler, and read by other threads. A process
// stops once: the first signal is kept for its whole life.
std::atomic<int> requested{0};
static_assert(std::atomic<int>::is_always_lock_free);
std::atomic<bool> training{false};  // a StopRequests is alive: the trainer looks between steps
std::atomic<bool> say_it{true};
std::atomic<bool> installed{false};

void say(const char* message, size_t size) {
    if (!say_it) return;
    [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, message, size);
}

// Only async-signal-safe calls in here: write and _exit.
void on_signal(int signal) {
    if (requested != 0) {
        constexpr char message[] = "\ndptrain: second signal, exiting at once (no checkpoint written now)\n";
        say(message, sizeof message - 1);
        _exit(128 + signal);
    }
    requested = signal;
    if (training) {
        constexpr char message[] =
            "\ndptrain: stopping after the steps already queued (press Ctrl-C again to exit at once)\n";
        say(message, sizeof message - 1);
    } else {
        constexpr char message[] =
            "\ndptrain: signal received after training: finishing what is under way, then exiting "
            "(press Ctrl-C again to exit at once)\n";
        say(message, sizeof message - 1);
    }
}

}  // namespace

StopRequests::StopRequests(bool say) {
    say_it = say;
    training = true;
    if (installed.exchange(true)) return;
    struct sigaction action {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;  // the host's waits resume after the handler
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
}

StopRequests::~StopRequests() {
    training = false;
    if (finished_) return;
    struct sigaction action {};
    action.sa_handler = SIG_DFL;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
    installed = false;
}

int StopRequests::signal() const { return requested; }

int stop_signal() { return requested; }

const char* signal_name(int signal) { return signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "a signal"; }

}  // namespace dpt
