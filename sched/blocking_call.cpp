#include "blocking_call.h"

#include "scheduler_core.h"
#include "worker.h"

namespace weft::detail {

Worker* enter_blocking_call() noexcept {
  Worker* worker = current_worker();
  if (worker == nullptr || !worker->begin_blocking_call()) return nullptr;
  // A sysmon asleep for longer than the grace would see the call late:
  // wake it (rarely: it stays alert for a while after an announcement).
  Sysmon& sysmon = worker->core().sysmon();
  if (sysmon.napping()) [[unlikely]]
    sysmon.alert();
  return worker;
}

bool exit_blocking_call(Worker* worker) noexcept {
  if (worker == nullptr) return false;
  worker->end_blocking_call();
  // Sysmon judged the call blocked and handed the worker off (Go's retake of
  // a P in a system call): the fiber yields at its next checkpoint, the
  // hook's own, as if preempted (Go's exitsyscall queues a goroutine whose P
  // was taken). Otherwise a fiber making one long call after another kept
  // its worker between them, and a timer's fiber waited for a slice.
  // Once per verdict: the flag is sysmon's, cleared at its next look after
  // the switch, and each call returning before that look would otherwise
  // yield again (two fibers making short calls swapped at every one).
  if (worker->stuck() && worker->core().config().preemption) [[unlikely]] {
    worker->set_stuck(false);
    worker->request_preempt(worker->switch_tick());
    return true;
  }
  return false;
}

}  // namespace weft::detail
