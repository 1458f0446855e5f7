// weft::Latch: a single-use countdown, like std::latch, that parks waiting
// fibers (and blocks waiting plain threads in the kernel).
//
//   weft::Latch ready{workers};
//   ... each worker fiber: setup(); ready.count_down();
//   ready.wait();                 // parks until all have counted down
//
// Counting below zero throws std::logic_error and changes nothing.
#pragma once

#include <chrono>
#include <cstdint>

#include "detail/misuse.h"
#include "detail/park.h"
#include "detail/require_cxx20.h"
#include "detail/visibility.h"

namespace weft {

class WEFT_API Latch {
 public:
  explicit Latch(std::int64_t expected);
  Latch(const Latch&) = delete;
  Latch& operator=(const Latch&) = delete;
  // Aborts, naming this and its waiters, if anyone still waits on it
  // (detail/misuse.h): they would stay parked on freed memory.
  ~Latch() { detail::check_no_waiters("weft::Latch", this, lock_, waiters_); }

  void count_down(std::int64_t n = 1);
  bool try_wait() const noexcept;
  void wait() const { wait_until_deadline(detail::no_deadline); }
  template <class Rep, class Period>
  bool wait_for(const std::chrono::duration<Rep, Period>& timeout) const {
    return wait_until_deadline(detail::deadline_after(timeout));
  }
  void arrive_and_wait(std::int64_t n = 1) {
    count_down(n);
    wait();
  }

 private:
  bool wait_until_deadline(detail::Clock::time_point deadline) const;

  mutable detail::SpinLock lock_;
  std::int64_t count_;
  mutable detail::WaitList waiters_;
};

}  // namespace weft
