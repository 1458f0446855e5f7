#include "cancellable_wait.h"

#include <climits>
#include <mutex>
#include <new>

#include "../sched/raw_lock.h"
#include "locks.h"
#include "real_calls.h"

namespace weft::detail::locks {
namespace {

// The registered waits: a list of the waiters' own objects, which live in
// their frames. Invariant: an object is linked exactly while its
// constructor has returned and its destructor has not, so wake() may touch
// any linked one under the lock.
RawMutex registry_lock;
CancellableWait* registered = nullptr;

// A forked child has only the forking thread: the others' waits, and a lock
// one of them may have held, are gone.
void forget_in_child() noexcept {
  new (&registry_lock) RawMutex();
  registered = nullptr;
}
[[gnu::constructor]] void register_fork_handler() { pthread_atfork(nullptr, nullptr, &forget_in_child); }

}  // namespace

CancellableWait::CancellableWait(std::atomic<std::uint32_t>* word) noexcept : thread_(pthread_self()), word_(word) {
  const std::lock_guard guard(registry_lock);
  next_ = registered;
  registered = this;
}

CancellableWait::~CancellableWait() {
  const std::lock_guard guard(registry_lock);
  for (CancellableWait** link = &registered; *link != nullptr; link = &(*link)->next_) {
    if (*link == this) {
      *link = next_;
      break;
    }
  }
}

void CancellableWait::wake(pthread_t thread) noexcept {
  const std::lock_guard guard(registry_lock);
  for (CancellableWait* wait = registered; wait != nullptr; wait = wait->next_) {
    if (pthread_equal(wait->thread_, thread) == 0) continue;
    wait->requested_.store(true, std::memory_order_release);
    futex_wake(wait->word_, INT_MAX);
  }
}

}  // namespace weft::detail::locks

// Exported: it interposes libc's (include/weft/detail/visibility.h).
#pragma GCC visibility push(default)
extern "C" {

int pthread_cancel(pthread_t thread) {
  const int result = weft::detail::real::pthread_cancel()(thread);
  if (result == 0) weft::detail::locks::CancellableWait::wake(thread);
  return result;
}

}  // extern "C"
#pragma GCC visibility pop
