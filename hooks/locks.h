// The lock hooks: pthread mutexes, condition variables and rwlocks on
// fibers (docs/locks.md). libweft defines pthread_mutex_lock and its
// family, so std::mutex, std::recursive_mutex, std::timed_mutex,
// std::condition_variable(_any) and std::shared_mutex reach them, and a
// fiber that finds one contended parks instead of sleeping its worker's
// thread in futex(2), as Wisp2 made Java's monitors do.
//
// === The protocol ===
//
// 1. Everybody runs it. A pthread object is a few words of memory whose
//    meaning glibc's code defines, and glibc's code also runs where no
//    hook can reach: its pthread_cond_wait() unlocks and relocks the
//    user's mutex through internal calls, and a thread asleep in glibc's
//    lock waits for a futex wake, never for weft's wake-up of a fiber.
//    So for the objects it takes over (below) libweft implements the whole
//    object, for plain threads as much as for fibers: the mutex, the
//    condition variable (glibc's cond_wait never runs on them, so neither
//    do its internal mutex calls) and the rwlock. glibc's functions are
//    still what runs for the objects passed through, and for every call
//    when the hooks are off (WEFT_HOOK_LOCKS=0 or WEFT_HOOKS=0, read at the
//    first call, never changed after).
//    What else of glibc touches these objects, and why it is safe:
//    - pthread_*_init() and the static initializers write glibc's layout
//      (all zeros but a mutex's kind, a condition variable's clock and
//      process-shared bits, an rwlock's preference and process-shared
//      flag); the hooks read those and keep their own state where glibc's
//      initial state is zero (hooks/pthread_layout.h).
//    - pthread_mutex_destroy() answers EBUSY from __nusers, which the hooks
//      keep as glibc does; pthread_cond_destroy() waits for glibc's waiter
//      references, which the hooks never take; pthread_rwlock_destroy()
//      does nothing.
//    - A mutex's lock word keeps glibc's lll encoding in its low two bits
//      (0 free, 1 locked, 2 locked with sleepers in futex(2)), and plain
//      threads wait on it exactly as glibc's lll_lock does. So where glibc
//      still locks or unlocks a taken-over mutex internally (the two cases
//      below), it interoperates, as long as no fiber is parked on it.
//      Those two cases: (a) glibc's pthread_cond_wait() on a process-shared
//      condition variable with a taken-over mutex: the condition variable
//      file bridges it (hooks/hooks_condvar.cpp), so glibc never sees that
//      mutex; (b) libweft not first in the symbol search order (dlopen'ed,
//      or another library interposing the same calls): then only libweft's
//      own code reaches these hooks (-Bsymbolic-functions binds its calls
//      to them), on its own internal mutexes, on which fibers never park
//      (3 below), and whose condition variable waits glibc then runs.
//
// 2. What is taken over: mutexes of the four glibc types (normal/timed,
//    recursive, error-checking, adaptive) that are neither robust, nor
//    priority-inheriting or -protecting, nor process-shared; condition
//    variables that are not process-shared; rwlocks that are not
//    process-shared. Everything else goes to glibc untouched, as do calls
//    on a destroyed mutex (kind -1). A process-shared object is shared
//    with processes that run glibc's code on it; robust and priority
//    mutexes need the kernel's help (the robust list, FUTEX_LOCK_PI),
//    which a parked fiber cannot have.
//
// 3. Who calls, and how a call waits (decided once per call at its entry):
//    - The caller's identity is its fiber when it runs in one, else its
//      thread (current_caller() below). A mutex owned by a fiber
//      stays its owner wherever the fiber runs: error-checking and
//      recursive mutexes never see a foreign thread after a migration.
//      __owner holds the tid of an owning thread (glibc's value) or, for a
//      fiber, 2^30 | its id's low 30 bits, which no tid can equal
//      (pid_max is at most 2^22); the full identity of an owning fiber is
//      its control block's address, kept in the mutex's __list.__prev
//      (glibc uses __list for robust mutexes only).
//    - A caller parks only if it is a fiber, not pinned (this_fiber::pin()
//      or a hook's own park), not in a forked child's leftover fiber, and
//      not libweft's own code: libweft's internal std::mutexes are taken
//      inside the scheduler, in switch actions where the running fiber is
//      not the caller, and must never park. -Bsymbolic-functions binds
//      those calls straight to these functions, so their return address is
//      in libweft's own text, found once at load (how_call_waits()). Every
//      other call blocks its thread: futex(2) on the mutex word as glibc
//      does, or, for condition variables and rwlocks, a futex on its own
//      waiter in the parking lot (sync/parking_lot.h), with the caller's
//      clock.
//    - A fiber that parks here is pinned to its worker for the park and
//      resumes on the thread it called from, with errno as it was, exactly
//      as in the I/O hooks (hooks/hook_support.h, ParkScope and ErrnoHome):
//      code around a std::mutex may hold &errno or a thread_local's
//      address across the call. Sysmon releases that pin as it does a
//      hook's, if the worker's thread blocks in the kernel meanwhile.
//
// 4. The objects' own protocols are in their files, with their invariants:
//    hooks/hooks_mutex.cpp (the lock word, hand-off to fibers, glibc's
//    futex protocol for threads), hooks/hooks_condvar.cpp (waiters in the
//    parking lot, the user's mutex released only once the waiter is
//    queued and has left its worker), hooks/hooks_rwlock.cpp.
//
// 5. Under the sanitizers. ASan and TSan intercept these calls and call
//    the next definition, libweft's. For TSan: libweft's own calls, which no interceptor sees,
//    tell it what its interceptor would have (lock_call below), and every
//    wait runs inside a WaitingCall, with a TSan fiber of its own.
//
// 6. fork(): the parking lot empties itself in the child; a mutex whose
//    word still says "fibers parked" finds none there and clears it.
#pragma once

