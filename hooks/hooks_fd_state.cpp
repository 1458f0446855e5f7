// The calls that create, change or end an fd, hooked on every thread and
// always (WEFT_HOOKS=0 too), so that hooks/fd_table.h knows every fd a fiber
// may later use: socket, socketpair, pipe, pipe2, dup, dup2, dup3,
// fcntl/fcntl64 (F_SETFL, F_GETFL, F_DUPFD), ioctl(FIONBIO), setsockopt
// (SO_RCVTIMEO, SO_SNDTIMEO, SO_RCVLOWAT), close, shutdown. (accept is in
// hooks_io_calls.cpp.) Each calls the real function first and records
// only what succeeded.
//
// close (and dup2/dup3 onto an open fd) tells the netpoller first
// (fd_closing): every fiber parked on the fd wakes with EBADF, and a new fd
// that reuses the number gets none of the old one's wake-ups.
// Define fcntl itself, not the fcntl64 that _FILE_OFFSET_BITS=64 renames it to
// (both are hooked, and on 64-bit systems they are the same function).
#undef _FILE_OFFSET_BITS
#include <fcntl.h>
#include <linux/close_range.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>

#include "announced.h"
#include "child_processes.h"
#include "description_sharing.h"
#include "fd_table.h"
#include "hook_support.h"
#include "real_calls.h"
#include "signal_handlers.h"
#include "user_memory.h"

