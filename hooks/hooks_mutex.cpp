// pthread_mutex_lock, _trylock, _timedlock, _clocklock and _unlock
// (hooks/locks.h): a contended mutex parks a fiber in the parking lot and
// blocks a plain thread in futex(2), one lock word for both.
//
// The lock word (__lock), bits:
//   0-1  glibc's lll value: 0 free, 1 locked, 2 locked and plain threads
//        (or fibers that may not park) may sleep in futex(2) on the word;
//   2    kParked: fibers may be queued in the parking lot under the
//        mutex's address;
//   3    kThreadsNext: with both kinds waiting, the next release goes to a
//        sleeping thread (set when one was handed to a starving fiber).
//
// Invariants:
// - kParked is set and cleared only under the mutex's bucket lock, and is
//   set while a fiber is queued there (it may outlive the last one, who
//   timed out; the next look under the lock clears it).
// - A queued fiber is woken in one of two ways (Go's sync.Mutex has the
//   same two modes), told by its LotWaiter::intent:
//   - to compete (barging, the rule): the word is freed first and the
//     first queued fiber woken; running callers may take the mutex before
//     it runs, and if one did, it queues again, first in line. A mutex
//     handed to a fiber stays held while that fiber waits in a run queue,
//     and every caller behind it waits too (a lock convoy).
//   - handed over, once the fiber is starving (it was woken to compete and
//     lost, more than 1 ms after it first queued): the word stays locked
//     from its last owner to it, so nobody can take it between (on fibers
//     that never preempt each other, a releaser that relocks at once would
//     otherwise keep it from ever getting the mutex). Its owner fields are
//     written before it is woken.
// - A sleeping thread is woken to compete, as glibc wakes it: the word is
//   freed first and running callers may take it meanwhile; a thread that
//   then finds it taken sleeps again. A thread that takes the word in its
//   slow path leaves 2 in it, since others may still sleep (glibc's rule).
//   So a release that frees the word while threads sleep wakes one of them
//   (the fibers' barging turn too: freeing the word drops its 2).
// - With both kinds waiting, releases alternate between a woken thread and
//   a fiber handed the mutex (kThreadsNext), so neither kind starves.
// - The mutex is never left free with fibers queued and nobody bound to
//   take it: a release that frees it while they queue wakes the first
//   fiber or a sleeping thread, which takes it, or loses it to a barger,
//   and either one's release serves the fibers; if the one it woke was not
//   there after all (no thread asleep, or the fiber timed out), the
//   releaser takes the mutex back and serves the next.
// - Only the owner writes __count and __nusers; __owner and the owner's
//   fiber are written by the owner, or by the releaser that hands the
//   mutex over, and read by anybody (atomically).
// - Without fibers parked (kParked clear) the word is exactly glibc's, and
//   glibc's own lll_lock/lll_unlock interoperate with it (hooks/locks.h, 1).
#include <pthread.h>
#include <threads.h>

#include <cerrno>
#include <mutex>

#include "../runtime/fast_clock.h"
#include "../sched/current.h"
#include "announced.h"
#include "glibc_mutex_pins.h"
#include "locks.h"
#include "pthread_layout.h"
#include "tsan.h"

