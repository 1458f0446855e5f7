// park / unpark: the one blocking primitive that every weft sync type is
// built on (DESIGN.md, decision 1; Go's gopark, marl's Fiber::wait).
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

#include "../runtime/fiber_control.h"
#include "../runtime/spin_lock.h"
#include "futex.h"
#include "wait_list.h"

namespace weft::detail {

enum class WakeReason { notified, timed_out };

constexpr Clock::time_point no_deadline = Clock::time_point::max();

// Blocks the calling fiber or thread; see the contract above. `lock` may be
// null when no waker needs one (a plain sleep).
WakeReason park(Waiter& waiter, SpinLock* lock, const WaitSite& site, Clock::time_point deadline = no_deadline);

// Wakes a parked waiter. False if it had already timed out (or been woken).
bool unpark(Waiter& waiter) noexcept;

// Sleeps the calling fiber until `deadline` (a fiber only).
void park_until(Clock::time_point deadline, const WaitSite& site);

}  // namespace weft::detail