namespace weft::detail {
namespace {

void before_close(int fd) noexcept {
  // A vfork child closes its own copy of the fd; the records are its
  // parent's (hooks/vfork_mark.cpp).
  if (fd < 0 || in_vfork_child()) return;
  if (in_signal_handler()) return fd_changed_in_handler(fd);
  // In a forked child too: the child forgot its parent's pollers at the
  // fork (io/netpoller.cpp), so this deletes from its own only.
  fd_closing(fd);
  if (FdRecord* record = fd_records().find(fd)) fd_description_reset(*record);
}

// A stream's fd, or -1 for one with none (fopencookie, fmemopen). errno
// kept: fileno() sets EBADF for those, where the call the hook makes next
// (fclose, freopen) may succeed and leave errno alone.
int stream_fd(FILE* stream) noexcept {
  if (stream == nullptr) return -1;
  const int saved = errno;
  const int fd = ::fileno(stream);
  errno = saved;
  return fd;
}

// before_close for every fd in [first, last] that has a record.
void before_close_range(unsigned int first, unsigned int last) noexcept {
  const unsigned int end = std::min(last, unsigned(FdRecords::kLimit - 1));
  for (unsigned int fd = first; fd <= end; ++fd) {
    if (fd_records().find(int(fd)) == nullptr) {
      fd |= (1u << FdRecords::kChunkBits) - 1;  // a whole chunk without records: skip it
      continue;
    }
    before_close(int(fd));
  }
}

// The user's F_SETFL or FIONBIO: `set()` makes it, and if it succeeds the
// record takes `nonblock`. Under the flip lock, so that a connect or accept
// flip in flight, which restores the flags it read, cannot overwrite them;
// but not in a signal handler, which must take no lock the code it
// interrupted may hold (a flip that code then ends puts back the flags it
// read, as any F_SETFL of its own would). A vfork child's fd is its own,
// perhaps a number it dup2'd over, and the records its parent's: its
// setting is recorded only on a description it shares with the parent
// (and never in a record it would have to make).
template <class Set>
int set_user_nonblock(int fd, bool nonblock, Set&& set) {
  FdRecord* state = settable_fd_state(fd);
  if (state == nullptr) return set();
  const bool locking = !in_signal_handler();
  if (locking) state->flip_lock.lock();
  const int result = set();
  if (result == 0) state->set_bit(FdRecord::user_nonblock_bit, nonblock);
  if (locking) state->flip_lock.unlock();
  return result;
}

// fcntl and fcntl64 share everything but the real function.
template <class Real>
int fcntl_hooked(Real real_fcntl, int fd, int cmd, void* arg) {
  switch (cmd) {
    case F_SETFL:
      return set_user_nonblock(fd, int(reinterpret_cast<std::intptr_t>(arg)) & O_NONBLOCK,
                               [&] { return real_fcntl(fd, cmd, arg); });
    case F_GETFL: {
      const int result = real_fcntl(fd, cmd, arg);
      const FdRecord* state = fd_state(fd);
      // During a flip the kernel's flag is weft's; report the user's.
      if (result >= 0 && state != nullptr && state->flipped())
        return state->user_nonblock() ? (result | O_NONBLOCK) : (result & ~O_NONBLOCK);
      return result;
    }
    case F_SETFD: {
      const int result = real_fcntl(fd, cmd, arg);
      if (result == 0) cloexec_changed(fd_records().find(fd), int(reinterpret_cast<std::intptr_t>(arg)) & FD_CLOEXEC);
      return result;
    }
    case F_DUPFD:
    case F_DUPFD_CLOEXEC: {
      const int result = real_fcntl(fd, cmd, arg);
      if (result >= 0) fd_duplicated(fd, result);
      return result;
    }
    case F_SETLKW:
    case F_OFD_SETLKW:
      // Waits for another process's lock (or, for an OFD lock, another
      // fiber's): announced in a fiber.
      return announced([&] { return real_fcntl(fd, cmd, arg); }, Sleeps::until_woken);
    default:
      return real_fcntl(fd, cmd, arg);
  }
}

// A spawned child holds every description that is not close-on-exec, and
// the one a dup2 action names (hooks/description_sharing.h). It starts
// with the thread's signal mask unless the attributes set one: without
// the SIGCHLD block that another fiber's system() put on the thread
// (child_mask_without_systems_block), which it kept across exec.
template <class Spawn>
int spawn_with_callers_mask(const posix_spawnattr_t* attributes, Spawn&& spawn) {
  const SpawnUnderWay spawning;
  short flags = 0;
  if (attributes != nullptr) posix_spawnattr_getflags(attributes, &flags);
  sigset_t mask;
  if ((flags & POSIX_SPAWN_SETSIGMASK) != 0 || !child_mask_without_systems_block(mask)) return spawn(attributes);
  // glibc's attributes are plain data: a copy keeps every setting.
  posix_spawnattr_t adjusted;
  if (attributes != nullptr)
    adjusted = *attributes;
  else
    posix_spawnattr_init(&adjusted);
  posix_spawnattr_setsigmask(&adjusted, &mask);
  posix_spawnattr_setflags(&adjusted, static_cast<short>(flags | POSIX_SPAWN_SETSIGMASK));
  return spawn(&adjusted);
}

}  // namespace
}  // namespace weft::detail

using namespace weft::detail;

