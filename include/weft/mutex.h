// weft::Mutex: a mutual-exclusion lock that parks a waiting fiber (and
// blocks a waiting plain thread in the kernel). BasicLockable and
// TimedLockable, so std::lock_guard, std::unique_lock and std::scoped_lock
// work:
//
//   weft::Mutex mu;
//   { std::lock_guard guard(mu); ++shared; }
//   std::unique_lock lock(mu, std::defer_lock);
//   if (lock.try_lock_for(5ms)) { ... }
//
// Fairness, and why it differs by waiter: unlock() hands the lock straight
// to a waiting fiber (on cooperative fibers a releaser that retakes at once
// would otherwise never let a woken fiber run: docs/benchmarks.md). A
// waiting plain thread is instead woken to compete, and running callers may
// barge in meanwhile, as with std::mutex: handing a lock to a sleeping
// thread keeps it idle for a futex wake-up per acquisition (a lock convoy).
// A waiter that has waited past 1 ms is handed the lock whatever it is, so
// nobody starves. A plain thread spins briefly before it sleeps. Not
// recursive. unlock() by anyone but the owner aborts with a message naming
// the mutex and the caller, in every build.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "detail/misuse.h"
#include "detail/park.h"
#include "detail/require_cxx20.h"
#include "detail/visibility.h"

namespace weft {

namespace detail {
struct MutexInspection;  // sync/mutex.cpp: who holds it, for weft-dump
}

class WEFT_API Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;
  // Aborts, naming this and its waiters, if anyone still waits on it
  // (detail/misuse.h): they would stay parked on freed memory.
  ~Mutex() { detail::check_no_waiters("weft::Mutex", this, lock_, waiters_); }

  void lock();
  bool try_lock();
  template <class Rep, class Period>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout) {
    return acquire(detail::deadline_after(timeout));
  }
  template <class Clock, class Duration>
  bool try_lock_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    return acquire(detail::to_deadline(deadline));
  }
  void unlock();

 private:
  friend class ConditionVariable;
  friend struct detail::MutexInspection;
  // unlock() without its checkpoint, for a caller that holds a SpinLock
  // (ConditionVariable::wait registers before it releases the mutex).
  void unlock_holding_spin_lock();

  bool acquire(detail::Clock::time_point deadline);
  bool acquire(std::uintptr_t me, detail::Clock::time_point deadline);

  bool spin_then_try_lock(std::uintptr_t me) noexcept;
  bool try_claim(std::uintptr_t me) noexcept;
  void unlock_slow(std::uintptr_t me);

  // The lock word: the owner's identity (a fiber's or thread's, never 0),
  // or 0 when free; bit 0 (kWaiters) says that waiters_ may be non-empty,
  // which sends unlock() to its slow path.
  std::atomic<std::uintptr_t> state_{0};
  detail::SpinLock lock_;     // guards waiters_ and the setting of kWaiters
  detail::WaitList waiters_;  // each Waiter's `payload` is its caller's identity
};

}  // namespace weft
