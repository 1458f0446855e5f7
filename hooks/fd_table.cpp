#include "fd_table.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>

#include "../io/netpoller.h"
#include "../io/real_calls.h"

namespace weft::detail {
namespace {

std::int64_t timeout_ns(int fd, int option) noexcept {
  timeval tv{};
  socklen_t len = sizeof(tv);
  if (real::getsockopt()(fd, SOL_SOCKET, option, &tv, &len) != 0) return 0;
  return std::int64_t(tv.tv_sec) * 1'000'000'000 + std::int64_t(tv.tv_usec) * 1'000;
}

}  // namespace

FdRecord* classified_fd_state(int fd) noexcept {
  FdRecord* state = fd_state(fd);
  if (state == nullptr || state->kind() != FdKind::unknown) return state;
  const int saved = errno;
  struct stat st {};
  FdKind kind = FdKind::unpollable;
  if (fstat(fd, &st) == 0) {
    if (S_ISSOCK(st.st_mode)) {
      kind = FdKind::socket;
    } else if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode) || S_ISBLK(st.st_mode)) {
      kind = FdKind::unpollable;
    } else {
      kind = FdKind::pollable;  // FIFOs, terminals, anonymous inodes (eventfd, epoll, timerfd)
    }
    const int fl = real::fcntl()(fd, F_GETFL);
    if (fl >= 0) state->set_bit(FdRecord::user_nonblock_bit, fl & O_NONBLOCK);
    if (kind == FdKind::socket) {
      state->recv_timeout_ns.store(timeout_ns(fd, SO_RCVTIMEO), std::memory_order_relaxed);
      state->send_timeout_ns.store(timeout_ns(fd, SO_SNDTIMEO), std::memory_order_relaxed);
      int type = 0;
      socklen_t len = sizeof(type);
      if (real::getsockopt()(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0)
        state->set_bit(FdRecord::stream_bit, type == SOCK_STREAM);
    }
    state->set_kind(kind);
  }
  // A failed fstat (EBADF) leaves the record unknown: the real call will
  // report the error.
  errno = saved;
  return state;
}

void fd_created(int fd, FdKind kind, bool user_nonblock, std::int64_t recv_timeout_ns, std::int64_t send_timeout_ns,
                bool stream) noexcept {
  FdRecord* state = fd_state(fd);
  if (state == nullptr) return;
  // The number's previous fd may have closed where no hook saw it (inside
  // libc, a raw system call): nothing of its netpoller state may reach this
  // one, its registration least of all (the kernel dropped it with the old
  // file, and a record still marked registered would never add the new).
  fd_renewed(fd);
  state->recv_timeout_ns.store(recv_timeout_ns, std::memory_order_relaxed);
  state->send_timeout_ns.store(send_timeout_ns, std::memory_order_relaxed);
  state->flags.store(
      std::uint32_t(kind) | (user_nonblock ? FdRecord::user_nonblock_bit : 0) | (stream ? FdRecord::stream_bit : 0),
      std::memory_order_relaxed);
}

void fd_duplicated(int from, int to) noexcept {
  FdRecord* source = fd_state(from);
  FdRecord* target = fd_state(to);
  if (target == nullptr) return;
  fd_renewed(to);  // a new fd, as in fd_created
  if (source == nullptr) {
    fd_description_reset(*target);
    return;
  }
  target->recv_timeout_ns.store(source->recv_timeout_ns.load(std::memory_order_relaxed), std::memory_order_relaxed);
  target->send_timeout_ns.store(source->send_timeout_ns.load(std::memory_order_relaxed), std::memory_order_relaxed);
  // The flip is the source's moment, not the copy's.
  target->flags.store(source->flags.load(std::memory_order_relaxed) & ~FdRecord::flipped_bit,
                      std::memory_order_relaxed);
}

void fd_description_reset(FdRecord& record) noexcept {
  record.flags.store(0, std::memory_order_relaxed);
  record.recv_timeout_ns.store(0, std::memory_order_relaxed);
  record.send_timeout_ns.store(0, std::memory_order_relaxed);
}

void fd_forgotten(int fd) noexcept {
  FdRecord* state = fd_records().find(fd);
  if (state == nullptr) return;
  fd_renewed(fd);
  fd_description_reset(*state);
}

}  // namespace weft::detail
