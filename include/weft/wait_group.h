// weft::WaitGroup: waits for a set of tasks to finish, with Go's
// sync.WaitGroup semantics.
//
//   weft::WaitGroup wg;
//   for (auto& job : jobs) {
//     wg.add(1);
//     sched.spawn([&] { run(job); wg.done(); }).detach();
//   }
//   wg.wait();                      // parks until every done()
//
// A counter driven below zero throws std::logic_error (Go panics), and the
// counter is left unchanged.
#pragma once

#include <chrono>
#include <cstdint>

#include "detail/misuse.h"
#include "detail/park.h"
#include "detail/require_cxx20.h"
#include "detail/visibility.h"

namespace weft {

class WEFT_API WaitGroup {
 public:
  WaitGroup() = default;
  WaitGroup(const WaitGroup&) = delete;
  WaitGroup& operator=(const WaitGroup&) = delete;
  // Aborts, naming this and its waiters, if anyone still waits on it
  // (detail/misuse.h): they would stay parked on freed memory.
  ~WaitGroup() { detail::check_no_waiters("weft::WaitGroup", this, lock_, waiters_); }

  void add(std::int64_t delta);
  void done() { add(-1); }
  void wait() { wait_until_deadline(detail::no_deadline); }
  // False if the counter did not reach zero in time.
  template <class Rep, class Period>
  bool wait_for(const std::chrono::duration<Rep, Period>& timeout) {
    return wait_until_deadline(detail::deadline_after(timeout));
  }
  std::int64_t count() const;

 private:
  bool wait_until_deadline(detail::Clock::time_point deadline);

  mutable detail::SpinLock lock_;
  std::int64_t counter_ = 0;
  detail::WaitList waiters_;
};

}  // namespace weft
