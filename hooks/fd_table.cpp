#include "fd_table.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <new>

#include "../io/real_calls.h"

namespace weft::detail {
namespace {

constexpr int chunk_bits = 10;
constexpr int chunk_size = 1 << chunk_bits;
constexpr int chunk_count = 1 << 15;  // 2^25 fds: above fs/nr_open's default of 2^20

// Zero-initialised, so usable before any constructor runs; 256 KiB of
// address space, touched only where fds exist.
std::atomic<FdState*> chunks[chunk_count];

FdState* allocate_chunk() noexcept {
  // mmap, not new: the hooks may run inside malloc's callers, before main
  // and in a forked child.
  void* memory =
      mmap(nullptr, sizeof(FdState) * chunk_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return nullptr;
  auto* records = static_cast<FdState*>(memory);
  for (int i = 0; i < chunk_size; ++i) new (&records[i]) FdState;
  return records;
}

std::int64_t timeout_ns(int fd, int option) noexcept {
  timeval tv{};
  socklen_t len = sizeof(tv);
  if (real::getsockopt()(fd, SOL_SOCKET, option, &tv, &len) != 0) return 0;
  return std::int64_t(tv.tv_sec) * 1'000'000'000 + std::int64_t(tv.tv_usec) * 1'000;
}

}  // namespace

void FdState::set_kind(FdKind kind) noexcept {
  std::uint32_t old = flags.load(std::memory_order_relaxed);
  while (!flags.compare_exchange_weak(old, (old & ~kind_mask) | std::uint32_t(kind), std::memory_order_relaxed)) {
  }
}

FdState* fd_state(int fd) noexcept {
  if (fd < 0) return nullptr;
  const unsigned index = unsigned(fd) >> chunk_bits;
  if (index >= unsigned(chunk_count)) return nullptr;
  FdState* chunk = chunks[index].load(std::memory_order_acquire);
  if (chunk == nullptr) {
    FdState* fresh = allocate_chunk();
    if (fresh == nullptr) return nullptr;
    // acq_rel: the winner publishes constructed records; a loser sees them.
    if (chunks[index].compare_exchange_strong(chunk, fresh, std::memory_order_acq_rel)) {
      chunk = fresh;
    } else {
      munmap(fresh, sizeof(FdState) * chunk_size);
    }
  }
  return &chunk[unsigned(fd) & (chunk_size - 1)];
}

FdState* classified_fd_state(int fd) noexcept {
  FdState* state = fd_state(fd);
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
    if (fl >= 0) state->set_bit(FdState::user_nonblock_bit, fl & O_NONBLOCK);
    if (kind == FdKind::socket) {
      state->recv_timeout_ns.store(timeout_ns(fd, SO_RCVTIMEO), std::memory_order_relaxed);
      state->send_timeout_ns.store(timeout_ns(fd, SO_SNDTIMEO), std::memory_order_relaxed);
      int type = 0;
      socklen_t len = sizeof(type);
      if (real::getsockopt()(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0)
        state->set_bit(FdState::stream_bit, type == SOCK_STREAM);
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
  FdState* state = fd_state(fd);
  if (state == nullptr) return;
  state->recv_timeout_ns.store(recv_timeout_ns, std::memory_order_relaxed);
  state->send_timeout_ns.store(send_timeout_ns, std::memory_order_relaxed);
  state->flags.store(
      std::uint32_t(kind) | (user_nonblock ? FdState::user_nonblock_bit : 0) | (stream ? FdState::stream_bit : 0),
      std::memory_order_relaxed);
}

void fd_duplicated(int from, int to) noexcept {
  FdState* source = fd_state(from);
  FdState* target = fd_state(to);
  if (target == nullptr) return;
  if (source == nullptr) {
    fd_forgotten(to);
    return;
  }
  target->recv_timeout_ns.store(source->recv_timeout_ns.load(std::memory_order_relaxed), std::memory_order_relaxed);
  target->send_timeout_ns.store(source->send_timeout_ns.load(std::memory_order_relaxed), std::memory_order_relaxed);
  // The flip is the source's moment, not the copy's.
  target->flags.store(source->flags.load(std::memory_order_relaxed) & ~FdState::flipped_bit, std::memory_order_relaxed);
}

void fd_forgotten(int fd) noexcept {
  FdState* state = fd_state(fd);
  if (state == nullptr) return;
  state->generation.fetch_add(1, std::memory_order_relaxed);
  state->flags.store(0, std::memory_order_relaxed);
  state->recv_timeout_ns.store(0, std::memory_order_relaxed);
  state->send_timeout_ns.store(0, std::memory_order_relaxed);
}

}  // namespace weft::detail
