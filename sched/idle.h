// IdleWorkers: how workers with nothing to run go to sleep, and how whoever
// publishes work wakes one, without ever losing a wakeup.
//
// Protocol (Go's "submit -> fence -> check spinners", a Dekker handshake):
//   publisher:  make the fiber visible in a queue; seq_cst fence;
//               if nobody is searching and somebody sleeps: wake one.
//   sleeper:    stop searching; register as sleeping; seq_cst fence;
//               re-check every queue; only then futex-wait.
// Either the publisher sees the sleeper registered, or the sleeper's
// re-check sees the fiber: both cannot miss each other.
//
// At most half the workers search (spin) at once, so that more workers than
// cores do not burn the cores that have real work.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

namespace weft::detail {

// A worker's part of the protocol.
struct IdleSlot {
  std::atomic<std::uint32_t> wake_word{0};  // futex: 1 once woken
  bool listed = false;                      // in the sleepers list (guarded by IdleWorkers)
};

class IdleWorkers {
 public:
  // `sleepers`: how many may sleep at once (the workers, and spares that
  // hold pinned fibers), so that going to sleep never allocates.
  IdleWorkers(unsigned workers, unsigned sleepers) : workers_(workers) { sleepers_.reserve(sleepers); }

  // After publishing work any worker may run.
  void notify_work() noexcept {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (searching_.load(std::memory_order_relaxed) == 0 && sleeping_.load(std::memory_order_relaxed) > 0) wake_one();
  }
  // After publishing work only `slot`'s worker may run (a pinned fiber).
  void notify_worker(IdleSlot& slot) noexcept;

  // A worker that found nothing local may search others' queues if fewer
  // than half the workers already do.
  bool begin_search() noexcept;
  // Returns true when this was the last searcher.
  bool end_search() noexcept { return searching_.fetch_sub(1, std::memory_order_seq_cst) == 1; }

  // Sleeping: prepare, re-check the queues, then either cancel or wait.
  void prepare_sleep(IdleSlot& slot) noexcept;
  void cancel_sleep(IdleSlot& slot) noexcept;
  void wait(IdleSlot& slot) noexcept;

  void wake_all() noexcept;

 private:
  void wake_one() noexcept;
  void wake_locked(IdleSlot& slot) noexcept;

  const unsigned workers_;
  std::atomic<unsigned> searching_{0};
  std::atomic<unsigned> sleeping_{0};
  std::mutex lock_;
  std::vector<IdleSlot*> sleepers_;  // LIFO: the most recent sleeper is warmest
};

}  // namespace weft::detail
