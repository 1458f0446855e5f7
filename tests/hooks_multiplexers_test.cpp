// The multiplexer hooks (hooks/hooks_multiplexers.cpp) in their corners:
// each case runs the same calls on a plain thread and in a fiber and
// compares what they return, their errno and their output arguments as
// text.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

#include "hooks_test_support.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// What a call returned, with errno when it failed.
std::string outcome(int result) {
  return result >= 0 ? std::to_string(result) : "-1 " + std::string(strerrorname_np(errno));
}

void expect_same_on_thread_and_fiber(const std::function<std::string()>& body) {
  std::string on_thread;
  std::thread([&] { on_thread = body(); }).join();
  std::string on_fiber;
  {
    Scheduler sched = test::one_worker();
    sched.spawn([&] { on_fiber = body(); }).join();
  }
  EXPECT_EQ(on_fiber, on_thread);
}

// A pipe, closed when it goes.
struct Pipe {
  int reader = -1;
  int writer = -1;
  Pipe() {
    int fds[2];
    EXPECT_EQ(::pipe2(fds, O_CLOEXEC | O_NONBLOCK), 0);
    reader = fds[0];
    writer = fds[1];
  }
  ~Pipe() {
    ::close(reader);
    ::close(writer);
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
};

std::atomic<int> handled{0};
void count_signal(int) { handled.fetch_add(1); }

// SIGUSR1 caught by count_signal (no SA_RESTART), blocked on the calling
// thread and pending on it, as long as this lives; then unblocked (the
// handler takes it if the call under test did not) and the old action back.
class PendingSignal {
 public:
  PendingSignal() {
    struct sigaction action {};
    action.sa_handler = count_signal;
    sigemptyset(&action.sa_mask);
    EXPECT_EQ(sigaction(SIGUSR1, &action, &old_action_), 0);
    sigset_t blocked;
    sigemptyset(&blocked);
    sigaddset(&blocked, SIGUSR1);
    EXPECT_EQ(pthread_sigmask(SIG_BLOCK, &blocked, &old_mask_), 0);
    handled = 0;
    EXPECT_EQ(raise(SIGUSR1), 0);  // to this thread
  }
  ~PendingSignal() {
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
    sigaction(SIGUSR1, &old_action_, nullptr);
  }
  PendingSignal(const PendingSignal&) = delete;
  PendingSignal& operator=(const PendingSignal&) = delete;

 private:
  struct sigaction old_action_ {};
  sigset_t old_mask_{};
};

// Linux's select leaves the time not slept in *timeout, also for a timeout
// too long to be a deadline (a program's "forever"): 2e9 s less what went.
TEST(HooksMultiplexers, SelectLeavesTheTimeNotSleptOfAHugeTimeout) {
  expect_same_on_thread_and_fiber([] {
    const Pipe pipe;
    EXPECT_EQ(::write(pipe.writer, "x", 1), 1);
    fd_set r;
    FD_ZERO(&r);
    FD_SET(pipe.reader, &r);
    timeval tv{2'000'000'000, 0};
    const int ready = select(pipe.reader + 1, &r, nullptr, nullptr, &tv);
    return outcome(ready) + " left " + std::to_string(tv.tv_sec) + " s";
  });
}

// glibc reads select's tv_usec as an int32_t, refuses a negative one
// (EINVAL) and carries whole seconds into tv_sec (1.5e6 us: 1.5 s).
TEST(HooksMultiplexers, SelectReadsItsTimeoutAsGlibcDoes) {
  expect_same_on_thread_and_fiber([] {
    const Pipe pipe;
    EXPECT_EQ(::write(pipe.writer, "x", 1), 1);
    std::string out;
    for (const long usec : {-1L, 1'500'000L, 3'000'000'000L, 5'000'000'000L}) {
      fd_set r;
      FD_ZERO(&r);
      FD_SET(pipe.reader, &r);
      timeval tv{0, usec};
      const int ready = select(pipe.reader + 1, &r, nullptr, nullptr, &tv);
      out += std::to_string(usec) + " us: " + outcome(ready) + " left " + std::to_string(tv.tv_sec) + " s\n";
    }
    return out;
  });
}

// A signal pending at the call, that the call's mask unblocks, ends the
// wait at once with EINTR, its handler run, when nothing is ready.
TEST(HooksMultiplexers, EpollPwaitEndsOnASignalItsMaskUnblocks) {
  expect_same_on_thread_and_fiber([] {
    const int epfd = epoll_create1(EPOLL_CLOEXEC);
    sigset_t none;
    sigemptyset(&none);
    epoll_event events[1];
    std::string out;
    {
      const PendingSignal pending;
      const int result = epoll_pwait(epfd, events, 1, 200, &none);
      out = "epoll_pwait " + outcome(result) + " handled " + std::to_string(handled.load());
    }
    {
      const PendingSignal pending;
      const timespec timeout{0, 200'000'000};
      const int result = epoll_pwait2(epfd, events, 1, &timeout, &none);
      out += ", epoll_pwait2 " + outcome(result) + " handled " + std::to_string(handled.load());
    }
    ::close(epfd);
    return out;
  });
}

// ppoll with no fds and a mask is sigsuspend with a timeout: a signal
// pending at the call ends it at once (well before its 10 s).
TEST(HooksMultiplexers, PpollWithNoFdsEndsOnASignalItsMaskUnblocks) {
  expect_same_on_thread_and_fiber([] {
    sigset_t none;
    sigemptyset(&none);
    const PendingSignal pending;
    const timespec timeout{10, 0};
    const auto start = Clock::now();
    const int result = ppoll(nullptr, 0, &timeout, &none);
    const bool at_once = Clock::now() - start < 5s;
    return outcome(result) + " handled " + std::to_string(handled.load()) + (at_once ? " at once" : " at the timeout");
  });
}

}  // namespace
}  // namespace weft
