// RunQueue: a worker's local queue of runnable fibers. A fixed ring that
// its owner pushes and pops without locks and that idle workers steal half
// of (Go's runq, tokio's queue.rs).
//
// Two faces, so that the type says who may do what:
//   RunQueue<T>::Owner  push / pop / take_half: only the owning worker;
//   RunQueue<T>::Thief  steal_into: any other worker.
//
// Protocol. `tail_` is written only by the owner; `head_` is advanced by
// whoever consumes (owner pop, thief steal), always with a CAS, so a slot is
// consumed exactly once. The owner publishes a slot with a release store of
// tail_; consumers read tail_ with acquire before reading slots. A thief
// copies the slots it wants, then claims them with one CAS on head_: if the
// CAS fails someone else consumed first and the copy is discarded. Slots are
// relaxed atomics so that this speculative copy is not a data race. For
// the same reason a thief's `can_take` must judge an entry by its value
// alone: by the time the thief looks, the entry's fiber may have been
// popped, run and freed.
//
// T is a small trivially copyable value; T{} means "none".
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace weft::detail {

template <class T, std::uint32_t Capacity = 256>
class RunQueue {
  static_assert((Capacity & (Capacity - 1)) == 0, "capacity must be a power of two");

 public:
  static constexpr std::uint32_t capacity = Capacity;

  // What a steal found.
  struct StealResult {
    std::uint32_t taken = 0;  // moved into the thief's queue
    T blocked{};              // the first candidate, when it could not be taken
  };

  class Thief;

  class Owner {
   public:
    explicit Owner(RunQueue& q) noexcept : q_(q) {}

    // False when full: the caller moves take_half() elsewhere and retries.
    bool push(T item) noexcept {
      const std::uint32_t tail = q_.tail_.load(std::memory_order_relaxed);
      const std::uint32_t head = q_.head_.load(std::memory_order_acquire);
      if (tail - head >= Capacity) return false;
      q_.slots_[tail % Capacity].store(item, std::memory_order_relaxed);
      q_.tail_.store(tail + 1, std::memory_order_release);
      return true;
    }

    T pop() noexcept {
      std::uint32_t head = q_.head_.load(std::memory_order_acquire);
      for (;;) {
        const std::uint32_t tail = q_.tail_.load(std::memory_order_relaxed);
        if (tail == head) return T{};
        T item = q_.slots_[head % Capacity].load(std::memory_order_relaxed);
        if (q_.head_.compare_exchange_weak(head, head + 1, std::memory_order_acq_rel, std::memory_order_acquire))
          return item;
      }
    }

    // Removes the older half into `out` (room for Capacity / 2); returns how
    // many. Used when the run queue is full, to spill to the global queue.
    std::uint32_t take_half(T* out) noexcept {
      std::uint32_t head = q_.head_.load(std::memory_order_acquire);
      for (;;) {
        const std::uint32_t tail = q_.tail_.load(std::memory_order_relaxed);
        const std::uint32_t n = (tail - head) / 2;
        if (n == 0) return 0;
        for (std::uint32_t i = 0; i < n; ++i) out[i] = q_.slots_[(head + i) % Capacity].load(std::memory_order_relaxed);
        if (q_.head_.compare_exchange_weak(head, head + n, std::memory_order_acq_rel, std::memory_order_acquire))
          return n;
      }
    }

    std::uint32_t size() const noexcept { return q_.size(); }

   private:
    friend class RunQueue::Thief;
    RunQueue& q_;
  };

  class Thief {
   public:
    explicit Thief(RunQueue& q) noexcept : q_(q) {}

    // Moves up to half of the victim's fibers (n - n/2, at least one) into
    // `dst`, which must be empty. Only a prefix for which `can_take(item)`
    // holds is taken: a pinned fiber ends the steal and is reported in
    // `blocked`, so it stays where it is.
    template <class CanTake>
    StealResult steal_into(Owner& dst, CanTake&& can_take) noexcept {
      RunQueue& to = dst.q_;
      const std::uint32_t dst_tail = to.tail_.load(std::memory_order_relaxed);
      std::uint32_t head = q_.head_.load(std::memory_order_acquire);
      for (;;) {
        const std::uint32_t tail = q_.tail_.load(std::memory_order_acquire);
        std::uint32_t n = tail - head;
        n -= n / 2;
        if (n == 0) return {};
        if (n > Capacity / 2) {  // head and tail read at different moments
          head = q_.head_.load(std::memory_order_acquire);
          continue;
        }
        StealResult result;
        std::uint32_t taken = 0;
        for (; taken < n; ++taken) {
          T item = q_.slots_[(head + taken) % Capacity].load(std::memory_order_relaxed);
          if (!can_take(item)) {
            if (taken == 0) result.blocked = item;
            break;
          }
          to.slots_[(dst_tail + taken) % Capacity].store(item, std::memory_order_relaxed);
        }
        if (taken == 0) {
          // Confirm the blocked item was still queued when we looked.
          if (q_.head_.load(std::memory_order_acquire) != head) result.blocked = T{};
          return result;
        }
        if (q_.head_.compare_exchange_weak(head, head + taken, std::memory_order_acq_rel, std::memory_order_acquire)) {
          to.tail_.store(dst_tail + taken, std::memory_order_release);
          result.taken = taken;
          return result;
        }
      }
    }

   private:
    RunQueue& q_;
  };

  Owner owner() noexcept { return Owner(*this); }
  Thief thief() noexcept { return Thief(*this); }

  // Approximate when read by anyone but the owner.
  std::uint32_t size() const noexcept {
    const std::uint32_t head = head_.load(std::memory_order_acquire);
    const std::uint32_t tail = tail_.load(std::memory_order_acquire);
    return tail - head;
  }

 private:
  alignas(64) std::atomic<std::uint32_t> head_{0};
  alignas(64) std::atomic<std::uint32_t> tail_{0};
  alignas(64) std::array<std::atomic<T>, Capacity> slots_{};
};

}  // namespace weft::detail
