// Stop requests (src/base/signals.hpp): once a run has finished, SIGINT and
// SIGTERM no longer kill the process silently while it closes down; a run
// that failed gives the signals their default action back. Each case runs in a child process, so that the signal it
// sends and the handler it leaves behind stay out of the other tests.
// tests/test_cli.sh drives the stop in the middle of a run through the binary.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <functional>

#include "base/signals.hpp"

using namespace dpt;

namespace {

// The child's exit status, or 128 + the signal that killed it.
int in_child(const std::function<int()>& body) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) _exit(body());
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

TEST_CASE("a signal during a run is recorded for the trainer to stop at", "[signals]") {
    for (int signal : {SIGINT, SIGTERM}) {
        CAPTURE(signal);
        CHECK(in_child([signal] {
                  StopRequests stop(false);
                  if (stop.signal() != 0) return 1;
                  raise(signal);
                  return stop.signal() == signal && stop_signal() == signal ? 0 : 2;
              }) == 0);
    }
}

TEST_CASE("a signal after the run has ended is noted, not a silent death", "[signals]") {
    for (int signal : {SIGINT, SIGTERM}) {
        CAPTURE(signal);
        // The run finished and its StopRequests is gone (as when train() has
        // returned and main tears down); with the default action back,
        // raise() would kill the child and this would read 128 + signal.
        CHECK(in_child([signal] {
                  {
                      StopRequests stop(false);
                      stop.finished();
                  }
                  raise(signal);
                  return stop_signal() == signal ? 0 : 2;
              }) == 0);
        // A run that starts after it (dptrain compare's next run) sees it at
        // once and stops before its first step.
        CHECK(in_child([signal] {
                  {
                      StopRequests first(false);
                      first.finished();
                  }
                  raise(signal);
                  StopRequests next(false);
                  return next.signal() == signal ? 0 : 2;
              }) == 0);
    }
}

TEST_CASE("after a run that failed, a signal has its default action again", "[signals]") {
    // As when train() throws: mpirun, ending a failed job, expects SIGTERM to end each rank.
    CHECK(in_child([] {
              { StopRequests stop(false); }
              raise(SIGTERM);
              return 0;  // not reached
          }) == 128 + SIGTERM);
}

TEST_CASE("a second signal exits at once with 128 + its number", "[signals]") {
    CHECK(in_child([] {
              StopRequests stop(false);
              raise(SIGINT);
              raise(SIGTERM);
              return 0;  // not reached
          }) == 128 + SIGTERM);
    CHECK(in_child([] {
              {
                  StopRequests stop(false);
                  stop.finished();
              }
              raise(SIGTERM);
              raise(SIGINT);
              return 0;
          }) == 128 + SIGINT);
}
