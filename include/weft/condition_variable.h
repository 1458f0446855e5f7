// weft::ConditionVariable: waits for a condition under a weft::Mutex,
// parking a fiber (or blocking a plain thread in the kernel).
//
//   weft::Mutex mu;
//   weft::ConditionVariable cv;
//   std::unique_lock lock(mu);
//   cv.wait(lock, [&] { return ready; });
//   if (!cv.wait_for(lock, 10ms, [&] { return ready; })) { /* timed out */ }
//
// Like std::condition_variable: wakes are delivered to waiters present at
// notify time, FIFO; a waiter re-acquires the mutex before returning.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "detail/misuse.h"
#include "detail/park.h"
#include "detail/require_cxx20.h"
#include "detail/visibility.h"
#include "mutex.h"

namespace weft {

class WEFT_API ConditionVariable {
 public:
  ConditionVariable() = default;
  ConditionVariable(const ConditionVariable&) = delete;
  ConditionVariable& operator=(const ConditionVariable&) = delete;
  // Aborts, naming this and its waiters, if anyone still waits on it
  // (detail/misuse.h): they would stay parked on freed memory.
  ~ConditionVariable() { detail::check_no_waiters("weft::ConditionVariable", this, lock_, waiters_); }

  void notify_one() noexcept;
  void notify_all() noexcept;

  void wait(std::unique_lock<Mutex>& lock) { wait_until_deadline(lock, detail::no_deadline); }
  template <class Predicate>
  void wait(std::unique_lock<Mutex>& lock, Predicate ready) {
    while (!ready()) wait(lock);
  }

  template <class Clock, class Duration>
  std::cv_status wait_until(std::unique_lock<Mutex>& lock, const std::chrono::time_point<Clock, Duration>& deadline) {
    return wait_until_deadline(lock, detail::to_deadline(deadline));
  }
  template <class Clock, class Duration, class Predicate>
  bool wait_until(std::unique_lock<Mutex>& lock, const std::chrono::time_point<Clock, Duration>& deadline,
                  Predicate ready) {
    const auto steady_deadline = detail::to_deadline(deadline);
    while (!ready()) {
      if (wait_until_deadline(lock, steady_deadline) == std::cv_status::timeout) return ready();
    }
    return true;
  }

  template <class Rep, class Period>
  std::cv_status wait_for(std::unique_lock<Mutex>& lock, const std::chrono::duration<Rep, Period>& timeout) {
    return wait_until_deadline(lock, detail::deadline_after(timeout));
  }
  template <class Rep, class Period, class Predicate>
  bool wait_for(std::unique_lock<Mutex>& lock, const std::chrono::duration<Rep, Period>& timeout, Predicate ready) {
    const auto deadline = detail::deadline_after(timeout);
    while (!ready()) {
      if (wait_until_deadline(lock, deadline) == std::cv_status::timeout) return ready();
    }
    return true;
  }

 private:
  std::cv_status wait_until_deadline(std::unique_lock<Mutex>& lock, detail::Clock::time_point deadline);

  detail::SpinLock lock_;
  detail::WaitList waiters_;
};

}  // namespace weft
