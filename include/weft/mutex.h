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
// Fairness: unlock() hands the lock to the longest waiter directly, so no
// waiter starves under contention (the price: a newcomer cannot barge in
// ahead of a woken waiter). Not recursive. unlock() by anyone but the owner
// aborts with a message naming the mutex and the caller, in every build.
#pragma once

#include <chrono>
#include <cstdint>

#include "detail/misuse.h"
#include "detail/park.h"
#include "detail/require_cxx20.h"

namespace weft {

class Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;
  // Aborts, naming this and its waiters, if anyone still waits on it
  // (detail/misuse.h): they would stay parked on freed memory.
  ~Mutex() { detail::check_no_waiters("weft::Mutex", this, lock_, waiters_); }

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

 private:
  bool acquire(detail::Clock::time_point deadline);
  void set_owner() noexcept;

  detail::SpinLock lock_;
  bool locked_ = false;
  detail::WaitList waiters_;
  std::uintptr_t owner_ = 0;  // the owning fiber or thread, for misuse checks
};

}  // namespace weft