namespace weft::detail::locks {
namespace {

using namespace pthread_layout;

constexpr int kLockedBits = 3;
constexpr int kLocked = 1;
constexpr int kSleepers = 2;
constexpr int kParked = 4;
constexpr int kThreadsNext = 8;

constexpr int kNormal = PTHREAD_MUTEX_NORMAL;  // and PTHREAD_MUTEX_TIMED_NP
constexpr int kRecursive = PTHREAD_MUTEX_RECURSIVE;
constexpr int kErrorCheck = PTHREAD_MUTEX_ERRORCHECK;
constexpr int kAdaptive = PTHREAD_MUTEX_ADAPTIVE_NP;

#ifdef WEFT_HOOKS_TSAN
constexpr unsigned kTsanTryLock = __tsan_mutex_try_lock;
#else
constexpr unsigned kTsanTryLock = 0;
#endif

// A plain thread's spin on an adaptive mutex before it sleeps, as glibc's
// (whose default cap is 100 spins).
constexpr int kAdaptiveSpins = 100;

bool is_locked(int word) noexcept { return (word & kLockedBits) != 0; }

// A queued fiber's LotWaiter::intent: how it waits, then how its releaser
// woke it.
constexpr std::uint32_t kQueued = 0;          // to be woken to compete
constexpr std::uint32_t kStarving = 1;        // to be handed the mutex
constexpr std::uint32_t kHandedOver = 2;      // woken as the owner
constexpr std::uint32_t kWokenToCompete = 3;  // woken to try again

// A fiber that was woken to compete and lost, having waited this long
// since it first queued, waits to be handed the mutex instead (Go's
// sync.Mutex: starvation mode after 1 ms), so that one that keeps losing
// to running callers still gets it.
constexpr std::int64_t kStarvingAfterNs = 1'000'000;

WaitSite wait_site(const pthread_mutex_t* mutex, int type) noexcept {
  return {type == kRecursive ? "std::recursive_mutex" : "std::mutex", mutex, "lock"};
}

Ownership<__pthread_internal_list*> owner_of(pthread_mutex_t* mutex) noexcept {
  return {mutex_owner_tag(mutex), mutex_owner_fiber(mutex)};
}

bool owned_by(pthread_mutex_t* mutex, const Caller& caller) noexcept { return owner_of(mutex).held_by(caller); }

// Whether a lock or an unlock changes the mutex's user count, __nusers,
// which glibc's pthread_mutex_destroy() answers EBUSY from: every call
// does but a condition variable's wait, whose release and relock keep it,
// as glibc's (__pthread_mutex_unlock_usercnt(mutex, 0) and
// __pthread_mutex_cond_lock), so the mutex a waiter will relock stays
// busy.
enum class Users : bool { count, keep };

// The owner's bookkeeping once it holds the word (glibc's).
void record_acquired(pthread_mutex_t* mutex, int type, const Caller& owner, Users users = Users::count) noexcept {
  owner_of(mutex).set(owner);
  if (type == kRecursive) mutex->__data.__count = 1;
  if (users == Users::count) ++mutex->__data.__nusers;
}

// Clears kParked (and kThreadsNext with it) once no fiber is queued; with
// the bucket lock held.
void clear_parked(pthread_mutex_t* mutex) noexcept {
  auto word = mutex_word(mutex);
  int value = word.load(std::memory_order_relaxed);
  while ((value & kParked) != 0 &&
         !word.compare_exchange_weak(value, value & ~(kParked | kThreadsNext), std::memory_order_relaxed)) {
  }
}

// glibc's lll_lock_wait (and __futex_clocklock64), keeping the hooks' bits:
// a thread, or a fiber that may not park, sleeps in futex(2) on the word.
int acquire_blocking(pthread_mutex_t* mutex, const Deadline& deadline) noexcept {
  auto word = mutex_word(mutex);
  for (;;) {
    int value = word.load(std::memory_order_relaxed);
    if (!is_locked(value)) {
      if (word.compare_exchange_weak(value, (value & ~kLockedBits) | kSleepers, std::memory_order_acquire,
                                     std::memory_order_relaxed))
        return 0;
      continue;
    }
    const int asleep = (value & ~kLockedBits) | kSleepers;
    if (value != asleep && !word.compare_exchange_weak(value, asleep, std::memory_order_relaxed)) continue;
    const int error = futex_wait(&mutex->__data.__lock, static_cast<unsigned>(asleep), deadline);
    if (error == ETIMEDOUT || error == EINVAL) return error;
  }
}

// A fiber queues in the parking lot and parks until a releaser hands it the
// mutex or wakes it to compete for it (then it tries again, and queues
// again if it loses), or until the deadline.
int acquire_parked(pthread_mutex_t* mutex, int type, const Caller& me, const Deadline& deadline) noexcept {
  auto word = mutex_word(mutex);
  LotBucket& bucket = lot_bucket(mutex);
  LotWaiter waiter;
  waiter.key = mutex;
  waiter.payload = me.fiber;  // the owner to be, named by the releaser that hands it over
  waiter.amount = static_cast<std::uint32_t>(me.tag);
  for (;;) {
    bucket.lock.lock();
    for (;;) {
      int value = word.load(std::memory_order_relaxed);
      if (!is_locked(value)) {
        if (word.compare_exchange_weak(value, value | kLocked, std::memory_order_acquire, std::memory_order_relaxed)) {
          bucket.lock.unlock();
          return 0;
        }
        continue;
      }
      // Announced before the last look: a releaser either saw the mutex free
      // above, or sees kParked and takes this bucket's lock, after us.
      if ((value & kParked) != 0 || word.compare_exchange_weak(value, value | kParked, std::memory_order_relaxed))
        break;
    }
    waiter.state.store(Waiter::waiting, std::memory_order_relaxed);
    if (waiter.queued_ns == 0) {
      waiter.queued_ns = fast_now_ns();
      waiter.intent = kQueued;
      bucket.push(waiter);
    } else {
      // It was woken to compete and lost: first in line again, and handed
      // the mutex next time once it has waited long enough.
      waiter.intent = fast_now_ns() - waiter.queued_ns >= kStarvingAfterNs ? kStarving : kQueued;
      bucket.push_front(waiter);
    }
    if (wait_in_lot(bucket, waiter, wait_site(mutex, type), deadline, true)) {
      if (waiter.intent == kHandedOver) return 0;
      continue;  // woken to compete: unlinked by its releaser
    }
    bucket.lock.lock();
    bucket.remove(waiter);
    if (!bucket.has(mutex)) clear_parked(mutex);
    bucket.lock.unlock();
    return ETIMEDOUT;
  }
}

int acquire_slow(pthread_mutex_t* mutex, int type, const Caller& me, bool park, const Deadline& deadline) noexcept {
  // As glibc: the time is looked at only by a call that would wait, and a
  // negative tv_sec has passed whatever its tv_nsec (glibc's futex wait
  // answers ETIMEDOUT before the kernel could refuse the tv_nsec; both
  // waits below do too).
  if (deadline.none() || deadline.at->tv_sec >= 0) {
    if (const int error = deadline.check(); error != 0) return error;
  }
  if (park) return acquire_parked(mutex, type, me, deadline);
  if (type == kAdaptive) {
    auto word = mutex_word(mutex);
    for (int i = 0; i < kAdaptiveSpins; ++i) {
      int value = word.load(std::memory_order_relaxed);
      if (!is_locked(value) &&
          word.compare_exchange_weak(value, value | kLocked, std::memory_order_acquire, std::memory_order_relaxed))
        return 0;
      cpu_relax();
    }
  }
  return acquire_blocking(mutex, deadline);
}

// A release freed the word (kParked kept) for someone who then was not
// there to take it, while fibers still queue: the releaser takes the mutex
// back to serve them. False if a barger has it meanwhile, whose release
// serves them. With the bucket lock held.
bool take_back_for_fibers(pthread_mutex_t* mutex) noexcept {
  int value = kParked;
  return mutex_word(mutex).compare_exchange_strong(value, kParked | kLocked, std::memory_order_acquire,
                                                   std::memory_order_relaxed);
}

// Releases the word of a mutex some fiber waits for (kParked seen), with
// its bucket lock: hands it to the first queued fiber, or frees it and
// wakes a sleeping thread if it is the threads' turn. False if no fiber is
// queued after all (kParked cleared): the caller releases as glibc does.
bool release_to_parked(pthread_mutex_t* mutex) noexcept {
  auto word = mutex_word(mutex);
  LotBucket& bucket = lot_bucket(mutex);
  std::lock_guard guard(bucket.lock);
  for (;;) {
    int value = word.load(std::memory_order_relaxed);
    if ((value & kParked) == 0) return false;
    LotWaiter* first = bucket.first(mutex);
    if (first == nullptr) {
      clear_parked(mutex);
      return false;
    }
    const bool sleepers = (value & kLockedBits) == kSleepers;
    if (sleepers && (value & kThreadsNext) != 0) {
      if (!word.compare_exchange_weak(value, kParked, std::memory_order_release, std::memory_order_relaxed)) continue;
      if (futex_wake(&mutex->__data.__lock, 1) != 0) return true;  // it takes the mutex, or a barger does
      // Nobody slept after all (a 2 outlives its sleepers): nobody would
      // take the mutex and serve the fibers.
      if (!take_back_for_fibers(mutex)) return true;
      continue;
    }
    const bool more = bucket.next_after(*first) != nullptr;
    if (first->intent != kStarving) {
      // The fibers' turn, in barging mode: the word is freed and the first
      // fiber woken to compete for it, so that the mutex is not held by a
      // fiber that waits in a run queue meanwhile (and everybody behind
      // it). A sleeping thread is woken too: freeing the word drops its 2.
      if (!word.compare_exchange_weak(value, more ? kParked : 0, std::memory_order_release, std::memory_order_relaxed))
        continue;
      bucket.remove(*first);
      first->intent = kWokenToCompete;
      if (sleepers) futex_wake(&mutex->__data.__lock, 1);
      if (unpark(*first) || !more) return true;
      // It timed out meanwhile and leaves: nobody may be bound to take the
      // mutex for the fibers still queued.
      if (!take_back_for_fibers(mutex)) return true;
      continue;
    }
    const int handed = (value & kLockedBits) | (more ? kParked : 0) | (sleepers ? kThreadsNext : 0);
    if (!word.compare_exchange_weak(value, handed, std::memory_order_release, std::memory_order_relaxed)) continue;
    bucket.remove(*first);
    first->intent = kHandedOver;
    owner_of(mutex).set(Caller{static_cast<FiberControl*>(first->payload), static_cast<int>(first->amount)});
    if (unpark(*first)) return true;
    // It timed out meanwhile: the mutex is still this caller's to release.
    owner_of(mutex).clear();
  }
}

// The word's release when someone waits; 0, for a tail call.
[[gnu::noinline]] int release_slow(pthread_mutex_t* mutex, int value) noexcept {
  auto word = mutex_word(mutex);
  for (;;) {
    if ((value & kParked) != 0) {
      if (release_to_parked(mutex)) return 0;
      value = word.load(std::memory_order_relaxed);
      continue;
    }
    // `value` is fresh (the caller's failed CAS, or this one's): another
    // load of the contended word would cost a cache miss for nothing.
    if (word.compare_exchange_weak(value, 0, std::memory_order_release, std::memory_order_relaxed)) {
      if ((value & kLockedBits) == kSleepers) futex_wake(&mutex->__data.__lock, 1);
      return 0;
    }
  }
}

// The unlock of a normal or adaptive mutex, which checks no owner
// (glibc's); 0.
inline int unlock_unchecked(pthread_mutex_t* mutex, Users users = Users::count) noexcept {
  owner_of(mutex).clear();
  if (users == Users::count) --mutex->__data.__nusers;
  int value = kLocked;
  if (!mutex_word(mutex).compare_exchange_strong(value, 0, std::memory_order_release, std::memory_order_relaxed))
      [[unlikely]]
    return release_slow(mutex, value);
  return 0;
}

// The unlock of a recursive or error-checking mutex by `caller`.
int unlock_owned(pthread_mutex_t* mutex, const Caller& caller, Users users) noexcept {
  if (const int error = mutex_unlock_error(mutex, caller); error != 0) return error;
  if ((mutex_kind(mutex) & kMutexTypeMask) == kRecursive && --mutex->__data.__count != 0) return 0;
  return unlock_unchecked(mutex, users);
}

// pthread_mutex_unlock of a recursive or error-checking mutex.
[[gnu::noinline]] int unlock_checked(pthread_mutex_t* mutex) {
  return unlock_owned(mutex, current_caller(), Users::count);
}

// glibc's own mutex's unlock (hooks/glibc_mutex_pins.h). Where glibc
// checks the owner (error-checking and recursive mutexes, robust and
// priority-inheriting ones), another fiber of the thread is not it.
int unlock_glibc(pthread_mutex_t* mutex) {
  FiberControl* const keeper = glibc_lock_keeper();
  if (keeper == nullptr) return real::pthread_mutex_unlock()(mutex);
  const int kind = mutex_kind(mutex);
  const bool checks_owner = (kind & kMutexTypeMask) == kRecursive || (kind & kMutexTypeMask) == kErrorCheck ||
                            (kind & (kMutexRobust | kMutexPrioInherit)) != 0;
  if (checks_owner && holding(keeper, mutex) == Holding::other_fiber) return EPERM;
  const int result = real::pthread_mutex_unlock()(mutex);
  const int tid = cached_tid != 0 ? cached_tid : fetch_tid();
  return unpin_if_released(keeper, result, mutex, mutex_owner_tag(mutex).load(std::memory_order_relaxed) == tid);
}

// The whole of pthread_mutex_unlock, for what its fast path leaves: the
// hooks off (or not yet read), glibc's own mutex.
[[gnu::noinline]] int unlock_any(pthread_mutex_t* mutex) {
  if (!lock_hooks_enabled()) return real::pthread_mutex_unlock()(mutex);
  if (!mutex_taken_over(mutex)) return unlock_glibc(mutex);
  const int kind = mutex_kind(mutex);
  return kind == kNormal || kind == kAdaptive ? unlock_unchecked(mutex) : unlock_checked(mutex);
}

// The lock of a taken-over mutex of `type` that the caller found taken:
// waits for it (parks, or blocks the thread), then records the owner.
int lock_waiting(pthread_mutex_t* mutex, int type, const Caller& me, const void* return_address,
                 const Deadline& deadline) {
  {
    const WaitingCall call(how_call_waits(return_address));
    if (const int error = acquire_slow(mutex, type, me, call.parks(), deadline); error != 0) return error;
  }
  record_acquired(mutex, type, me);
  return 0;
}

// pthread_mutex_lock and its timed forms on a taken-over mutex of `type`,
// past the fast path of a normal one.
int lock(pthread_mutex_t* mutex, int type, Caller me, const void* return_address, const Deadline& deadline) {
  if (type == kRecursive && owned_by(mutex, me)) {
    if (mutex->__data.__count + 1 == 0) return EAGAIN;
    ++mutex->__data.__count;
    return 0;
  }
  if (type == kErrorCheck && owned_by(mutex, me)) return EDEADLK;
  int value = 0;
  if (!mutex_word(mutex).compare_exchange_strong(value, kLocked, std::memory_order_acquire, std::memory_order_relaxed))
      [[unlikely]]
    return lock_waiting(mutex, type, me, return_address, deadline);
  record_acquired(mutex, type, me);
  return 0;
}

// pthread_mutex_lock of a normal mutex whose fast path found it taken (and
// no checkpoint pending): straight to the wait, without a second CAS on the
// contended word.
[[gnu::noinline]] int lock_contended(pthread_mutex_t* mutex, const void* return_address) {
  return lock_waiting(mutex, kNormal, current_caller(), return_address, Deadline::never());
}

// pthread_mutex_lock past its fast path: every call tail-calls here, so
// that the fast path saves no register.
[[gnu::noinline]] int lock_untimed(pthread_mutex_t* mutex, int kind, const void* return_address) {
  lock_checkpoint(return_address);
  return lock(mutex, kind & kMutexTypeMask, current_caller(), return_address, Deadline::never());
}

// A thread's first lock, once taken: its tid is not known yet.
[[gnu::noinline]] int record_acquired_first(pthread_mutex_t* mutex) {
  record_acquired(mutex, kNormal, current_caller());
  return 0;
}

// The whole of pthread_mutex_lock, for what its fast path leaves: the
// hooks off (or not yet read), glibc's own mutex.
[[gnu::noinline]] int lock_any(pthread_mutex_t* mutex, const void* return_address) {
  if (!lock_hooks_enabled()) return real::pthread_mutex_lock()(mutex);
  const int kind = mutex_kind(mutex);
  if ((kind & kMutexTakenOverMask) != 0) {
    const Deadline never = Deadline::never();
    return lock_after_holder_beside(mutex, &never, [&] {
      return announced([&] { return real::pthread_mutex_lock()(mutex); }, Sleeps::until_woken);
    });
  }
  return lock_untimed(mutex, kind, return_address);
}

// pthread_mutex_trylock.
int try_lock(pthread_mutex_t* mutex, const void* return_address) {
  if (!lock_hooks_enabled()) return real::pthread_mutex_trylock()(mutex);
  const int kind = mutex_kind(mutex);
  if ((kind & kMutexTakenOverMask) != 0)
    return lock_after_holder_beside(mutex, nullptr, [&] { return real::pthread_mutex_trylock()(mutex); });
  lock_checkpoint(return_address);
  const int type = kind & kMutexTypeMask;
  const Caller me = current_caller();
  if (type == kRecursive && owned_by(mutex, me)) {
    if (mutex->__data.__count + 1 == 0) return EAGAIN;
    ++mutex->__data.__count;
    return 0;
  }
  auto word = mutex_word(mutex);
  int value = word.load(std::memory_order_relaxed);
  do {
    if (is_locked(value)) return EBUSY;
  } while (!word.compare_exchange_weak(value, value | kLocked, std::memory_order_acquire, std::memory_order_relaxed));
  record_acquired(mutex, type, me);
  return 0;
}

// pthread_mutex_timedlock and _clocklock, once the clock is known good.
// glibc's timed lock: CLOCK_REALTIME's as pthread_mutex_timedlock, the
// same call inside glibc, which ThreadSanitizer intercepts where it does
// not intercept pthread_mutex_clocklock (it then took the unlock of a
// mutex so locked for one of a mutex never locked).
int glibc_timed_lock(pthread_mutex_t* mutex, clockid_t clock, const timespec* abstime) {
  if (clock == CLOCK_REALTIME) return real::pthread_mutex_timedlock()(mutex, abstime);
  return real::pthread_mutex_clocklock()(mutex, clock, abstime);
}

int timed_lock(pthread_mutex_t* mutex, clockid_t clock, const timespec* abstime, const void* return_address) {
  if (!lock_hooks_enabled()) return glibc_timed_lock(mutex, clock, abstime);
  const int kind = mutex_kind(mutex);
  if ((kind & kMutexTakenOverMask) != 0) {
    const Deadline deadline = Deadline::at_time(clock, abstime);
    return lock_after_holder_beside(mutex, &deadline, [&] {
      return announced([&] { return glibc_timed_lock(mutex, clock, abstime); }, Sleeps::until_woken);
    });
  }
  lock_checkpoint(return_address);
  // The time is read only by a call that must wait (acquire_slow), as
  // glibc's: a free mutex is taken whatever `abstime` is, null included.
  return lock(mutex, kind & kMutexTypeMask, current_caller(), return_address, Deadline::at_time(clock, abstime));
}

int clock_lock(pthread_mutex_t* mutex, clockid_t clock, const timespec* abstime, const void* return_address) {
  if (!lock_hooks_enabled()) return real::pthread_mutex_clocklock()(mutex, clock, abstime);
  if (!glibc_waits_on(clock)) return EINVAL;  // before anything, as glibc
  return timed_lock(mutex, clock, abstime, return_address);
}

// Who holds a mutex, for the fibers weft-dump finds parked on it
// (sched/wait_owner.h): __owner, and for a fiber its control block, read
// quietly, since the mutex may be gone.
WaitOwner mutex_owner(const void* object) noexcept {
  pthread_mutex_t copy;
  if (!read_quietly(object, &copy, sizeof(copy))) return {};
  return wait_owner_of(copy.__data.__owner, copy.__data.__list.__prev);
}

[[maybe_unused]] const bool owners_registered =
    register_wait_owner("std::mutex", &mutex_owner) && register_wait_owner("std::recursive_mutex", &mutex_owner);

}  // namespace

bool mutex_taken_over(const pthread_mutex_t* mutex) noexcept { return (mutex_kind(mutex) & kMutexTakenOverMask) == 0; }

int mutex_lock(pthread_mutex_t* mutex, const Caller& caller, bool park, const Deadline& deadline) noexcept {
  const int type = mutex_kind(mutex) & kMutexTypeMask;
  // A recursive mutex held more than once was only counted down by the
  // wait's release, and is still the caller's: counted up again (glibc's
  // __pthread_mutex_cond_lock).
  if (type == kRecursive && owned_by(mutex, caller)) {
    if (mutex->__data.__count + 1 == 0) return EAGAIN;
    ++mutex->__data.__count;
    return 0;
  }
  int value = 0;
  if (!mutex_word(mutex).compare_exchange_strong(value, kLocked, std::memory_order_acquire,
                                                 std::memory_order_relaxed)) {
    if (const int error = acquire_slow(mutex, type, caller, park, deadline); error != 0) return error;
  }
  record_acquired(mutex, type, caller, Users::keep);
  return 0;
}

int mutex_unlock_error(pthread_mutex_t* mutex, const Caller& caller) noexcept {
  switch (mutex_kind(mutex) & kMutexTypeMask) {
    case kRecursive:
      return owned_by(mutex, caller) ? 0 : EPERM;
    case kErrorCheck:
      return owned_by(mutex, caller) && is_locked(mutex_word(mutex).load(std::memory_order_relaxed)) ? 0 : EPERM;
    default:  // as glibc: neither a normal nor an adaptive mutex checks its caller
      return 0;
  }
}

int mutex_unlock(pthread_mutex_t* mutex, const Caller& caller) noexcept {
  return unlock_owned(mutex, caller, Users::keep);
}

}  // namespace weft::detail::locks

