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
#ifndef NDEBUG
  if (!locked_ || owner_ != caller_identity()) {
    std::fprintf(stderr, "weft: weft::Mutex@%p unlocked by %s\n", static_cast<void*>(this),
                 locked_ ? "a fiber or thread that does not own it" : "nobody: it was not locked");
    std::abort();
  }
  owner_ = 0;
#endif
  if (!detail::wake_first(waiters_)) locked_ = false;
}

}  // namespace weft
