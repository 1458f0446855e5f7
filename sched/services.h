// Services that live above the scheduler and want to know every scheduler of
// the process: today introspect/'s dump server. sched/ declares these calls
// and makes them; introspect/ defines them, so that the include arrows keep
// pointing down (runtime <- sched <- sync, io <- introspect).
#pragma once

namespace weft::detail {

class SchedulerCore;

// Called once the core is fully built. True if a service registered it.
bool attach_services(SchedulerCore& core);
// Called before any part of the core is destroyed; waits for a dump that is
// reading it.
void detach_services(SchedulerCore& core) noexcept;

// A scheduler's membership in the services: the SchedulerCore owns one as
// its last member, so that it is detached before anything else dies.
class ServiceRegistration {
 public:
  ServiceRegistration() noexcept = default;
  ServiceRegistration(const ServiceRegistration&) = delete;
  ServiceRegistration& operator=(const ServiceRegistration&) = delete;
  ~ServiceRegistration() {
    if (core_ != nullptr) detach_services(*core_);
  }

  void attach(SchedulerCore& core) {
    if (attach_services(core)) core_ = &core;
  }

 private:
  SchedulerCore* core_ = nullptr;
};

}  // namespace weft::detail
