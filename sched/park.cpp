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

// park_then()'s: the unlock, then the action. Lives in the parked fiber's
// frame, which nothing can resume before the unlock: read it first.
struct UnlockThenAct {
  ParkAction action;
  SpinLock* lock;
};

void unlock_then_act_after_switch_out(void* arg) {
  const UnlockThenAct request = *static_cast<UnlockThenAct*>(arg);
  if (request.lock != nullptr) request.lock->unlock();
  request.action.run(request.action.arg);
}

// What a fiber parking with a deadline leaves for the SwitchAction that runs
// once it has been switched out. It lives in the parked fiber's frame: read
// it before anything can resume that fiber.
struct TimedParkRequest {
  SpinLock* lock;
  TimerNode* timer;
  SchedulerCore* core;
  ParkAction action;
};

void arm_after_switch_out(void* arg) {
  auto* request = static_cast<TimedParkRequest*>(arg);
  SpinLock* lock = request->lock;
  const ParkAction action = request->action;
  // Arm before unlocking: until the lock is released no waker can find the
  // waiter, so the fiber cannot resume (and pop the frame that holds the
  // node) before the node is armed. After arm(), the request may be gone:
  // the timer itself may resume the fiber.
  request->core->arm_timer(*request->timer);
  if (lock != nullptr) lock->unlock();
  if (action.run != nullptr) action.run(action.arg);
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

WakeReason park_thread(Waiter& waiter, SpinLock* lock, const WaitSite& site, Clock::time_point deadline,
                       ParkAction action) {
  waiter.fiber = nullptr;
  stamp_thread_waiter(waiter);  // so that a fork child hands it nothing (sched/fork_generation.h)
  const ThreadWaitScope recorded(site.kind, site.object, site.operation, &waiter.state);  // for weft-dump
  if (lock != nullptr) lock->unlock();
  if (action.run != nullptr) action.run(action.arg);
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
                                        Clock::time_point deadline, ParkAction action) {
  TimerNode timer;
  timer.deadline = deadline;
  timer.fire = &time_out;
  timer.context = &waiter;
  TimedParkRequest request{lock, &timer, self->scheduler, action};
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

// The body of park() and park_then(), inlined into each so that the frame
// and call site the dump records are theirs.
[[gnu::always_inline]] inline WakeReason park_here(Waiter& waiter, SpinLock* lock, const WaitSite& site,
                                                   Clock::time_point deadline, ParkAction action, std::uintptr_t frame,
                                                   std::uintptr_t call_site) {
  waiter.may_time_out = deadline != no_deadline;
  Worker* worker = current_worker();
  FiberControl* self = worker != nullptr ? worker->current() : nullptr;
  if (self == nullptr) return park_thread(waiter, lock, site, deadline, action);

  waiter.fiber = self;
  self->record_wait(site);
  self->park_frame.store(frame, std::memory_order_relaxed);
  self->park_call_site.store(call_site, std::memory_order_relaxed);
  WakeReason reason = WakeReason::notified;
  if (deadline != no_deadline) {
    reason = park_timed(worker, self, waiter, lock, deadline, action);
  } else if (action.run != nullptr) {
    UnlockThenAct request{action, lock};
    worker->park_current(SwitchAction{&unlock_then_act_after_switch_out, &request});
    (void)waiter.state.load(std::memory_order_acquire);  // as below
  } else {
    worker->park_current(lock != nullptr ? SwitchAction{&unlock_after_switch_out, lock} : SwitchAction{});
    // Without a deadline only unpark() wakes us. Its release store of the
    // state is what orders the waker's hand-off before our return.
    (void)waiter.state.load(std::memory_order_acquire);
  }
  self->clear_wait();
  return reason;
}

}  // namespace

ThreadWait& this_thread_wait() noexcept {
  thread_local ThreadWait wait;
  return wait;
}

WakeReason park(Waiter& waiter, SpinLock* lock, const WaitSite& site, Clock::time_point deadline) {
  return park_here(waiter, lock, site, deadline, ParkAction{},
                   reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0)),
                   reinterpret_cast<std::uintptr_t>(__builtin_return_address(0)));
}

WakeReason park_then(Waiter& waiter, SpinLock* lock, const WaitSite& site, Clock::time_point deadline,
                     ParkAction after_release) {
  return park_here(waiter, lock, site, deadline, after_release,
                   reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0)),
                   reinterpret_cast<std::uintptr_t>(__builtin_return_address(0)));
}

namespace {

// unpark() itself: decides between the waker and a timeout, then wakes.
inline bool notify(Waiter& waiter) noexcept {
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

// unpark() in a fork child. A waiter the parent's threads or fibers left
// in the list of the child's copy of a primitive counts as gone, as one
// that timed out, so that the waker hands on or keeps what it had, as a
// thread's sem_post or unlock does there (the kernel's futex has no
// waiters from the parent). Out of line, so that the check costs unpark()
// one load and a branch.
[[gnu::cold, gnu::noinline]] bool notify_in_forked_child(Waiter& waiter) noexcept {
  return !left_by_the_parent(waiter) && notify(waiter);
}

}  // namespace

bool unpark(Waiter& waiter) noexcept {
  if (forks_behind_this_process.load(std::memory_order_relaxed) != 0) [[unlikely]]
    return notify_in_forked_child(waiter);
  return notify(waiter);
}

void park_until(Clock::time_point deadline, const WaitSite& site) {
  Waiter waiter;
  park(waiter, nullptr, site, deadline);
}

}  // namespace weft::detail