using namespace weft::detail;
using namespace weft::detail::locks;

namespace {

// The bodies of the exported calls, for a caller at `return_address`:
// inlined into each, pthread_mutex_lock's fast path included.

// The fast path: a normal mutex, free, hooks on, nothing pending. Every
// other case is a tail call.
[[gnu::always_inline]] inline int lock_from(pthread_mutex_t* mutex, const void* return_address) {
  return lock_call(mutex, 0, return_address, [mutex, return_address] {
    if (lock_hooks_state.load(std::memory_order_relaxed) <= 0) [[unlikely]]
      return lock_any(mutex, return_address);
    const int kind = pthread_layout::mutex_kind(mutex);
    if ((kind & pthread_layout::kMutexTakenOverMask) != 0) [[unlikely]]
      return lock_any(mutex, return_address);
    if (kind != kNormal || pending_preempt_requests.load(std::memory_order_relaxed) != 0) [[unlikely]]
      return lock_untimed(mutex, kind, return_address);
    int value = 0;
    if (!pthread_layout::mutex_word(mutex).compare_exchange_strong(value, kLocked, std::memory_order_acquire,
                                                                   std::memory_order_relaxed)) [[unlikely]]
      return lock_contended(mutex, return_address);
    // current_caller(), with its one system call (a thread's first lock)
    // out of this function, so that the fast path saves no register.
    if (FiberControl* fiber = current_fiber()) {
      record_acquired(mutex, kNormal, {fiber, fiber_owner_tag(fiber->id)});
      return 0;
    }
    if (const int tid = cached_tid; tid != 0) [[likely]] {
      record_acquired(mutex, kNormal, {nullptr, tid});
      return 0;
    }
    return record_acquired_first(mutex);
  });
}

[[gnu::always_inline]] inline int trylock_from(pthread_mutex_t* mutex, const void* return_address) {
  return lock_call(mutex, kTsanTryLock, return_address, [&] { return try_lock(mutex, return_address); });
}

[[gnu::always_inline]] inline int timedlock_from(pthread_mutex_t* mutex, const timespec* abstime,
                                                 const void* return_address) {
  return lock_call(mutex, kTsanTryLock, return_address,
                   [&] { return timed_lock(mutex, CLOCK_REALTIME, abstime, return_address); });
}

[[gnu::always_inline]] inline int unlock_from(pthread_mutex_t* mutex, const void* return_address) {
  return unlock_call(mutex, return_address, [mutex] {
    const int kind = pthread_layout::mutex_kind(mutex);
    if (lock_hooks_state.load(std::memory_order_relaxed) <= 0 || (kind & pthread_layout::kMutexTakenOverMask) != 0)
        [[unlikely]]
      return unlock_any(mutex);
    if (kind == kNormal || kind == kAdaptive) [[likely]]
      return unlock_unchecked(mutex);
    return unlock_checked(mutex);
  });
}

}  // namespace

