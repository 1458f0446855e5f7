#include <weft/fiber_local.h>

#include <atomic>
#include <stdexcept>

#include "fiber_control.h"

namespace weft::detail {
namespace {

std::atomic<std::size_t> next_slot{0};

FiberControl& require_fiber() {
  FiberControl* fiber = own_fiber();
  if (fiber == nullptr) throw std::logic_error("weft::FiberLocal accessed from a plain thread, not a weft fiber");
  return *fiber;
}

}  // namespace

std::size_t allocate_fiber_local_slot() noexcept { return next_slot.fetch_add(1, std::memory_order_relaxed); }

void* fiber_local_get(std::size_t slot) {
  FiberControl& fiber = require_fiber();
  return slot < fiber.locals.size() ? fiber.locals[slot].value : nullptr;
}

void fiber_local_set(std::size_t slot, void* value, void (*destroy)(void*)) {
  FiberControl& fiber = require_fiber();
  if (slot >= fiber.locals.size()) fiber.locals.resize(slot + 1);
  fiber.locals[slot] = FiberLocalValue{value, destroy};
}

}  // namespace weft::detail