#include <pthread.h>
#include <threads.h>
#include <time.h>
#include <weft/detail/checkpoint.h>
#include <weft/detail/park.h>

#include <cerrno>
#include <cstdint>
#include <optional>

#include "../runtime/fiber_control.h"
#include "../sched/current.h"
#include "../sched/wait_owner.h"
#include "../sync/parking_lot.h"
#include "hook_support.h"
#include "real_calls.h"
#include "tsan.h"

namespace weft::detail::locks {

// --- who calls -------------------------------------------------------------

// __owner (and an rwlock's __cur_writer) of an object a fiber owns: this
// bit, which no tid has, and the fiber id's low 30 bits.
constexpr int kFiberOwnerBit = 1 << 30;

// The owner tag of the fiber with this id.
inline int fiber_owner_tag(std::uint64_t id) noexcept {
  return kFiberOwnerBit | static_cast<int>(id & (kFiberOwnerBit - 1));
}

struct Caller {
  FiberControl* fiber = nullptr;  // null: a plain thread
  int tag = 0;                    // its tid, or its fiber's owner tag
};

// The calling thread's tid, kept (glibc keeps it in its thread descriptor;
// gettid(2) is a system call); forgotten by the thread that forks.
[[gnu::tls_model("initial-exec"), gnu::visibility("hidden")]] extern thread_local constinit int cached_tid;
int fetch_tid() noexcept;

// The calling fiber, or else the calling thread. Inline, on every lock's
// fast path; a caller that parks must not ask again afterwards in the same
// function (the compiler may reuse the thread pointer it read before the
// park, and the fiber may have moved): it keeps the answer, which does not
// change.
inline Caller current_caller() noexcept {
  if (FiberControl* fiber = current_fiber()) return {fiber, fiber_owner_tag(fiber->id)};
  const int tid = cached_tid;
  return {nullptr, tid != 0 ? tid : fetch_tid()};
}

// The tid of a thread, or the owner tag of a fiber; the numbers __owner
// holds, for the dump: kFiberOwnerBit set means a fiber.
inline bool names_fiber(int owner_tag) noexcept { return (owner_tag & kFiberOwnerBit) != 0; }

// Who owns a mutex or writes an rwlock, in two of glibc's fields (a mutex's
// __owner and __list.__prev, an rwlock's __cur_writer and __pad2): the
// owner's tag (a tid or a fiber's tag) and, for a fiber, its control block.
template <class FiberSlot>
struct Ownership {
  std::atomic_ref<int> tag;
  std::atomic_ref<FiberSlot> fiber;

