// hooks/real_calls.h: the real libc functions behind the hooks, and the direct
// system calls they fall back to when no object defines one (a static link,
// a runtime that hides a symbol). The fallbacks are called here directly,
// as a hook would call them, and must behave as libc's functions do.
#include "hooks/real_calls.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace weft::detail::real {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

template <class Fn>
Fn* fallback(const char* name) {
  void* fn = raw_syscall_fallback(name);
  EXPECT_NE(fn, nullptr) << name;
  return reinterpret_cast<Fn*>(fn);
}

// Resolved when the library was loaded, before any use: a hook's first
// call may come from a signal handler, where dlsym is not safe. Nothing in
// this binary calls these before the test.
TEST(RealCalls, CallsAreResolvedBeforeTheirFirstUse) {
  EXPECT_NE(slot_waitid.load(), nullptr);
  EXPECT_NE(slot_sigtimedwait.load(), nullptr);
  EXPECT_NE(slot_mq_timedsend.load(), nullptr);
}

TEST(RealCalls, DlsymFindsLibcsFunctions) {
  // In this test binary, libc is there to be found: no fallback is used.
  EXPECT_NE(reinterpret_cast<void*>(read()), raw_syscall_fallback("read"));
  EXPECT_NE(reinterpret_cast<void*>(read()), nullptr);
}

TEST(RealCallsFallback, PipeReadWriteCloseMakeTheSystemCalls) {
  int fds[2] = {-1, -1};
  ASSERT_EQ(fallback<int(int*)>("pipe")(fds), 0);
  EXPECT_EQ(fallback<ssize_t(int, const void*, size_t)>("write")(fds[1], "hey", 3), 3);
  char buf[8] = {};
  EXPECT_EQ(fallback<ssize_t(int, void*, size_t)>("read")(fds[0], buf, sizeof(buf)), 3);
  EXPECT_STREQ(buf, "hey");
  // The variadic ones take their optional argument.
  auto* fcntl_fn = fallback<int(int, int, ...)>("fcntl");
  EXPECT_EQ(fcntl_fn(fds[0], F_SETFL, O_NONBLOCK), 0);
  EXPECT_NE(fcntl_fn(fds[0], F_GETFL) & O_NONBLOCK, 0);
  errno = 0;
  EXPECT_EQ(fallback<ssize_t(int, void*, size_t)>("read")(fds[0], buf, sizeof(buf)), -1);
  EXPECT_EQ(errno, EAGAIN);
  // dup2 onto itself only checks the fd, as libc's does.
  EXPECT_EQ(fallback<int(int, int)>("dup2")(fds[0], fds[0]), fds[0]);
  auto* close_fn = fallback<int(int)>("close");
  EXPECT_EQ(close_fn(fds[0]), 0);
  EXPECT_EQ(close_fn(fds[1]), 0);
  errno = 0;
  EXPECT_EQ(close_fn(fds[0]), -1);
  EXPECT_EQ(errno, EBADF);
}

