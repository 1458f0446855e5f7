#include "pool_registry.h"

#include <algorithm>
#include <mutex>

#include "pool_core.h"

namespace weft::detail {

namespace {

struct Registry {
  std::mutex lock;  // held while a snapshot reads the pools
  std::vector<PoolCore*> pools;
};

Registry& registry() {
  // Never destroyed: pools that are static objects unregister from their
  // destructors at exit, possibly after a function-local static's would
  // have run.
  static Registry* const instance = new Registry;
  return *instance;
}

}  // namespace

void register_pool(PoolCore& pool) {
  Registry& r = registry();
  std::lock_guard guard(r.lock);
  r.pools.push_back(&pool);
}

void unregister_pool(PoolCore& pool) noexcept {
  Registry& r = registry();
  std::lock_guard guard(r.lock);
  r.pools.erase(std::remove(r.pools.begin(), r.pools.end(), &pool), r.pools.end());
}

std::vector<PoolSnapshot> snapshot_pools() {
  Registry& r = registry();
  std::lock_guard guard(r.lock);
  std::vector<PoolSnapshot> out;
  out.reserve(r.pools.size());
  for (const PoolCore* pool : r.pools) out.push_back(pool->snapshot());
  return out;
}

}  // namespace weft::detail
