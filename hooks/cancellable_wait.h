// Thread cancellation in the condition variable's wait (POSIX makes
// pthread_cond_wait, _timedwait and _clockwait cancellation points).
//
// glibc's wait sleeps with asynchronous cancellation enabled, so a
// pthread_cancel() that arrives while it sleeps ends the sleep at once.
// The hooks' wait sleeps on a futex of its own, which the cancellation's
// signal does not end (a deferred cancellation acts only at a cancellation
// point entered after it). So libweft interposes pthread_cancel too: after
// glibc's, it marks every wait of the target thread registered here and
// wakes it. The wait then leaves the parking lot, takes its mutex again and
// calls pthread_testcancel(), which acts as glibc's cleanup does: the
// cancellation handlers run with the mutex held. If the thread has
// cancellation disabled, the wait returns 0, a spurious wake-up (POSIX
// allows one; the caller's loop waits again).
//
// Plain threads only: a fiber's wait parks, and cancelling a worker thread
// is not something weft supports.
//
//   CancellableWait cancellable(&waiter.state);  // registered
//   pthread_testcancel();                         // one sent before it
//   ... sleep while !cancellable.requested() ...
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>

namespace weft::detail::locks {

class CancellableWait {
 public:
  // Registers the calling thread's wait on the futex `word`.
  explicit CancellableWait(std::atomic<std::uint32_t>* word) noexcept;
  ~CancellableWait();
  CancellableWait(const CancellableWait&) = delete;
  CancellableWait& operator=(const CancellableWait&) = delete;

  // Set by pthread_cancel() of this thread, once registered.
  const std::atomic<bool>& requested() const noexcept { return requested_; }

  // pthread_cancel's part, after glibc's: marks and wakes `thread`'s waits.
  static void wake(pthread_t thread) noexcept;

 private:
  const pthread_t thread_;
  std::atomic<std::uint32_t>* const word_;
  std::atomic<bool> requested_{false};
  // In the registry's bucket of thread_, under the bucket's lock.
  CancellableWait* prev_ = nullptr;
  CancellableWait* next_ = nullptr;
};

}  // namespace weft::detail::locks
