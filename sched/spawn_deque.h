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
// first one runs: skynet's 1,111,111 fibers took 10.4 s and 472 MiB on one
// worker that way, against 0.3 s and 4 MiB depth first. Thieves take the
// oldest, the biggest subtree. Fibers that have run and been woken or
// yielded keep their FIFO ring (Worker), served before this deque, so
// fairness among running fibers is unchanged. A stream of spawns on one
// busy worker can keep an old spawn waiting until an idle worker steals it
// (taking the oldest spawn every 61 picks, for fairness, opened a new
// subtree each time: skynet took 22 s and 889 MiB).
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
    bottom_.store(bottom + 1, std::memory_order_release);
    return true;
  }

  // The newest item, or T{} when empty.
  T pop() noexcept {
    const std::int64_t bottom = bottom_.load(std::memory_order_relaxed) - 1;
    if (bottom < top_.load(std::memory_order_relaxed)) return T{};  // empty: no fence needed
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
  // The oldest item, or T{} when there are fewer than `leave + 1` items or
  // another thief won. A thief leaves the newest (leave = 1): the owner is
  // about to run it, as Go leaves a running P's runnext alone.
  T steal(std::int64_t leave = 0) noexcept {
    std::int64_t top = top_.load(std::memory_order_seq_cst);
    const std::int64_t bottom = bottom_.load(std::memory_order_seq_cst);
    if (bottom - top <= leave) return T{};
    T item = slot(top).load(std::memory_order_relaxed);
    if (!top_.compare_exchange_strong(top, top + 1, std::memory_order_seq_cst, std::memory_order_relaxed)) return T{};
    return item;
  }

  std::int64_t size() const noexcept {
    const std::int64_t size = bottom_.load(std::memory_order_acquire) - top_.load(std::memory_order_acquire);
    return size > 0 ? size : 0;
  }

 private:
  std::atomic<T>& slot(std::int64_t index) noexcept { return slots_[static_cast<std::size_t>(index & (Capacity - 1))]; }

  alignas(64) std::atomic<std::int64_t> top_{0};
  alignas(64) std::atomic<std::int64_t> bottom_{0};
  alignas(64) std::array<std::atomic<T>, Capacity> slots_{};
};

}  // namespace weft::detail
