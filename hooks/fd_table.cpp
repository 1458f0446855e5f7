#include "fd_table.h"

#include <fcntl.h>
#include <linux/time_types.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <string_view>

#include "../io/netpoller.h"
#include "cache_trust.h"
#include "description_sharing.h"
#include "hook_support.h"
#include "real_calls.h"
#include "signal_handlers.h"

namespace weft::detail {
namespace {

std::int64_t timeout_ns(int fd, int option) noexcept {
  timeval tv{};
  socklen_t len = sizeof(tv);
  if (real::getsockopt()(fd, SOL_SOCKET, option, &tv, &len) != 0) return 0;
  return std::int64_t(tv.tv_sec) * 1'000'000'000 + std::int64_t(tv.tv_usec) * 1'000;
}

int rcvlowat(int fd) noexcept {
  int lowat = 1;
  socklen_t len = sizeof(lowat);
  if (real::getsockopt()(fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, &len) != 0) return 1;
  return lowat;
}

// Counts the changes to the options the records cache (SO_RCVTIMEO,
// SO_SNDTIMEO, SO_RCVLOWAT) made in this process, from 1 (a record's 0:
// never read).
constinit std::atomic<std::uint32_t> option_changes{1};

// Whether an SO_RCVLOWAT was set in this process: until then no record
// reads it, and a receive asks nothing more than it did without one. Set
// before option_changes moves, so a record read at the new count has it.
constinit std::atomic<bool> rcvlowat_set{false};

// The timeout options, in their two forms: SO_RCVTIMEO_OLD's value is a
// __kernel_old_timeval, SO_RCVTIMEO_NEW's a __kernel_sock_timeval (64-bit
// seconds everywhere); libc's SO_RCVTIMEO is one or the other.
bool is_timeout_option(int option) noexcept {
  if (option == SO_RCVTIMEO || option == SO_SNDTIMEO) return true;
#if defined(SO_RCVTIMEO_NEW)
  if (option == SO_RCVTIMEO_OLD || option == SO_SNDTIMEO_OLD || option == SO_RCVTIMEO_NEW || option == SO_SNDTIMEO_NEW)
    return true;
#endif
  return false;
}

bool is_receive_timeout(int option) noexcept {
#if defined(SO_RCVTIMEO_NEW)
  if (option == SO_RCVTIMEO_OLD || option == SO_RCVTIMEO_NEW) return true;
#endif
  return option == SO_RCVTIMEO;
}

// Whether a timeout the kernel accepted (sock_set_timeout) was negative,
// which it keeps as "at once". Its value was read by the kernel a moment
// ago: readable.
bool negative_timeout(int option, const void* value) noexcept {
#if defined(SO_RCVTIMEO_NEW)
  if (option == SO_RCVTIMEO_NEW || option == SO_SNDTIMEO_NEW) {
    __kernel_sock_timeval tv;
    std::memcpy(&tv, value, sizeof(tv));
    return tv.tv_sec < 0;
  }
  __kernel_old_timeval tv;
#else
  timeval tv;
#endif
  std::memcpy(&tv, value, sizeof(tv));
  return tv.tv_sec < 0;
}

// The record's bit for `fd`, an anonymous inode, by its name in /proc (one
// readlink, at its classification; none where /proc is not mounted): a
// signalfd's, an eventfd's or timerfd's, or 0.
std::uint32_t anonymous_inode_bit(int fd) noexcept {
  char path[32] = "/proc/self/fd/";
  const std::size_t prefix = std::strlen(path);
  *std::to_chars(path + prefix, path + sizeof path - 1, fd).ptr = '\0';
  char buffer[32];
  const ssize_t n = ::readlink(path, buffer, sizeof buffer);
  const std::string_view name(buffer, n > 0 ? std::size_t(n) : 0);
  if (name == "anon_inode:[signalfd]") return FdRecord::signalfd_bit;
  if (name == "anon_inode:[eventfd]" || name == "anon_inode:[timerfd]") return FdRecord::counter_bit;
  return 0;
}

}  // namespace

FdRecord* settable_fd_state(int fd) noexcept {
  if (!in_vfork_child()) return fd_state(fd);
  return vfork_child_shares_parents_fd(fd) ? fd_records().find(fd) : nullptr;
}

FdRecord* classified_fd_state(int fd) noexcept {
  FdRecord* state = fd_state(fd);
  if (state == nullptr || state->kind() != FdKind::unknown) return state;
  fd_renew_if_changed(*state);
  const int saved = errno;
  struct stat st {};
  FdKind kind = FdKind::unpollable;
  if (fstat(fd, &st) == 0) {
    if (S_ISSOCK(st.st_mode)) {
      kind = FdKind::socket;
    } else if (epoll_refuses(st.st_mode)) {
      kind = FdKind::unpollable;
      if (S_ISREG(st.st_mode)) {
        // A file whose last fds the cache served starts trusted.
        const std::uint32_t key = cache_trust_key(st);
        state->file_key.store(key, std::memory_order_relaxed);
        if (cache_trusted(key)) state->cached_reads.store(FdRecord::kTrustCache, std::memory_order_relaxed);
      }
    } else {
      kind = FdKind::pollable;  // FIFOs, terminals, anonymous inodes (eventfd, epoll, timerfd)
      const std::uint32_t bit = (st.st_mode & S_IFMT) == 0 ? anonymous_inode_bit(fd) : 0;
      state->set_bit(FdRecord::signalfd_bit, bit == FdRecord::signalfd_bit);
      state->set_bit(FdRecord::counter_bit, bit == FdRecord::counter_bit);
    }
    // The user's O_NONBLOCK matters only where a fiber would park on the fd
    // (O_NONBLOCK does nothing to a regular file): no system call for a
    // file's first read.
    if (kind != FdKind::unpollable) {
      const int fl = real::fcntl()(fd, F_GETFL);
      if (fl >= 0) state->set_bit(FdRecord::user_nonblock_bit, fl & O_NONBLOCK);
    }
    if (kind == FdKind::socket) {
      int domain = 0, type = 0, protocol = 0;
      socklen_t len = sizeof(int);
      if (real::getsockopt()(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 &&
          real::getsockopt()(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 &&
          real::getsockopt()(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &len) == 0)
        state->flags.fetch_or(socket_bits(domain, type, protocol), std::memory_order_relaxed);
    }
    state->set_kind(kind);
  }
  // A failed fstat (EBADF) leaves the record unknown: the real call will
  // report the error.
  errno = saved;
  return state;
}

void fd_added_to_epoll(int epoll_fd, int fd) noexcept {
  // Not in a vfork child (the records are the parent's) nor in a handler
  // (classifying may take the record's lock): an epoll marked there is
  // missed, and its waits park as before. Nor with the hooks off, where no
  // wait parks: no fstat for nothing.
  if (in_vfork_child() || in_signal_handler() || !hooks_enabled()) return;
  const FdRecord* added = classified_fd_state(fd);
  if (added == nullptr || !readiness_is_the_callers(*added)) return;
  if (FdRecord* epoll = fd_state(epoll_fd)) epoll->set_bit(FdRecord::holds_callers_readiness_bit, true);
}

void fd_changed_in_handler(int fd) noexcept {
  if (FdRecord* state = fd_state(fd)) state->flags.store(FdRecord::changed_in_handler_bit, std::memory_order_relaxed);
}

std::uint32_t socket_bits(int domain, int type, int protocol) noexcept {
  if ((type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) != SOCK_STREAM) return 0;
  const bool tcp = (domain == AF_INET || domain == AF_INET6) && (protocol == 0 || protocol == IPPROTO_TCP);
  return FdRecord::stream_bit | (tcp ? FdRecord::short_read_drains_bit : 0);
}

void fd_created(int fd, FdKind kind, bool user_nonblock, const DescriptionBirth& birth,
                std::uint32_t socket_bits) noexcept {
  if (in_vfork_child()) return;  // the records are the parent's (hooks/vfork_mark.cpp)
  if (in_signal_handler()) return fd_changed_in_handler(fd);
  FdRecord* state = fd_state(fd);
  if (state == nullptr) return;
  // The number's previous fd may have closed where no hook saw it (inside
  // libc, a raw system call): nothing of its netpoller state may reach this
  // one, its registration least of all (the kernel dropped it with the old
  // file, and a record still marked registered would never add the new).
  fd_renewed(fd);
  fd_description_reset(*state);
  state->flags.store(std::uint32_t(kind) | (user_nonblock ? FdRecord::user_nonblock_bit : 0) | socket_bits,
                     std::memory_order_relaxed);
  description_made_here(*state, birth);
}

void fd_duplicated(int from, int to) noexcept {
  // In a vfork child, the copy is the child's, and the records are the
  // parent's: only that the description is now held elsewhere too (one
  // atomic bit).
  if (in_vfork_child()) return description_passed(fd_records().find(from));
  if (in_signal_handler()) {
    description_passed(fd_records().find(from));  // one atomic bit: no lock
    return fd_changed_in_handler(to);
  }
  FdRecord* source = fd_state(from);
  FdRecord* target = fd_state(to);
  if (target == nullptr) return;
  fd_renewed(to);  // a new fd, as in fd_created
  if (source == nullptr) {
    fd_description_reset(*target);
    return;
  }
  fd_description_reset(*target);
  // The flip is the source's moment, not the copy's.
  target->flags.store(source->flags.load(std::memory_order_relaxed) & ~FdRecord::flipped_bit,
                      std::memory_order_relaxed);
  target->file_key.store(source->file_key.load(std::memory_order_relaxed), std::memory_order_relaxed);
  // Another fd now names the description: a flip through one of them is
  // not seen by the other's record.
  description_passed(source);
  description_passed(target);
}

void fd_description_reset(FdRecord& record) noexcept {
  record.flags.store(0, std::memory_order_relaxed);
  record.cached_reads.store(0, std::memory_order_relaxed);
  record.file_key.store(0, std::memory_order_relaxed);
  record.forget_socket_options();
}

namespace {

// Locks the record with its cached options up to date: read from the
// socket afresh if an option was set in the process since they were.
void lock_with_fresh_options(int fd, FdRecord& record) noexcept {
  // Read before getsockopt: an option set after that read bumps the count
  // after its setsockopt, so the values cached here are never taken for
  // newer than they are.
  const std::uint32_t now = option_changes.load(std::memory_order_acquire);
  record.lock.lock();
  if (record.options_read_at == now) return;
  record.lock.unlock();
  const int saved = errno;
  const std::int64_t recv = timeout_ns(fd, SO_RCVTIMEO);
  const std::int64_t send = timeout_ns(fd, SO_SNDTIMEO);
  const int lowat = rcvlowat_set.load(std::memory_order_relaxed) ? rcvlowat(fd) : 1;
  errno = saved;
  record.lock.lock();
  record.recv_timeout_ns = recv;
  record.send_timeout_ns = send;
  record.recv_lowat = lowat;
  record.options_read_at = now;
}

}  // namespace

std::int64_t socket_timeout_ns(int fd, FdRecord& record, FdDirection direction) noexcept {
  if (record.kind() != FdKind::socket) return 0;
  lock_with_fresh_options(fd, record);
  const std::int64_t timeout = direction == FdDirection::read ? record.recv_timeout_ns : record.send_timeout_ns;
  record.lock.unlock();
  // {0, 0} is the socket's "none" unless this fd set it negative; a
  // timeout set since through another fd of the socket reads as itself.
  const std::uint32_t at_once =
      direction == FdDirection::read ? FdRecord::recv_timeout_at_once_bit : FdRecord::send_timeout_at_once_bit;
  if (timeout == 0 && (record.flags.load(std::memory_order_relaxed) & at_once)) return kTimeoutAtOnce;
  return timeout;
}

int socket_rcvlowat(int fd, FdRecord& record) noexcept {
  if (!rcvlowat_set.load(std::memory_order_relaxed) || record.kind() != FdKind::socket) return 1;
  lock_with_fresh_options(fd, record);
  const int lowat = record.recv_lowat;
  record.lock.unlock();
  return lowat;
}

void socket_option_set(int fd, int level, int option, const void* value) noexcept {
  if (level != SOL_SOCKET) return;
  if (option == SO_RCVLOWAT) {
    rcvlowat_set.store(true, std::memory_order_relaxed);
  } else if (is_timeout_option(option)) {
    // Any other value the kernel took replaces an "at once" (the fd's
    // dups, made before, keep their copy of the mark: socket_timeout_ns).
    // A vfork child's only on a socket it shares with its parent (the
    // count below still makes the parent read its options afresh).
    if (FdRecord* const record = settable_fd_state(fd))
      record->set_bit(
          is_receive_timeout(option) ? FdRecord::recv_timeout_at_once_bit : FdRecord::send_timeout_at_once_bit,
          negative_timeout(option, value));
  } else {
    return;
  }
  option_changes.fetch_add(1, std::memory_order_release);
}

void fd_forgotten(int fd) noexcept {
  if (in_vfork_child()) return;  // the fd is the child's, the records the parent's (hooks/vfork_mark.cpp)
  if (in_signal_handler()) return fd_changed_in_handler(fd);
  FdRecord* state = fd_records().find(fd);
  if (state == nullptr) return;
  fd_renewed(fd);
  fd_description_reset(*state);
}

}  // namespace weft::detail
