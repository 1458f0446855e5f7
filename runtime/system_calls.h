// The few system calls weft's own layers make for themselves: sched/ reads
// /proc and sleeps a plain thread, io/'s netpoller drives its epoll and
// eventfd. They go to the kernel through the system call instruction
// (call() below), never through libc's wrappers by name, because inside libweft a plain ::read() is weft's own
// hook: the library links with -Bsymbolic-functions, which binds every call
// to a function libweft defines to that definition, and hooks/ defines
// read, close, epoll_wait, ... So a lower layer calling libc by name would
// call up into hooks/ (scripts/check-layers fails on it), and its internal
// fds would meet the hooks' fd table and checkpoints. hooks/ itself reaches
// libc through its real_calls, which resolve the next definition with
// dlsym (docs/architecture.md, "Calls into the kernel").
//
// introspect/ makes its looks at a fiber's fd (fstat, getsockname, ...)
// through these too: a description from outside, which neither the hooks
// nor a sanitizer's interceptors should see as a use of the fd
// (ThreadSanitizer models a close as a write that races any other thread's
// fstat of the same fd).
//
// Each returns what the system call returns, with errno set on failure, as
// libc's function of the same name does.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>
#include <weft/detail/raw_syscall.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>

namespace weft::detail::sys {

// A system call as libc's syscall() makes it: -1 with errno set on
// failure. Through the instruction itself (weft/detail/raw_syscall.h).
template <class... Args>
inline long call(long number, Args... args) noexcept {
  const long result = raw_syscall(number, args...);
  if (result < 0 && result > -4096) {
    errno = static_cast<int>(-result);
    return -1;
  }
  return result;
}

// futex(2), inline and without errno: the kernel's result, or -errno. For
// the lock hooks' contended paths, where a futex call is most of the cost
// and libc's syscall() adds a call, its argument shuffle and errno's store.
inline long futex(void* word, int op, std::uint32_t value, const timespec* timeout, std::uint32_t value3) noexcept {
  return raw_syscall(SYS_futex, word, op, value, timeout, nullptr, value3);
}

// open(path, O_RDONLY | O_CLOEXEC).
int open_read_only(const char* path) noexcept;
ssize_t read(int fd, void* buffer, std::size_t size) noexcept;
ssize_t write(int fd, const void* buffer, std::size_t size) noexcept;
int close(int fd) noexcept;
int fstat(int fd, struct stat* info) noexcept;
int getsockname(int fd, sockaddr* address, socklen_t* length) noexcept;
int getpeername(int fd, sockaddr* address, socklen_t* length) noexcept;
int getsockopt(int fd, int level, int name, void* value, socklen_t* length) noexcept;
// A small file (/proc/...) read with one read(2) into `buffer`, which is
// NUL-terminated: the bytes read, or -1 (nothing read, or an error).
ssize_t read_small_file(const char* path, char* buffer, std::size_t size) noexcept;

int poll(pollfd* fds, nfds_t count, int timeout_ms) noexcept;
int eventfd(unsigned initial, int flags) noexcept;
int epoll_create1(int flags) noexcept;
int epoll_ctl(int epoll_fd, int op, int fd, epoll_event* event) noexcept;
int epoll_wait(int epoll_fd, epoll_event* events, int max_events, int timeout_ms) noexcept;
// Fails with ENOSYS before Linux 5.11.
int epoll_pwait2(int epoll_fd, epoll_event* events, int max_events, const timespec* timeout) noexcept;

// libc's sigaction under its internal name, which no hook interposes
// (hooks/ wraps the handlers given to sigaction: hooks_signals.cpp). Not a
// system call of its own: rt_sigaction needs the return trampoline
// (sa_restorer) that only libc has.
int sigaction(int signal, const struct sigaction* action, struct sigaction* old) noexcept;
// Sets the calling thread's signal mask (rt_sigprocmask): async-signal-safe,
// and not the hooks' pthread_sigmask.
int set_signal_mask(const sigset_t& mask) noexcept;

// Sleeps the calling thread until `deadline` on CLOCK_MONOTONIC (whole, across
// signals).
void sleep_until(const timespec& deadline) noexcept;

}  // namespace weft::detail::sys
