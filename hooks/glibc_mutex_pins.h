// A fiber that holds one of glibc's own mutexes (robust, priority-
// inheriting or -protecting, process-shared: hooks/locks.h, point 2), or a
// process-shared rwlock's write lock, stays on its worker until it lets
// go of it. glibc records such a lock's owner as the thread's tid, and an
// unlock from another thread is refused (EPERM: robust, priority,
// error-checking and recursive kinds), releases a futex the kernel ties to
// the locking thread, or is taken for a reader's (an rwlock), so a fiber
// that moved between its lock and its unlock could never release it.
//
// Each lock that leaves the object held (0, or EOWNERDEAD for a robust
// mutex) pins the fiber as this_fiber::pin() does, a pin sysmon never
// releases; each unlock glibc accepts from the holder takes one such pin
// back.
//
// The other fibers of that thread share its tid, so glibc would take any
// of them for the owner: a recursive mutex let a second fiber in, an
// error-checking one answered EDEADLK, a normal one blocked the thread in
// futex(2) for good (the holder, pinned to it, never ran again). So each
// thread keeps which of its fibers holds which such object, and a fiber
// waits for another one's (parks, as on a taken-over mutex) before glibc's
// call; an unlock by a fiber that does not hold it is EPERM where glibc
// checks the owner, and takes no pin.
//
// Invariant, kept by the functions below on each thread (only its own
// fibers touch its record, one at a time): an object is recorded with a
// fiber's id from the lock that left it held by that fiber until the
// unlock after which glibc no longer names the thread its owner.
//
// Each function takes the keeper the call found once (glibc_lock_keeper):
// null for a plain thread, a signal handler or a forked child's leftover
// fiber, where they do nothing and glibc's call is all there is.
#pragma once

#include <pthread.h>

namespace weft::detail {
struct FiberControl;
}

namespace weft::detail::locks {

struct Deadline;

// The calling fiber, whose glibc locks this thread's record keeps, or null.
FiberControl* glibc_lock_keeper() noexcept;
// Who holds `object` as this thread's record says: the keeper `me`,
// another fiber of its thread, or neither.
enum class Holding { none, caller, other_fiber };
Holding holding(const FiberControl* me, const void* object) noexcept;
// Before `me`'s glibc lock of `object` (a mutex or a process-shared
// rwlock): waits while another fiber of its thread holds it, parked, until
// `deadline` (ETIMEDOUT), or answers EBUSY at once if `deadline` is null
// (a trylock), or EINVAL for a deadline glibc would refuse once it must
// wait. 0: go on to glibc's call.
int wait_for_holder_beside(const FiberControl* me, const void* object, const Deadline* deadline) noexcept;
// After glibc's lock, trylock, timedlock or clocklock: pins `me` and
// records it as the holder if the object is now its. Returns `result`.
int pin_if_held(FiberControl* me, int result, const void* object) noexcept;
// After glibc's unlock: if the unlock succeeded and the record names `me`
// the holder, unpins it once; once glibc no longer names the thread the
// owner (`still_owned` false: a recursive mutex's last unlock), forgets
// the holder and wakes the fibers waiting for it. Returns `result`.
int unpin_if_released(FiberControl* me, int result, const void* object, bool still_owned) noexcept;

// A glibc lock of `object` as a whole: waits for another fiber of the
// thread that holds it (wait_for_holder_beside), then `lock()`, glibc's
// call, then pin_if_held.
template <class Lock>
int lock_after_holder_beside(const void* object, const Deadline* deadline, Lock&& lock) {
  FiberControl* const me = glibc_lock_keeper();
  if (const int error = wait_for_holder_beside(me, object, deadline); error != 0) return error;
  return pin_if_held(me, lock(), object);
}

}  // namespace weft::detail::locks
