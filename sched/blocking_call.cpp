#include "blocking_call.h"

#include "scheduler_core.h"
#include "worker.h"

namespace weft::detail {

Worker* enter_blocking_call(Sleeps sleeps) noexcept {
  Worker* worker = current_worker();
  if (worker == nullptr || !worker->begin_blocking_call(sleeps)) return nullptr;
  Sysmon& sysmon = worker->core().sysmon();
  // Fibers queued behind a call that will sleep: sysmon hands them off at
  // its look, which comes now. Nothing queued (a thread per fiber, as a
  // hundred fibers in fsync come to be): no wake-up for the hand-off.
  if (sleeps == Sleeps::always && worker->has_work_to_hand_off(true)) {
    sysmon.look_now();
    return worker;
  }
  // A sysmon asleep for longer than the grace would see the call late:
  // wake it if its verdict is awaited (rarely: it stays alert for a while
  // after an announcement). If not, the call is judged at sysmon's next
  // tick, for the count of blocked threads.
  if (sysmon.napping() && sysmon.verdict_awaited(*worker)) [[unlikely]]
    sysmon.alert();
  return worker;
}

namespace {

// If a timer is due, the fiber yields at its next checkpoint, the hook's
// own, as if preempted, and the worker fires the timer first.
void yield_if_a_timer_is_due(Worker& worker) noexcept {
  SchedulerCore& core = worker.core();
  if (core.config().preemption && core.timers().due()) worker.request_preempt(worker.switch_tick());
}

}  // namespace

bool exit_blocking_call(Worker* worker) noexcept {
  if (worker == nullptr) return false;
  const std::uint32_t call = worker->end_blocking_call();
  if (!worker->stuck()) [[likely]] {
    // Short calls one after another (a file written block by block) never
    // switch, and while every worker runs fibers only their switches fire
    // timers: every kTimerLookCalls-th call asks whether one is due, which
    // otherwise waited for sysmon's backstop, a slice late (a 1 ms ticker
    // beside 4 fibers writing files: docs/benchmarks.md, "Timers between
    // short calls"). Not every call: a clock read is a twentieth of a
    // cached pread.
    if (worker->count_call_for_timers()) [[unlikely]]
      yield_if_a_timer_is_due(*worker);
    return false;
  }
  // Sysmon judged the call blocked and handed the worker's queue off (Go's
  // retake of a P in a system call), or judged that the fiber, its short
  // calls coming and going, held the worker too long. The verdict is
  // cleared here, or each call returning before sysmon's next look would
  // act on it again; only the first kind is reported as this call's (a
  // cached read then takes the slow way again, hooks_files.cpp: not after a
  // hold-up, which says nothing of the cache). If a timer is due, the fiber
  // yields (above): while every worker runs fibers, timers fire only at
  // their switches (sched/timers.h), so a fiber going from one long call to
  // the next kept them waiting for a slice. Not whenever fibers wait:
  // sysmon hands those to other threads, and a fiber that always yielded
  // here made every call of a busy worker wait for a hand-off
  // (docs/benchmarks.md, "Checkpoints at file calls").
  worker->set_stuck(false);
  yield_if_a_timer_is_due(*worker);
  return worker->judged_call() == call;
}

}  // namespace weft::detail
