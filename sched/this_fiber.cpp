#include <weft/detail/park.h>
#include <weft/this_fiber.h>

#include <stdexcept>
#include <thread>

#include "worker.h"

namespace weft::this_fiber {
namespace {

detail::FiberControl& require_fiber(const char* what) {
  detail::FiberControl* fiber = detail::current_fiber();
  if (fiber == nullptr)
    throw std::logic_error(std::string(what) + " must be called from a weft fiber, not from a plain thread");
  return *fiber;
}

}  // namespace

bool is_fiber() noexcept { return detail::current_fiber() != nullptr; }

void yield() {
  detail::Worker* worker = detail::current_worker();
  if (worker == nullptr || worker->current() == nullptr) {
    std::this_thread::yield();
    return;
  }
  worker->yield_current();
}

void sleep_until(std::chrono::steady_clock::time_point deadline) {
  if (is_fiber() && deadline <= std::chrono::steady_clock::now()) {
    detail::checkpoint();  // no sleep, but still a weft call
    return;
  }
  detail::sleep_parked_until(deadline);
}

std::uint64_t id() noexcept {
  detail::FiberControl* fiber = detail::current_fiber();
  return fiber != nullptr ? fiber->id : 0;
}

std::string name() { return require_fiber("weft::this_fiber::name()").name(); }

void set_name(std::string_view name) { require_fiber("weft::this_fiber::set_name()").set_name(name); }

PinGuard pin() {
  detail::FiberControl& fiber = require_fiber("weft::this_fiber::pin()");
  // The first pin binds the fiber to this worker: a spare must not retire
  // under it (sched/worker.h).
  if (fiber.pin_count.fetch_add(1, std::memory_order_relaxed) == 0) detail::current_worker()->count_pin(1);
  return PinGuard(&fiber);
}

PinGuard::~PinGuard() {
  if (fiber_ == nullptr) return;
  // Unpinned on the worker it was pinned on: it could not move meanwhile.
  if (static_cast<detail::FiberControl*>(fiber_)->pin_count.fetch_sub(1, std::memory_order_relaxed) == 1)
    if (detail::Worker* worker = detail::current_worker()) worker->count_pin(-1);
}

}  // namespace weft::this_fiber

namespace weft::detail {

void sleep_parked_until(std::chrono::steady_clock::time_point deadline) {
  if (!this_fiber::is_fiber()) {
    std::this_thread::sleep_until(deadline);
    return;
  }
  park_until(deadline, {"weft::this_fiber", nullptr, "sleep"});
}

}  // namespace weft::detail
