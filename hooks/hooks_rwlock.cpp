// pthread_rwlock_rdlock, _wrlock, their try, timed and clock forms, and
// _unlock (hooks/locks.h): readers and writers that must wait queue in the
// parking lot under the rwlock's address, fibers and plain threads alike.
//
// The hooks' word (glibc's __readers), bits:
//   0     kWriter: a writer holds it;
//   1     kParked: waiters may be queued in the parking lot;
//   2     kWriterQueued: a writer may be queued (readers of a
//         PREFER_WRITER_NONRECURSIVE rwlock then queue behind it);
//   3-31  the number of readers that hold it (at most kMaxReaders).
//
// Invariants:
// - kParked and kWriterQueued change only under the rwlock's bucket lock
//   (which every waiter queues and leaves under), and are set while a
//   waiter, a writer, is queued.
// - The lock is handed over: a queued waiter is woken only once it holds
//   the lock (a writer with kWriter and its owner fields set for it, a
//   reader counted), so nothing barges between. Running callers may still
//   take a lock that is free, or read-held (readers), as glibc's do.
// - Whoever leaves the lock free (the last reader, a writer, a waiter that
//   timed out) while waiters are queued hands it on, under the bucket
//   lock (grant()): by glibc's preference, to every queued reader
//   (default: PREFER_READER) or to the first queued writer
//   (PREFER_WRITER_NONRECURSIVE), else to whoever is queued.
// - __cur_writer holds the writer's tid or fiber tag (hooks/locks.h, 3),
//   with the writing fiber's control block in __pad2, so that unlock()
//   tells a writer from a reader as glibc does, and a fiber that migrated
//   is still the writer.
#include <pthread.h>

#include <cerrno>
#include <mutex>

#include "announced.h"
#include "glibc_mutex_pins.h"
#include "locks.h"
#include "pthread_layout.h"
#include "real_calls.h"