extern "C" {
// libc's names, interposed: exported, unlike the rest of libweft
// (include/weft/detail/visibility.h).
#pragma GCC visibility push(default)

int socket(int domain, int type, int protocol) noexcept {
  const DescriptionBirth birth = description_birth(type & SOCK_CLOEXEC);
  const int fd = real::socket()(domain, type, protocol);
  if (fd >= 0) fd_created(fd, FdKind::socket, type & SOCK_NONBLOCK, birth, socket_bits(domain, type, protocol));
  return fd;
}

int socketpair(int domain, int type, int protocol, int fds[2]) noexcept {
  const DescriptionBirth birth = description_birth(type & SOCK_CLOEXEC);
  const int result = real::socketpair()(domain, type, protocol, fds);
  if (result == 0) {
    fd_created(fds[0], FdKind::socket, type & SOCK_NONBLOCK, birth, socket_bits(domain, type, protocol));
    fd_created(fds[1], FdKind::socket, type & SOCK_NONBLOCK, birth, socket_bits(domain, type, protocol));
  }
  return result;
}

int pipe(int fds[2]) noexcept {
  const DescriptionBirth birth = description_birth(false);
  const int result = real::pipe()(fds);
  if (result == 0) {
    fd_created(fds[0], FdKind::pollable, false, birth);
    fd_created(fds[1], FdKind::pollable, false, birth);
  }
  return result;
}

int pipe2(int fds[2], int flags) noexcept {
  const DescriptionBirth birth = description_birth(flags & O_CLOEXEC);
  const int result = real::pipe2()(fds, flags);
  if (result == 0) {
    fd_created(fds[0], FdKind::pollable, flags & O_NONBLOCK, birth);
    fd_created(fds[1], FdKind::pollable, flags & O_NONBLOCK, birth);
  }
  return result;
}

int dup(int fd) noexcept {
  const int result = real::dup()(fd);
  if (result >= 0) fd_duplicated(fd, result);
  return result;
}

int dup2(int fd, int target) noexcept {
  // dup2 onto an open fd closes it first; onto itself it does nothing.
  if (fd != target && fcntl(fd, F_GETFD) >= 0) before_close(target);
  const int result = real::dup2()(fd, target);
  if (result >= 0 && fd != target) fd_duplicated(fd, result);
  return result;
}

int dup3(int fd, int target, int flags) noexcept {
  if (fd != target && fcntl(fd, F_GETFD) >= 0) before_close(target);
  const int result = real::dup3()(fd, target, flags);
  if (result >= 0) fd_duplicated(fd, result);
  return result;
}

int fcntl(int fd, int cmd, ...) {
  va_list args;
  va_start(args, cmd);
  // As glibc does: every argument fcntl takes fits a pointer.
  void* arg = va_arg(args, void*);
  va_end(args);
  return fcntl_hooked(real::fcntl(), fd, cmd, arg);
}

int fcntl64(int fd, int cmd, ...) {
  va_list args;
  va_start(args, cmd);
  void* arg = va_arg(args, void*);
  va_end(args);
  return fcntl_hooked(real::fcntl64(), fd, cmd, arg);
}

int ioctl(int fd, unsigned long request, ...) noexcept {
  va_list args;
  va_start(args, request);
  void* arg = va_arg(args, void*);
  va_end(args);
  if (request == FIOCLEX || request == FIONCLEX) {
    const int result = real::ioctl()(fd, request, arg);
    if (result == 0) cloexec_changed(fd_records().find(fd), request == FIOCLEX);
    return result;
  }
  // An argument the kernel cannot read is its EFAULT (hooks/user_memory.h).
  if (request != FIONBIO || !readable_by_kernel(static_cast<const int*>(arg))) return real::ioctl()(fd, request, arg);
  return set_user_nonblock(fd, *static_cast<const int*>(arg) != 0, [&] { return real::ioctl()(fd, request, arg); });
}

int posix_spawn(pid_t* pid, const char* path, const posix_spawn_file_actions_t* actions,
                const posix_spawnattr_t* attributes, char* const argv[], char* const envp[]) {
  return spawn_with_callers_mask(attributes, [&](const posix_spawnattr_t* used) {
    return real::posix_spawn()(pid, path, actions, used, argv, envp);
  });
}

int posix_spawnp(pid_t* pid, const char* file, const posix_spawn_file_actions_t* actions,
                 const posix_spawnattr_t* attributes, char* const argv[], char* const envp[]) {
  return spawn_with_callers_mask(attributes, [&](const posix_spawnattr_t* used) {
    return real::posix_spawnp()(pid, file, actions, used, argv, envp);
  });
}

int posix_spawn_file_actions_adddup2(posix_spawn_file_actions_t* actions, int fd, int target) noexcept {
  const int result = real::posix_spawn_file_actions_adddup2()(actions, fd, target);
  if (result == 0) description_passed(fd_records().find(fd));
  return result;
}

int setsockopt(int fd, int level, int option, const void* value, socklen_t len) noexcept {
  const int result = real::setsockopt()(fd, level, option, value, len);
  if (result == 0) socket_option_set(fd, level, option, value);
  return result;
}

// A close can sleep in the kernel: a socket's with SO_LINGER waits up to
// the linger time for the peer to take what is queued
// (sk_stream_wait_close), a file's last one on a network file system
// flushes it. Announced.
int close(int fd) {
  before_close(fd);
  return announced([&] { return real::close()(fd); });
}

// stdio closes its fd with libc's internal close, which no hook sees.
int fclose(FILE* stream) {
  before_close(stream_fd(stream));
  return real::fclose()(stream);
}

// With CLOSE_RANGE_CLOEXEC nothing closes now; with CLOSE_RANGE_UNSHARE
// the caller's private copy of the fd table is closed, not the process's.
int close_range(unsigned int first, unsigned int last, int flags) noexcept {
  if ((flags & (CLOSE_RANGE_CLOEXEC | CLOSE_RANGE_UNSHARE)) == 0) before_close_range(first, last);
  return real::close_range()(first, last, flags);
}

void closefrom(int first) noexcept {
  if (first >= 0) before_close_range(unsigned(first), ~0u);
  real::closefrom()(first);
}

int shutdown(int fd, int how) noexcept {
  // A fiber parked on the fd wakes on the kernel's own EOF/HUP edge where
  // there is one (a TCP socket's), and then reads 0 or gets EPIPE, as a
  // thread would. A unix socket's SHUT_WR raises none: its parked send
  // stayed parked, where a thread's blocking send ends. So this process's
  // waiters on the fd are woken to call again (not from a signal handler,
  // which must take no record's lock; nor a vfork child's: its fd is its
  // own). A peer's shutdown(SHUT_RD) of a unix socket raises no edge
  // here either, and is not seen (docs/io.md).
  const int result = real::shutdown()(fd, how);
  if (result == 0 && !in_signal_handler() && !in_vfork_child()) fd_wake_waiters(fd);
  return result;
}

#pragma GCC visibility pop
}  // extern "C"