// Not inlined anywhere: each asks for its own return address, which tells
// libweft's own calls (hooks/locks.h, 3).
// Exported: they interpose libc's (include/weft/detail/visibility.h).
#pragma GCC visibility push(default)
extern "C" {

[[gnu::noinline]] int pthread_mutex_lock(pthread_mutex_t* mutex) {
  return lock_from(mutex, __builtin_return_address(0));
}

[[gnu::noinline]] int pthread_mutex_trylock(pthread_mutex_t* mutex) {
  return trylock_from(mutex, __builtin_return_address(0));
}

[[gnu::noinline]] int pthread_mutex_timedlock(pthread_mutex_t* mutex, const timespec* abstime) {
  return timedlock_from(mutex, abstime, __builtin_return_address(0));
}

[[gnu::noinline]] int pthread_mutex_clocklock(pthread_mutex_t* mutex, clockid_t clock, const timespec* abstime) {
  const void* return_address = __builtin_return_address(0);
  return lock_call(
      mutex, kTsanTryLock, return_address, [&] { return clock_lock(mutex, clock, abstime, return_address); },
      /*seen_by_tsan=*/false);
}

[[gnu::noinline]] int pthread_mutex_unlock(pthread_mutex_t* mutex) {
  return unlock_from(mutex, __builtin_return_address(0));
}

// C11 <threads.h>: the same calls, their results as glibc's mtx_* give
// them (thrd_result). Before, a fiber's went to glibc, which keys a mutex
// on the thread: two fibers of one worker were both inside a recursive
// mtx_t, a fiber that moved could not unlock its own, and a contended
// mtx_lock blocked the worker.
[[gnu::noinline]] int mtx_lock(mtx_t* mutex) {
  return thrd_result(lock_from(as_pthread(mutex), __builtin_return_address(0)));
}

[[gnu::noinline]] int mtx_trylock(mtx_t* mutex) {
  return thrd_result(trylock_from(as_pthread(mutex), __builtin_return_address(0)));
}

[[gnu::noinline]] int mtx_timedlock(mtx_t* __restrict mutex, const timespec* __restrict abstime) {
  return thrd_result(timedlock_from(as_pthread(mutex), abstime, __builtin_return_address(0)));
}

[[gnu::noinline]] int mtx_unlock(mtx_t* mutex) {
  return thrd_result(unlock_from(as_pthread(mutex), __builtin_return_address(0)));
}

}  // extern "C"
#pragma GCC visibility pop
