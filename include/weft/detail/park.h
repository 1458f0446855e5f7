// park / unpark: the one blocking primitive that every weft sync type is
// built on (docs/architecture.md; Go's gopark, marl's Fiber::wait).
//
// The contract, for a caller that wants to wait until some condition holds:
//
//   1. Lock the primitive's SpinLock and check the condition.
//   2. If it does not hold: link a Waiter (on your stack) into the
//      primitive's WaitList, then call park(waiter, &lock, site, deadline)
//      with the lock still held.
//   3. park() releases the lock for you, and only after the caller can no
//      longer run: for a fiber, after its context has been saved and it has
//      left its worker; for a plain thread, just before it sleeps in the
//      kernel on the waiter's futex. So a waker that takes the lock and
//      finds the waiter can always resume it safely.
//   4. park() returns without the lock, with the reason it woke:
//        notified  - a waker called unpark(waiter) and won;
//        timed_out - the deadline passed first. The waiter may still be
//                    linked: lock again and remove it (WaitList::remove).
//
// Exactly one of unpark() and the deadline wins, decided by one atomic
// compare-and-swap on Waiter::state (waiting -> notified | timed_out). A
// waker whose unpark() returns false lost to a timeout and must wake the
// next waiter instead, so that no notification is lost.
//
// park() records `site` on the fiber for weft-dump ("waiting on
// weft::BlockingQueue@0x... (take) for 12.4 ms") and counts the park.
#pragma once

#include <chrono>
#include <cmath>
#include <stdexcept>
#include <type_traits>

#include "checkpoint.h"
#include "require_cxx20.h"
#include "spin_lock.h"
#include "visibility.h"
#include "wait_list.h"

namespace weft::detail {

enum class WakeReason { notified, timed_out };

constexpr Clock::time_point no_deadline = Clock::time_point::max();

// Blocks the calling fiber or thread; see the contract above. `lock` may be
// null when no waker needs one (a plain sleep).
WEFT_API WakeReason park(Waiter& waiter, SpinLock* lock, const WaitSite& site,
                         Clock::time_point deadline = no_deadline);

// Wakes a parked waiter. False if it had already timed out (or been woken).
WEFT_API bool unpark(Waiter& waiter) noexcept;

// Sleeps the calling fiber until `deadline` (a fiber only).
void park_until(Clock::time_point deadline, const WaitSite& site);

}  // namespace weft::detail

namespace weft::detail {

// Every timeout and deadline weft takes goes through deadline_after or
// to_deadline: one saturating conversion for every Rep and Period (signed,
// unsigned, floating point). A timeout too long for steady_clock means
// "never" (no_deadline), one at or below zero (or a deadline already past)
// means "now"; nothing wraps. The arithmetic is done in long double
// nanoseconds, which hold every 64-bit count exactly and every larger one
// without overflow. A NaN is refused: it names no time at all.
using WideNanos = std::chrono::duration<long double, std::nano>;

// now + remaining, saturated to [now, no_deadline], rounded up so that a
// wait never ends before the time asked for.
inline Clock::time_point saturating_deadline(Clock::time_point now, WideNanos remaining) {
  if (std::isnan(remaining.count())) throw std::invalid_argument("weft: a timeout or deadline is NaN");
  if (remaining.count() <= 0) return now;
  if (remaining >= WideNanos(no_deadline - now)) return no_deadline;
  return now + std::chrono::ceil<Clock::duration>(remaining);
}

// A relative timeout as a deadline (a timeout of duration::max() means
// "never").
template <class Rep, class Period>
Clock::time_point deadline_after(const std::chrono::duration<Rep, Period>& timeout) {
  return saturating_deadline(Clock::now(), WideNanos(timeout));
}

// A deadline on any clock, converted once to steady_clock (a later step of
// that clock, e.g. of system_clock, is not followed).
template <class OtherClock, class Duration>
Clock::time_point to_deadline(const std::chrono::time_point<OtherClock, Duration>& deadline) {
  const WideNanos target(deadline.time_since_epoch());
  if constexpr (std::is_same_v<OtherClock, Clock>) {
    const Clock::time_point now = Clock::now();
    return saturating_deadline(now, target - WideNanos(now.time_since_epoch()));
  } else {
    const WideNanos other_now(OtherClock::now().time_since_epoch());
    return saturating_deadline(Clock::now(), target - other_now);
  }
}

// The common shape of a blocking operation: with `lock` held, link `waiter`
// into `list` and park. Returns true when notified; on timeout the waiter
// has been unlinked again and false is returned. Either way `lock` is
// released on return.
inline bool wait_in(WaitList& list, SpinLock& lock, Waiter& waiter, const WaitSite& site,
                    Clock::time_point deadline = no_deadline) {
  list.push_back(waiter);
  if (park(waiter, &lock, site, deadline) == WakeReason::notified) return true;
  lock.lock();
  list.remove(waiter);
  lock.unlock();
  return false;
}

// A whole blocking operation: with `lock` free on entry, take the lock and
// call `try_now()`; if it succeeds (it may claim what it found: a permit,
// the lock), return true. Otherwise wait in `list` until woken (true) or
// until the deadline (false). `lock` is free again on return. An operation
// that did not wait is a checkpoint (detail/checkpoint.h), taken once the
// lock is free.
template <class TryNow>
bool wait_unless(WaitList& list, SpinLock& lock, TryNow&& try_now, const WaitSite& site,
                 Clock::time_point deadline = no_deadline) {
  lock.lock();
  if (try_now()) {
    lock.unlock();
    checkpoint();
    return true;
  }
  Waiter waiter;
  return wait_in(list, lock, waiter, site, deadline);
}

// Wakes the first waiter in `list` that can still be woken (one that timed
// out is skipped). `give(w)` runs before the wake (hand the waiter its item,
// permit or lock); `take_back(w)` undoes it when that waiter turns out to
// have timed out. Call with the list's lock held. False if nobody was woken.
// If `give` throws, the waiter goes back to the front of the list, still
// waiting, and the exception reaches the caller: nobody is lost.
template <class Give, class TakeBack>
bool wake_first(WaitList& list, Give&& give, TakeBack&& take_back) {
  while (Waiter* waiter = list.pop_front()) {
    try {
      give(*waiter);
    } catch (...) {
      list.push_front(*waiter);
      throw;
    }
    if (unpark(*waiter)) return true;
    take_back(*waiter);
  }
  return false;
}

inline bool wake_first(WaitList& list) {
  return wake_first(
      list, [](Waiter&) {}, [](Waiter&) {});
}

inline void wake_all(WaitList& list) {
  while (Waiter* waiter = list.pop_front()) unpark(*waiter);
}

}  // namespace weft::detail
