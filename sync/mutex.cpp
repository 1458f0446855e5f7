#include <unistd.h>
#include <weft/mutex.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "../runtime/fiber_control.h"
#include "../runtime/log.h"
#include "../sched/current.h"
#include "../sched/wait_owner.h"

namespace weft {
namespace {

// Who is calling: the fiber (which may move between threads) or, off a
// fiber, the thread.
// Identities are 8-aligned addresses with bit 1 set for a thread; bit 0 is
// the lock word's kWaiters.
constexpr std::uintptr_t kWaiters = 1;
constexpr std::uintptr_t kThreadBit = 2;

// A thread's identity is the address of its token, which holds its tid
// for weft-dump (MutexInspection below); set on the thread's first lock.
struct alignas(8) ThreadToken {
  int tid = 0;
};

std::uintptr_t caller_identity() noexcept {
  [[gnu::tls_model("initial-exec")]] thread_local ThreadToken thread_token;
  // One (deliberately not inlined) look at the thread's running fiber: a
  // fiber may resume on another thread, so its TLS address is never cached.
  if (detail::FiberControl* fiber = detail::own_fiber()) return reinterpret_cast<std::uintptr_t>(fiber);
  if (thread_token.tid == 0) [[unlikely]]
    thread_token.tid = static_cast<int>(::gettid());
  return reinterpret_cast<std::uintptr_t>(&thread_token) | kThreadBit;
}

// Keeps FiberControl::weft_mutexes_held: a fiber's count of the mutexes
// it holds, which must be 0 when it ends (sched's fiber_main). Threads keep
// none.
void note_taken(std::uintptr_t me) noexcept {
  if ((me & kThreadBit) == 0) ++reinterpret_cast<detail::FiberControl*>(me)->weft_mutexes_held;
}
void note_released(std::uintptr_t me) noexcept {
  if ((me & kThreadBit) == 0) --reinterpret_cast<detail::FiberControl*>(me)->weft_mutexes_held;
}

[[noreturn]] void report_bad_unlock(const Mutex* mutex, bool locked) noexcept {
  char caller[96];
  detail::describe_caller(caller, sizeof caller);
  detail::log_message(LogLevel::fatal, "weft: weft::Mutex@%p unlocked by %s, %s", static_cast<const void*>(mutex),
                      caller, locked ? "which does not own it" : "but it was not locked");
  std::abort();
}

}  // namespace

// Who holds a mutex, for the fibers weft-dump finds waiting on it
// (sched/wait_owner.h): the owner part of its lock word, a fiber's control
// block or a thread's token, read quietly, since the mutex may be gone.
struct detail::MutexInspection {
  static WaitOwner owner(const void* object) noexcept {
    std::uintptr_t state = 0;
    if (!read_member_quietly<Mutex>(object, &Mutex::state_, state)) return {};
    const std::uintptr_t owner = state & ~(kWaiters | kThreadBit);
    if (owner == 0) return {};
    if ((state & kThreadBit) == 0) return {fiber_id_at(reinterpret_cast<const FiberControl*>(owner)), 0};
    ThreadToken token;
    if (!read_quietly(reinterpret_cast<const void*>(owner), &token, sizeof(token))) return {};
    return {0, token.tid};
  }
};

namespace {
[[maybe_unused]] const bool owners_registered =
    detail::register_wait_owner("weft::Mutex", &detail::MutexInspection::owner);
}  // namespace

// A waiter that has waited this long is handed the lock instead of woken
// to compete (Go's sync.Mutex starvation threshold).
constexpr std::int64_t kStarvingNs = 1'000'000;
// How many times a plain thread looks for the lock to come free before it
// sleeps: a few microseconds, about one short critical section.
constexpr int kThreadSpins = 64;

std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(detail::Clock::now().time_since_epoch()).count();
}

bool Mutex::try_claim(std::uintptr_t me) noexcept {
  std::uintptr_t state = state_.load(std::memory_order_relaxed);
  while ((state & ~kWaiters) == 0) {
    if (state_.compare_exchange_weak(state, me | state, std::memory_order_acquire, std::memory_order_relaxed))
      return true;
  }
  return false;
}

// lock() and try_lock*() are checkpoints on entry, before the lock is
// taken: a fiber preempted there does not keep the lock while it waits to
// run again. unlock() is one after the lock is free.
bool Mutex::try_lock() {
  detail::checkpoint();
  const std::uintptr_t me = caller_identity();
  if (!try_claim(me)) return false;
  note_taken(me);
  return true;
}

bool Mutex::spin_then_try_lock(std::uintptr_t me) noexcept {
  for (int i = 0; i < kThreadSpins; ++i) {
    if ((state_.load(std::memory_order_relaxed) & ~kWaiters) == 0 && try_claim(me)) return true;
    detail::cpu_relax();
  }
  return false;
}

