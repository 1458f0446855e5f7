#include "fd_table.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <atomic>
#include <cerrno>

#include "../io/netpoller.h"
#include "cache_trust.h"
#include "description_sharing.h"
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

// Counts the timeouts set in this process, from 1 (a record's 0: never
// read).
constinit std::atomic<std::uint32_t> timeout_changes{1};

}  // namespace

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
    } else if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode) || S_ISBLK(st.st_mode)) {
      kind = FdKind::unpollable;
      if (S_ISREG(st.st_mode)) {
        // A file whose last fds the cache served starts trusted.
        const std::uint32_t key = cache_trust_key(st);
        state->file_key.store(key, std::memory_order_relaxed);
        if (cache_trusted(key)) state->cached_reads.store(FdRecord::kTrustCache, std::memory_order_relaxed);
      }
    } else {
      kind = FdKind::pollable;  // FIFOs, terminals, anonymous inodes (eventfd, epoll, timerfd)
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
  record.forget_timeouts();
}

std::int64_t socket_timeout_ns(int fd, FdRecord& record, FdDirection direction) noexcept {
  if (record.kind() != FdKind::socket) return 0;
  // Read before getsockopt: a timeout set after that read bumps the count
  // after its setsockopt, so the values cached here are never taken for
  // newer than they are.
  const std::uint32_t now = timeout_changes.load(std::memory_order_acquire);
  record.lock.lock();
  if (record.timeouts_read_at != now) {
    record.lock.unlock();
    const int saved = errno;
    const std::int64_t recv = timeout_ns(fd, SO_RCVTIMEO);
    const std::int64_t send = timeout_ns(fd, SO_SNDTIMEO);
    errno = saved;
    record.lock.lock();
    record.recv_timeout_ns = recv;
    record.send_timeout_ns = send;
    record.timeouts_read_at = now;
  }
  const std::int64_t timeout = direction == FdDirection::read ? record.recv_timeout_ns : record.send_timeout_ns;
  record.lock.unlock();
  return timeout;
}

void timeouts_changed() noexcept { timeout_changes.fetch_add(1, std::memory_order_release); }

void fd_forgotten(int fd) noexcept {
  if (in_signal_handler()) return fd_changed_in_handler(fd);
  FdRecord* state = fd_records().find(fd);
  if (state == nullptr) return;
  fd_renewed(fd);
  fd_description_reset(*state);
}

}  // namespace weft::detail
