// pthread_cond_wait, _timedwait, _clockwait, _signal and _broadcast
// (hooks/locks.h): the waiters of a condition variable queue in the parking
// lot under its address, fibers and plain threads alike, in arrival order.
//
// The hooks' word (hooks/pthread_layout.h, cond_word) holds one bit,
// kWaiters: someone may be queued. Invariants:
// - kWaiters is set and cleared only under the condition variable's bucket
//   lock, and is set while a waiter is queued (it may outlive the last one,
//   who timed out; the next signal clears it).
// - A waiter is queued, and kWaiters set, before the user's mutex is
//   released: a signal made under that mutex after the release finds it.
//   The mutex is released once the waiter has left its worker (or just
//   before its thread sleeps), with the bucket lock already released
//   (park_then()'s action), so that no two buckets are ever held at once,
//   and the release cannot race the waiter's own relock: a parked fiber is
//   pinned to the worker that runs the action.
// - signal() wakes the longest waiter queued before it, broadcast() every
//   one; a waiter queued later is behind them and never takes their wake.
//   A woken waiter never touches the condition variable again (it may be
//   destroyed right after the wake: glibc allows that), and there are no
//   spurious wake-ups but timeouts and a pthread_cancel() of a plain thread
//   that has cancellation disabled (hooks/cancellable_wait.h).
// - A process-shared condition variable is glibc's. With a taken-over
//   mutex, its wait goes through a bridge: the waiter holds a glibc mutex
//   of a small table (keyed by the condition variable's address) from
//   before it releases the user's mutex until glibc's wait has registered
//   it, and the hooks' signal and broadcast take the same bridge, so a
//   signal made after that release still finds the waiter, while glibc
//   never touches the user's mutex.
#include <pthread.h>
#include <threads.h>

#include <cerrno>
#include <mutex>
#include <optional>

#include "announced.h"
#include "cancellable_wait.h"
#include "glibc_mutex_pins.h"
#include "locks.h"
#include "pthread_layout.h"
#include "real_calls.h"

