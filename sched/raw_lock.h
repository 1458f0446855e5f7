// A mutex and a condition for libweft's own code below hooks/ (runtime/
// has none; sched/, sync/, io/), on futex(2) of their own.
//
// Why not std::mutex and std::condition_variable: libweft defines
// pthread_mutex_lock and the rest of the lock family (hooks/locks.h), and
// it links with -Bsymbolic-functions, so a std::mutex inside libweft binds
// to those hooks, a layer above (scripts/check-layers reports it). These
// never park a fiber: a caller that must wait blocks its thread, as
// glibc's lock does.
#pragma once

#include <atomic>
#include <climits>
#include <cstdint>
#include <mutex>

#include "futex.h"

namespace weft::detail {

// Drepper's three-state futex mutex ("Futexes Are Tricky"): 0 free, 1
// locked, 2 locked and someone may sleep in futex(2). A BasicLockable and
// Lockable, for std::lock_guard and std::unique_lock.
class RawMutex {
 public:
  constexpr RawMutex() noexcept = default;
  RawMutex(const RawMutex&) = delete;
  RawMutex& operator=(const RawMutex&) = delete;

  void lock() noexcept {
    std::uint32_t seen = kFree;
    if (!state_.compare_exchange_strong(seen, kLocked, std::memory_order_acquire, std::memory_order_relaxed))
        [[unlikely]]
      lock_slow(seen);
  }
  bool try_lock() noexcept {
    std::uint32_t seen = kFree;
    return state_.compare_exchange_strong(seen, kLocked, std::memory_order_acquire, std::memory_order_relaxed);
  }
  void unlock() noexcept {
    if (state_.exchange(kFree, std::memory_order_release) == kSleepers) [[unlikely]]
      futex_wake(state_, 1);
  }

 private:
  static constexpr std::uint32_t kFree = 0;
  static constexpr std::uint32_t kLocked = 1;
  static constexpr std::uint32_t kSleepers = 2;

  void lock_slow(std::uint32_t seen) noexcept {
    // Whoever takes it here leaves kSleepers: others may still sleep.
    if (seen != kSleepers) seen = state_.exchange(kSleepers, std::memory_order_acquire);
    while (seen != kFree) {
      futex_wait(state_, kSleepers);
      seen = state_.exchange(kSleepers, std::memory_order_acquire);
    }
  }

  std::atomic<std::uint32_t> state_{kFree};
};

// A condition for a RawMutex: a sequence number that every notify_all()
// advances, and futex(2) on it. Waiters re-check their predicate under the
// mutex; there is no notify_one (libweft's own waits are all-or-nothing).
class RawCondition {
 public:
  RawCondition() = default;
  RawCondition(const RawCondition&) = delete;
  RawCondition& operator=(const RawCondition&) = delete;

  // Call after changing what waiters test, under the mutex or after it.
  void notify_all() noexcept {
    sequence_.fetch_add(1, std::memory_order_release);
    futex_wake(sequence_, INT_MAX);
  }

  // Waits until `done()` (tested with `lock` held) or `deadline`; returns
  // done()'s last answer.
  template <class Done>
  bool wait_until(std::unique_lock<RawMutex>& lock, Clock::time_point deadline, Done done) {
    while (!done()) {
      if (deadline != Clock::time_point::max() && Clock::now() >= deadline) return false;
      // Read under the mutex: a notifier that changes the state after the
      // unlock advances the sequence after this read, and the futex wait
      // then returns at once.
      const std::uint32_t seen = sequence_.load(std::memory_order_acquire);
      lock.unlock();
      futex_wait(sequence_, seen, deadline);
      lock.lock();
    }
    return true;
  }
  template <class Done>
  void wait(std::unique_lock<RawMutex>& lock, Done done) {
    wait_until(lock, Clock::time_point::max(), done);
  }

 private:
  std::atomic<std::uint32_t> sequence_{0};
};

// A count down to zero that threads wait for, as std::latch, on futex(2):
// std::latch's wait spins through sched_yield, which libweft interposes
// (hooks/hooks_yields.cpp), a layer above.
class RawLatch {
 public:
  explicit RawLatch(std::uint32_t count) noexcept : count_(count) {}
  RawLatch(const RawLatch&) = delete;
  RawLatch& operator=(const RawLatch&) = delete;

  void count_down() noexcept {
    if (count_.fetch_sub(1, std::memory_order_acq_rel) == 1) futex_wake(count_, INT_MAX);
  }
  void wait() noexcept {
    for (std::uint32_t left; (left = count_.load(std::memory_order_acquire)) != 0;) futex_wait(count_, left);
  }

 private:
  std::atomic<std::uint32_t> count_;
};

}  // namespace weft::detail
