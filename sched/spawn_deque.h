// SpawnDeque: where a worker keeps the fibers spawned on it that have not
// started yet. Its owner pushes and pops at the bottom, newest first; other
// workers steal at the top, oldest first, one at a time (the Chase-Lev
// deque of Cilk, TBB and Rayon, in the C11 form of Le et al., PPoPP 2013,
// with seq_cst operations in place of fences so that ThreadSanitizer can
// follow it).
//
// Why newest first: a fiber that spawns children and joins them (fork-join,
// skynet, a request fanning out) then runs depth first. Only about depth x
// fan-out fibers are alive at once, and each one's stack comes back hot
// from the pool. In spawn order (FIFO), every leaf is spawned before the
// first one runs, and skynet's million fibers are all alive at once
// (docs/benchmarks.md, "Figures behind the comments"). Thieves take the
// oldest, the biggest subtree. Fibers that have run and been woken or
// yielded keep their FIFO run queue (Worker), served before this deque, so
// fairness among running fibers is unchanged. A stream of spawns on one
// busy worker can keep an old spawn waiting until an idle worker steals it
// (taking the oldest spawn every 61 picks, for fairness, opened a new
// subtree each time, as slow as FIFO order).
//
// The newest item is held for the owner from its push until the owner pops
// it or releases it (Go's runnext, which a thief leaves to a P about to run
// it): a fiber that spawns a child and joins it runs the child on its own
// worker, hot, instead of handing it to a thief woken for nothing. The hold
// lasts only while the spawner runs: the owner releases it when it picks
// anything else to run (Worker::pick_next), so that a spawn is never left
// where only a busy owner may take it (sched/idle.h: work a searcher can
// see is work it can take). Holding is a flag, not a count: only the
// newest is ever held, and a pop, which takes the newest, ends the hold
// before it moves the bottom, so that what a thief may take never shrinks
// by a pop without the item that left.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace weft::detail {

template <class T, std::int64_t Capacity = 256>
class SpawnDeque {
  static_assert((Capacity & (Capacity - 1)) == 0, "capacity must be a power of two");

 public:
  static constexpr std::int64_t capacity = Capacity;

  // --- the owner's thread -----------------------------------------------
  // False when full.
  bool push(T item) noexcept {
    const std::int64_t bottom = bottom_.load(std::memory_order_relaxed);
    const std::int64_t top = top_.load(std::memory_order_acquire);
    if (bottom - top >= Capacity) return false;
    slot(bottom).store(item, std::memory_order_relaxed);
    // Before the bottom: a thief that sees the item sees it held.
    held_.store(true, std::memory_order_relaxed);
    bottom_.store(bottom + 1, std::memory_order_release);
    return true;
  }

  // Ends the hold on the newest item: thieves may take it from now on. The
  // caller then publishes it (sched/idle.h, rule 1: a seq_cst fence, then
  // a look at the searchers and sleepers).
  void release() noexcept { held_.store(false, std::memory_order_relaxed); }
  bool held() const noexcept { return held_.load(std::memory_order_relaxed); }

  // The newest item, or T{} when empty.
  T pop() noexcept {
    const std::int64_t bottom = bottom_.load(std::memory_order_relaxed) - 1;
    if (bottom < top_.load(std::memory_order_relaxed)) return T{};  // empty: no fence needed
    // The held item is the one taken here, and the one below it is not
    // held: released before the bottom moves, so a thief that sees the new
    // bottom (seq_cst, after this) may take the rest.
    held_.store(false, std::memory_order_relaxed);
    // Claim the bottom before looking at the top: a thief reading the top
    // after this sees the smaller bottom (the StoreLoad that needs seq_cst).
    bottom_.store(bottom, std::memory_order_seq_cst);
    std::int64_t top = top_.load(std::memory_order_seq_cst);
    if (top > bottom) {  // a thief took the last one
      bottom_.store(bottom + 1, std::memory_order_relaxed);
      return T{};
    }
    T item = slot(bottom).load(std::memory_order_relaxed);
    if (top == bottom) {
      // The last item: race the thieves for it on the top.
      if (!top_.compare_exchange_strong(top, top + 1, std::memory_order_seq_cst, std::memory_order_relaxed)) item = T{};
      bottom_.store(bottom + 1, std::memory_order_relaxed);
    }
    return item;
  }

  // --- any thread ---------------------------------------------------------
  // The oldest item, or T{} when there is none a thief may take (the only
  // one is held, unless `take_held`: sysmon found the owner stuck) or
  // another thief won.
  T steal(bool take_held = false) noexcept {
    std::int64_t top = top_.load(std::memory_order_seq_cst);
    const std::int64_t bottom = bottom_.load(std::memory_order_seq_cst);
    if (bottom - top <= held_back(take_held)) return T{};
    T item = slot(top).load(std::memory_order_relaxed);
    if (!top_.compare_exchange_strong(top, top + 1, std::memory_order_seq_cst, std::memory_order_relaxed)) return T{};
    return item;
  }

  std::int64_t size() const noexcept {
    const std::int64_t size = bottom_.load(std::memory_order_acquire) - top_.load(std::memory_order_acquire);
    return size > 0 ? size : 0;
  }
  // Whether steal(take_held) would find an item (racing thieves aside).
  bool stealable(bool take_held = false) const noexcept {
    const std::int64_t top = top_.load(std::memory_order_seq_cst);
    const std::int64_t bottom = bottom_.load(std::memory_order_seq_cst);
    return bottom - top > held_back(take_held);
  }

 private:
  // How many items at the bottom a thief leaves: read after the bottom, so
  // that an item seen is seen held if it is.
  std::int64_t held_back(bool take_held) const noexcept {
    return !take_held && held_.load(std::memory_order_relaxed) ? 1 : 0;
  }

  std::atomic<T>& slot(std::int64_t index) noexcept { return slots_[static_cast<std::size_t>(index & (Capacity - 1))]; }

  alignas(64) std::atomic<std::int64_t> top_{0};
  alignas(64) std::atomic<std::int64_t> bottom_{0};
  std::atomic<bool> held_{false};  // the newest item is the owner's; written by the owner, beside the bottom
  alignas(64) std::array<std::atomic<T>, Capacity> slots_{};
};

}  // namespace weft::detail
