// runtime/system_calls.h: the system calls sched/ and io/ make for
// themselves, without libc's wrappers (and so without weft's hooks). Each
// must behave as the libc call of the same name.
#include "runtime/system_calls.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <weft/weft.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>

namespace {

using weft::detail::sys::close;

struct Pipe {
  int read_end = -1;
  int write_end = -1;
  Pipe() {
    int fds[2];
    EXPECT_EQ(::pipe2(fds, O_CLOEXEC | O_NONBLOCK), 0);
    read_end = fds[0];
    write_end = fds[1];
  }
  ~Pipe() {
    ::close(read_end);
    ::close(write_end);
  }
};

TEST(SystemCalls, ReadSmallFileReadsAndTerminates) {
  char buffer[512];
  std::memset(buffer, 'x', sizeof(buffer));
  const ssize_t n = weft::detail::sys::read_small_file("/proc/self/stat", buffer, sizeof(buffer));
  ASSERT_GT(n, 0);
  EXPECT_EQ(buffer[n], '\0');
  EXPECT_EQ(std::strtol(buffer, nullptr, 10), static_cast<long>(::getpid()));
}

TEST(SystemCalls, ReadSmallFileKeepsRoomForTheTerminator) {
  char buffer[4];
  std::memset(buffer, 'x', sizeof(buffer));
  EXPECT_EQ(weft::detail::sys::read_small_file("/proc/self/stat", buffer, sizeof(buffer)), 3);
  EXPECT_EQ(buffer[3], '\0');
}

TEST(SystemCalls, ReadSmallFileOfAMissingFileFailsWithErrno) {
  char buffer[16];
  errno = 0;
  EXPECT_EQ(weft::detail::sys::read_small_file("/proc/self/no-such-file", buffer, sizeof(buffer)), -1);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_EQ(weft::detail::sys::read_small_file("/proc/self/stat", buffer, 0), -1);
}

TEST(SystemCalls, ReadWriteAndCloseAsLibc) {
  Pipe pipe;
  char byte = 0;
  errno = 0;
  EXPECT_EQ(weft::detail::sys::read(pipe.read_end, &byte, 1), -1);
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_EQ(weft::detail::sys::write(pipe.write_end, "ab", 2), 2);
  char two[2] = {};
  EXPECT_EQ(weft::detail::sys::read(pipe.read_end, two, sizeof(two)), 2);
  EXPECT_EQ(std::string(two, 2), "ab");
  const int fd = weft::detail::sys::open_read_only("/proc/self/stat");
  ASSERT_GE(fd, 0);
  EXPECT_NE(::fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
  EXPECT_EQ(close(fd), 0);
  errno = 0;
  EXPECT_EQ(close(fd), -1);
  EXPECT_EQ(errno, EBADF);
}

TEST(SystemCalls, PollSeesReadinessAndTimesOut) {
  Pipe pipe;
  pollfd entry{pipe.read_end, POLLIN, 0};
  EXPECT_EQ(weft::detail::sys::poll(&entry, 1, 0), 0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(weft::detail::sys::poll(&entry, 1, 20), 0);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(20));
  ASSERT_EQ(::write(pipe.write_end, "x", 1), 1);
  EXPECT_EQ(weft::detail::sys::poll(&entry, 1, -1), 1);
  EXPECT_NE(entry.revents & POLLIN, 0);
}

TEST(SystemCalls, EpollAndEventfdAsTheNetpollerUsesThem) {
  const int epoll_fd = weft::detail::sys::epoll_create1(EPOLL_CLOEXEC);
  ASSERT_GE(epoll_fd, 0);
  const int event_fd = weft::detail::sys::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  ASSERT_GE(event_fd, 0);
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = 42;
  ASSERT_EQ(::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, event_fd, &event), 0);
  epoll_event events[4];
  EXPECT_EQ(weft::detail::sys::epoll_wait(epoll_fd, events, 4, 0), 0);
  const timespec short_wait{0, 1'000'000};
  const int n = weft::detail::sys::epoll_pwait2(epoll_fd, events, 4, &short_wait);
  if (n < 0) {
    EXPECT_EQ(errno, ENOSYS);  // before Linux 5.11
  } else {
    EXPECT_EQ(n, 0);
  }
  const std::uint64_t one = 1;
  ASSERT_EQ(weft::detail::sys::write(event_fd, &one, sizeof(one)), 8);
  ASSERT_EQ(weft::detail::sys::epoll_wait(epoll_fd, events, 4, -1), 1);
  EXPECT_EQ(events[0].data.u64, 42u);
  std::uint64_t count = 0;
  EXPECT_EQ(weft::detail::sys::read(event_fd, &count, sizeof(count)), 8);
  EXPECT_EQ(count, 1u);
  EXPECT_EQ(close(event_fd), 0);
  EXPECT_EQ(close(epoll_fd), 0);
}

TEST(SystemCalls, SleepUntilSleepsToTheDeadline) {
  timespec now{};
  ASSERT_EQ(::clock_gettime(CLOCK_MONOTONIC, &now), 0);
  timespec deadline = now;
  deadline.tv_nsec += 20'000'000;
  if (deadline.tv_nsec >= 1'000'000'000) {
    deadline.tv_nsec -= 1'000'000'000;
    ++deadline.tv_sec;
  }
  weft::detail::sys::sleep_until(deadline);
  timespec after{};
  ASSERT_EQ(::clock_gettime(CLOCK_MONOTONIC, &after), 0);
  EXPECT_TRUE(after.tv_sec > deadline.tv_sec || (after.tv_sec == deadline.tv_sec && after.tv_nsec >= deadline.tv_nsec));
  weft::detail::sys::sleep_until(now);  // past: returns at once
}

// From a fiber's stack, as io/'s wait_fd makes its poll(2).
TEST(SystemCalls, OnAFiberTheyAreThePlainCalls) {
  weft::Config config;
  config.workers = 1;
  weft::Scheduler scheduler{config};
  scheduler
      .spawn([] {
        Pipe pipe;
        char byte = 0;
        errno = 0;
        EXPECT_EQ(weft::detail::sys::read(pipe.read_end, &byte, 1), -1);
        EXPECT_EQ(errno, EAGAIN);
        pollfd entry{pipe.read_end, POLLIN, 0};
        EXPECT_EQ(weft::detail::sys::poll(&entry, 1, 0), 0);
      })
      .join();
}

}  // namespace
