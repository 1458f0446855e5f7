// FiberRegistry: every live fiber of a scheduler, so that weft-dump can list
// them. Sharded (one shard per worker, one for plain threads) so that
// spawns on different workers do not contend on one lock.
#pragma once

#include <weft/detail/spin_lock.h>

#include <cstddef>
#include <memory>

#include "../runtime/fiber_control.h"

namespace weft::detail {

class FiberRegistry {
 public:
  explicit FiberRegistry(unsigned shards) : shards_(std::make_unique<Shard[]>(shards)), shard_count_(shards) {}

  void add(FiberControl* fiber, unsigned shard) noexcept;
  void remove(FiberControl* fiber) noexcept;
  std::size_t size() const noexcept;

  // Calls fn(FiberControl&) for every live fiber, one shard locked at a time.
  template <class Fn>
  void for_each(Fn&& fn) const {
    for_each(fn, [] {});
  }
  // The same, and end_of_shard() before each shard's lock is released: the
  // fibers that fn saw cannot be freed until it returns.
  template <class Fn, class EndOfShard>
  void for_each(Fn&& fn, EndOfShard&& end_of_shard) const {
    for (unsigned i = 0; i < shard_count_; ++i) {
      std::lock_guard guard(shards_[i].lock);
      for (FiberControl* f = shards_[i].head; f != nullptr; f = f->registry_next) fn(*f);
      end_of_shard();
    }
  }

 private:
  friend struct GdbLayoutAccess;  // introspect/gdb_layout.cpp: where gdb finds the shards
  // A cache line each: every worker adds and removes in its own.
  struct alignas(64) Shard {
    mutable SpinLock lock;
    FiberControl* head = nullptr;
    std::size_t count = 0;
  };
  std::unique_ptr<Shard[]> shards_;
  unsigned shard_count_;
};

}  // namespace weft::detail
