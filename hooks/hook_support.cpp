#include "hook_support.h"

#include <netdb.h>
#include <pthread.h>
#include <weft/this_fiber.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <system_error>

#include "../runtime/environment_switch.h"
#include "../sched/current.h"
#include "../sched/worker.h"
#include "fd_table.h"
#include "real_calls.h"
#include "tsan.h"

namespace weft::detail {
namespace {

// -1 until read; then 0 or 1. Computed lazily: a hook may run before any
// constructor.
std::atomic<int> enabled_state{-1};

}  // namespace

bool hooks_enabled() noexcept {
  int state = enabled_state.load(std::memory_order_relaxed);
  if (__builtin_expect(state < 0, 0)) {
    state = environment_says_off("WEFT_HOOKS") ? 0 : 1;
    enabled_state.store(state, std::memory_order_relaxed);
  }
  return state == 1;
}

[[gnu::visibility("hidden")]] constinit std::atomic<int> lock_hooks_state{-1};

bool read_lock_hooks_switch() noexcept {
  const int state = hooks_enabled() && !environment_says_off("WEFT_HOOK_LOCKS") ? 1 : 0;
  lock_hooks_state.store(state, std::memory_order_relaxed);
  return state == 1;
}

WEFT_TSAN_SWITCHES ParkScope::ParkScope() {
  // this_fiber::pin()'s bookkeeping, with the pins counted as the hooks'.
  FiberControl& fiber = *current_fiber();
  releases_ = fiber.pin_releases;
  host_error_ = *h_errno_here();
  ++fiber.releasable_pins;
  pin_current(fiber);
#ifdef WEFT_HOOKS_TSAN
  // The fiber's context resumes as whichever TSan fiber it names: the
  // park's own until the destructor, which switches back (flags 0: with
  // synchronisation, both ways).
  // The park's TSan fiber is kept with the fiber's stack and reused.
  ExecutionContext& context = fiber.context;
  own_tsan_fiber_ = context.tsan_fiber;
  park_tsan_fiber_ = fiber.stack.park_sanitizer_fiber();
  context.tsan_fiber = park_tsan_fiber_;
  __tsan_switch_to_fiber(park_tsan_fiber_, 0);
#endif
}

WEFT_TSAN_SWITCHES ParkScope::~ParkScope() {
#ifdef WEFT_HOOKS_TSAN
  __tsan_switch_to_fiber(own_tsan_fiber_, 0);
  current_fiber()->context.tsan_fiber = own_tsan_fiber_;
#endif
  FiberControl& fiber = *current_fiber();
  if (fiber.pin_releases != releases_) return;  // released by sysmon: nothing of ours is left to undo
  --fiber.releasable_pins;
  unpin_current(fiber);
  *h_errno_here() = host_error_;
}

[[gnu::noinline]] int* h_errno_here() noexcept {
  asm volatile("" ::: "memory");
  return &h_errno;
}

FiberControl* pinnable_fiber() noexcept {
  FiberControl* fiber = current_fiber();
  return fiber == nullptr || in_vfork_child() ? nullptr : fiber;
}

ThreadPin::ThreadPin() noexcept : fiber_(pinnable_fiber()) {
  if (fiber_ != nullptr) pin_current(*fiber_);
}

ThreadPin::~ThreadPin() {
  if (fiber_ != nullptr) unpin_current(*fiber_);
}

[[gnu::noinline]] ErrnoHome::ErrnoHome() noexcept
    : fiber_(current_fiber()), home_(&errno), releases_(fiber_->pin_releases) {}

bool ErrnoHome::may_write_home() const noexcept {
  // Released once: by the worker whose thread the call was made on (a
  // pinned fiber runs nowhere else until released). Released again, by
  // the worker it moved to: that release's record says nothing of the
  // first thread, and the write is left out.
  const std::uint32_t releases = fiber_->pin_releases - releases_;
  return releases == 0 || (releases == 1 && fiber_->released_from->still_in_the_call_released_behind(*fiber_));
}

// The write to errno on the thread the call was made on, from the thread
// the released fiber runs on: ordered with that thread's own writes by
// its sleep in the call (may_write_home), which ThreadSanitizer cannot
// see, so it is unseen by it.
WEFT_UNSEEN_BY_TSAN static void write_errno_at_home(int* home, int value) noexcept { *home = value; }

[[gnu::noinline]] ErrnoHome::~ErrnoHome() {
  if (&errno != home_ && may_write_home()) write_errno_at_home(home_, errno);
}

void CheckpointOnReturn::hook_checkpoint_slow() noexcept {
  // Only a fiber whose worker was asked (the count is process-wide), and
  // not where the hooks pass everything through.
  if (!parking_enabled()) return;
  if (!preempt_requested_here()) return;
  // The hooks' pin, not this_fiber::pin()'s: if the worker's thread blocks
  // in the kernel while this fiber waits in its queues, sysmon may release
  // it as it releases a parked hook (Worker::release_hook_pinned), and then
  // ErrnoHome takes errno to the thread the call was made on.
  const ErrnoHome home;
  const int saved = errno_value();
  {
    const ParkScope pin;
    checkpoint_slow();
  }
  set_errno(saved);
}

int wait_for_fd(int fd, FdDirection direction, Clock::time_point deadline, const FdWaitMark* mark,
                std::uint32_t* harvested, FdRecord* record) noexcept {
  try {
    const ParkScope park;
    const FdWaitResult result = record != nullptr ? wait_fd(fd, *record, direction, deadline, mark, harvested)
                                                  : wait_fd(fd, direction, deadline, mark, harvested);
    switch (result) {
      case FdWaitResult::ready:
        return 0;
      case FdWaitResult::timed_out:
        return EAGAIN;
      case FdWaitResult::closed:
        return EBADF;
    }
    return 0;
  } catch (const std::system_error& error) {
    return error.code().value() != 0 ? error.code().value() : EIO;
  } catch (...) {
    return ENOMEM;  // std::bad_alloc registering the fd
  }
}

void sleep_parked(Clock::time_point deadline) noexcept {
  try {
    const ParkScope park;
    sleep_parked_until(deadline);
  } catch (...) {
    // Parking allocates nothing that can fail for a timer; nothing to report.
  }
}

}  // namespace weft::detail
