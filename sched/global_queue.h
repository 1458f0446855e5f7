// GlobalQueue: a scheduler's one queue that any thread may push to
// (sched/scheduler_core.h, "global"): spawns and wakes from plain threads,
// the timers sysmon runs, overflow from full run queues and hand-offs. A
// moodycamel::ConcurrentQueue, pushed to through producers of its own: one
// per worker, used only on that worker's thread, and one that every other
// thread (plain threads, weft::blocking's helpers, sysmon, spares) shares
// under a lock.
//
// Why not the queue's implicit producers (a push without a token): the
// queue makes one for every thread that ever pushes, in a hash table whose
// resize every other new producer spins on while it lasts (moodycamel's
// issue 288), and keeps them all (a pop without a token looks at each). 200
// weft::blocking helpers that finished their calls together each made its
// first push: whenever a helper's wake-up preempted the one resizing, the
// rest spun on both CPUs, up to 2 s before the fibers ran again
// (docs/benchmarks.md, "Wakes from many threads"). The shared producer's
// lock is a futex mutex: a holder preempted mid-push puts the others to
// sleep, not to spinning.
//
// Invariant: each ProducerToken is used by one thread at a time (worker i's
// by worker i's thread, the shared one under shared_lock_), as moodycamel
// requires. Pops need no token.
#pragma once

#include <concurrentqueue/concurrentqueue.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "../runtime/fiber_control.h"
#include "raw_lock.h"

namespace weft::detail {

class GlobalQueue {
 public:
  // push()'s `worker` from a thread that is none of the workers.
  static constexpr unsigned kAnyThread = ~0u;

  explicit GlobalQueue(unsigned workers);
  GlobalQueue(const GlobalQueue&) = delete;
  GlobalQueue& operator=(const GlobalQueue&) = delete;

  // From worker `worker`'s own thread, or kAnyThread from any other.
  // Aborts, saying so, if the queue cannot allocate: a fiber lost here
  // would never run again.
  void push(FiberControl* const* fibers, std::size_t count, unsigned worker) noexcept;
  // Up to `max` fibers into `out`; how many.
  std::size_t pop(FiberControl** out, std::size_t max) noexcept;
  // Fibers queued (relaxed: a hint for the idle loop and the dump).
  std::int64_t size() const noexcept { return size_.load(std::memory_order_relaxed); }

 private:
  moodycamel::ConcurrentQueue<FiberControl*> queue_;
  std::vector<moodycamel::ProducerToken> worker_producers_;
  RawMutex shared_lock_;
  moodycamel::ProducerToken shared_producer_{queue_};  // guarded by shared_lock_
  std::atomic<std::int64_t> size_{0};
};

}  // namespace weft::detail
