// SchedulerServices: what layers above sched/ do with every scheduler of the
// process (introspect/ lists it for gdb and serves it to weft-dump). sched/
// owns this interface and calls it; the composition root (compose/) hands
// the core an implementation, so the arrows point down at link time too.
#pragma once

namespace weft::detail {

class SchedulerCore;

class SchedulerServices {
 public:
  // Called once the core is fully built. True if the services took it:
  // then detach() follows.
  virtual bool attach(SchedulerCore& core) = 0;
  // Called before any part of the core is destroyed; waits for a dump that
  // is reading it.
  virtual void detach(SchedulerCore& core) noexcept = 0;

 protected:
  ~SchedulerServices() = default;
};

// A scheduler's membership in the services: the SchedulerCore owns one as
// its last member, so that it is detached before anything else dies.
class ServiceRegistration {
 public:
  ServiceRegistration() noexcept = default;
  ServiceRegistration(const ServiceRegistration&) = delete;
  ServiceRegistration& operator=(const ServiceRegistration&) = delete;
  ~ServiceRegistration() {
    if (core_ != nullptr) services_->detach(*core_);
  }

  // `services` may be null: none.
  void attach(SchedulerServices* services, SchedulerCore& core) {
    if (services != nullptr && services->attach(core)) {
      services_ = services;
      core_ = &core;
    }
  }

 private:
  SchedulerServices* services_ = nullptr;
  SchedulerCore* core_ = nullptr;
};

}  // namespace weft::detail