namespace weft::detail::locks {
namespace {

using namespace pthread_layout;

constexpr unsigned kWaiters = 1;

void clear_waiters_if_none(pthread_cond_t* cond, const LotBucket& bucket) noexcept {
  if (!bucket.has(cond)) cond_word(cond).clear(kWaiters);
}

// What the parked waiter's action releases: a copy, taken before anything
// can wake the waiter.
struct MutexRelease {
  pthread_mutex_t* mutex;
  Caller owner;
};

void release_mutex(void* arg) noexcept {
  const MutexRelease release = *static_cast<const MutexRelease*>(arg);
  mutex_unlock(release.mutex, release.owner);
}

// The relock of glibc's own mutex at the end of a wait: after another
// fiber of this thread that took it meanwhile, announced, as
// pthread_mutex_lock() (hooks_mutex.cpp).
int relock_glibc(pthread_mutex_t* mutex) {
  const Deadline never = Deadline::never();
  return lock_after_holder_beside(mutex, &never, [mutex] {
    return announced([mutex] { return real::pthread_mutex_lock()(mutex); }, Sleeps::until_woken);
  });
}

// The wait of a condition variable the hooks take over.
int wait(pthread_cond_t* cond, pthread_mutex_t* mutex, const Deadline& deadline, const void* return_address) {
  const Caller me = current_caller();
  const bool mutex_is_ours = mutex_taken_over(mutex);
  if (mutex_is_ours) {
    if (const int error = mutex_unlock_error(mutex, me); error != 0) return error;
  }
  // glibc's own mutex, recorded as held by a fiber of this thread
  // (hooks/glibc_mutex_pins.h): another fiber's is not the caller's to
  // release (glibc, which sees one tid, would release it); the caller's
  // record and pin go before the park, so that the thread's other fibers
  // may take the mutex meanwhile (they run only once this fiber has
  // parked, the mutex released), and come back with the relock. Before
  // how_call_waits: a fiber pinned by that mutex would block its thread,
  // and those fibers with it (until sysmon's slow rule moved them).
  FiberControl* const keeper = mutex_is_ours ? nullptr : glibc_lock_keeper();
  const Holding held = holding(keeper, mutex);
  if (held == Holding::other_fiber) return EPERM;
  if (held == Holding::caller) unpin_if_released(keeper, 0, mutex, false);
  const Waits waits = how_call_waits(return_address);
  const WaitingCall call(waits);
  LotBucket& bucket = lot_bucket(cond);
  LotWaiter waiter;
  waiter.key = cond;
  // A plain thread's wait is a cancellation point (hooks/cancellable_wait.h):
  // registered first, so that a pthread_cancel() is either seen by the
  // test below, with the mutex still held, or marks the wait.
  std::optional<CancellableWait> cancellable;
  if (waits == Waits::block_thread) {
    cancellable.emplace(&waiter.state);
    pthread_testcancel();
  }
  const std::atomic<bool>* cancelled = cancellable ? &cancellable->requested() : nullptr;
  MutexRelease release{mutex, me};
  ParkAction release_after{};
  bucket.lock.lock();
  bucket.push(waiter);
  cond_word(cond).set(kWaiters);
  if (mutex_is_ours) {
    release_after = ParkAction{&release_mutex, &release};
  } else {
    // glibc's own mutex (robust, priority, process-shared) touches no
    // bucket: released here, under the bucket lock, and its error (not
    // the owner) ends the wait as glibc's would. glibc's wait keeps the
    // mutex's user count (__nusers: pthread_mutex_destroy() is EBUSY
    // meanwhile), which the real unlock and lock count down and up: it is
    // counted up first, by the owner the caller must be, and down once
    // the mutex is held again.
    ++mutex->__data.__nusers;
    if (const int error = real::pthread_mutex_unlock()(mutex); error != 0) {
      if (held == Holding::caller) pin_if_held(keeper, 0, mutex);
      --mutex->__data.__nusers;
      bucket.remove(waiter);
      clear_waiters_if_none(cond, bucket);
      bucket.lock.unlock();
      return error;
    }
  }
  const bool notified = wait_in_lot(bucket, waiter, {"std::condition_variable", cond, "wait"}, deadline, call.parks(),
                                    release_after, cancelled);
  if (!notified) {
    std::lock_guard guard(bucket.lock);
    bucket.remove(waiter);
    clear_waiters_if_none(cond, bucket);
  }
  const int relocked = mutex_is_ours ? mutex_lock(mutex, me, call.parks(), Deadline::never()) : relock_glibc(mutex);
  if (!mutex_is_ours && (relocked == 0 || relocked == EOWNERDEAD)) --mutex->__data.__nusers;  // held again
  if (relocked != 0) return relocked;  // EOWNERDEAD and the like, from glibc's own mutexes
  if (!notified && cancelled != nullptr && cancelled->load(std::memory_order_acquire)) {
    cancellable.reset();
    pthread_testcancel();  // acts, the mutex held, unless cancellation is disabled
    return 0;              // then a spurious wake-up
  }
  return notified ? 0 : ETIMEDOUT;
}

// --- process-shared condition variables with a taken-over mutex -----------

constexpr std::size_t kBridges = 64;
pthread_mutex_t bridges[kBridges];  // zeros: PTHREAD_MUTEX_INITIALIZER; glibc's, through real::

pthread_mutex_t* bridge_of(const pthread_cond_t* cond) noexcept {
  return &bridges[(reinterpret_cast<std::uintptr_t>(cond) >> 6) % kBridges];
}

template <class Wait>
int bridged_wait(pthread_cond_t* cond, pthread_mutex_t* mutex, const void* return_address, Wait glibc_wait) {
  // glibc's waits block the thread: announced (hooks/announced.h).
  if (!mutex_taken_over(mutex)) return announced([&] { return glibc_wait(mutex); }, Sleeps::until_woken);
  const WaitingCall call(how_call_waits(return_address));
  const Caller me = current_caller();
  pthread_mutex_t* bridge = bridge_of(cond);
  int result = 0;
  {
    // The checkpoint every hook takes at its return, taken here instead,
    // where the fiber holds neither the bridge nor the caller's mutex.
    // After the relock, a yield would run the fibers pinned to this worker
    // (woken from a park on that mutex, say) only for them to park on it
    // again: a loop of short timed waits then starved them for as long as
    // it ran, its thread never free for them.
    const CheckpointOnReturn at_wake;
    real::pthread_mutex_lock()(bridge);
    if (const int error = mutex_unlock(mutex, me); error != 0) {
      real::pthread_mutex_unlock()(bridge);
      return error;
    }
    result = announced([&] { return glibc_wait(bridge); }, Sleeps::until_woken);
    real::pthread_mutex_unlock()(bridge);
  }
  const int relocked = mutex_lock(mutex, me, call.parks(), Deadline::never());
  return relocked != 0 ? relocked : result;
}

template <class Wake>
int bridged_wake(pthread_cond_t* cond, Wake glibc_wake) {
  pthread_mutex_t* bridge = bridge_of(cond);
  real::pthread_mutex_lock()(bridge);
  const int result = glibc_wake();
  real::pthread_mutex_unlock()(bridge);
  return result;
}

bool is_shared(const pthread_cond_t* cond) noexcept { return (cond_flags(cond) & kCondPshared) != 0; }

}  // namespace
}  // namespace weft::detail::locks

