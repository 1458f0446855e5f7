#include "mutex.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace weft {
namespace {

#ifndef NDEBUG
// Who is calling: the fiber (which may move between threads) or, off a
// fiber, the thread.
std::uintptr_t caller_identity() noexcept {
  thread_local char thread_token;
  if (detail::FiberControl* fiber = detail::current_fiber()) return reinterpret_cast<std::uintptr_t>(fiber);
  return reinterpret_cast<std::uintptr_t>(&thread_token) | 1u;
}
#endif

}  // namespace

void Mutex::set_owner() noexcept {
#ifndef NDEBUG
  owner_ = caller_identity();
#endif
}

bool Mutex::try_lock() {
  std::lock_guard guard(lock_);
  if (locked_ || starving_) return false;
  locked_ = true;
  set_owner();
  return true;
}

// Waiter::amount: 1 when unlock() handed the lock over (fair mode), 0 when
// it only woke the waiter to compete.
bool Mutex::acquire(detail::Clock::time_point deadline) {
  lock_.lock();
  if (!locked_ && !starving_) {
    locked_ = true;
    set_owner();
    lock_.unlock();
    return true;
  }
  const detail::Clock::time_point since = detail::Clock::now();
  bool lost_a_race = false;
  for (;;) {
    detail::Waiter waiter;
    if (lost_a_race)
      waiters_.push_front(waiter);
    else
      waiters_.push_back(waiter);
    if (detail::park(waiter, &lock_, {"weft::Mutex", this, "lock"}, deadline) != detail::WakeReason::notified) {
      std::lock_guard guard(lock_);
      waiters_.remove(waiter);
      return false;
    }
    lock_.lock();
    const bool waited_long = detail::Clock::now() - since >= starvation_threshold;
    if (waiter.amount == 1) {  // handed over: locked_ stayed true
      if (waiters_.empty() || !waited_long) starving_ = false;
      set_owner();
      lock_.unlock();
      return true;
    }
    waking_ = false;
    if (!locked_) {
      locked_ = true;
      set_owner();
      lock_.unlock();
      return true;
    }
    // A running newcomer got there first: wait again, at the front, with
    // lock_ still held (park() releases it).
    if (waited_long) starving_ = true;
    lost_a_race = true;
  }
}

void Mutex::unlock() {
  std::lock_guard guard(lock_);
#ifndef NDEBUG
  if (!locked_ || owner_ != caller_identity()) {
    std::fprintf(stderr, "weft: weft::Mutex@%p unlocked by %s\n", static_cast<void*>(this),
                 locked_ ? "a fiber or thread that does not own it" : "nobody: it was not locked");
    std::abort();
  }
  owner_ = 0;
#endif
  if (starving_) {
    const bool handed = detail::wake_first(
        waiters_, [](detail::Waiter& w) { w.amount = 1; }, [](detail::Waiter& w) { w.amount = 0; });
    if (!handed) {
      locked_ = false;
      starving_ = false;
    }
    return;
  }
  locked_ = false;
  // One competitor at a time: while a woken waiter is on its way, more
  // wakes would only have them lose to each other.
  if (!waking_ && detail::wake_first(waiters_)) waking_ = true;
}

}  // namespace weft