TEST(RealCallsFallback, SocketsSendAndReceive) {
  int fds[2] = {-1, -1};
  ASSERT_EQ(fallback<int(int, int, int, int*)>("socketpair")(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  EXPECT_EQ(fallback<ssize_t(int, const void*, size_t, int)>("send")(fds[0], "ab", 2, 0), 2);
  char buf[4] = {};
  EXPECT_EQ(fallback<ssize_t(int, void*, size_t, int)>("recv")(fds[1], buf, sizeof(buf), 0), 2);
  EXPECT_STREQ(buf, "ab");
  EXPECT_EQ(fallback<int(int, int)>("shutdown")(fds[0], SHUT_WR), 0);
  EXPECT_EQ(fallback<ssize_t(int, void*, size_t, int)>("recv")(fds[1], buf, sizeof(buf), 0), 0);  // EOF
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST(RealCallsFallback, MultiplexersWaitAndReport) {
  int fds[2] = {-1, -1};
  ASSERT_EQ(::pipe(fds), 0);
  pollfd entry{fds[0], POLLIN, 0};
  const auto start = Clock::now();
  EXPECT_EQ(fallback<int(pollfd*, nfds_t, int)>("poll")(&entry, 1, 20), 0);  // times out
  EXPECT_GE(Clock::now() - start, 20ms);
  ASSERT_EQ(::write(fds[1], "x", 1), 1);
  EXPECT_EQ(fallback<int(pollfd*, nfds_t, int)>("poll")(&entry, 1, -1), 1);
  EXPECT_NE(entry.revents & POLLIN, 0);

  fd_set readable;
  FD_ZERO(&readable);
  FD_SET(fds[0], &readable);
  timeval timeout{5, 0};
  EXPECT_EQ(fallback<int(int, fd_set*, fd_set*, fd_set*, timeval*)>("select")(fds[0] + 1, &readable, nullptr, nullptr,
                                                                              &timeout),
            1);
  EXPECT_TRUE(FD_ISSET(fds[0], &readable));
  EXPECT_GT(timeout.tv_sec + timeout.tv_usec, 0);  // the time not slept, as Linux's select leaves it

  const int epfd = fallback<int(int)>("epoll_create1")(EPOLL_CLOEXEC);
  ASSERT_GE(epfd, 0);
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = 9;
  ASSERT_EQ(epoll_ctl(epfd, EPOLL_CTL_ADD, fds[0], &event), 0);
  epoll_event out{};
  EXPECT_EQ(fallback<int(int, epoll_event*, int, int)>("epoll_wait")(epfd, &out, 1, 1000), 1);
  EXPECT_EQ(out.data.u64, 9u);
  errno = 0;
  EXPECT_EQ(fallback<int(int)>("epoll_create")(0), -1);
  EXPECT_EQ(errno, EINVAL);
  ::close(epfd);
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST(RealCallsFallback, SleepsKeepTheirOwnErrorConventions) {
  const timespec ten_ms{0, 10'000'000};
  const auto start = Clock::now();
  EXPECT_EQ(fallback<int(const timespec*, timespec*)>("nanosleep")(&ten_ms, nullptr), 0);
  EXPECT_GE(Clock::now() - start, 10ms);
  const timespec invalid{0, 2'000'000'000};
  errno = 0;
  EXPECT_EQ(fallback<int(const timespec*, timespec*)>("nanosleep")(&invalid, nullptr), -1);
  EXPECT_EQ(errno, EINVAL);
  // clock_nanosleep returns the error and leaves errno alone.
  errno = 0;
  EXPECT_EQ(fallback<int(clockid_t, int, const timespec*, timespec*)>("clock_nanosleep")(CLOCK_MONOTONIC, 0, &invalid,
                                                                                         nullptr),
            EINVAL);
  EXPECT_EQ(errno, 0);
}

TEST(RealCallsFallback, OpenTakesItsModeOnlyWithOCreat) {
  char path[] = "/tmp/weft-real-calls-XXXXXX";
  const int made = mkstemp(path);
  ASSERT_GE(made, 0);
  ::close(made);
  ::unlink(path);
  const int fd = fallback<int(const char*, int, ...)>("open")(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  struct stat st {};
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ::close(fd);
  errno = 0;
  EXPECT_EQ(fallback<int(const char*, int, ...)>("open")(path, O_RDONLY | O_CREAT | O_EXCL, 0600), -1);
  EXPECT_EQ(errno, EEXIST);
  ::unlink(path);
}

TEST(RealCallsFallback, EveryCallWithASystemCallBeneathHasOne) {
  // Every WEFT_REAL_CALL in hooks/real_calls.h but the sleeps, the resolver and
  // the signal calls.
  for (const char* name :
       {"read",     "readv",        "write",        "writev",       "recv",          "recvfrom",
        "recvmsg",  "recvmmsg",     "send",         "sendto",       "sendmsg",       "sendmmsg",
        "connect",  "accept",       "accept4",      "poll",         "ppoll",         "select",
        "pselect",  "epoll_wait",   "epoll_pwait",  "epoll_pwait2", "nanosleep",     "clock_nanosleep",
        "socket",   "socketpair",   "pipe",         "pipe2",        "dup",           "dup2",
        "dup3",     "fcntl",        "fcntl64",      "ioctl",        "setsockopt",    "getsockopt",
        "close",    "shutdown",     "open",         "open64",       "openat",        "openat64",
        "creat",    "creat64",      "eventfd",      "epoll_create", "epoll_create1", "timerfd_create",
        "signalfd", "inotify_init", "inotify_init1"})
    EXPECT_NE(raw_syscall_fallback(name), nullptr) << name;
  for (const char* name :
       {"waitpid",   "wait4",           "waitid",     "pread",   "preadv",      "preadv2",      "fsync",
        "fdatasync", "sync_file_range", "flock",      "pwrite",  "pwritev",     "pwritev2",     "ftruncate",
        "fallocate", "copy_file_range", "sendfile",   "splice",  "msync",       "sync",         "syncfs",
        "wait",      "pause",           "sigsuspend", "sigwait", "sigwaitinfo", "sigtimedwait", "msgrcv",
        "msgsnd",    "semop",           "semtimedop"})
    EXPECT_NE(raw_syscall_fallback(name), nullptr) << name;
}

TEST(RealCallsFallback, NoneForCallsWithNoSystemCallBeneath) {
  // sigaction has rt_sigaction beneath, which needs libc's return
  // trampoline (sa_restorer).
  for (const char* name :
       {"getaddrinfo", "getnameinfo", "gethostbyname", "sleep", "usleep", "system", "popen", "pclose", "sigaction",
        "signal", "posix_spawn", "posix_spawnp", "posix_spawn_file_actions_adddup2", "no_such_call"})
    EXPECT_EQ(raw_syscall_fallback(name), nullptr) << name;
}

TEST(RealCallsFallback, ResolutionPrefersWhatDlsymFound) {
  int found = 0;
  EXPECT_EQ(resolved_or_fallback("read", &found), &found);
  EXPECT_EQ(resolved_or_fallback("read", nullptr), raw_syscall_fallback("read"));
}

TEST(RealCallsFallbackDeathTest, AMissingCallWithNoSystemCallAbortsNamingIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(resolved_or_fallback("getaddrinfo", nullptr), "cannot find the real getaddrinfo\\(\\)");
}

}  // namespace
}  // namespace weft::detail::real
