#include "services.h"

#include "../sched/scheduler_core.h"
#include "blocking_tracer.h"
#include "dump_server.h"
#include "gdb_layout.h"

namespace weft::detail {
namespace {

// Stateless: what they register with (gdb's list, the dump server's) is
// process-wide already (introspect/dump_server.h says why).
class ProcessSchedulerServices final : public SchedulerServices {
 public:
  bool attach(SchedulerCore& core) override {
    list_for_gdb(core);
    if (core.config().dump && dump_enabled_by_environment()) attach_to_dump_server(core);
    trace_blocking_of(core);
    return true;
  }
  void detach(SchedulerCore& core) noexcept override {
    stop_tracing_blocking_of(core);
    detach_from_dump_server(core);
    unlist_for_gdb(core);
  }
};

class ProcessPoolServices final : public PoolServices {
 public:
  bool attach(const std::string& pool_name) override { return attach_pool_services(pool_name); }
  void detach() noexcept override { detach_pool_services(); }
};

constinit ProcessSchedulerServices process_scheduler_services;
constinit ProcessPoolServices process_pool_services;

}  // namespace

SchedulerServices& scheduler_services() noexcept { return process_scheduler_services; }
PoolServices& pool_services() noexcept { return process_pool_services; }

}  // namespace weft::detail
