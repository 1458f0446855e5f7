#include "fiber_control.h"

#include <time.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "fast_clock.h"

namespace weft::detail {
namespace {

[[gnu::tls_model("initial-exec")]] thread_local const std::atomic<FiberControl*>* tls_running_fiber = nullptr;
// own_fiber()'s answer in a fork child, where tls_running_fiber is unbound.
[[gnu::tls_model("initial-exec")]] thread_local FiberControl* tls_forked_fiber = nullptr;

// Writes "fiber-<id>" without allocating (also used from a signal handler).
void format_default_name(std::uint64_t id, char* out, std::size_t size) noexcept {
  char digits[24];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + id % 10);
    id /= 10;
  } while (id != 0);
  const char prefix[] = "fiber-";
  std::size_t pos = 0;
  for (std::size_t i = 0; prefix[i] != '\0' && pos + 1 < size; ++i) out[pos++] = prefix[i];
  while (n > 0 && pos + 1 < size) out[pos++] = digits[--n];
  out[pos] = '\0';
}

}  // namespace

// Not inlined, and with a compiler barrier: a fiber can resume on another
// thread, and the compiler must not reuse a TLS address computed before.
[[gnu::noinline]] FiberControl* current_fiber() noexcept {
  asm volatile("" ::: "memory");
  const std::atomic<FiberControl*>* cell = tls_running_fiber;
  return cell != nullptr ? cell->load(std::memory_order_relaxed) : nullptr;
}

FiberControl* own_fiber() noexcept {
  FiberControl* fiber = current_fiber();
  return fiber != nullptr ? fiber : tls_forked_fiber;
}

void keep_identity_in_forked_child(FiberControl* fiber) noexcept { tls_forked_fiber = fiber; }

void bind_running_fiber_cell(const std::atomic<FiberControl*>* cell) noexcept { tls_running_fiber = cell; }

const char* to_string(FiberState state) noexcept {
  switch (state) {
    case FiberState::runnable:
      return "runnable";
    case FiberState::running:
      return "running";
    case FiberState::parked:
      return "parked";
    case FiberState::done:
      return "done";
  }
  return "unknown";
}

std::string FiberControl::name() const {
  char buffer[sizeof(name_)];
  std::lock_guard guard(name_lock_);
  copy_name(buffer, sizeof(buffer));
  return buffer;
}

void FiberControl::set_name(std::string_view name) noexcept {
  std::lock_guard guard(name_lock_);
  const std::size_t n = std::min(name.size(), sizeof(name_) - 1);
  std::memcpy(name_, name.data(), n);
  name_[n] = '\0';
}

void FiberControl::copy_name(char* out, std::size_t size) const noexcept {
  if (size == 0) return;
  // No lock: the signal handler reads its own fiber's name, which only that
  // fiber writes. Other readers take the lock.
  if (name_[0] == '\0') {
    format_default_name(id, out, size);
    return;
  }
  const std::size_t n = std::min(std::strlen(name_), size - 1);
  std::memcpy(out, name_, n);
  out[n] = '\0';
}

void FiberControl::record_wait(const WaitSite& site) noexcept {
  wait_kind.store(site.kind, std::memory_order_relaxed);
  wait_object.store(site.object, std::memory_order_relaxed);
  wait_operation.store(site.operation, std::memory_order_relaxed);
  // On every park, twice per PingPong round trip: the fast clock, whose
  // microseconds the coarse clock's 4 ms ticks did not have.
  parked_since_ns.store(fast_now_ns(), std::memory_order_relaxed);
}

void FiberControl::clear_wait() noexcept {
  wait_kind.store(nullptr, std::memory_order_relaxed);
  parked_since_ns.store(0, std::memory_order_relaxed);
}

FiberCounts read_counts(const FiberControl& fiber) noexcept {
  FiberCounts counts;
  counts.active = fiber.counters.active.load(std::memory_order_relaxed);
  counts.steal = fiber.counters.steal.load(std::memory_order_relaxed);
  counts.steal_fail = fiber.counters.steal_fail.load(std::memory_order_relaxed);
  counts.preempt = fiber.counters.preempt.load(std::memory_order_relaxed);
  counts.park = fiber.counters.park.load(std::memory_order_relaxed);
  return counts;
}

FiberSnapshot take_snapshot(const FiberControl& fiber) {
  FiberSnapshot snap;
  snap.id = fiber.id;
  snap.address = &fiber;
  snap.name = fiber.name();
  const FiberState state = fiber.state.load(std::memory_order_relaxed);
  snap.state = to_string(state);
  snap.pinned = fiber.pin_count.load(std::memory_order_relaxed) != 0;
  snap.counts = read_counts(fiber);
  const std::int64_t now = fast_now_ns();
  snap.runnable_total_ms = static_cast<double>(fiber.counters.runnable_ns.load(std::memory_order_relaxed)) / 1e6;
  if (state == FiberState::runnable) {
    const std::int64_t since = fiber.runnable_since_ns.load(std::memory_order_relaxed);
    if (since != 0 && now > since) snap.runnable_ms = static_cast<double>(now - since) / 1e6;
  }
  if (const char* kind = fiber.wait_kind.load(std::memory_order_relaxed)) {
    snap.wait_kind = kind;
    snap.wait_object = fiber.wait_object.load(std::memory_order_relaxed);
    if (const char* op = fiber.wait_operation.load(std::memory_order_relaxed)) snap.wait_operation = op;
    const std::int64_t since = fiber.parked_since_ns.load(std::memory_order_relaxed);
    if (since != 0 && now > since) snap.waiting_ms = static_cast<double>(now - since) / 1e6;
  }
  // park() clears the wait only once the fiber runs again, so a runnable
  // fiber that still has one was woken and waits for a worker.
  if (state == FiberState::parked)
    snap.park_state = -1;
  else if (state == FiberState::runnable && !snap.wait_kind.empty())
    snap.park_state = 1;
  return snap;
}

}  // namespace weft::detail