using namespace weft::detail;
using namespace weft::detail::locks;

namespace {

// The bodies of the exported waits, for a caller at `return_address`.
[[gnu::always_inline]] inline int wait_from(pthread_cond_t* cond, pthread_mutex_t* mutex, const void* return_address) {
  return wait_call(mutex, return_address, [&] {
    if (!lock_hooks_enabled()) return real::pthread_cond_wait()(cond, mutex);
    if (is_shared(cond))
      return bridged_wait(cond, mutex, return_address,
                          [cond](pthread_mutex_t* held) { return real::pthread_cond_wait()(cond, held); });
    return wait(cond, mutex, Deadline::never(), return_address);
  });
}

[[gnu::always_inline]] inline int timedwait_from(pthread_cond_t* cond, pthread_mutex_t* mutex, const timespec* abstime,
                                                 const void* return_address) {
  return wait_call(mutex, return_address, [&] {
    if (!lock_hooks_enabled()) return real::pthread_cond_timedwait()(cond, mutex, abstime);
    // Before anything, as glibc: a bridged wait would look at the mutex first.
    if (!valid_nanoseconds(abstime)) return EINVAL;
    if (is_shared(cond))
      return bridged_wait(cond, mutex, return_address, [cond, abstime](pthread_mutex_t* held) {
        return real::pthread_cond_timedwait()(cond, held, abstime);
      });
    const clockid_t clock = (pthread_layout::cond_flags(cond) & pthread_layout::kCondClockMonotonic) != 0
                                ? CLOCK_MONOTONIC
                                : CLOCK_REALTIME;
    return wait(cond, mutex, Deadline::at_time(clock, abstime), return_address);
  });
}

}  // namespace