// Invariant (kept under lock_): while waiters_ is non-empty, kWaiters is
// set, so that unlock() takes lock_ and wakes one. kWaiters may be set with
// no waiter left (they timed out); the next slow unlock clears it.
void Mutex::lock() {
  detail::checkpoint();
  const std::uintptr_t me = caller_identity();
  std::uintptr_t expected = 0;
  if (!state_.compare_exchange_strong(expected, me, std::memory_order_acquire, std::memory_order_relaxed))
    acquire(me, detail::no_deadline);
  note_taken(me);
}

bool Mutex::acquire(detail::Clock::time_point deadline) {
  detail::checkpoint();
  const std::uintptr_t me = caller_identity();
  if (!acquire(me, deadline)) return false;
  note_taken(me);
  return true;
}

bool Mutex::acquire(std::uintptr_t me, detail::Clock::time_point deadline) {
  if ((me & kThreadBit) != 0 ? spin_then_try_lock(me) : try_claim(me)) return true;
  detail::Waiter waiter;
  waiter.payload = reinterpret_cast<void*>(me);
  lock_.lock();
  for (;;) {
    // Announce a waiter before the last look, so that an unlock() racing
    // with us either is seen here (the lock is free) or sees kWaiters.
    if ((state_.fetch_or(kWaiters, std::memory_order_acq_rel) & ~kWaiters) == 0) {
      std::uintptr_t state = kWaiters;
      const std::uintptr_t mine = me | (waiters_.empty() ? 0 : kWaiters);
      if (state_.compare_exchange_strong(state, mine, std::memory_order_acquire, std::memory_order_relaxed)) {
        lock_.unlock();
        return true;
      }
      continue;  // a barger took it meanwhile
    }
    if (waiter.amount == 0) {
      waiter.amount = static_cast<std::uint64_t>(now_ns());  // first arrival: its place in the line
      waiters_.push_back(waiter);
    } else {
      waiters_.push_front(waiter);  // woken to compete and lost: keep its place
    }
    if (detail::park(waiter, &lock_, {"weft::Mutex", this, "lock"}, deadline) == detail::WakeReason::timed_out) {
      lock_.lock();
      waiters_.remove(waiter);
      lock_.unlock();
      return false;
    }
    // Handed over? The waker's release of the waiter's state orders its
    // store of state_ before this load.
    if ((state_.load(std::memory_order_acquire) & ~kWaiters) == me) return true;
    waiter.state.store(detail::Waiter::waiting, std::memory_order_relaxed);
    lock_.lock();
  }
}

void Mutex::unlock() {
  unlock_holding_spin_lock();
  detail::checkpoint();  // lock_ is free again
}

void Mutex::unlock_holding_spin_lock() {
  const std::uintptr_t me = caller_identity();
  std::uintptr_t expected = me;
  if (!state_.compare_exchange_strong(expected, 0, std::memory_order_release, std::memory_order_relaxed))
    unlock_slow(me);  // aborts unless `me` holds it
  note_released(me);
}

void Mutex::unlock_slow(std::uintptr_t me) {
  std::lock_guard guard(lock_);
  const std::uintptr_t state = state_.load(std::memory_order_relaxed);
  // One compare, kept in release builds: a foreign unlock would let two
  // callers into the critical section with no error.
  if ((state & ~kWaiters) != me) report_bad_unlock(this, (state & ~kWaiters) != 0);
  detail::Waiter* front = waiters_.front();
  if (front == nullptr) {
    state_.store(0, std::memory_order_release);
    return;
  }
  const auto remaining = [&] { return waiters_.empty() ? 0 : kWaiters; };
  if (front->fiber != nullptr || now_ns() - static_cast<std::int64_t>(front->amount) > kStarvingNs) {
    // Hand-off: the owner part never reads 0, so nobody barges in between.
    const bool handed = detail::wake_first(
        waiters_,
        [&](detail::Waiter& w) {
          state_.store(reinterpret_cast<std::uintptr_t>(w.payload) | remaining(), std::memory_order_release);
        },
        [&](detail::Waiter&) { state_.store(me | kWaiters, std::memory_order_relaxed); });
    if (!handed) state_.store(0, std::memory_order_release);
    return;
  }
  // Wake to compete: free it now; running callers may take it first.
  detail::wake_first(
      waiters_, [&](detail::Waiter&) { state_.store(remaining(), std::memory_order_release); }, [](detail::Waiter&) {});
  if (waiters_.empty() && (state_.load(std::memory_order_relaxed) & ~kWaiters) == me)
    state_.store(0, std::memory_order_release);
}

}  // namespace weft
