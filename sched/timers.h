// TimerQueue: deadlines for sleeping fibers and for the timeouts of every
// sync primitive. There is no timer thread (Go's model since 1.14): the
// scheduler's own threads run the timers that are due.
//
// Who runs due timers (run_due), cheapest first:
//   - a worker, every kGlobalCheckInterval picks (with its look at the
//     global queue), when its fiber is preempted (the timer's fiber then
//     runs first, before the global queue's), and on entering its idle
//     loop and after every sleep (sched/worker.cpp);
//   - a fiber's announced blocking call, at its return if it was judged
//     blocked and at every Worker::kTimerLookCalls-th return otherwise:
//     the fiber yields at its hook's checkpoint if a timer is due
//     (sched/blocking_call.h), since calls one after another never switch;
//   - the blocker, the one idle worker that sleeps in the netpoller's
//     epoll_wait, with the earliest deadline as its timeout (ns, through
//     epoll_pwait2): its wake-up is the timer's;
//   - sysmon, the backstop, for timers a slice overdue (at its ticks, at
//     most a quarter slice apart while fibers run): every worker is busy
//     with fibers that neither switch nor reach a checkpoint. It leaves
//     the first slice to the workers because their fibers go to the next
//     slot, ahead of the fibers queued in the run queue, while sysmon's go to
//     the global queue, behind them: beside more CPU-bound fibers than
//     workers, a timer's fiber would wait a slice per fiber ahead of it.
//     And sysmon wakes a sleeping worker for a timer Sysmon::kTimerOverdue
//     late: the blocker left epoll_wait for a fiber that then blocked its
//     thread, and the other sleepers were never told of the timers armed
//     while it slept (the invariant below holds for an arm, not after the
//     blocker leaves; a running worker's switches run them, a blocked one's
//     do not).
// A fired timer readies its fiber with the scheduler's ready(): on a worker
// into its next slot (no hop at all), from sysmon into the global queue.
//
// Arming (arm) keeps one invariant: while a timer is armed, either the
// blocker sleeps with a timeout no later than the earliest deadline, or no
// worker sleeps without being told about it. So when the new node is the
// earliest, arm() reports what to do: wake the blocker, whose timeout is
// later (its eventfd), or, with no blocker, wake a sleeping worker to
// become one (notify_work; Go's wakeNetPoller). Both are decided under the
// queue's lock, against the blocker's timeout recorded under it
// (begin_blocking), so a blocker never sleeps past a deadline armed before
// it blocked or while it sleeps.
//
// Nodes are intrusive and owned by the caller (they live in the parked
// fiber's frame). The fire callback runs under the queue's lock, which is
// what lets cancel() promise: once it returns, the node is not touched.
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <vector>

#include "futex.h"
#include "raw_lock.h"

namespace weft::detail {

struct TimerNode {
  Clock::time_point deadline;
  // Runs on whichever scheduler thread runs the due timers, under the
  // queue's lock, at or after deadline. It must not arm or cancel timers.
  void (*fire)(TimerNode& node) = nullptr;
  void* context = nullptr;
  std::size_t heap_index = npos;
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
};

class TimerQueue {
 public:
  // What the caller of arm() must do, after it returns (no lock held).
  enum class ArmWake { none, blocker, idle_worker };

  TimerQueue() = default;
  TimerQueue(const TimerQueue&) = delete;
  TimerQueue& operator=(const TimerQueue&) = delete;

  [[nodiscard]] ArmWake arm(TimerNode& node);
  // True if the node was removed before it fired.
  bool cancel(TimerNode& node);
  std::size_t size() const;

  // The earliest deadline (time_point::max() when none): a relaxed load,
  // so a caller may see a node armed or removed a moment ago late.
  Clock::time_point earliest() const noexcept {
    return Clock::time_point(Clock::duration(earliest_.load(std::memory_order_relaxed)));
  }
  bool armed() const noexcept { return earliest_.load(std::memory_order_relaxed) != kNone; }
  // Whether the earliest timer has been due for at least `overdue`: one
  // relaxed load, and a clock read only while a timer is armed.
  bool due(Clock::duration overdue = Clock::duration::zero()) const noexcept {
    // One load: armed() then earliest() could see the last node removed in
    // between, and max() + overdue overflows (UBSan).
    const Clock::rep earliest = earliest_.load(std::memory_order_relaxed);
    return earliest != kNone && Clock::time_point(Clock::duration(earliest)) <= Clock::now() - overdue;
  }
  // Cheap when nothing is due (due()): fires every timer due by now, if the
  // earliest has been due for at least `overdue`. Returns how many fired.
  // Skips if another thread is running them (it fires what is due).
  std::size_t run_due(Clock::duration overdue = Clock::duration::zero()) noexcept {
    if (!due(overdue)) [[likely]]
      return 0;
    return run_due_slow();
  }

  // The blocker, before it sleeps: records that it sleeps until the
  // earliest deadline, which it returns (max(): no timer), so that arm()
  // wakes it for an earlier one.
  Clock::time_point begin_blocking() noexcept;
  // The blocker, awake again.
  void end_blocking() noexcept;

 private:
  static constexpr Clock::rep kNone = Clock::time_point::max().time_since_epoch().count();
  std::size_t run_due_slow() noexcept;
  void publish_earliest() noexcept;  // under lock_
  // A heap entry carries its node's deadline, so that sifting compares
  // within the heap's own array instead of loading every node it passes
  // (nodes live on parked fibers' stacks, cold with many fibers parked).
  struct Entry {
    Clock::rep deadline;
    TimerNode* node;
  };
  // Four children per entry, as Go's timer heap has: half the levels of a
  // binary heap, and the children compared at one level are adjacent.
  static constexpr std::size_t kArity = 4;
  void place(std::size_t index, const Entry& entry) noexcept;
  void sift_up(std::size_t index, Entry moving) noexcept;
  void sift_down(std::size_t index, Entry moving) noexcept;
  void remove_at(std::size_t index) noexcept;

  mutable RawMutex lock_;
  std::vector<Entry> heap_;  // min-heap on deadline; heap_[i].node->heap_index == i
  std::atomic<Clock::rep> earliest_{kNone};
  // Guarded by lock_: whether a blocker sleeps (or is about to), and until.
  bool blocking_ = false;
  Clock::time_point blocking_until_{};
};

}  // namespace weft::detail
