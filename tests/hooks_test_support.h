// Shared by the hooks' tests (hooks_*_test.cpp).
#pragma once

#include <weft/weft.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

#include "test_support.h"

namespace weft::test {

// A call's result as text: the count, or the (negative) result and errno's
// name, e.g. "3" or "-1 EAGAIN". Call it before anything else sets errno.
inline std::string outcome(long result) {
  const int error = errno;
  if (result >= 0) return std::to_string(result);
  return std::to_string(result) + " " + strerrorname_np(error);
}

// One worker and no spare workers: a spare would run the other fibers of a
// worker blocked in the kernel (docs/sysmon.md), hiding a hook that failed
// to park.
inline Scheduler one_worker() {
  Config config = config_with(1);
  config.max_threads = config.workers;  // no spares
  return Scheduler(config);
}

// What `body` returned on a plain thread and in a fiber (one worker, no
// spares), run in that order: the hooks' tests compare a call's results,
// errno and outputs as text.
struct ThreadAndFiber {
  std::string thread;
  std::string fiber;
};
inline ThreadAndFiber on_thread_and_fiber(const std::function<std::string()>& body) {
  ThreadAndFiber got;
  std::thread([&] { got.thread = body(); }).join();
  Scheduler sched = one_worker();
  sched.spawn([&] { got.fiber = body(); }).join();
  return got;
}

// For a call that must return at once, or that a test must end: after
// `after`, unless destroyed first, a thread runs `fire`, which ends a wait
// the call should not have made (it makes the fd ready), and fired() says
// so. `fire` may take the flag that says the watchdog is being destroyed,
// to end a loop of its own.
class Watchdog {
 public:
  using Fire = std::function<void(const std::atomic<bool>& stopped)>;
  explicit Watchdog(Fire fire, std::chrono::milliseconds after = std::chrono::seconds(5))
      : thread_([this, fire = std::move(fire), after] {
          const auto until = std::chrono::steady_clock::now() + after;
          while (!stopped_ && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          if (stopped_) return;
          fired_ = true;
          fire(stopped_);
        }) {}
  explicit Watchdog(std::function<void()> fire, std::chrono::milliseconds after = std::chrono::seconds(5))
      : Watchdog([fire = std::move(fire)](const std::atomic<bool>&) { fire(); }, after) {}
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  ~Watchdog() {
    stopped_ = true;
    thread_.join();
  }
  bool fired() const { return fired_; }

 private:
  std::atomic<bool> stopped_{false};
  std::atomic<bool> fired_{false};
  std::thread thread_;  // last: it reads the flags above
};

// Waits (up to 20 s) until `n` fibers of `sched` are parked on fds.
inline bool io_waiters_reach(Scheduler& sched, std::uint64_t n) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < until) {
    if (sched.snapshot().poller.io_waiters >= n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

}  // namespace weft::test
