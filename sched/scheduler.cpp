// weft::Scheduler, the members that need only sched/: its constructor and
// snapshot() put the layers together and live above them, in
// compose/scheduler.cpp.
#include <weft/scheduler.h>

#include "scheduler_core.h"
#include "worker.h"

namespace weft {
namespace detail {

struct FiberAccess {
  static Fiber adopt(FiberControl* fiber) noexcept { return Fiber(fiber); }
};

FiberControl* prepare_fiber(SchedulerCore& core, const SpawnOptions& options, std::size_t size, std::size_t align) {
  return core.prepare_fiber(options, size, align);
}

void abandon_fiber(SchedulerCore& core, FiberControl* fiber) noexcept { core.abandon_fiber(fiber); }

void* fiber_callable(FiberControl* fiber) noexcept { return fiber->callable; }

Fiber launch_fiber(SchedulerCore& core, FiberControl* fiber, FiberBody body) noexcept {
  Fiber handle = FiberAccess::adopt(fiber);
  core.launch_fiber(fiber, body);
  checkpoint();  // spawn is a preemption point (docs/sysmon.md)
  return handle;
}

}  // namespace detail

Scheduler::~Scheduler() {
  // In a forked child the core's threads are not there to join (a worker's
  // std::thread would terminate the child): the parent's scheduler is left
  // to the child's exit.
  if (core_->in_forked_child()) {
    (void)core_.release();
    return;
  }
  core_->shutdown();
}

void Scheduler::shutdown() { core_->shutdown(); }

const Config& Scheduler::config() const noexcept { return core_->config(); }

unsigned Scheduler::worker_count() const noexcept { return static_cast<unsigned>(core_->config().workers); }

}  // namespace weft
