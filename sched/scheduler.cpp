#include "scheduler.h"

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

Fiber launch_fiber(SchedulerCore& core, FiberControl* fiber, void (*body)(void*)) noexcept {
  Fiber handle = FiberAccess::adopt(fiber);
  core.launch_fiber(fiber, body);
  return handle;
}

}  // namespace detail

Scheduler::Scheduler(Config config) : core_(std::make_unique<detail::SchedulerCore>(std::move(config))) {}

Scheduler::~Scheduler() { core_->shutdown(); }

void Scheduler::shutdown() { core_->shutdown(); }

SchedulerSnapshot Scheduler::snapshot() const {
  SchedulerSnapshot snap;
  snap.name = core_->config().name;
  for (const auto& worker : core_->workers()) {
    WorkerSnapshot w;
    w.index = worker->index();
    w.os_thread_id = worker->os_thread_id();
    w.state = detail::to_string(worker->state());
    w.queue_length = worker->queue_length();
    const auto& c = worker->counters();
    w.fibers_run = c.fibers_run.load(std::memory_order_relaxed);
    w.steals = c.steals.load(std::memory_order_relaxed);
    w.failed_steals = c.failed_steals.load(std::memory_order_relaxed);
    w.parks = c.parks.load(std::memory_order_relaxed);
    w.preempts = c.preempts.load(std::memory_order_relaxed);
    snap.workers.push_back(w);
  }
  core_->registry().for_each([&](const detail::FiberControl& fiber) {
    FiberSnapshot f = detail::take_snapshot(fiber);
    if (const detail::Worker* worker = fiber.worker.load(std::memory_order_relaxed))
      f.worker = static_cast<int>(worker->index());
    snap.fibers.push_back(std::move(f));
  });
  return snap;
}

const Config& Scheduler::config() const noexcept { return core_->config(); }

unsigned Scheduler::worker_count() const noexcept { return static_cast<unsigned>(core_->config().workers); }

}  // namespace weft
