#include "glibc_mutex_pins.h"

#include <weft/fiber_local.h>

#include <cerrno>
#include <cstdint>

#include "../sched/current.h"
#include "hook_support.h"

namespace weft::detail::locks {
namespace {

// The calling fiber's count of pins for glibc mutexes, kept in a fiber-
// local slot as an integer (no allocation but the slot table's own).
const std::size_t held_slot = allocate_fiber_local_slot();

// The slot's destructor, run by the fiber as it ends: a fiber that ends
// holding such a mutex gives its pins back, so that its worker's count of
// pinned fibers stays true (the mutex stays held, as a thread's would).
void unpin_at_end(void* value) noexcept {
  FiberControl* fiber = current_fiber();
  for (auto held = reinterpret_cast<std::uintptr_t>(value); held != 0 && fiber != nullptr; --held)
    unpin_current(*fiber);
}

}  // namespace

int pin_if_held(int result) noexcept {
  if (result != 0 && result != EOWNERDEAD) return result;
  FiberControl* fiber = pinnable_fiber();
  if (fiber == nullptr) return result;
  try {
    const auto held = reinterpret_cast<std::uintptr_t>(fiber_local_get(held_slot));
    fiber_local_set(held_slot, reinterpret_cast<void*>(held + 1), &unpin_at_end);
  } catch (...) {
    return result;  // no room for the count (std::bad_alloc): left unpinned, as before
  }
  pin_current(*fiber);
  return result;
}

int unpin_if_released(int result) noexcept {
  if (result != 0) return result;
  FiberControl* fiber = pinnable_fiber();
  if (fiber == nullptr) return result;
  const auto held = reinterpret_cast<std::uintptr_t>(fiber_local_get(held_slot));
  if (held == 0) return result;  // another fiber's lock, released on the thread it is pinned to
  fiber_local_set(held_slot, reinterpret_cast<void*>(held - 1), &unpin_at_end);  // within the table: no allocation
  unpin_current(*fiber);
  return result;
}

}  // namespace weft::detail::locks
