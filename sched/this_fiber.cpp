#include <weft/detail/park.h>
#include <weft/detail/spin_lock.h>
#include <weft/this_fiber.h>

#include <stdexcept>

#include "../runtime/system_calls.h"
#include "worker.h"

namespace weft::this_fiber {
namespace {

detail::FiberControl& require_fiber(const char* what) {
  detail::FiberControl* fiber = detail::own_fiber();
  if (fiber == nullptr)
    throw std::logic_error(std::string(what) + " must be called from a weft fiber, not from a plain thread");
  return *fiber;
}

}  // namespace

bool is_fiber() noexcept { return detail::current_fiber() != nullptr; }

void yield() {
  detail::Worker* worker = detail::current_worker();
  if (worker == nullptr || worker->current() == nullptr) {
    detail::yield_thread();  // the kernel's: libweft binds sched_yield to its own hook
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
  detail::FiberControl* fiber = detail::own_fiber();
  return fiber != nullptr ? fiber->id : 0;
}

std::string name() { return require_fiber("weft::this_fiber::name()").name(); }

void set_name(std::string_view name) { require_fiber("weft::this_fiber::set_name()").set_name(name); }

PinGuard pin() {
  detail::FiberControl& fiber = require_fiber("weft::this_fiber::pin()");
  detail::pin_current(fiber);
  return PinGuard(&fiber);
}

PinGuard::~PinGuard() {
  if (fiber_ != nullptr) detail::unpin_current(*static_cast<detail::FiberControl*>(fiber_));
}

}  // namespace weft::this_fiber

namespace weft::detail {

// A load and a store, not a locked add: while the fiber runs it is
// pin_count's only writer (sysmon writes it only while the fiber waits in
// a queue, which orders the two: FiberControl::pin_count).
void pin_current(FiberControl& fiber) noexcept {
  const std::uint32_t pins = fiber.pin_count.load(std::memory_order_relaxed);
  fiber.pin_count.store(pins + 1, std::memory_order_relaxed);
  if (pins == 0)
    if (Worker* worker = current_worker()) worker->count_pin(1);  // none in a fork child
}

void unpin_current(FiberControl& fiber) noexcept {
  const std::uint32_t pins = fiber.pin_count.load(std::memory_order_relaxed);
  fiber.pin_count.store(pins - 1, std::memory_order_relaxed);
  if (pins == 1)
    if (Worker* worker = current_worker()) worker->count_pin(-1);
}

void sleep_parked_until(std::chrono::steady_clock::time_point deadline) {
  if (!this_fiber::is_fiber()) {
    // steady_clock is CLOCK_MONOTONIC. Not std::this_thread::sleep_until:
    // its nanosleep would be weft's own hook (runtime/system_calls.h).
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch()).count();
    sys::sleep_until({static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)});
    return;
  }
  park_until(deadline, {"weft::this_fiber", nullptr, "sleep"});
}

}  // namespace weft::detail
