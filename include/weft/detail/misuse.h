// Misuse that would corrupt silently is reported and aborts, in every
// build: a primitive destroyed while callers still wait on it would leave
// them parked on freed memory (and a later wake would write into it).
#pragma once

#include <cstddef>

#include "spin_lock.h"
#include "visibility.h"
#include "wait_list.h"

namespace weft::detail {

// Who is calling, for a message: `fiber "rpc-3" #42` or `thread 1234`.
void describe_caller(char* out, std::size_t size) noexcept;

// Aborts naming `kind`@`object`, the caller and who waits in `waiters`
// (and `more`, when the primitive has a second list), unless every one
// of them is a waiter the parent's fibers or threads left in a fork
// child's copy of the primitive (none of them is in the child: nothing
// waits). Call with the primitive's lock held, from its destructor, once
// a list is not empty.
WEFT_API void abort_if_waited_on(const char* kind, const void* object, const WaitList& waiters,
                                 const WaitList* more = nullptr) noexcept;

// The destructors' check: cheap (one lock, two loads) when nobody waits.
inline void check_no_waiters(const char* kind, const void* object, SpinLock& lock, const WaitList& waiters,
                             const WaitList* more = nullptr) noexcept {
  lock.lock();
  if (!waiters.empty() || (more != nullptr && !more->empty())) abort_if_waited_on(kind, object, waiters, more);
  lock.unlock();
}

}  // namespace weft::detail