// The calls that make an fd of a kind the hooks do not track. They are
// hooked only to forget what the table held for the number: the previous
// fd may have been closed where no hook sees it (inside libc: fclose), and
// the new one must be classified afresh on its first use from a fiber.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>

namespace weft::detail {
namespace {

int forget_new(int fd) noexcept {
  if (fd >= 0) fd_forgotten(fd);
  return fd;
}

// An open waits for another party (Sleeps::until_woken) where it waits at
// all: a FIFO's for its other end, which may be a fiber pinned to this
// worker by its own hook's park; sysmon then moves that fiber after
// kReleaseHookPinsAfter (sched/sysmon.cpp, release_hook_pins_if_waiting)
// instead of leaving both waiting for good. A regular file's open (no
// other party: it ends by itself) meets that rule only if it lasts that
// long.
template <class Call>
int announced_open(Call&& call) {
  return forget_new(announced(call, Sleeps::until_woken));
}

// The same, for libc's streams: fopen opens its fd inside libc, where no
// hook sees the open (libstdc++'s file streams open through fopen).
template <class Call>
FILE* announced_stream_open(Call&& call) {
  FILE* stream = announced(call, Sleeps::until_woken);
  if (stream != nullptr) fd_forgotten(::fileno(stream));
  return stream;
}

// open's mode argument exists only with O_CREAT or O_TMPFILE.
bool takes_mode(int flags) noexcept { return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE; }

mode_t mode_argument(int flags, va_list args) { return takes_mode(flags) ? mode_t(va_arg(args, int)) : 0; }

}  // namespace
}  // namespace weft::detail

