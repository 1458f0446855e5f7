// Which process an object was made in, for the objects whose threads do
// not survive fork(): a scheduler (its workers) and a pool (its runners).
// The child has only the thread that forked; a copy of such an object
// there must not wait for the parent's threads (docs/usage.md, "fork()").
#pragma once

#include <weft/detail/wait_list.h>

#include <atomic>

namespace weft::detail {

// How many times this process is a fork()ed child of the process it started
// as: one more in each child, counted by an atfork handler, so that a check
// costs a load, not a getpid() system call per spawn or task. The process's
// own fact, not a registry of objects. Its atfork handler is registered as
// libweft loads (sched/fork_generation.cpp), so a direct read is good from
// then on.
extern std::atomic<unsigned> forks_behind_this_process;

// A plain thread's Waiter is stamped as it parks (park()), so that a fork
// child can tell the waiters the parent's threads left in its copies of
// the primitives: unpark hands them nothing (sched/park.cpp). The lock
// hooks' parking lot needs no stamp: the child empties its buckets
// (sync/parking_lot.cpp), and a waiter never stamped is never taken for
// the parent's.
inline void stamp_thread_waiter(Waiter& waiter) noexcept {
  waiter.forks_at_park = forks_behind_this_process.load(std::memory_order_relaxed) + 1;
}
// True for a thread waiter stamped before this process was forked: one of
// the parent's threads. A waiter not stamped is never taken for one.
inline bool stamped_before_the_fork(const Waiter& waiter) noexcept {
  return waiter.forks_at_park != 0 &&
         waiter.forks_at_park != forks_behind_this_process.load(std::memory_order_relaxed) + 1;
}

// In a fork child: whether `waiter` is one the parent's threads or fibers
// left in the list of the child's copy of a primitive (a fiber of a
// scheduler made before the fork; a thread stamped before it). Such a
// waiter is not in this process: woken, it would take what it was handed
// and never run (sched/park.cpp), and it keeps no primitive from being
// destroyed (sched/misuse.cpp).
bool left_by_the_parent(const Waiter& waiter) noexcept;

class ForkGeneration {
 public:
  // The count now. Throws std::system_error if the atfork handler could not
  // be registered (pthread_atfork's only error is ENOMEM).
  static unsigned now();
  ForkGeneration() : made_at_(now()) {}
  // True in a child forked after this was made.
  bool in_forked_child() const noexcept {
    return forks_behind_this_process.load(std::memory_order_relaxed) != made_at_;
  }

 private:
  unsigned made_at_;
};

}  // namespace weft::detail
