// Whether an fd's open file description may be held by another process.
//
// A blocking socket has no per-call non-blocking flag for connect and
// accept (MSG_DONTWAIT is for sending and receiving), so the hooks make
// those one non-blocking call by setting O_NONBLOCK around it
// (hooks_io_calls.cpp, with_nonblock). O_NONBLOCK belongs to the open file
// description, which every holder shares: another process's blocking
// accept on the same listener then fails with EAGAIN (issue 27, item 10:
// 108 times in 20,000 connections). So the hooks flip only a description
// they can prove this process alone holds; any other is left as the user
// made it, and the call is the blocking one (hooks_io_calls.cpp: accept
// parks until the listener is readable first).
//
// Private means all of:
//   - made here: by socket, socketpair or accept through the hooks (not
//     inherited, not received with SCM_RIGHTS, not made where no hook saw);
//   - never duplicated (dup, dup2, dup3, F_DUPFD: the copy's own record
//     does not know of a flip), sent with SCM_RIGHTS, or named by a
//     posix_spawn dup2 action, since;
//   - no fork() since it was made (the child holds every description);
//   - no posix_spawn or vfork since, unless FD_CLOEXEC has been set on it
//     since before the first (the child keeps what is not close-on-exec;
//     weft's vfork, hooks/vfork_mark.cpp, counts as a spawn).
// While a fork, posix_spawn or vfork is under way, no description is
// private (the child may be taking it); it begins by waiting for the flips
// in flight, and it counts itself once it has returned, so that a
// description made before then, by another thread while the call was under
// way too, is not private after it either.
//
// Not seen: a child made by clone, by vfork where weft does not interpose
// it (other than x86-64), or by glibc's own internal spawns (wordexp);
// such a child that uses an inherited socket concurrently can meet a flip.
// Nor is a flip in flight on another thread waited for by a fork made in
// a signal handler, or by one made while its own thread is inside a flip
// (in a handler weft does not count: description_sharing.cpp,
// child_begins).
#pragma once

#include <cstdint>

#include "../io/fd_records.h"

namespace weft::detail {

// What a description this process is about to make is born with: the
// process's forks and spawns that have returned so far, read before the
// call that makes it (a fork that returns meanwhile then counts as after
// it: the child may hold it), and whether it is made close-on-exec
// (SOCK_CLOEXEC, O_CLOEXEC).
struct DescriptionBirth {
  std::uint32_t forks;
  std::uint32_t spawns;
  bool cloexec;
};
DescriptionBirth description_birth(bool cloexec) noexcept;

// A new description, made by this process (fd_created).
void description_made_here(FdRecord& record, const DescriptionBirth& birth) noexcept;

// The description may now be held elsewhere (a dup's source and copy, an
// fd sent with SCM_RIGHTS or named in a posix_spawn dup2 action).
void description_passed(FdRecord* record) noexcept;

// FD_CLOEXEC was set (`on`) or cleared on the fd.
void cloexec_changed(FdRecord* record, bool on) noexcept;

// Whether this process alone holds the description (above): private_;
// shared; or child_under_way, while a fork, posix_spawn or vfork is under
// way (the description may be private again once it has returned).
enum class Privacy : std::uint8_t { private_, shared, child_under_way };
Privacy description_privacy(const FdRecord& record) noexcept;
inline bool description_private(const FdRecord& record) noexcept {
  return description_privacy(record) == Privacy::private_;
}

// Held around a flip: a fork, posix_spawn or vfork that begins meanwhile
// waits for its end. privacy() is description_privacy, read inside it.
class [[nodiscard]] FlipWindow {
 public:
  explicit FlipWindow(const FdRecord& record) noexcept;
  ~FlipWindow();
  FlipWindow(const FlipWindow&) = delete;
  FlipWindow& operator=(const FlipWindow&) = delete;

  Privacy privacy() const noexcept { return privacy_; }

 private:
  Privacy privacy_;
};

// Before a posix_spawn or a vfork (the child will hold every description
// not close-on-exec), and after it, in the parent, whether it made a child
// or not. SpawnUnderWay holds the two around a call.
void child_spawning() noexcept;
void child_spawned() noexcept;

class [[nodiscard]] SpawnUnderWay {
 public:
  SpawnUnderWay() noexcept { child_spawning(); }
  ~SpawnUnderWay() { child_spawned(); }
  SpawnUnderWay(const SpawnUnderWay&) = delete;
  SpawnUnderWay& operator=(const SpawnUnderWay&) = delete;
};

}  // namespace weft::detail
