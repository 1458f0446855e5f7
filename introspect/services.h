// introspect/'s side of sched/services.h and pool/pool_registry.h: the
// process's services, which the composition root (compose/) hands every
// scheduler and pool it builds. A scheduler is listed for gdb (always: a
// core is read when nothing else can be) and for the dump server (unless
// Config::dump or WEFT_DUMP turns it off); a pool keeps the dump server
// running while it lives.
#pragma once

#include "../pool/pool_registry.h"
#include "../sched/services.h"

namespace weft::detail {

SchedulerServices& scheduler_services() noexcept;
PoolServices& pool_services() noexcept;

}  // namespace weft::detail