extern "C" {
// libc's names, interposed: exported, unlike the rest of libweft
// (include/weft/detail/visibility.h).
#pragma GCC visibility push(default)

int open(const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  const mode_t mode = mode_argument(flags, args);
  va_end(args);
  return announced_open([&] { return real::open()(path, flags, mode); });
}

int open64(const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  const mode_t mode = mode_argument(flags, args);
  va_end(args);
  return announced_open([&] { return real::open64()(path, flags, mode); });
}

int openat(int dir, const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  const mode_t mode = mode_argument(flags, args);
  va_end(args);
  return announced_open([&] { return real::openat()(dir, path, flags, mode); });
}

int openat64(int dir, const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  const mode_t mode = mode_argument(flags, args);
  va_end(args);
  return announced_open([&] { return real::openat64()(dir, path, flags, mode); });
}

// The _FORTIFY_SOURCE entries a fortified caller links to when its flags
// are not known at compile time. A flag that takes a mode, given none, is
// glibc's to refuse (it aborts, with its own message); the rest open as
// above. Through the real calls, not this file's open(): built fortified
// itself, libweft's open(path, flags) could compile back into __open_2.
int __open_2(const char* path, int flags) {
  if (takes_mode(flags)) return real::__open_2()(path, flags);
  return announced_open([&] { return real::open()(path, flags); });
}
int __open64_2(const char* path, int flags) {
  if (takes_mode(flags)) return real::__open64_2()(path, flags);
  return announced_open([&] { return real::open64()(path, flags); });
}
int __openat_2(int dir, const char* path, int flags) {
  if (takes_mode(flags)) return real::__openat_2()(dir, path, flags);
  return announced_open([&] { return real::openat()(dir, path, flags); });
}
int __openat64_2(int dir, const char* path, int flags) {
  if (takes_mode(flags)) return real::__openat64_2()(dir, path, flags);
  return announced_open([&] { return real::openat64()(dir, path, flags); });
}

FILE* fopen(const char* path, const char* mode) {
  return announced_stream_open([&] { return real::fopen()(path, mode); });
}
FILE* fopen64(const char* path, const char* mode) {
  return announced_stream_open([&] { return real::fopen64()(path, mode); });
}
// glibc's freopen opens the new file while the stream's fd stays open,
// then closes that fd (the open failed) or puts the new file on its
// number (dup3). Either way the fd's file is gone: closed here first, as
// close() would (a fiber parked on it wakes with EBADF, also while the new
// open still waits, a FIFO's for its other end).
FILE* freopen(const char* path, const char* mode, FILE* stream) {
  before_close(stream_fd(stream));
  return announced_stream_open([&] { return real::freopen()(path, mode, stream); });
}
FILE* freopen64(const char* path, const char* mode, FILE* stream) {
  before_close(stream_fd(stream));
  return announced_stream_open([&] { return real::freopen64()(path, mode, stream); });
}

int creat(const char* path, mode_t mode) {
  return announced_open([&] { return real::creat()(path, mode); });
}
int creat64(const char* path, mode_t mode) {
  return announced_open([&] { return real::creat64()(path, mode); });
}
int eventfd(unsigned int value, int flags) noexcept { return forget_new(real::eventfd()(value, flags)); }
int epoll_create(int size) noexcept { return forget_new(real::epoll_create()(size)); }
int epoll_create1(int flags) noexcept { return forget_new(real::epoll_create1()(flags)); }
// An epoll given an fd whose readiness is the caller's own (a signalfd, a
// procfs file) is marked, and a fiber's wait on it is then the call on its
// own thread (hooks/fd_table.h, readiness_is_the_callers).
int epoll_ctl(int epoll_fd, int op, int fd, epoll_event* event) noexcept {
  const int result = real::epoll_ctl()(epoll_fd, op, fd, event);
  if (result == 0 && op == EPOLL_CTL_ADD) fd_added_to_epoll(epoll_fd, fd);
  return result;
}
int timerfd_create(int clock, int flags) noexcept { return forget_new(real::timerfd_create()(clock, flags)); }
int signalfd(int fd, const sigset_t* mask, int flags) noexcept { return forget_new(real::signalfd()(fd, mask, flags)); }
int inotify_init() noexcept { return forget_new(real::inotify_init()()); }
int inotify_init1(int flags) noexcept { return forget_new(real::inotify_init1()(flags)); }

#pragma GCC visibility pop
}  // extern "C"
