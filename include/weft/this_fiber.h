// weft::this_fiber: what the calling fiber can do to itself.
//
// Called from a plain thread (not a weft fiber), each function either does
// the thread's equivalent or throws std::logic_error:
//   yield()        std::this_thread::yield()
//   sleep_for()    std::this_thread::sleep_for()
//   sleep_until()  std::this_thread::sleep_until()
//   checkpoint()   nothing
//   id()           0 (no fiber has id 0)
//   is_fiber()     false
//   name()         throws std::logic_error
//   set_name()     throws std::logic_error
//   pin()          throws std::logic_error
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "detail/park.h"
#include "detail/require_cxx20.h"
#include "detail/visibility.h"

namespace weft::detail {
// Parks until the deadline even if it has passed meanwhile: sleep_for with
// a positive duration always lets the worker's other fibers run, as Go's
// time.Sleep does, however slow the machine was between the two clock reads.
WEFT_API void sleep_parked_until(std::chrono::steady_clock::time_point deadline);
}  // namespace weft::detail

namespace weft::this_fiber {

WEFT_API bool is_fiber() noexcept;
// Lets the other runnable fibers of this worker run first.
WEFT_API void yield();
// Parks the fiber until the deadline; it never wakes earlier. A deadline
// already past returns at once (a preemption point, no park).
WEFT_API void sleep_until(std::chrono::steady_clock::time_point deadline);

// Durations and deadlines of any Rep and Period, saturated (a sleep of
// hours::max() sleeps for ever; detail::deadline_after).
template <class Rep, class Period>
void sleep_for(const std::chrono::duration<Rep, Period>& duration) {
  if (duration <= duration.zero()) return;
  detail::sleep_parked_until(detail::deadline_after(duration));
}

template <class Clock, class Duration>
void sleep_until(const std::chrono::time_point<Clock, Duration>& deadline) {
  sleep_until(detail::to_deadline(deadline));
}

WEFT_API std::uint64_t id() noexcept;
WEFT_API std::string name();
WEFT_API void set_name(std::string_view name);
// A preemption point: yields if sysmon asked this fiber to, because it has
// run longer than Config::time_slice (docs/sysmon.md). Costs a load and a
// branch when nothing is pending; every weft call that does not wait
// checks too (docs/sync.md).
inline void checkpoint() noexcept { detail::checkpoint(); }

// Keeps the calling fiber on its current worker for the guard's lifetime:
// it may still park and yield, but no other worker will run it (so that
// thread_locals stay the same). Nests.
class [[nodiscard]] WEFT_API PinGuard {
 public:
  PinGuard(PinGuard&& other) noexcept : fiber_(other.fiber_) { other.fiber_ = nullptr; }
  PinGuard(const PinGuard&) = delete;
  PinGuard& operator=(const PinGuard&) = delete;
  PinGuard& operator=(PinGuard&&) = delete;
  ~PinGuard();

 private:
  friend PinGuard pin();
  explicit PinGuard(void* fiber) noexcept : fiber_(fiber) {}
  void* fiber_;
};

[[nodiscard]] WEFT_API PinGuard pin();

}  // namespace weft::this_fiber