namespace weft::detail::locks {
namespace {

using namespace pthread_layout;

constexpr unsigned kWriter = 1;
constexpr unsigned kParked = 2;
constexpr unsigned kWriterQueued = 4;
constexpr unsigned kReader = 8;
// glibc's limit: a reader that would make its __readers (the count from
// bit 3) reach 2^31 is refused, EAGAIN.
constexpr unsigned kMaxReaders = (1u << 28) - 1;

enum Intent : std::uint32_t { kRead = 0, kWrite = 1 };

unsigned readers(unsigned word) noexcept { return word / kReader; }
bool held(unsigned word) noexcept { return (word & kWriter) != 0 || readers(word) != 0; }

bool prefers_writers(const pthread_rwlock_t* lock) noexcept {
  return rwlock_preference(lock) == kRwlockPreferWriterNonrecursive;
}

// Whether a reader may take `word` now, without waiting.
bool readable(const pthread_rwlock_t* lock, unsigned word) noexcept {
  if ((word & kWriter) != 0) return false;
  return !prefers_writers(lock) || (word & kWriterQueued) == 0;
}

Ownership<unsigned long> writer_of(pthread_rwlock_t* lock) noexcept {
  return {rwlock_writer_tag(lock), rwlock_writer_fiber(lock)};
}

// Who holds an rwlock, for the fibers weft-dump finds parked on it
// (sched/wait_owner.h), read quietly, since it may be gone: its writer, or
// how many readers hold it (they are not recorded, only counted).
WaitOwner holders(const void* object) noexcept {
  pthread_rwlock_t copy;
  if (!read_quietly(object, &copy, sizeof(copy))) return {};
  const unsigned word = copy.__data.__readers;
  if ((word & kWriter) == 0) return {.readers = readers(word)};
  return wait_owner_of(copy.__data.__cur_writer, reinterpret_cast<const void*>(copy.__data.__pad2));
}

[[maybe_unused]] const bool owners_registered = register_wait_owner("std::shared_mutex", &holders);

// The queued waiters' flags, recomputed after waiters left; bucket locked.
void update_queued_flags(pthread_rwlock_t* lock, const LotBucket& bucket) noexcept {
  unsigned flags = 0;
  for (LotWaiter* w = bucket.first(lock); w != nullptr; w = bucket.next_after(*w)) {
    flags |= kParked;
    if (w->intent == kWrite) flags |= kWriterQueued;
  }
  auto word = rwlock_word(lock);
  unsigned value = word.load(std::memory_order_relaxed);
  while (!word.compare_exchange_weak(value, (value & ~(kParked | kWriterQueued)) | flags, std::memory_order_relaxed)) {
  }
}

// Hands a free lock to the queued waiters its preference picks; bucket
// locked. A waiter that timed out meanwhile gives its share back.
void grant(pthread_rwlock_t* lock, LotBucket& bucket) noexcept {
  auto word = rwlock_word(lock);
  for (;;) {
    const unsigned value = word.load(std::memory_order_relaxed);
    if ((value & kWriter) != 0 || (value & kParked) == 0) return;  // the writer's release grants; nobody waits
    LotWaiter* first_reader = nullptr;
    LotWaiter* first_writer = nullptr;
    unsigned queued_readers = 0;
    for (LotWaiter* w = bucket.first(lock); w != nullptr; w = bucket.next_after(*w)) {
      if (w->intent == kWrite) {
        if (first_writer == nullptr) first_writer = w;
      } else {
        if (first_reader == nullptr) first_reader = w;
        ++queued_readers;
      }
    }
    if (first_reader == nullptr && first_writer == nullptr) {
      update_queued_flags(lock, bucket);
      return;
    }
    const bool to_writer = first_reader == nullptr || (first_writer != nullptr && prefers_writers(lock));
    // Read-held: queued readers join, unless a writer goes first (then the
    // last reader's release grants).
    if (readers(value) != 0 && to_writer) return;
    if (to_writer) {
      unsigned expected = value;
      if (!word.compare_exchange_strong(expected, value | kWriter, std::memory_order_acquire,
                                        std::memory_order_relaxed))
        continue;
      bucket.remove(*first_writer);
      update_queued_flags(lock, bucket);
      writer_of(lock).set(
          Caller{static_cast<FiberControl*>(first_writer->payload), static_cast<int>(first_writer->amount)});
      if (unpark(*first_writer)) return;
      writer_of(lock).clear();  // it timed out: the lock is free again
      word.fetch_and(~kWriter, std::memory_order_release);
      continue;
    }
    unsigned expected = value;
    if (!word.compare_exchange_strong(expected, value + queued_readers * kReader, std::memory_order_acquire,
                                      std::memory_order_relaxed))
      continue;
    for (LotWaiter* w = first_reader; w != nullptr;) {
      LotWaiter* next = bucket.next_after(*w);
      if (w->intent == kRead) {
        bucket.remove(*w);
        if (!unpark(*w)) word.fetch_sub(kReader, std::memory_order_release);  // timed out
      }
      w = next;
    }
    update_queued_flags(lock, bucket);
    // Every reader may have timed out: then the lock is free, with
    // writers perhaps still queued.
  }
}

// A waiter leaves the queue after its timeout; bucket locked. What it
// waited behind may be gone, so the lock is handed on if it is free.
void leave_after_timeout(pthread_rwlock_t* lock, LotBucket& bucket, LotWaiter& waiter) noexcept {
  bucket.remove(waiter);
  update_queued_flags(lock, bucket);
  grant(lock, bucket);
}

// Queues `intent` and waits until granted (0) or the deadline (ETIMEDOUT),
// unless the lock can be taken on the way (`take_now`, under the bucket
// lock); the caller's WaitingCall decides `park`.
template <class TakeNow>
int queue_and_wait(pthread_rwlock_t* lock, Intent intent, const Caller& me, bool park, const Deadline& deadline,
                   TakeNow take_now) noexcept {
  auto word = rwlock_word(lock);
  LotBucket& bucket = lot_bucket(lock);
  LotWaiter waiter;
  waiter.key = lock;
  waiter.intent = intent;
  waiter.payload = me.fiber;  // who it is: waiter.fiber is whom to wake, null for a thread that blocks
  waiter.amount = static_cast<std::uint32_t>(me.tag);
  bucket.lock.lock();
  for (;;) {
    unsigned value = word.load(std::memory_order_relaxed);
    if (take_now(value)) {
      bucket.lock.unlock();
      return 0;
    }
    // Announced before the last look: a releaser either left the lock for
    // take_now above, or sees kParked and grants under this bucket lock.
    const unsigned flags = kParked | (intent == kWrite ? kWriterQueued : 0);
    if ((value & flags) == flags || word.compare_exchange_weak(value, value | flags, std::memory_order_relaxed)) break;
  }
  bucket.push(waiter);
  const WaitSite site{"std::shared_mutex", lock, intent == kWrite ? "lock" : "lock_shared"};
  if (wait_in_lot(bucket, waiter, site, deadline, park)) return 0;
  std::lock_guard guard(bucket.lock);
  leave_after_timeout(lock, bucket, waiter);
  return ETIMEDOUT;
}

// One try to read-lock: 0, EBUSY or EAGAIN (too many readers).
int try_read(pthread_rwlock_t* lock) noexcept {
  auto word = rwlock_word(lock);
  unsigned value = word.load(std::memory_order_relaxed);
  for (;;) {
    if (!readable(lock, value)) return EBUSY;
    if (readers(value) >= kMaxReaders) return EAGAIN;
    if (word.compare_exchange_weak(value, value + kReader, std::memory_order_acquire, std::memory_order_relaxed))
      return 0;
  }
}

int read_lock(pthread_rwlock_t* lock, const Deadline& deadline, const void* return_address) {
  const Caller me = current_caller();
  if (writer_of(lock).held_by(me)) return EDEADLK;
  const int tried = try_read(lock);
  if (tried != EBUSY) return tried;
  if (const int error = deadline.check(); error != 0) return error;
  const WaitingCall call(how_call_waits(return_address));
  int overflow = 0;
  const int result = queue_and_wait(lock, kRead, me, call.parks(), deadline, [&](unsigned value) {
    if (!readable(lock, value)) return false;
    if (readers(value) >= kMaxReaders) {
      overflow = EAGAIN;  // taken "now" without a lock: the call fails
      return true;
    }
    return rwlock_word(lock).compare_exchange_strong(value, value + kReader, std::memory_order_acquire,
                                                     std::memory_order_relaxed);
  });
  return result != 0 ? result : overflow;
}

bool try_write(pthread_rwlock_t* lock, unsigned value) noexcept {
  return !held(value) && rwlock_word(lock).compare_exchange_strong(value, value | kWriter, std::memory_order_acquire,
                                                                   std::memory_order_relaxed);
}

int write_lock(pthread_rwlock_t* lock, const Deadline& deadline, const void* return_address) {
  const Caller me = current_caller();
  if (writer_of(lock).held_by(me)) return EDEADLK;
  unsigned value = 0;
  if (!rwlock_word(lock).compare_exchange_strong(value, kWriter, std::memory_order_acquire,
                                                 std::memory_order_relaxed)) {
    if (const int error = deadline.check(); error != 0) return error;
    const WaitingCall call(how_call_waits(return_address));
    const int result =
        queue_and_wait(lock, kWrite, me, call.parks(), deadline, [&](unsigned seen) { return try_write(lock, seen); });
    if (result != 0) return result;
  }
  writer_of(lock).set(me);
  return 0;
}

void unlock(pthread_rwlock_t* lock, const Caller& me) noexcept {
  auto word = rwlock_word(lock);
  unsigned left;
  if (writer_of(lock).held_by(me)) {
    writer_of(lock).clear();
    unsigned value = kWriter;
    if (word.compare_exchange_strong(value, 0, std::memory_order_release, std::memory_order_relaxed)) return;
    left = word.fetch_and(~kWriter, std::memory_order_release) & ~kWriter;
  } else {
    unsigned value = word.load(std::memory_order_relaxed);
    do {
      if (readers(value) == 0) return;  // not read-locked: glibc's would corrupt the count
    } while (!word.compare_exchange_weak(value, value - kReader, std::memory_order_release, std::memory_order_relaxed));
    left = value - kReader;
  }
  if (held(left) || (left & kParked) == 0) return;
  LotBucket& bucket = lot_bucket(lock);
  std::lock_guard guard(bucket.lock);
  grant(lock, bucket);
}

// The timed forms' checks, glibc's order: the clock and the time first,
// and neither for a null time (outside glibc's contract, which glibc
// tolerates: it then waits without end).
int check_timed(clockid_t clock, const timespec* abstime) noexcept {
  const Deadline deadline = Deadline::at_time(clock, abstime);
  if (deadline.none()) return 0;
  if (!glibc_waits_on(clock)) return EINVAL;
  return deadline.check();
}

}  // namespace
}  // namespace weft::detail::locks

