#include "real_calls.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/syscall.h>

#include <cerrno>
#include <csignal>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "../runtime/log.h"
#include "../runtime/system_calls.h"

namespace weft::detail::real {
namespace {

// The kernel's sigset_t is _NSIG bits, not glibc's 1024: the size every
// call taking a mask is told.
constexpr long kKernelSigsetSize = _NSIG / 8;

// --- direct system calls, for when no object defines the symbol ------------
//
// Each behaves as the libc function of its name does on Linux, through the
// generic system call where an architecture lacks the old one (poll is
// ppoll, select is pselect6, open is openat: aarch64 has only those), and
// returns -1 with errno set as libc's wrapper would. glibc's extras are not
// here (cancellation points, the vDSO): these only run when libc itself
// could not be found.

// syscall() itself: six arguments, whatever the call, as glibc's reads.
long sys_syscall(long number, ...) {
  va_list list;
  va_start(list, number);
  long a[6];
  for (long& arg : a) arg = va_arg(list, long);
  va_end(list);
  return sys::call(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}

ssize_t sys_read(int fd, void* buf, size_t n) { return sys::call(SYS_read, fd, buf, n); }
ssize_t sys_readv(int fd, const iovec* iov, int count) { return sys::call(SYS_readv, fd, iov, count); }
ssize_t sys_write(int fd, const void* buf, size_t n) { return sys::call(SYS_write, fd, buf, n); }
ssize_t sys_writev(int fd, const iovec* iov, int count) { return sys::call(SYS_writev, fd, iov, count); }
ssize_t sys_recv(int fd, void* buf, size_t n, int flags) {
  return sys::call(SYS_recvfrom, fd, buf, n, flags, nullptr, nullptr);
}
ssize_t sys_recvfrom(int fd, void* buf, size_t n, int flags, sockaddr* from, socklen_t* from_len) {
  return sys::call(SYS_recvfrom, fd, buf, n, flags, from, from_len);
}
ssize_t sys_recvmsg(int fd, msghdr* msg, int flags) { return sys::call(SYS_recvmsg, fd, msg, flags); }
int sys_recvmmsg(int fd, mmsghdr* msgs, unsigned int count, int flags, timespec* timeout) {
  return int(sys::call(SYS_recvmmsg, fd, msgs, count, flags, timeout));
}
ssize_t sys_send(int fd, const void* buf, size_t n, int flags) {
  return sys::call(SYS_sendto, fd, buf, n, flags, nullptr, 0);
}
ssize_t sys_sendto(int fd, const void* buf, size_t n, int flags, const sockaddr* to, socklen_t to_len) {
  return sys::call(SYS_sendto, fd, buf, n, flags, to, to_len);
}
ssize_t sys_sendmsg(int fd, const msghdr* msg, int flags) { return sys::call(SYS_sendmsg, fd, msg, flags); }
int sys_sendmmsg(int fd, mmsghdr* msgs, unsigned int count, int flags) {
  return int(sys::call(SYS_sendmmsg, fd, msgs, count, flags));
}
int sys_connect(int fd, const sockaddr* addr, socklen_t len) { return int(sys::call(SYS_connect, fd, addr, len)); }
int sys_accept(int fd, sockaddr* addr, socklen_t* len) { return int(sys::call(SYS_accept4, fd, addr, len, 0)); }
int sys_accept4(int fd, sockaddr* addr, socklen_t* len, int flags) {
  return int(sys::call(SYS_accept4, fd, addr, len, flags));
}
int sys_ppoll(pollfd* fds, nfds_t count, const timespec* timeout, const sigset_t* mask) {
  // The kernel writes the time left into the timeout; libc's does not.
  timespec copy{};
  if (timeout != nullptr) copy = *timeout;
  return int(sys::call(SYS_ppoll, fds, count, timeout != nullptr ? &copy : nullptr, mask, kKernelSigsetSize));
}
int sys_poll(pollfd* fds, nfds_t count, int timeout_ms) {
  if (timeout_ms < 0) return sys_ppoll(fds, count, nullptr, nullptr);
  const timespec timeout{timeout_ms / 1000, long(timeout_ms % 1000) * 1'000'000};
  return sys_ppoll(fds, count, &timeout, nullptr);
}
int sys_pselect(int nfds, fd_set* r, fd_set* w, fd_set* e, const timespec* timeout, const sigset_t* mask) {
  timespec copy{};
  if (timeout != nullptr) copy = *timeout;
  // pselect6's sixth argument: the mask and its size, together.
  const struct {
    const sigset_t* set;
    long size;
  } with_size{mask, kKernelSigsetSize};
  return int(sys::call(SYS_pselect6, nfds, r, w, e, timeout != nullptr ? &copy : nullptr,
                       mask != nullptr ? &with_size : nullptr));
}
int sys_select(int nfds, fd_set* r, fd_set* w, fd_set* e, timeval* timeout) {
  if (timeout == nullptr) return sys_pselect(nfds, r, w, e, nullptr, nullptr);
  if (timeout->tv_usec < 0 || timeout->tv_usec >= 1'000'000) {
    errno = EINVAL;
    return -1;
  }
  timespec left{timeout->tv_sec, long(timeout->tv_usec) * 1000};
  const int result = int(sys::call(SYS_pselect6, nfds, r, w, e, &left, nullptr));
  // Linux's select leaves the time not slept in *timeout.
  timeout->tv_sec = left.tv_sec;
  timeout->tv_usec = left.tv_nsec / 1000;
  return result;
}
int sys_epoll_pwait(int epfd, epoll_event* events, int max, int timeout_ms, const sigset_t* mask) {
  return int(sys::call(SYS_epoll_pwait, epfd, events, max, timeout_ms, mask, kKernelSigsetSize));
}
int sys_epoll_wait(int epfd, epoll_event* events, int max, int timeout_ms) {
  return sys_epoll_pwait(epfd, events, max, timeout_ms, nullptr);
}
#ifdef SYS_epoll_pwait2
int sys_epoll_pwait2(int epfd, epoll_event* events, int max, const timespec* timeout, const sigset_t* mask) {
  return int(sys::call(SYS_epoll_pwait2, epfd, events, max, timeout, mask, kKernelSigsetSize));
}
#endif
int sys_nanosleep(const timespec* request, timespec* left) {
  return int(sys::call(SYS_clock_nanosleep, CLOCK_REALTIME, 0, request, left));
}
int sys_clock_nanosleep(clockid_t clock, int flags, const timespec* request, timespec* left) {
  // Returns the error instead of setting errno, as clock_nanosleep(3) does.
  const int saved = errno;
  const long result = sys::call(SYS_clock_nanosleep, clock, flags, request, left);
  const int error = result == 0 ? 0 : errno;
  errno = saved;
  return error;
}
int sys_socket(int domain, int type, int protocol) { return int(sys::call(SYS_socket, domain, type, protocol)); }
int sys_socketpair(int domain, int type, int protocol, int* fds) {
  return int(sys::call(SYS_socketpair, domain, type, protocol, fds));
}
int sys_pipe2(int* fds, int flags) { return int(sys::call(SYS_pipe2, fds, flags)); }
int sys_pipe(int* fds) { return sys_pipe2(fds, 0); }
int sys_dup(int fd) { return int(sys::call(SYS_dup, fd)); }
int sys_dup3(int fd, int target, int flags) { return int(sys::call(SYS_dup3, fd, target, flags)); }
int sys_dup2(int fd, int target) {
  // dup3 refuses fd == target; dup2 then only checks that fd is open.
  if (fd == target) return sys::call(SYS_fcntl, fd, F_GETFD) < 0 ? -1 : fd;
  return sys_dup3(fd, target, 0);
}
// The variadic ones read their one optional argument as a pointer-sized
// word, as glibc's wrappers do.
int sys_fcntl(int fd, int cmd, ...) {
  va_list args;
  va_start(args, cmd);
  void* arg = va_arg(args, void*);
  va_end(args);
  return int(sys::call(SYS_fcntl, fd, cmd, arg));
}
int sys_ioctl(int fd, unsigned long request, ...) {
  va_list args;
  va_start(args, request);
  void* arg = va_arg(args, void*);
  va_end(args);
  return int(sys::call(SYS_ioctl, fd, request, arg));
}
int sys_setsockopt(int fd, int level, int option, const void* value, socklen_t len) {
  return int(sys::call(SYS_setsockopt, fd, level, option, value, len));
}
int sys_getsockopt(int fd, int level, int option, void* value, socklen_t* len) {
  return int(sys::call(SYS_getsockopt, fd, level, option, value, len));
}
int sys_close(int fd) { return int(sys::call(SYS_close, fd)); }
int sys_close_range(unsigned int first, unsigned int last, int flags) {
  return int(sys::call(SYS_close_range, first, last, flags));
}
void sys_closefrom(int first) { sys::call(SYS_close_range, unsigned(first), ~0u, 0); }
int sys_shutdown(int fd, int how) { return int(sys::call(SYS_shutdown, fd, how)); }
bool takes_mode(int flags) { return (flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE; }
int sys_openat(int dir, const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);  // the mode is there only when the flags create a file
  const mode_t mode = takes_mode(flags) ? va_arg(args, mode_t) : 0;
  va_end(args);
  return int(sys::call(SYS_openat, dir, path, flags | O_LARGEFILE, mode));
}
int sys_open(const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);  // the mode is there only when the flags create a file
  const mode_t mode = takes_mode(flags) ? va_arg(args, mode_t) : 0;
  va_end(args);
  return sys_openat(AT_FDCWD, path, flags, mode);
}
int sys_creat(const char* path, mode_t mode) { return sys_openat(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode); }
int sys_eventfd(unsigned int count, int flags) { return int(sys::call(SYS_eventfd2, count, flags)); }
int sys_epoll_create1(int flags) { return int(sys::call(SYS_epoll_create1, flags)); }
int sys_epoll_create(int size) {
  if (size <= 0) {
    errno = EINVAL;
    return -1;
  }
  return sys_epoll_create1(0);
}
int sys_epoll_ctl(int epfd, int op, int fd, epoll_event* event) {
  return int(sys::call(SYS_epoll_ctl, epfd, op, fd, event));
}
int sys_timerfd_create(int clock, int flags) { return int(sys::call(SYS_timerfd_create, clock, flags)); }
int sys_signalfd(int fd, const sigset_t* mask, int flags) {
  return int(sys::call(SYS_signalfd4, fd, mask, kKernelSigsetSize, flags));
}
int sys_inotify_init1(int flags) { return int(sys::call(SYS_inotify_init1, flags)); }
int sys_inotify_init() { return sys_inotify_init1(0); }

pid_t sys_wait4(pid_t pid, int* status, int options, struct rusage* usage) {
  return pid_t(sys::call(SYS_wait4, pid, status, options, usage));
}
pid_t sys_waitpid(pid_t pid, int* status, int options) { return sys_wait4(pid, status, options, nullptr); }
int sys_waitid(idtype_t type, id_t id, siginfo_t* info, int options) {
  return int(sys::call(SYS_waitid, type, id, info, options, nullptr));
}

// The kernel takes a file offset as two words, low then high.
unsigned long low_word(off_t offset) { return static_cast<unsigned long>(offset); }
unsigned long high_word(off_t offset) {
  return static_cast<unsigned long>(static_cast<std::uint64_t>(offset) >> 32 >> 32);
}
ssize_t sys_pread(int fd, void* buf, size_t n, off_t offset) { return sys::call(SYS_pread64, fd, buf, n, offset); }
ssize_t sys_preadv2(int fd, const iovec* iov, int count, off_t offset, int flags) {
  return sys::call(SYS_preadv2, fd, iov, count, low_word(offset), high_word(offset), flags);
}
ssize_t sys_preadv(int fd, const iovec* iov, int count, off_t offset) {
  return sys::call(SYS_preadv, fd, iov, count, low_word(offset), high_word(offset));
}
int sys_fsync(int fd) { return int(sys::call(SYS_fsync, fd)); }
int sys_fdatasync(int fd) { return int(sys::call(SYS_fdatasync, fd)); }
int sys_sync_file_range(int fd, off_t offset, off_t length, unsigned int flags) {
  return int(sys::call(SYS_sync_file_range, fd, offset, length, flags));
}

ssize_t sys_pwrite(int fd, const void* buf, size_t n, off_t offset) {
  return sys::call(SYS_pwrite64, fd, buf, n, offset);
}
ssize_t sys_pwritev(int fd, const iovec* iov, int count, off_t offset) {
  return sys::call(SYS_pwritev, fd, iov, count, low_word(offset), high_word(offset));
}
ssize_t sys_pwritev2(int fd, const iovec* iov, int count, off_t offset, int flags) {
  return sys::call(SYS_pwritev2, fd, iov, count, low_word(offset), high_word(offset), flags);
}
int sys_flock(int fd, int operation) { return int(sys::call(SYS_flock, fd, operation)); }
int sys_ftruncate(int fd, off_t length) { return int(sys::call(SYS_ftruncate, fd, length)); }
int sys_fallocate(int fd, int mode, off_t offset, off_t length) {
  return int(sys::call(SYS_fallocate, fd, mode, offset, length));
}
ssize_t sys_copy_file_range(int in, off64_t* in_offset, int out, off64_t* out_offset, size_t n, unsigned int flags) {
  return sys::call(SYS_copy_file_range, in, in_offset, out, out_offset, n, flags);
}
ssize_t sys_sendfile(int out, int in, off_t* offset, size_t n) { return sys::call(SYS_sendfile, out, in, offset, n); }
ssize_t sys_splice(int in, off64_t* in_offset, int out, off64_t* out_offset, size_t n, unsigned int flags) {
  return sys::call(SYS_splice, in, in_offset, out, out_offset, n, flags);
}
int sys_msync(void* address, size_t length, int flags) { return int(sys::call(SYS_msync, address, length, flags)); }
void sys_sync() { sys::call(SYS_sync); }
int sys_syncfs(int fd) { return int(sys::call(SYS_syncfs, fd)); }
pid_t sys_wait(int* status) { return sys_wait4(-1, status, 0, nullptr); }
int sys_pause() { return int(sys::call(SYS_ppoll, nullptr, 0, nullptr, nullptr, kKernelSigsetSize)); }
int sys_sigsuspend(const sigset_t* mask) { return int(sys::call(SYS_rt_sigsuspend, mask, kKernelSigsetSize)); }
int sys_sigtimedwait(const sigset_t* set, siginfo_t* info, const timespec* timeout) {
  return int(sys::call(SYS_rt_sigtimedwait, set, info, timeout, kKernelSigsetSize));
}
int sys_sigwaitinfo(const sigset_t* set, siginfo_t* info) { return sys_sigtimedwait(set, info, nullptr); }
// sigwait reports its error as its result, not through errno.
int sys_sigwait(const sigset_t* set, int* signal) {
  int got;
  do {
    got = sys_sigtimedwait(set, nullptr, nullptr);
  } while (got < 0 && errno == EINTR);
  if (got < 0) return errno;
  *signal = got;
  return 0;
}
ssize_t sys_msgrcv(int queue, void* message, size_t size, long type, int flags) {
  return sys::call(SYS_msgrcv, queue, message, size, type, flags);
}
int sys_msgsnd(int queue, const void* message, size_t size, int flags) {
  return int(sys::call(SYS_msgsnd, queue, message, size, flags));
}
int sys_semtimedop(int set, struct sembuf* operations, size_t count, const timespec* timeout) {
  return int(sys::call(SYS_semtimedop, set, operations, count, timeout));
}
int sys_semop(int set, struct sembuf* operations, size_t count) {
  return sys_semtimedop(set, operations, count, nullptr);
}
ssize_t sys_mq_timedreceive(mqd_t queue, char* message, size_t size, unsigned int* priority, const timespec* timeout) {
  return sys::call(SYS_mq_timedreceive, queue, message, size, priority, timeout);
}
ssize_t sys_mq_receive(mqd_t queue, char* message, size_t size, unsigned int* priority) {
  return sys_mq_timedreceive(queue, message, size, priority, nullptr);
}
int sys_mq_timedsend(mqd_t queue, const char* message, size_t size, unsigned int priority, const timespec* timeout) {
  return int(sys::call(SYS_mq_timedsend, queue, message, size, priority, timeout));
}
int sys_sched_yield() { return int(sys::call(SYS_sched_yield)); }
int sys_mq_send(mqd_t queue, const char* message, size_t size, unsigned int priority) {
  return sys_mq_timedsend(queue, message, size, priority, nullptr);
}

struct Fallback {
  const char* name;
  void* fn;
};

template <class Fn>
constexpr Fallback entry(const char* name, Fn* fn) {
  return {name, reinterpret_cast<void*>(fn)};
}

// Every real call but those with no system call beneath them: sleep and
// usleep (libc's arithmetic over nanosleep), the resolver (files, DNS
// and NSS modules, all user space), system, popen and pclose, lockf
// and tcdrain (libc's over fcntl and ioctl), and the thread calls
// (semaphores, joins, barriers, thrd_sleep: libc's over futexes and
// clock_nanosleep, with libc's own state).
const Fallback fallbacks[] = {
    entry("syscall", &sys_syscall),
    entry("read", &sys_read),
    entry("readv", &sys_readv),
    entry("write", &sys_write),
    entry("writev", &sys_writev),
    entry("recv", &sys_recv),
    entry("recvfrom", &sys_recvfrom),
    entry("recvmsg", &sys_recvmsg),
    entry("recvmmsg", &sys_recvmmsg),
    entry("send", &sys_send),
    entry("sendto", &sys_sendto),
    entry("sendmsg", &sys_sendmsg),
    entry("sendmmsg", &sys_sendmmsg),
    entry("connect", &sys_connect),
    entry("accept", &sys_accept),
    entry("accept4", &sys_accept4),
    entry("poll", &sys_poll),
    entry("ppoll", &sys_ppoll),
    entry("select", &sys_select),
    entry("pselect", &sys_pselect),
    entry("epoll_wait", &sys_epoll_wait),
    entry("epoll_pwait", &sys_epoll_pwait),
#ifdef SYS_epoll_pwait2
    entry("epoll_pwait2", &sys_epoll_pwait2),
#endif
    entry("nanosleep", &sys_nanosleep),
    entry("clock_nanosleep", &sys_clock_nanosleep),
    entry("socket", &sys_socket),
    entry("socketpair", &sys_socketpair),
    entry("pipe", &sys_pipe),
    entry("pipe2", &sys_pipe2),
    entry("dup", &sys_dup),
    entry("dup2", &sys_dup2),
    entry("dup3", &sys_dup3),
    entry("fcntl", &sys_fcntl),
    entry("fcntl64", &sys_fcntl),
    entry("ioctl", &sys_ioctl),
    entry("setsockopt", &sys_setsockopt),
    entry("getsockopt", &sys_getsockopt),
    entry("close", &sys_close),
    entry("close_range", &sys_close_range),
    entry("closefrom", &sys_closefrom),
    entry("shutdown", &sys_shutdown),
    entry("open", &sys_open),
    entry("open64", &sys_open),
    entry("openat", &sys_openat),
    entry("openat64", &sys_openat),
    entry("creat", &sys_creat),
    entry("creat64", &sys_creat),
    entry("eventfd", &sys_eventfd),
    entry("epoll_create", &sys_epoll_create),
    entry("epoll_create1", &sys_epoll_create1),
    entry("epoll_ctl", &sys_epoll_ctl),
    entry("timerfd_create", &sys_timerfd_create),
    entry("signalfd", &sys_signalfd),
    entry("inotify_init", &sys_inotify_init),
    entry("inotify_init1", &sys_inotify_init1),
    entry("waitpid", &sys_waitpid),
    entry("wait4", &sys_wait4),
    entry("waitid", &sys_waitid),
    entry("pread", &sys_pread),
    entry("preadv", &sys_preadv),
    entry("preadv2", &sys_preadv2),
    entry("fsync", &sys_fsync),
    entry("fdatasync", &sys_fdatasync),
    entry("sync_file_range", &sys_sync_file_range),
    entry("flock", &sys_flock),
    entry("pwrite", &sys_pwrite),
    entry("pwrite64", &sys_pwrite),
    entry("pwritev", &sys_pwritev),
    entry("pwritev64", &sys_pwritev),
    entry("pwritev2", &sys_pwritev2),
    entry("ftruncate", &sys_ftruncate),
    entry("ftruncate64", &sys_ftruncate),
    entry("fallocate", &sys_fallocate),
    entry("fallocate64", &sys_fallocate),
    entry("copy_file_range", &sys_copy_file_range),
    entry("sendfile", &sys_sendfile),
    entry("sendfile64", &sys_sendfile),
    entry("splice", &sys_splice),
    entry("msync", &sys_msync),
    entry("sync", &sys_sync),
    entry("syncfs", &sys_syncfs),
    entry("wait", &sys_wait),
    entry("pause", &sys_pause),
    entry("sigsuspend", &sys_sigsuspend),
    entry("sigwait", &sys_sigwait),
    entry("sigwaitinfo", &sys_sigwaitinfo),
    entry("sigtimedwait", &sys_sigtimedwait),
    entry("msgrcv", &sys_msgrcv),
    entry("msgsnd", &sys_msgsnd),
    entry("semop", &sys_semop),
    entry("semtimedop", &sys_semtimedop),
    entry("mq_receive", &sys_mq_receive),
    entry("mq_timedreceive", &sys_mq_timedreceive),
    entry("mq_send", &sys_mq_send),
    entry("mq_timedsend", &sys_mq_timedsend),
    entry("sched_yield", &sys_sched_yield),
};

}  // namespace

void* raw_syscall_fallback(const char* name) noexcept {
  for (const Fallback& fallback : fallbacks)
    if (std::strcmp(fallback.name, name) == 0) return fallback.fn;
  return nullptr;
}

namespace {

// `name` in the next object after libweft, else in libc.so.6; null if
// neither defines it.
void* look_up(const char* name) noexcept {
  void* fn = dlsym(RTLD_NEXT, name);
  if (fn != nullptr) return fn;
  // dlmopen, not dlopen: the hooks interpose dlopen (hooks/excluded_callers.h).
  if (void* libc = dlmopen(LM_ID_BASE, "libc.so.6", RTLD_LAZY | RTLD_NOLOAD)) return dlsym(libc, name);
  return nullptr;
}

// `found`, else `name`'s direct system call; null if it has none.
void* found_or_fallback(const char* name, void* found) noexcept {
  return found != nullptr ? found : raw_syscall_fallback(name);
}

}  // namespace

void* resolved_or_fallback(const char* name, void* found) noexcept {
  if (void* fn = found_or_fallback(name, found)) return fn;
  // Not through weft's log handler (runtime/log.h): a hook may run in a
  // signal handler, or before main.
  write_stderr("weft: cannot find the real ");
  write_stderr(name);
  write_stderr(
      "() behind weft's hook: no later object and no libc.so.6 defines it (a static link, or a runtime "
      "that hides it), and it is no system call weft could make directly\n");
  std::abort();
}

void* resolve(const char* name) noexcept {
  // dlsym may set dlerror state and errno; the hook's caller must not see
  // either change.
  const int saved = errno;
  void* fn = resolved_or_fallback(name, look_up(name));
  errno = saved;
  return fn;
}

ResolvedAtLoad::ResolvedAtLoad(std::atomic<void*>& slot, const char* name) noexcept {
  if (slot.load(std::memory_order_relaxed) != nullptr) return;
  const int saved = errno;
  if (void* fn = found_or_fallback(name, look_up(name))) slot.store(fn, std::memory_order_relaxed);
  errno = saved;
}

}  // namespace weft::detail::real

namespace weft::detail {

// Out of line and not inlinable, so that each call asks for the calling
// thread's errno again (see real_calls.h).
[[gnu::noinline]] int errno_value() noexcept {
  asm volatile("" ::: "memory");
  return errno;
}

[[gnu::noinline]] void set_errno(int value) noexcept {
  asm volatile("" ::: "memory");
  errno = value;
}

}  // namespace weft::detail
