#include "system_calls.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

// glibc exports it (GLIBC_2.2.5) without declaring it.
extern "C" int __sigaction(int signal, const struct sigaction* action, struct sigaction* old) noexcept;

namespace weft::detail::sys {

int sigaction(int signal, const struct sigaction* action, struct sigaction* old) noexcept {
  return ::__sigaction(signal, action, old);
}

int set_signal_mask(const sigset_t& mask) noexcept {
  return static_cast<int>(call(SYS_rt_sigprocmask, SIG_SETMASK, &mask, nullptr, NSIG / 8));
}

int open_read_only(const char* path) noexcept {
  return static_cast<int>(call(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC));
}

ssize_t read(int fd, void* buffer, std::size_t size) noexcept { return call(SYS_read, fd, buffer, size); }

ssize_t write(int fd, const void* buffer, std::size_t size) noexcept { return call(SYS_write, fd, buffer, size); }

int close(int fd) noexcept { return static_cast<int>(call(SYS_close, fd)); }

int fstat(int fd, struct stat* info) noexcept { return static_cast<int>(call(SYS_fstat, fd, info)); }

int getsockname(int fd, sockaddr* address, socklen_t* length) noexcept {
  return static_cast<int>(call(SYS_getsockname, fd, address, length));
}

int getpeername(int fd, sockaddr* address, socklen_t* length) noexcept {
  return static_cast<int>(call(SYS_getpeername, fd, address, length));
}

int getsockopt(int fd, int level, int name, void* value, socklen_t* length) noexcept {
  return static_cast<int>(call(SYS_getsockopt, fd, level, name, value, length));
}

ssize_t read_small_file(const char* path, char* buffer, std::size_t size) noexcept {
  if (size == 0) return -1;
  const int fd = open_read_only(path);
  if (fd < 0) return -1;
  const ssize_t n = read(fd, buffer, size - 1);
  close(fd);
  if (n <= 0) return -1;
  buffer[n] = '\0';
  return n;
}

int poll(pollfd* fds, nfds_t count, int timeout_ms) noexcept {
  timespec timeout{timeout_ms / 1000, (timeout_ms % 1000) * 1'000'000L};
  return static_cast<int>(call(SYS_ppoll, fds, count, timeout_ms < 0 ? nullptr : &timeout, nullptr, 0));
}

int eventfd(unsigned initial, int flags) noexcept { return static_cast<int>(call(SYS_eventfd2, initial, flags)); }

int epoll_create1(int flags) noexcept { return static_cast<int>(call(SYS_epoll_create1, flags)); }
int epoll_ctl(int epoll_fd, int op, int fd, epoll_event* event) noexcept {
  return static_cast<int>(call(SYS_epoll_ctl, epoll_fd, op, fd, event));
}

// epoll_pwait with no signal mask is epoll_wait (the only one some
// architectures have).
int epoll_wait(int epoll_fd, epoll_event* events, int max_events, int timeout_ms) noexcept {
  return static_cast<int>(call(SYS_epoll_pwait, epoll_fd, events, max_events, timeout_ms, nullptr, 0));
}

int epoll_pwait2(int epoll_fd, epoll_event* events, int max_events, const timespec* timeout) noexcept {
#ifdef SYS_epoll_pwait2
  return static_cast<int>(call(SYS_epoll_pwait2, epoll_fd, events, max_events, timeout, nullptr, 0));
#else
  (void)epoll_fd, (void)events, (void)max_events, (void)timeout;
  errno = ENOSYS;
  return -1;
#endif
}

void sleep_until(const timespec& deadline) noexcept {
  while (call(SYS_clock_nanosleep, CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, nullptr) != 0 && errno == EINTR) {
  }
}

}  // namespace weft::detail::sys
