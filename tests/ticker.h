// The 1 ms ticker of the checkpoint tests (checkpoint_test,
// hooks_checkpoint_test): a fiber that sleeps 1 ms at a time beside loops
// that never park, and records how late its worst wake-up was; and the
// control, a plain thread's 1 ms sleeps over the same run, late only by
// what the machine itself does to threads (on 2 loaded cores, at times
// 100 ms and more), which no checkpoint can help.
#pragma once

#include <weft/weft.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "run_delays.h"

namespace weft::test {

class Ticker {
 public:
  using Clock = std::chrono::steady_clock;

  // Starts ticking on `sched`: spawn it before the loops, so that it is
  // queued on their workers.
  explicit Ticker(Scheduler& sched)
      : fiber_(sched.spawn({.name = "ticker"}, [this] {
          // Bounded in count as well as by stop().
          while (!stop_.load(std::memory_order_relaxed) && ticks_.load(std::memory_order_relaxed) < 100'000) {
            const auto due = Clock::now() + std::chrono::milliseconds(1);
            this_fiber::sleep_for(std::chrono::milliseconds(1));
            const std::int64_t late = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - due).count();
            if (late > worst_late_ns_.load(std::memory_order_relaxed))
              worst_late_ns_.store(late, std::memory_order_relaxed);
            ticks_.fetch_add(1, std::memory_order_relaxed);
          }
        })) {}
  Ticker(const Ticker&) = delete;
  Ticker& operator=(const Ticker&) = delete;
  ~Ticker() {
    if (fiber_.joinable()) stop();
  }

  // Ends the ticking and waits for the fiber.
  void stop() {
    stop_.store(true);
    fiber_.join();
  }

  double worst_late_ms() const { return static_cast<double>(worst_late_ns_.load()) / 1e6; }
  // Counts the worst lateness afresh from here: for a test that bounds it
  // once a start-up has settled (call it between two ticks, after a wait
  // for one, so that no tick from before is still in flight).
  void forget_worst() { worst_late_ns_.store(0); }
  int ticks() const { return ticks_.load(); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<std::int64_t> worst_late_ns_{0};
  std::atomic<int> ticks_{0};
  Fiber fiber_;  // last: it uses the fields above
};

// The control: a plain thread's 1 ms sleeps for `run`; their worst
// lateness in ms.
inline double plain_thread_worst_late_ms(std::chrono::milliseconds run) {
  using Clock = std::chrono::steady_clock;
  std::int64_t worst_ns = 0;
  for (const auto end = Clock::now() + run; Clock::now() < end;) {
    const auto due = Clock::now() + std::chrono::milliseconds(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    worst_ns = std::max<std::int64_t>(worst_ns,
                                      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - due).count());
  }
  return static_cast<double>(worst_ns) / 1e6;
}

}  // namespace weft::test
