// The user's view of each file descriptor, as the libc hooks see it
// (docs/io.md): what kind of fd it is, whether the *user* asked for
// O_NONBLOCK, and its SO_RCVTIMEO / SO_SNDTIMEO. Kept up to date by the
// state hooks (socket, accept, pipe, dup, fcntl, ioctl(FIONBIO),
// setsockopt, close) on every thread, before any scheduler exists too, so
// that an fd created on a plain thread is known when a fiber uses it.
//
// An fd weft did not see created (inherited, opened by open(), made inside
// libc) is classified on its first use from a fiber with fstat, F_GETFL and
// getsockopt; after that its record is as good as any other.
//
// Records live in a two-level table whose chunks are allocated on first
// touch and never freed, so a record's address is stable and a hook may
// hold it across a park (the fd may be closed meanwhile; the record is
// then reset, never freed).
#pragma once

#include <weft/detail/spin_lock.h>

#include <atomic>
#include <cstdint>

namespace weft::detail {

enum class FdKind : std::uint32_t {
  unknown = 0,     // not classified yet
  socket = 1,      // attempted with MSG_DONTWAIT, parked on EAGAIN
  pollable = 2,    // pipes, FIFOs, terminals, eventfds: waited for, then called
  unpollable = 3,  // regular files, directories, block devices: passed through
};

struct FdState {
  static constexpr std::uint32_t kind_mask = 3;
  static constexpr std::uint32_t user_nonblock_bit = 4;  // the user's O_NONBLOCK
  static constexpr std::uint32_t flipped_bit = 8;        // weft set O_NONBLOCK for a moment
  static constexpr std::uint32_t stream_bit = 16;        // a SOCK_STREAM socket: a short read drained it

  std::atomic<std::uint32_t> flags{0};
  // Bumped when the fd is closed through weft: a hook that parked on this
  // fd and wakes to another generation knows its fd is gone (EBADF), even
  // if the number was reused meanwhile.
  std::atomic<std::uint32_t> generation{0};
  // Counts weft's O_NONBLOCK flips: a plain thread whose blocking accept
  // got EAGAIN retries only if a flip began meanwhile (EAGAIN is also
  // what SO_RCVTIMEO gives).
  std::atomic<std::uint32_t> flips{0};
  // Nanoseconds; 0 means no timeout (block forever), as for the kernel.
  std::atomic<std::int64_t> recv_timeout_ns{0};
  std::atomic<std::int64_t> send_timeout_ns{0};
  // Serialises weft's O_NONBLOCK flips (connect, accept) with each other
  // and with the user's F_SETFL, so a flip never restores stale flags.
  SpinLock flip_lock;

  FdKind kind() const noexcept { return FdKind(flags.load(std::memory_order_relaxed) & kind_mask); }
  bool user_nonblock() const noexcept { return flags.load(std::memory_order_relaxed) & user_nonblock_bit; }
  bool flipped() const noexcept { return flags.load(std::memory_order_relaxed) & flipped_bit; }
  bool stream() const noexcept { return flags.load(std::memory_order_relaxed) & stream_bit; }
  void set_bit(std::uint32_t bit, bool on) noexcept {
    if (on)
      flags.fetch_or(bit, std::memory_order_relaxed);
    else
      flags.fetch_and(~bit, std::memory_order_relaxed);
  }
  void set_kind(FdKind kind) noexcept;
};

// The record of `fd`, allocating its chunk on first touch; null for a
// negative fd or one beyond the table (2^25), and if memory runs out (the
// hooks then pass the call through).
FdState* fd_state(int fd) noexcept;

// fd_state(), classified if it was unknown (a fiber is about to use it).
FdState* classified_fd_state(int fd) noexcept;

// A new fd the hooks saw created; timeouts as given (accept inherits the
// listener's, as the kernel does). `stream`: a SOCK_STREAM socket.
void fd_created(int fd, FdKind kind, bool user_nonblock, std::int64_t recv_timeout_ns = 0,
                std::int64_t send_timeout_ns = 0, bool stream = false) noexcept;

// `to` now refers to the same open file description as `from` (dup).
void fd_duplicated(int from, int to) noexcept;

// `fd` is being closed: its record goes back to unknown.
void fd_forgotten(int fd) noexcept;

}  // namespace weft::detail
