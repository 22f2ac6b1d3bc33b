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

// The temporary file being written now, if any (TemporaryFile).
std::atomic<const char*> temporary{nullptr};
static_assert(std::atomic<const char*>::is_always_lock_free);

std::atomic<bool> on_terminal{false};  // stderr is a terminal, where a progress bar may be drawn

// `message` starts with a newline, to leave the line it interrupts. On a
// terminal the line is cleared instead: it is the progress bar's, if any,
// and the message takes its place.
void say(const char* message, size_t size) {
    if (!say_it) return;
    if (on_terminal) {
        [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, "\r\033[K", 4);
        ++message;
        --size;
    }
    [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, message, size);
}

// Only async-signal-safe calls in here: write, unlink and _exit.
void on_signal(int signal) {
    if (requested != 0) {
        constexpr char message[] = "\ndptrain: second signal, exiting at once (no checkpoint written now)\n";
        say(message, sizeof message - 1);
        if (const char* path = temporary.load()) unlink(path);
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
    on_terminal = isatty(STDERR_FILENO) == 1;
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

TemporaryFile::TemporaryFile(const char* path) { temporary = path; }

TemporaryFile::~TemporaryFile() { temporary = nullptr; }

int StopRequests::signal() const { return requested; }

int stop_signal() { return requested; }

const char* signal_name(int signal) { return signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "a signal"; }

}  // namespace dpt
