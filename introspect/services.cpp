// What sched/services.h asks of introspect/: every scheduler is listed for
// gdb (always: a core is read when nothing else can be) and for the dump
// server (unless Config::dump or WEFT_DUMP turns it off).
#include "../sched/services.h"

#include "../sched/scheduler_core.h"
#include "blocking_tracer.h"
#include "dump_server.h"
#include "gdb_layout.h"

namespace weft::detail {

bool attach_services(SchedulerCore& core) {
  list_for_gdb(core);
  if (core.config().dump && dump_enabled_by_environment()) attach_to_dump_server(core);
  trace_blocking_of(core);
  return true;
}

void detach_services(SchedulerCore& core) noexcept {
  stop_tracing_blocking_of(core);
  detach_from_dump_server(core);
  unlist_for_gdb(core);
}

}  // namespace weft::detail
