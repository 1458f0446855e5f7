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
// Fairness, as Go's sync.Mutex: normally unlock() frees the lock and wakes
// the longest waiter to compete for it, and a running newcomer may take it
// first (barging: the lock stays with whoever is running, with no switch or
// futex wake per acquisition, so contended throughput stays close to
// std::mutex's). A woken waiter that loses goes back to the front of the
// queue. Once a waiter has waited longer than starvation_threshold, the
// mutex turns fair: unlock() hands the lock straight to the longest waiter
// and newcomers queue behind, until the queue empties or a waiter got the
// lock within the threshold. So no waiter starves. Not recursive. In builds
// without NDEBUG, unlock() by anyone but the owner aborts with a message.
#pragma once

#include <chrono>
#include <cstdint>

#include "../sched/park.h"

namespace weft {

class Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() { acquire(detail::no_deadline); }
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

  // How long a waiter may wait before the mutex turns fair (Go's 1 ms).
  static constexpr std::chrono::milliseconds starvation_threshold{1};

 private:
  bool acquire(detail::Clock::time_point deadline);
  void set_owner() noexcept;

  detail::SpinLock lock_;
  bool locked_ = false;
  bool starving_ = false;  // fair mode: unlock() hands over, nobody barges
  bool waking_ = false;    // a woken waiter is on its way to compete
  detail::WaitList waiters_;
#ifndef NDEBUG
  std::uintptr_t owner_ = 0;  // the owning fiber or thread, for misuse checks
#endif
};

}  // namespace weft
