// weft::Semaphore: a counting semaphore that parks a waiting fiber (and
// blocks a waiting plain thread in the kernel).
//
//   weft::Semaphore slots{8};        // at most 8 requests in flight
//   slots.acquire();
//   ... call the backend ...
//   slots.release();
//
// FIFO: release() hands permits to the longest waiters first, and a new
// acquire() does not barge ahead of them.
#pragma once

#include <chrono>
#include <cstdint>

#include "detail/misuse.h"
#include "detail/park.h"
#include "detail/require_cxx20.h"
#include "detail/visibility.h"

namespace weft {

class WEFT_API Semaphore {
 public:
  explicit Semaphore(std::uint64_t initial = 0) : permits_(initial) {}
  Semaphore(const Semaphore&) = delete;
  Semaphore& operator=(const Semaphore&) = delete;
  // Aborts, naming this and its waiters, if anyone still waits on it
  // (detail/misuse.h): they would stay parked on freed memory.
  ~Semaphore() { detail::check_no_waiters("weft::Semaphore", this, lock_, waiters_); }

  void acquire() { acquire_until(detail::no_deadline); }
  bool try_acquire();
  template <class Rep, class Period>
  bool try_acquire_for(const std::chrono::duration<Rep, Period>& timeout) {
    return acquire_until(detail::deadline_after(timeout));
  }
  template <class Clock, class Duration>
  bool try_acquire_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    return acquire_until(detail::to_deadline(deadline));
  }
  void release(std::uint64_t n = 1);
  std::uint64_t available() const;

 private:
  bool acquire_until(detail::Clock::time_point deadline);

  mutable detail::SpinLock lock_;
  std::uint64_t permits_;
  detail::WaitList waiters_;
};

}  // namespace weft
