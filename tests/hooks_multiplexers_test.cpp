// The multiplexer hooks (hooks/hooks_multiplexers.cpp) in their corners:
// each case runs the same calls on a plain thread and in a fiber and
// compares what they return, their errno and their output arguments as
// text.
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <unistd.h>

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

}  // namespace
}  // namespace weft
