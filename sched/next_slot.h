// NextSlot: a worker's "run next" slot (Go's runnext, tokio's LIFO slot),
// the fiber just woken by the running one. A PingPong hand-off goes through
// it twice, so its owner's side has no locked instruction: an exchange would
// cost two per hand-off (docs/benchmarks.md, "Figures behind the comments").
//
// Only the worker's own thread puts and takes. Sysmon may seize the fiber of
// a stuck worker (sched/sysmon.h); the two agree through an asymmetric
// fence (asymmetric_fence.h): the owner marks itself busy and checks for a
// seizure with plain stores and loads, sysmon announces the seizure, runs a
// heavy fence and waits for the owner to be outside its critical section.
#pragma once

#include <weft/detail/spin_lock.h>

#include <atomic>

#include "asymmetric_fence.h"

namespace weft::detail {

struct FiberControl;

class NextSlot {
 public:
  // --- the owner's thread -----------------------------------------------
  // Stores `fiber`; returns the one it displaced, or null.
  FiberControl* put(FiberControl* fiber) noexcept {
    enter();
    FiberControl* previous = fiber_.load(std::memory_order_relaxed);
    fiber_.store(fiber, std::memory_order_relaxed);
    leave();
    return previous;
  }
  // Empties the slot; returns what it held, or null.
  FiberControl* take() noexcept {
    if (fiber_.load(std::memory_order_relaxed) == nullptr) return nullptr;
    enter();
    FiberControl* fiber = fiber_.load(std::memory_order_relaxed);
    fiber_.store(nullptr, std::memory_order_relaxed);
    leave();
    return fiber;
  }

  // --- any thread ---------------------------------------------------------
  bool empty() const noexcept { return fiber_.load(std::memory_order_relaxed) == nullptr; }
  // Takes the fiber from under a (stuck) owner. Null if the slot is empty or
  // the kernel has no expedited membarrier (the fiber then waits for its
  // worker). Callers seize one at a time (sysmon's thread).
  FiberControl* seize() noexcept {
    if (empty() || !heavy_fence_available()) return nullptr;
    seizing_.store(true, std::memory_order_relaxed);
    heavy_fence();
    while (owner_busy_.load(std::memory_order_acquire)) cpu_relax();
    FiberControl* fiber = fiber_.load(std::memory_order_relaxed);
    fiber_.store(nullptr, std::memory_order_relaxed);
    seizing_.store(false, std::memory_order_release);
    return fiber;
  }

 private:
  void enter() noexcept {
    for (;;) {
      owner_busy_.store(true, std::memory_order_relaxed);
      light_fence();
      if (!seizing_.load(std::memory_order_acquire)) [[likely]]
        return;
      // Sysmon is taking the slot: step aside until it is done.
      owner_busy_.store(false, std::memory_order_release);
      while (seizing_.load(std::memory_order_acquire)) cpu_relax();
    }
  }
  void leave() noexcept {
    light_fence();
    owner_busy_.store(false, std::memory_order_release);
  }

  std::atomic<FiberControl*> fiber_{nullptr};
  std::atomic<bool> owner_busy_{false};
  std::atomic<bool> seizing_{false};
};

}  // namespace weft::detail
