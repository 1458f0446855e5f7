#include <weft/mutex.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "../runtime/fiber_control.h"

namespace weft {
namespace {

// Who is calling: the fiber (which may move between threads) or, off a
// fiber, the thread.
std::uintptr_t caller_identity() noexcept {
  thread_local char thread_token;
  if (detail::FiberControl* fiber = detail::current_fiber()) return reinterpret_cast<std::uintptr_t>(fiber);
  return reinterpret_cast<std::uintptr_t>(&thread_token) | 1u;
}

[[noreturn]] void report_bad_unlock(const Mutex* mutex, bool locked) noexcept {
  char caller[96];
  detail::describe_caller(caller, sizeof caller);
  std::fprintf(stderr, "weft: weft::Mutex@%p unlocked by %s, %s\n", static_cast<const void*>(mutex), caller,
               locked ? "which does not own it" : "but it was not locked");
  std::abort();
}

}  // namespace

void Mutex::set_owner() noexcept { owner_ = caller_identity(); }

bool Mutex::try_lock() {
  std::lock_guard guard(lock_);
  if (locked_) return false;
  locked_ = true;
  set_owner();
  return true;
}

bool Mutex::acquire(detail::Clock::time_point deadline) {
  // Woken means the lock was handed to us: locked_ stayed true throughout.
  const bool acquired = detail::wait_unless(
      waiters_, lock_,
      [&] {
        if (locked_) return false;
        locked_ = true;
        return true;
      },
      {"weft::Mutex", this, "lock"}, deadline);
  if (acquired) {
    std::lock_guard guard(lock_);
    set_owner();
  }
  return acquired;
}

void Mutex::unlock() {
  std::lock_guard guard(lock_);
  // One compare, kept in release builds: a foreign unlock would let two
  // callers into the critical section with no error.
  if (!locked_ || owner_ != caller_identity()) report_bad_unlock(this, locked_);
  owner_ = 0;
  if (!detail::wake_first(waiters_)) locked_ = false;
}

}  // namespace weft
