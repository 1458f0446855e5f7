// The parking lot: where fibers and threads wait on objects that have no
// room for a wait list of their own, keyed by the object's address (WebKit's
// WTF::ParkingLot, Rust's parking_lot). The libc lock hooks (hooks/locks.h)
// park on it for a pthread_mutex_t, pthread_cond_t or pthread_rwlock_t,
// whose layout belongs to glibc: the object keeps a bit that says "someone
// may be parked here", and the waiters themselves live in the lot.
//
// A fixed table of buckets, each a SpinLock and one FIFO of the waiters of
// every key that hashes to it. A waiter is a detail::Waiter (the one that
// park() and unpark() decide on, include/weft/detail/park.h) with its key
// and what it asks for. So the lot is only a place: the object's own code
// decides, under its bucket's lock, whom to wake and what to hand over, and
// parks and wakes with park()/unpark() as every weft primitive does.
//
// Invariants, kept under the bucket's lock:
// - a waiter is linked in exactly the bucket of its key, in arrival order
//   among the waiters of that key, but for one its object put first
//   (push_front);
// - a waiter is linked from its push until a waker pops it (to unpark it)
//   or it unlinks itself after a timeout; nobody touches it after that.
//
// After fork() the child's buckets are emptied (their waiters were threads
// and fibers of the parent) and unlocked (a parent's thread may have held
// one): see parking_lot.cpp.
#pragma once

#include <weft/detail/park.h>

#include <cstddef>
#include <cstdint>

namespace weft::detail {

// A waiter in the lot: whose, and what it asks for (its object's meaning:
// a reader or a writer; for a mutex, how its releaser woke it).
struct LotWaiter : Waiter {
  const void* key = nullptr;
  std::uint32_t intent = 0;
  std::int64_t queued_ns = 0;  // when it first queued (runtime/fast_clock.h), if its object keeps it
};

class LotBucket {
 public:
  // Guards the waiter list. Never held across a park: park() releases it
  // once the caller can no longer run.
  SpinLock lock;

  // All below: with `lock` held.
  void push(LotWaiter& waiter) noexcept { waiters_.push_back(waiter); }
  // Ahead of every other waiter: for one that its object lets go first
  // (a mutex's fiber that was woken to compete and lost).
  void push_front(LotWaiter& waiter) noexcept { waiters_.push_front(waiter); }
  void remove(LotWaiter& waiter) noexcept { waiters_.remove(waiter); }
  // The longest-waiting waiter of `key`, or null.
  LotWaiter* first(const void* key) const noexcept { return next_of(key, waiters_.front()); }
  // The waiter of the same key after `waiter` (which is linked), or null.
  LotWaiter* next_after(const LotWaiter& waiter) const noexcept { return next_of(waiter.key, waiter.next); }
  bool has(const void* key) const noexcept { return first(key) != nullptr; }

  // The child's side of fork(): no waiter, unlocked.
  void reset_after_fork() noexcept;

 private:
  static LotWaiter* next_of(const void* key, Waiter* from) noexcept {
    for (Waiter* w = from; w != nullptr; w = w->next) {
      auto* waiter = static_cast<LotWaiter*>(w);
      if (waiter->key == key) return waiter;
    }
    return nullptr;
  }

  WaitList waiters_;
};

// The bucket of `key`.
LotBucket& lot_bucket(const void* key) noexcept;

}  // namespace weft::detail
