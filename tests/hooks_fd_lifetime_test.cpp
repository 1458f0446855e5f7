// How an fd ends, and what a fiber waiting on its number sees (docs/io.md,
// "close while parked"): every way an fd closes wakes the fibers parked on
// it, and leaves nothing behind that a new fd with the same number could
// inherit (a stale epoll registration would swallow the new fd's events).
// Runs on one worker without spares: a hook that blocked the thread would
// keep the other fiber from running, and the test fails by its bound (an
// SO_RCVTIMEO), never by a hang.
#include <fcntl.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "hooks_test_support.h"

extern char** environ;

namespace weft {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using test::one_worker;

void set_receive_timeout(int fd, std::chrono::milliseconds timeout) {
  timeval tv{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
  ASSERT_EQ(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
}

using test::io_waiters_reach;

// A fiber reads a banner that arrives while it is parked: the fd is now in
// the scheduler's epoll.
void read_banner_parked(Scheduler& sched, const int fds[2]) {
  std::string banner;
  Fiber reader = sched.spawn([&] {
    char buf[16];
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n > 0) banner.assign(buf, std::size_t(n));
  });
  ASSERT_TRUE(io_waiters_reach(sched, 1));
  ASSERT_EQ(write(fds[1], "220 weft\r\n", 10), 10);
  reader.join();
  EXPECT_EQ(banner, "220 weft\r\n");
}

// A fiber of `sched` that reads one byte of `fd`, its result in `got` and
// its errno in `error`, once it is parked on `fd`.
Fiber parked_read(Scheduler& sched, int fd, ssize_t& got, int& error) {
  Fiber reader = sched.spawn([fd, &got, &error] {
    char c;
    got = read(fd, &c, 1);
    error = errno;
  });
  EXPECT_TRUE(io_waiters_reach(sched, 1));
  return reader;
}

// A way of closing that does not go through close(2)'s hook. `place`
// moves the fd where the closer can close it alone, and returns its number.
struct Closer {
  const char* name;
  std::function<int(int)> place;
  std::function<void(int)> close_fd;
};

int in_place(int fd) { return fd; }

std::vector<Closer> closers() {
  return {
      {"fclose", in_place,
       [](int fd) {
         FILE* stream = fdopen(fd, "w");
         ASSERT_NE(stream, nullptr);
         std::fprintf(stream, "EHLO weft\r\n");
         EXPECT_EQ(std::fclose(stream), 0);
       }},
      {"close_range", in_place, [](int fd) { EXPECT_EQ(close_range(unsigned(fd), unsigned(fd), 0), 0); }},
      {"closefrom",
       [](int fd) {
         // Above every other fd of this process.
         constexpr int kHigh = 900;
         EXPECT_EQ(dup2(fd, kHigh), kHigh);
         close(fd);
         return kHigh;
       },
       [](int fd) {
         closefrom(fd);
         EXPECT_EQ(fcntl(fd, F_GETFD), -1);
       }},
  };
}

// A fiber parked on a socket while another fiber closes it (as an
// SMTP-style client's banner read meets its fdopen/fprintf/fclose): the
// parked read ends with EBADF at once, as after close(). Before, fclose,
// close_range and closefrom told nothing to weft, and the read waited
// for its whole SO_RCVTIMEO (issue 27, item 4).
TEST(HooksFdLifetime, EveryWayOfClosingWakesAParkedReaderWithEbadf) {
  for (const Closer& closer : closers()) {
    Scheduler sched = one_worker();
    int pair[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
    pair[0] = closer.place(pair[0]);
    set_receive_timeout(pair[0], 10s);
    ssize_t got = -2;
    int error = 0;
    Fiber reader = parked_read(sched, pair[0], got, error);
    sched.spawn([&] { closer.close_fd(pair[0]); }).join();
    reader.join();
    EXPECT_EQ(got, -1) << closer.name;
    EXPECT_EQ(error, EBADF) << closer.name << ": " << std::strerror(error);
    close(pair[1]);
  }
}

// The SMTP-style client's next connection: the number of the fd closed
// behind close(2)'s back is reused by the next socket, and a fiber
// waiting on that one must be woken by its data. Before, the record still
// said "registered", the kernel had dropped the registration with the old
// file, and the read waited for its whole SO_RCVTIMEO (issue 27, item 4).
TEST(HooksFdLifetime, ANewFdWithTheNumberOfOneClosedBehindCloseIsWoken) {
  for (const Closer& closer : closers()) {
    if (std::string(closer.name) == "closefrom") continue;  // its fd was moved to a number no new fd takes
    Scheduler sched = one_worker();
    int first[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, first), 0);
    const int number = first[0];
    ssize_t got = -2;
    int error = 0;
    read_banner_parked(sched, first);
    sched.spawn([&] { closer.close_fd(first[0]); }).join();
    close(first[1]);
    // The lowest free number is `number`, unless another thread (sysmon
    // reading /proc, a helper) holds it for a moment: then again.
    int second[2];
    for (int attempt = 0;; ++attempt) {
      ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, second), 0);
      if (second[0] == number) break;
      close(second[0]);
      close(second[1]);
      if (attempt == 200) GTEST_SKIP() << "the new socket did not get fd " << number;
      std::this_thread::sleep_for(1ms);
    }
    set_receive_timeout(second[0], 10s);
    Fiber reader = parked_read(sched, second[0], got, error);
    ASSERT_EQ(write(second[1], "2", 1), 1);
    reader.join();
    EXPECT_EQ(got, 1) << closer.name << ": " << std::strerror(error);
    close(second[0]);
    close(second[1]);
  }
}

