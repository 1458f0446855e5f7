#include "fiber_registry.h"

#include <mutex>

namespace weft::detail {

void FiberRegistry::add(FiberControl* fiber, unsigned shard) noexcept {
  Shard& s = shards_[shard % shard_count_];
  fiber->registry_shard = shard % shard_count_;
  std::lock_guard guard(s.lock);
  fiber->registry_prev = nullptr;
  fiber->registry_next = s.head;
  if (s.head != nullptr) s.head->registry_prev = fiber;
  s.head = fiber;
  ++s.count;
}

void FiberRegistry::remove(FiberControl* fiber) noexcept {
  Shard& s = shards_[fiber->registry_shard];
  std::lock_guard guard(s.lock);
  if (fiber->registry_prev != nullptr)
    fiber->registry_prev->registry_next = fiber->registry_next;
  else
    s.head = fiber->registry_next;
  if (fiber->registry_next != nullptr) fiber->registry_next->registry_prev = fiber->registry_prev;
  fiber->registry_prev = fiber->registry_next = nullptr;
  --s.count;
}

std::size_t FiberRegistry::size() const noexcept {
  std::size_t total = 0;
  for (unsigned i = 0; i < shard_count_; ++i) {
    std::lock_guard guard(shards_[i].lock);
    total += shards_[i].count;
  }
  return total;
}

}  // namespace weft::detail