using namespace weft::detail;
using namespace weft::detail::locks;

namespace {

// A process-shared rwlock's lock: glibc's, announced where it may wait
// (hooks/announced.h) so that the worker's other fibers move on at once.
// A fiber's lock first waits for another fiber of its thread that holds
// the write lock, and a write lock pins the fiber that takes it until its
// unlock (hooks/glibc_mutex_pins.h): glibc records the writer as the
// thread's tid, answered another fiber's lock EDEADLK, and took a writer's
// unlock from another thread for a reader's (the rwlock stayed
// write-locked for good). `deadline`: null for a try.
template <class Lock>
int shared_lock(const void* lock, bool write, const Deadline* deadline, Lock&& glibc_lock) {
  const auto call = [&] { return deadline == nullptr ? glibc_lock() : announced(glibc_lock, Sleeps::until_woken); };
  if (write) return lock_after_holder_beside(lock, deadline, call);
  if (const int error = wait_for_holder_beside(glibc_lock_keeper(), lock, deadline); error != 0) return error;
  return call();
}

}  // namespace

// The hooks off: glibc's call. A process-shared rwlock: shared_lock.
#define WEFT_PASS_THROUGH_SHARED(write, deadline, name, ...)                                     \
  if (!lock_hooks_enabled()) return real::name()(__VA_ARGS__);                                   \
  if (pthread_layout::rwlock_pshared(lock)) {                                                    \
    const Deadline* const shared_deadline = deadline;                                            \
    return shared_lock(lock, write, shared_deadline, [&] { return real::name()(__VA_ARGS__); }); \
  }