// A receive timeout belongs to the socket, not to the fd number it was set
// through: set through a dup, it ends a read on the original, as it does a
// thread's. Before,
// the hooks kept timeouts per fd number, and the fiber's read waited until
// the watchdog closed the peer (issue 27, item 6).
TEST(HooksFdLifetime, ATimeoutSetThroughADupEndsAReadOnTheOriginal) {
  Scheduler sched = one_worker();
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
  std::atomic<bool> finished{false};
  std::thread watchdog([&] {
    const auto until = Clock::now() + 20s;
    while (!finished.load() && Clock::now() < until) std::this_thread::sleep_for(5ms);
    if (!finished.load()) shutdown(pair[1], SHUT_WR);  // the read then ends with 0
  });
  const auto read_once = [&](int fd) {
    ssize_t got = -2;
    int error = 0;
    sched
        .spawn([&] {
          char c;
          got = read(fd, &c, 1);
          error = errno;
        })
        .join();
    return std::make_pair(got, error);
  };
  // The original is used first (with a byte there, so the read returns).
  ASSERT_EQ(write(pair[1], "1", 1), 1);
  auto [got, error] = read_once(pair[0]);
  EXPECT_EQ(got, 1);
  const int copy = dup(pair[0]);
  ASSERT_GE(copy, 0);
  set_receive_timeout(copy, 100ms);
  std::tie(got, error) = read_once(pair[0]);
  EXPECT_EQ(got, -1) << "the timeout set through the dup was not seen on the original";
  EXPECT_EQ(error, EAGAIN) << std::strerror(error);
  finished.store(true);
  watchdog.join();
  close(copy);
  close(pair[0]);
  close(pair[1]);
}

// A child process that closes its copy of an fd a fiber of the parent is
// parked on: by a posix_spawn close action, by exec (close-on-exec) after
// posix_spawn, and by exec after fork. The child's copy is gone, the
// parent's is not: its fiber still wakes for the data, as a thread's read
// would, and the registration in the parent's poller is left alone (issue
// 27, item 4).
TEST(HooksFdLifetime, AChildClosingItsCopyLeavesTheParentsWaitAlone) {
  struct Way {
    const char* name;
    int socket_flags;  // SOCK_CLOEXEC: the child's exec closes it
    bool close_action;
    bool by_fork;
  };
  char true_path[] = "/bin/true";
  char* const argv[] = {true_path, nullptr};
  for (const Way& way :
       {Way{"posix_spawn close action", 0, true, false}, Way{"posix_spawn, close-on-exec", SOCK_CLOEXEC, false, false},
        Way{"fork and exec, close-on-exec", SOCK_CLOEXEC, false, true}}) {
    Scheduler sched = one_worker();
    int pair[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | way.socket_flags, 0, pair), 0);
    set_receive_timeout(pair[0], 10s);
    ssize_t got = -2;
    int error = 0;
    Fiber reader = parked_read(sched, pair[0], got, error);
    pid_t child = -1;
    if (way.by_fork) {
      child = fork();
      ASSERT_GE(child, 0);
      if (child == 0) {
        execve(true_path, argv, environ);
        _exit(127);
      }
    } else {
      posix_spawn_file_actions_t actions;
      posix_spawn_file_actions_init(&actions);
      if (way.close_action) posix_spawn_file_actions_addclose(&actions, pair[0]);
      ASSERT_EQ(posix_spawn(&child, true_path, &actions, nullptr, argv, environ), 0);
      posix_spawn_file_actions_destroy(&actions);
    }
    int status = -1;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << way.name;
    ASSERT_EQ(write(pair[1], "x", 1), 1);
    reader.join();
    EXPECT_EQ(got, 1) << way.name << ": " << std::strerror(error);
    close(pair[0]);
    close(pair[1]);
  }
}

}  // namespace
}  // namespace weft
