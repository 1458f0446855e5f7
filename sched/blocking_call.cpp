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

void exit_blocking_call(Worker* worker) noexcept {
  if (worker != nullptr) worker->end_blocking_call();
}

}  // namespace weft::detail
