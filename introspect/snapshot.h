// A scheduler's snapshot (include/weft/snapshot.h): every worker and live
// fiber, taken from any thread without the workers' help.
#pragma once

#include <weft/snapshot.h>

#include <cstdint>
#include <unordered_set>

#include "deadlocks.h"

namespace weft::detail {

class SchedulerCore;

// Without `with_fibers`, only the fibers' count. Calls on one scheduler are
// serialized only where they read its scheduling latency (each call reports
// the interval since the previous one).
SchedulerSnapshot snapshot_scheduler(SchedulerCore& core, bool with_fibers = true);

// Adds to `out` the waits of those fibers of `core` named in `members`
// that are parked now: a deadlock's confirmation (introspect/deadlocks.h).
void read_waits(SchedulerCore& core, const std::unordered_set<std::uint64_t>& members, FiberWaits& out);

}  // namespace weft::detail
