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

// Keeps weft-dump's server running while the pool lives, also in a process
// with no scheduler (thread pools only). Declared here and defined by
// introspect/dump_server.cpp, as sched/services.h's calls are, so that the
// include arrows keep pointing down. False if the server is off (WEFT_DUMP=0)
// or could not start.
bool attach_pool_services(const std::string& pool_name);
void detach_pool_services() noexcept;

// A pool's membership: PoolCore's last member, so the pool leaves the list
// before any of its parts is destroyed.
class PoolRegistration {
 public:
  PoolRegistration(PoolCore& pool, const std::string& name) : pool_(pool) {
    register_pool(pool_);
    served_ = attach_pool_services(name);
  }
  PoolRegistration(const PoolRegistration&) = delete;
  PoolRegistration& operator=(const PoolRegistration&) = delete;
  ~PoolRegistration() {
    if (served_) detach_pool_services();
    unregister_pool(pool_);
  }

 private:
  PoolCore& pool_;
  bool served_ = false;
};

}  // namespace weft::detail