  void set(const Caller& owner) const noexcept {
    tag.store(owner.tag, std::memory_order_relaxed);
    fiber.store(reinterpret_cast<FiberSlot>(owner.fiber), std::memory_order_relaxed);
  }
  // The fiber slot is never read without the tag.
  void clear() const noexcept { tag.store(0, std::memory_order_relaxed); }
  bool held_by(const Caller& caller) const noexcept {
    // A thread's tid is unique among the living; a fiber's tag is 30 bits
    // of its id, so a fiber is told by its control block.
    return tag.load(std::memory_order_relaxed) == caller.tag &&
           (caller.fiber == nullptr ||
            fiber.load(std::memory_order_relaxed) == reinterpret_cast<FiberSlot>(caller.fiber));
  }
};

// weft-dump's answer (sched/wait_owner.h) for an owner tag read from an
// object (0: nobody) and the owning fiber's control block, if a fiber. A
// fiber that ended holding the lock left its block to be given to another
// fiber, which is not the owner: the block's fiber must carry the tag's id
// bits, else the owner is not known (it was reported as the new fiber: a
// fiber waiting on such a lock was "deadlocked" with itself).
inline WaitOwner wait_owner_of(int tag, const void* fiber) noexcept {
  if (tag == 0) return {};
  if (!names_fiber(tag)) return {0, tag};
  const std::uint64_t id = fiber_id_at(static_cast<const FiberControl*>(fiber));
  if (fiber_owner_tag(id) != tag) return {};
  return {id, 0};
}

// --- libweft's own calls ------------------------------------------------------

// Whether a call made from `return_address` is libweft's own (3 above).
bool called_from_weft(const void* return_address) noexcept;

#ifdef WEFT_HOOKS_TSAN
// Whether the real lock calls are TSan's interceptors (weft's objects
// linked into an executable, which comes before libtsan in the lookup
// order): they tell TSan themselves, and telling it twice breaks its
// model of the mutex.
bool real_calls_reach_tsan() noexcept;
#endif

// Under ThreadSanitizer: TSan models every pthread mutex in its
// interceptors, which libweft's own calls skip (they bind straight to the
// hooks). For those the hooks tell TSan what its interceptor would have,
// or a later intercepted call on the same mutex (a condition variable's
// wait through libstdc++) would find a mutex TSan never saw locked. Each
// exported call runs `call` (the whole call) through one of these; outside
// TSan builds they are `call()`. `tsan_flags`: __tsan_mutex_try_lock for
// the lock calls that may fail by design.
//
// A lock call that TSan does not intercept at all (GCC 12's TSan has no
// pthread_mutex_clocklock, which std::timed_mutex::try_lock_for makes) is
// told for every caller (`seen_by_tsan` false), once it has the mutex, as
// a trylock that succeeded: TSan ignores the caller's accesses and
// synchronisation between its pre_lock and post_lock, and a user's call
// may park in between, its worker's switches then unseen.
template <class Call>
int lock_call([[maybe_unused]] void* mutex, [[maybe_unused]] unsigned tsan_flags,
              [[maybe_unused]] const void* return_address, Call call, [[maybe_unused]] bool seen_by_tsan = true) {
#ifdef WEFT_HOOKS_TSAN
  if (!seen_by_tsan && !called_from_weft(return_address)) {
    const int result = call();
    if (result == 0) {
      __tsan_mutex_pre_lock(mutex, __tsan_mutex_try_lock);
      __tsan_mutex_post_lock(mutex, __tsan_mutex_try_lock, 0);
    }
    return result;
  }
  if (called_from_weft(return_address) && !real_calls_reach_tsan()) {
    __tsan_mutex_pre_lock(mutex, tsan_flags);
    const int result = call();
    __tsan_mutex_post_lock(
        mutex, result == 0 ? tsan_flags : tsan_flags | __tsan_mutex_try_lock | __tsan_mutex_try_lock_failed, 0);
    return result;
  }
#endif
  return call();
}

template <class Call>
int unlock_call([[maybe_unused]] void* mutex, [[maybe_unused]] const void* return_address, Call call) {
#ifdef WEFT_HOOKS_TSAN
  if (called_from_weft(return_address) && !real_calls_reach_tsan()) {
    __tsan_mutex_pre_unlock(mutex, 0);
    const int result = call();
    __tsan_mutex_post_unlock(mutex, 0);
    return result;
  }
#endif
  return call();
}

// A condition variable's wait: its mutex is released, then taken again.
template <class Call>
int wait_call([[maybe_unused]] void* mutex, [[maybe_unused]] const void* return_address, Call call) {
#ifdef WEFT_HOOKS_TSAN
  if (called_from_weft(return_address) && !real_calls_reach_tsan()) {
    __tsan_mutex_pre_unlock(mutex, 0);
    __tsan_mutex_post_unlock(mutex, 0);
    const int result = call();
    __tsan_mutex_pre_lock(mutex, 0);
    __tsan_mutex_post_lock(mutex, 0, 0);
    return result;
  }
#endif
  return call();
}

// --- how a call waits ------------------------------------------------------

// How a call waits if it must, decided at its entry (3 above).
enum class Waits : std::uint8_t {
  park,          // a fiber that may park
  block_fiber,   // a fiber that may not (pinned, or left in a forked child): blocks its thread
  block_thread,  // a plain thread
  block_weft,    // libweft's own code: blocks, and nothing around it may switch
};
Waits how_call_waits(const void* return_address) noexcept;

// The checkpoint at a lock call's entry (docs/sysmon.md): a fiber that may
// park yields there if sysmon asked it to, before it takes the lock.
void lock_checkpoint_slow(const void* return_address) noexcept;
inline void lock_checkpoint(const void* return_address) noexcept {
  if (pending_preempt_requests.load(std::memory_order_relaxed) != 0) [[unlikely]]
    lock_checkpoint_slow(return_address);
}

// Held around the half of a lock call that may wait (takes a parking-lot
// bucket, parks or blocks). For a fiber: the pin, errno, and under TSan a
// TSan fiber of its own, as the I/O hooks hold them around their parks
// (hooks/hook_support.h). For a plain thread, under TSan only: a TSan fiber
// of the thread's, since TSan's interceptors of these calls may mark the
// caller as in a blocking call, and then ignore every atomic it makes (the
// parking lot's too), as the I/O hooks' comment explains. Nothing for
// libweft's own calls, which no interceptor sees.
class WaitingCall {
 public:
  explicit WaitingCall(Waits waits) noexcept;
  ~WaitingCall();
  WaitingCall(const WaitingCall&) = delete;
  WaitingCall& operator=(const WaitingCall&) = delete;

