// The process's live pools, for weft-dump (introspect/ reads this list; the
// include arrow points down). Process-wide for the reason the dump server's
// list of schedulers is: what it models, "this process's pools", is itself
// process-wide; it holds only registrations, so pools stay plain objects.
#pragma once

#include <weft/snapshot.h>

#include <vector>

namespace weft::detail {

class PoolCore;

void register_pool(PoolCore& pool);
// Waits for a snapshot that is reading the pool.
void unregister_pool(PoolCore& pool) noexcept;
// Every live pool, oldest first.
std::vector<PoolSnapshot> snapshot_pools();

// A pool's membership: PoolCore's last member, so the pool leaves the list
// before any of its parts is destroyed.
class PoolRegistration {
 public:
  explicit PoolRegistration(PoolCore& pool) : pool_(pool) { register_pool(pool_); }
  PoolRegistration(const PoolRegistration&) = delete;
  PoolRegistration& operator=(const PoolRegistration&) = delete;
  ~PoolRegistration() { unregister_pool(pool_); }

 private:
  PoolCore& pool_;
};

}  // namespace weft::detail