// Exported: they interpose libc's (include/weft/detail/visibility.h).
#pragma GCC visibility push(default)
extern "C" {

[[gnu::noinline]] int pthread_rwlock_rdlock(pthread_rwlock_t* lock) {
  const Deadline never = Deadline::never();
  WEFT_PASS_THROUGH_SHARED(false, &never, pthread_rwlock_rdlock, lock);
  const void* return_address = __builtin_return_address(0);
  lock_checkpoint(return_address);
  return read_lock(lock, Deadline::never(), return_address);
}

[[gnu::noinline]] int pthread_rwlock_tryrdlock(pthread_rwlock_t* lock) {
  WEFT_PASS_THROUGH_SHARED(false, nullptr, pthread_rwlock_tryrdlock, lock);
  lock_checkpoint(__builtin_return_address(0));
  return try_read(lock);
}

[[gnu::noinline]] int pthread_rwlock_timedrdlock(pthread_rwlock_t* lock, const timespec* abstime) {
  const Deadline until = Deadline::at_time(CLOCK_REALTIME, abstime);
  WEFT_PASS_THROUGH_SHARED(false, &until, pthread_rwlock_timedrdlock, lock, abstime);
  if (const int error = check_timed(CLOCK_REALTIME, abstime); error != 0) return error;
  const void* return_address = __builtin_return_address(0);
  lock_checkpoint(return_address);
  return read_lock(lock, Deadline::at_time(CLOCK_REALTIME, abstime), return_address);
}

[[gnu::noinline]] int pthread_rwlock_clockrdlock(pthread_rwlock_t* lock, clockid_t clock, const timespec* abstime) {
  const Deadline until = Deadline::at_time(clock, abstime);
  WEFT_PASS_THROUGH_SHARED(false, &until, pthread_rwlock_clockrdlock, lock, clock, abstime);
  if (const int error = check_timed(clock, abstime); error != 0) return error;
  const void* return_address = __builtin_return_address(0);
  lock_checkpoint(return_address);
  return read_lock(lock, Deadline::at_time(clock, abstime), return_address);
}

[[gnu::noinline]] int pthread_rwlock_wrlock(pthread_rwlock_t* lock) {
  const Deadline never = Deadline::never();
  WEFT_PASS_THROUGH_SHARED(true, &never, pthread_rwlock_wrlock, lock);
  const void* return_address = __builtin_return_address(0);
  lock_checkpoint(return_address);
  return write_lock(lock, Deadline::never(), return_address);
}

[[gnu::noinline]] int pthread_rwlock_trywrlock(pthread_rwlock_t* lock) {
  WEFT_PASS_THROUGH_SHARED(true, nullptr, pthread_rwlock_trywrlock, lock);
  lock_checkpoint(__builtin_return_address(0));
  if (!try_write(lock, pthread_layout::rwlock_word(lock).load(std::memory_order_relaxed))) return EBUSY;
  writer_of(lock).set(current_caller());
  return 0;
}

[[gnu::noinline]] int pthread_rwlock_timedwrlock(pthread_rwlock_t* lock, const timespec* abstime) {
  const Deadline until = Deadline::at_time(CLOCK_REALTIME, abstime);
  WEFT_PASS_THROUGH_SHARED(true, &until, pthread_rwlock_timedwrlock, lock, abstime);
  if (const int error = check_timed(CLOCK_REALTIME, abstime); error != 0) return error;
  const void* return_address = __builtin_return_address(0);
  lock_checkpoint(return_address);
  return write_lock(lock, Deadline::at_time(CLOCK_REALTIME, abstime), return_address);
}

[[gnu::noinline]] int pthread_rwlock_clockwrlock(pthread_rwlock_t* lock, clockid_t clock, const timespec* abstime) {
  const Deadline until = Deadline::at_time(clock, abstime);
  WEFT_PASS_THROUGH_SHARED(true, &until, pthread_rwlock_clockwrlock, lock, clock, abstime);
  if (const int error = check_timed(clock, abstime); error != 0) return error;
  const void* return_address = __builtin_return_address(0);
  lock_checkpoint(return_address);
  return write_lock(lock, Deadline::at_time(clock, abstime), return_address);
}

[[gnu::noinline]] int pthread_rwlock_unlock(pthread_rwlock_t* lock) {
  if (!lock_hooks_enabled()) return real::pthread_rwlock_unlock()(lock);
  if (pthread_layout::rwlock_pshared(lock)) {
    // A writer's unlock gives its pin back (shared_lock). Another fiber
    // of the writer's thread is not the writer, though glibc would take
    // it for it (POSIX's EPERM: the caller holds no lock on it).
    FiberControl* const keeper = glibc_lock_keeper();
    if (keeper == nullptr) return real::pthread_rwlock_unlock()(lock);
    if (holding(keeper, lock) == Holding::other_fiber) return EPERM;
    const int tid = cached_tid != 0 ? cached_tid : fetch_tid();
    const bool writer = pthread_layout::rwlock_writer_tag(lock).load(std::memory_order_relaxed) == tid;
    const int result = real::pthread_rwlock_unlock()(lock);
    return writer ? unpin_if_released(keeper, result, lock, false) : result;
  }
  unlock(lock, current_caller());
  return 0;
}

}  // extern "C"
#pragma GCC visibility pop