  bool parks() const noexcept { return waits_ == Waits::park; }

 private:
  const Waits waits_;
  std::optional<ErrnoHome> home_;  // destroyed last: takes errno home if the pin was released
  int saved_errno_ = 0;
  std::optional<ParkScope> pin_;
  [[maybe_unused]] void* own_tsan_fiber_ = nullptr;  // a plain thread's, under TSan
};

// An absolute time on a clock (CLOCK_REALTIME or CLOCK_MONOTONIC), or none:
// the caller's own timespec, read only where it is used, for glibc's
// mutex reads its time only once the call must wait.
struct Deadline {
  clockid_t clock = CLOCK_MONOTONIC;
  const timespec* at = nullptr;  // null: none

  static Deadline never() noexcept { return {}; }
  // A null `at` is none, as glibc waits with a null time. glibc's headers
  // declare the timed calls' time __nonnull, which lets the compiler drop
  // the hooks' null checks of it: the empty asm hides what it assumed.
  static Deadline at_time(clockid_t clock, const timespec* at) noexcept {
    asm("" : "+r"(at));
    return {clock, at};
  }
  bool none() const noexcept { return at == nullptr; }
  // As glibc reports it before it would wait: EINVAL for a tv_nsec outside
  // [0, 1e9), else 0. (A negative tv_sec has passed: ETIMEDOUT, once
  // waited for.)
  int check() const noexcept;
  // Whether it has passed (false without one).
  bool passed() const noexcept;
  // The steady-clock deadline a fiber parks until, measured once: a later
  // step of CLOCK_REALTIME is not followed (a blocked thread's futex does
  // follow it).
  Clock::time_point steady() const noexcept;
};

// futex(2) on a word of a taken-over object (process-private), until woken
// or the deadline: 0, EAGAIN (the word was not `expected`), EINTR or
// ETIMEDOUT. Neither touches errno.
int futex_wait(void* word, unsigned expected, const Deadline& deadline) noexcept;
// How many it woke.
int futex_wake(void* word, int count) noexcept;

// Waits in `bucket` (locked, `waiter` pushed) until a waker unparks the
// waiter (true) or the deadline passes (false: the waiter may still be
// linked; lock the bucket and unlink it). Parks the fiber when `park`
// (which a WaitingCall has pinned), else blocks the thread on the waiter's
// own futex, with the deadline's clock. The bucket is released once the
// caller can no longer run, and `after_release` runs right after that
// (ParkAction, include/weft/detail/park.h). A blocked thread also stops
// waiting (false, as a timeout) once `cancelled` is set
// (hooks/cancellable_wait.h).
bool wait_in_lot(LotBucket& bucket, LotWaiter& waiter, const WaitSite& site, const Deadline& deadline, bool park,
                 ParkAction after_release = {}, const std::atomic<bool>* cancelled = nullptr) noexcept;

// --- the mutex, for the condition variable --------------------------------

// Whether the hooks implement this mutex (2 above).
bool mutex_taken_over(const pthread_mutex_t* mutex) noexcept;
// What pthread_mutex_unlock() by `caller` would answer, without unlocking:
// 0 or EPERM (a recursive or error-checking mutex it does not own).
int mutex_unlock_error(pthread_mutex_t* mutex, const Caller& caller) noexcept;
// A condition variable's wait's release and relock of a taken-over mutex
// for `caller`, who need not be the running code (the wait releases the
// mutex in its ParkAction, after the fiber left): pthread_mutex_unlock()
// and _lock(), but they keep the mutex's user count (__nusers), as glibc's
// wait does, so pthread_mutex_destroy() is EBUSY meanwhile. mutex_lock()
// counts a recursive mutex the caller still holds (held more than once,
// the release only counted it down) up again.
int mutex_unlock(pthread_mutex_t* mutex, const Caller& caller) noexcept;
int mutex_lock(pthread_mutex_t* mutex, const Caller& caller, bool park, const Deadline& deadline) noexcept;

// C11's mutex and condition variable are glibc's pthread ones (mtx_init
// makes a normal or a recursive mutex), which glibc's mtx_* and cnd_* use
// through its internal pthread calls, where no hook sees them; the hooks
// take them as what they are.
inline pthread_mutex_t* as_pthread(mtx_t* mutex) noexcept { return reinterpret_cast<pthread_mutex_t*>(mutex); }
inline pthread_cond_t* as_pthread(cnd_t* cond) noexcept { return reinterpret_cast<pthread_cond_t*>(cond); }

// A pthread call's error as C11's <threads.h> call on it gives it
// (glibc's thrd_err_map).
inline int thrd_result(int error) noexcept {
  switch (error) {
    case 0:
      return thrd_success;
    case ENOMEM:
      return thrd_nomem;
    case ETIMEDOUT:
      return thrd_timedout;
    case EBUSY:
      return thrd_busy;
    default:
      return thrd_error;
  }
}

}  // namespace weft::detail::locks