// (hooks/locks.h, 5: TSan.)
// Exported: they interpose libc's (include/weft/detail/visibility.h).
#pragma GCC visibility push(default)
extern "C" {

[[gnu::noinline]] int pthread_cond_wait(pthread_cond_t* cond, pthread_mutex_t* mutex) {
  return wait_from(cond, mutex, __builtin_return_address(0));
}

[[gnu::noinline]] int pthread_cond_timedwait(pthread_cond_t* cond, pthread_mutex_t* mutex, const timespec* abstime) {
  return timedwait_from(cond, mutex, abstime, __builtin_return_address(0));
}

[[gnu::noinline]] int pthread_cond_clockwait(pthread_cond_t* cond, pthread_mutex_t* mutex, clockid_t clock,
                                             const timespec* abstime) {
  const void* return_address = __builtin_return_address(0);
  return wait_call(mutex, return_address, [&] {
    if (!lock_hooks_enabled()) return real::pthread_cond_clockwait()(cond, mutex, clock, abstime);
    // Before anything, as glibc: a bridged wait would look at the mutex first.
    if (!valid_nanoseconds(abstime)) return EINVAL;
    if (!glibc_waits_on(clock)) return EINVAL;
    if (is_shared(cond))
      return bridged_wait(cond, mutex, return_address, [cond, clock, abstime](pthread_mutex_t* held) {
        return real::pthread_cond_clockwait()(cond, held, clock, abstime);
      });
    return wait(cond, mutex, Deadline::at_time(clock, abstime), return_address);
  });
}

[[gnu::noinline]] int pthread_cond_signal(pthread_cond_t* cond) {
  if (!lock_hooks_enabled()) return real::pthread_cond_signal()(cond);
  if (is_shared(cond)) return bridged_wake(cond, [cond] { return real::pthread_cond_signal()(cond); });
  if ((pthread_layout::cond_word(cond).load() & kWaiters) == 0) return 0;
  LotBucket& bucket = lot_bucket(cond);
  std::lock_guard guard(bucket.lock);
  // The waiters bit is cleared before the wake, never after: the woken
  // waiter may return, and the condition variable be destroyed and its
  // memory reused, before this call does anything more (a signal made
  // without the mutex held).
  while (LotWaiter* waiter = bucket.first(cond)) {
    bucket.remove(*waiter);
    clear_waiters_if_none(cond, bucket);
    if (unpark(*waiter)) return 0;  // else it timed out: the next one
  }
  clear_waiters_if_none(cond, bucket);  // none woken: the bit may be stale
  return 0;
}

[[gnu::noinline]] int pthread_cond_broadcast(pthread_cond_t* cond) {
  if (!lock_hooks_enabled()) return real::pthread_cond_broadcast()(cond);
  if (is_shared(cond)) return bridged_wake(cond, [cond] { return real::pthread_cond_broadcast()(cond); });
  if ((pthread_layout::cond_word(cond).load() & kWaiters) == 0) return 0;
  LotBucket& bucket = lot_bucket(cond);
  std::lock_guard guard(bucket.lock);
  pthread_layout::cond_word(cond).clear(kWaiters);  // before the wakes, as in pthread_cond_signal
  while (LotWaiter* waiter = bucket.first(cond)) {
    bucket.remove(*waiter);
    unpark(*waiter);
  }
  return 0;
}

// C11 <threads.h>: the same calls, their results as glibc's cnd_* give
// them (thrd_result). Before, a fiber's cnd_wait blocked its worker in
// glibc's wait, which the hooks' signals (a pthread_cond_signal of the
// same object) never reached.
[[gnu::noinline]] int cnd_wait(cnd_t* cond, mtx_t* mutex) {
  return thrd_result(wait_from(as_pthread(cond), as_pthread(mutex), __builtin_return_address(0)));
}

[[gnu::noinline]] int cnd_timedwait(cnd_t* __restrict cond, mtx_t* __restrict mutex,
                                    const timespec* __restrict abstime) {
  return thrd_result(timedwait_from(as_pthread(cond), as_pthread(mutex), abstime, __builtin_return_address(0)));
}

int cnd_signal(cnd_t* cond) { return thrd_result(pthread_cond_signal(as_pthread(cond))); }

int cnd_broadcast(cnd_t* cond) { return thrd_result(pthread_cond_broadcast(as_pthread(cond))); }

}  // extern "C"
#pragma GCC visibility pop
