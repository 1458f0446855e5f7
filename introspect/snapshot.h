// A scheduler's snapshot (include/weft/snapshot.h): every worker and live
// fiber, taken from any thread without the workers' help.
#pragma once

#include <weft/snapshot.h>

namespace weft::detail {

class SchedulerCore;

// Without `with_fibers`, only the fibers' count. Calls on one scheduler are
// serialized only where they read its scheduling latency (each call reports
// the interval since the previous one).
SchedulerSnapshot snapshot_scheduler(SchedulerCore& core, bool with_fibers = true);

}  // namespace weft::detail
