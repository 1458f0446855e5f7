#include <weft/detail/park.h>

#include "scheduler_core.h"
#include "thread_wait.h"
#include "timers.h"
#include "worker.h"

namespace weft::detail {
namespace {

// Runs once the parked fiber has been switched out: no waker can resume it
// before it has left its worker, since wakers find it under the lock.
void unlock_after_switch_out(void* lock) { static_cast<SpinLock*>(lock)->unlock(); }

// What a fiber parking with a deadline leaves for the SwitchAction that runs
// once it has been switched out. It lives in the parked fiber's frame: read
// it before anything can resume that fiber.
struct TimedParkRequest {
  SpinLock* lock;
  TimerNode* timer;
  SchedulerCore* core;
};

void arm_after_switch_out(void* arg) {
  auto* request = static_cast<TimedParkRequest*>(arg);
  SpinLock* lock = request->lock;
  // Arm before unlocking: until the lock is released no waker can find the
  // waiter, so the fiber cannot resume (and pop the frame that holds the
  // node) before the node is armed. After arm(), the request may be gone.
  request->core->arm_timer(*request->timer);
  if (lock != nullptr) lock->unlock();
}

// Timer callback: the deadline passed; time the waiter out unless a waker
// got there first.
void time_out(TimerNode& node) {
  auto* waiter = static_cast<Waiter*>(node.context);
  FiberControl* fiber = waiter->fiber;
  std::uint32_t expected = Waiter::waiting;
  if (waiter->state.compare_exchange_strong(expected, Waiter::timed_out, std::memory_order_acq_rel))
    fiber->scheduler->ready(fiber);
}

WakeReason park_thread(Waiter& waiter, SpinLock* lock, const WaitSite& site, Clock::time_point deadline) {
  waiter.fiber = nullptr;
  const ThreadWaitScope recorded(site.kind, site.object, site.operation, &waiter.state);  // for weft-dump
  if (lock != nullptr) lock->unlock();
  for (;;) {
    const std::uint32_t state = waiter.state.load(std::memory_order_acquire);
    if (state != Waiter::waiting) return state == Waiter::notified ? WakeReason::notified : WakeReason::timed_out;
    if (deadline != no_deadline && Clock::now() >= deadline) {
      std::uint32_t expected = Waiter::waiting;
      if (waiter.state.compare_exchange_strong(expected, Waiter::timed_out, std::memory_order_acq_rel))
        return WakeReason::timed_out;
      continue;  // a waker won the race
    }
    futex_wait(waiter.state, Waiter::waiting, deadline);
  }
}

// park() with a deadline: the timer node lives in this frame, kept out of
// park() so that the common park without one does not build it.
[[gnu::noinline]] WakeReason park_timed(Worker* worker, FiberControl* self, Waiter& waiter, SpinLock* lock,
                                        Clock::time_point deadline) {
  TimerNode timer;
  timer.deadline = deadline;
  timer.fire = &time_out;
  timer.context = &waiter;
  TimedParkRequest request{lock, &timer, self->scheduler};
  worker->park_current(SwitchAction{&arm_after_switch_out, &request});
  // Resumed, perhaps on another worker: `worker` is stale from here on.
  if (waiter.state.load(std::memory_order_acquire) == Waiter::notified) {
    // The timer may be firing right now: cancel() waits for it, so the node
    // is not touched once we return.
    self->scheduler->timers().cancel(timer);
    return WakeReason::notified;
  }
  return WakeReason::timed_out;
}

}  // namespace

ThreadWait& this_thread_wait() noexcept {
  thread_local ThreadWait wait;
  return wait;
}

WakeReason park(Waiter& waiter, SpinLock* lock, const WaitSite& site, Clock::time_point deadline) {
  waiter.may_time_out = deadline != no_deadline;
  Worker* worker = current_worker();
  FiberControl* self = worker != nullptr ? worker->current() : nullptr;
  if (self == nullptr) return park_thread(waiter, lock, site, deadline);

  waiter.fiber = self;
  self->record_wait(site);
  self->park_frame.store(reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0)), std::memory_order_relaxed);
  self->park_call_site.store(reinterpret_cast<std::uintptr_t>(__builtin_return_address(0)), std::memory_order_relaxed);
  WakeReason reason = WakeReason::notified;
  if (deadline != no_deadline) {
    reason = park_timed(worker, self, waiter, lock, deadline);
  } else {
    worker->park_current(lock != nullptr ? SwitchAction{&unlock_after_switch_out, lock} : SwitchAction{});
    // Without a deadline only unpark() wakes us. Its release store of the
    // state is what orders the waker's hand-off before our return.
    (void)waiter.state.load(std::memory_order_acquire);
  }
  self->clear_wait();
  return reason;
}

bool unpark(Waiter& waiter) noexcept {
  FiberControl* fiber = waiter.fiber;
  if (!waiter.may_time_out) {
    waiter.state.store(Waiter::notified, std::memory_order_release);
  } else {
    std::uint32_t expected = Waiter::waiting;
    if (!waiter.state.compare_exchange_strong(expected, Waiter::notified, std::memory_order_acq_rel)) return false;
  }
  if (fiber != nullptr)
    fiber->scheduler->ready(fiber);
  else
    futex_wake(waiter.state);
  return true;
}

void park_until(Clock::time_point deadline, const WaitSite& site) {
  Waiter waiter;
  park(waiter, nullptr, site, deadline);
}

}  // namespace weft::detail
