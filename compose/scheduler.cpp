// The composition root: the members of weft::Scheduler that put the layers
// together. A SchedulerCore (sched/) is built from the parts of the layers
// above it, through interfaces sched/ owns (sched/scheduler_core.h,
// SchedulerParts): io/'s netpoller and blocking pool, introspect/'s
// services. The rest of weft::Scheduler, which needs only sched/, is in
// sched/scheduler.cpp. docs/architecture.md draws it.
#include <weft/scheduler.h>

#include "../hooks/excluded_callers.h"
#include "../introspect/services.h"
#include "../introspect/snapshot.h"
#include "../io/blocking_pool.h"
#include "../io/file_ring.h"
#include "../io/netpoller.h"
#include "../sched/scheduler_core.h"

namespace weft {
namespace {

detail::SchedulerParts full_runtime() {
  // Which loaded objects the hooks' lists name, before any fiber of this
  // scheduler runs: a contended lock then never has to look
  // (hooks/excluded_callers.h, lock_caller_excluded).
  detail::notice_loaded_objects();
  detail::SchedulerParts parts;
  parts.make_poller = &detail::make_idle_poller;
  parts.extensions = {&detail::BlockingPool::make, &detail::FileRing::make};
  parts.services = &detail::scheduler_services();
  return parts;
}

}  // namespace

Scheduler::Scheduler(Config config)
    : core_(std::make_unique<detail::SchedulerCore>(std::move(config), full_runtime())) {}

SchedulerSnapshot Scheduler::snapshot() const { return detail::snapshot_scheduler(*core_); }

}  // namespace weft
