// The process's live pools, for weft-dump (introspect/ reads this list; the
// include arrow points down). Process-wide for the reason the dump server's
// list of schedulers is: what it models, "this process's pools", is itself
// process-wide; it holds only registrations, so pools stay plain objects.
#pragma once

#include <weft/snapshot.h>

#include <string>
#include <vector>

namespace weft::detail {

class PoolCore;

void register_pool(PoolCore& pool);
// Waits for a snapshot that is reading the pool.
void unregister_pool(PoolCore& pool) noexcept;
// Every live pool, oldest first.
std::vector<PoolSnapshot> snapshot_pools();

// What layers above pool/ do with every pool (introspect/: keep weft-dump's
// server running while it lives, also in a process with no scheduler).
// pool/ owns this interface and calls it; the composition root (compose/)
// hands each pool an implementation, so the arrows point down at link time.
class PoolServices {
 public:
  // True if the services took the pool: then detach() follows.
  virtual bool attach(const std::string& pool_name) = 0;
  virtual void detach() noexcept = 0;

 protected:
  ~PoolServices() = default;
};

// A pool's membership: PoolCore's last member, so the pool leaves the list
// before any of its parts is destroyed.
class PoolRegistration {
 public:
  // `services` may be null: none.
  PoolRegistration(PoolCore& pool, const std::string& name, PoolServices* services) : pool_(pool) {
    register_pool(pool_);
    if (services != nullptr && services->attach(name)) services_ = services;
  }
  PoolRegistration(const PoolRegistration&) = delete;
  PoolRegistration& operator=(const PoolRegistration&) = delete;
  ~PoolRegistration() {
    if (services_ != nullptr) services_->detach();
    unregister_pool(pool_);
  }

 private:
  PoolCore& pool_;
  PoolServices* services_ = nullptr;
};

}  // namespace weft::detail
