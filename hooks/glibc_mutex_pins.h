// A fiber that holds one of glibc's own mutexes (robust, priority-
// inheriting or -protecting, process-shared: hooks/locks.h, point 2) stays
// on its worker until it lets go of it. glibc records such a mutex's owner
// as the thread's tid, and an unlock from another thread is refused
// (EPERM: robust, priority, error-checking and recursive kinds) or
// releases a futex the kernel ties to the locking thread, so a fiber that
// moved between its lock and its unlock could never release the mutex.
//
// Each lock that leaves the mutex held (0, or EOWNERDEAD for a robust one)
// pins the fiber as this_fiber::pin() does, a pin sysmon never releases;
// each unlock glibc accepts from it takes one such pin back. The fiber's
// count of these pins keeps an unlock made by another fiber on the same
// thread (one tid to glibc) from taking a pin that is not its own.
#pragma once

#include <pthread.h>

namespace weft::detail::locks {

// After glibc's lock, trylock, timedlock or clocklock of such a mutex:
// pins the calling fiber if the mutex is now its. Returns `result`.
int pin_if_held(int result) noexcept;
// After glibc's unlock: unpins once if the unlock succeeded and the
// calling fiber holds a pin of pin_if_held. Returns `result`.
int unpin_if_released(int result) noexcept;

}  // namespace weft::detail::locks
