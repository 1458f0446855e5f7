// sched_yield, thrd_yield and pthread_yield (std::this_thread::yield is
// sched_yield) in a fiber: the fiber yields to the other fibers of its
// worker, then the thread to the other threads, as Wisp's Thread.yield()
// yields the coroutine. And pthread_spin_lock, whose wait is a spin: the
// fiber yields between its tries.
//
// Why: a fiber spinning on a flag with a yield in the loop (a hand-rolled
// spin lock, a wait for another task of the same pool) makes no weft call,
// so it is never preempted, and a yield of the thread alone hands the CPU
// back to the same fiber. The fiber that would set the flag, queued behind
// it on that worker, never ran: with every worker spinning so, the process
// hung where threads would have gone on (tests/hooks_yield_test.cpp).
//
// Kept as on a thread: the result (0), errno (other fibers run meanwhile
// and set the thread's), and the thread: the fiber resumes on the worker it
// yielded on (ParkScope), as after any hooked call. weft's own spins yield
// the thread only (include/weft/detail/spin_lock.h, yield_thread).
#include <pthread.h>
#include <sched.h>
#include <threads.h>
#include <weft/detail/spin_lock.h>
#include <weft/this_fiber.h>

#include "hook_support.h"
#include "real_calls.h"

namespace weft::detail {
namespace {

void yield_fiber() noexcept {
  const int saved = errno_value();
  try {
    const ParkScope pinned;
    this_fiber::yield();
  } catch (...) {
    // A yield allocates nothing that can fail; nothing to report.
  }
  set_errno(saved);
}

// Tries before a spinning fiber first yields: a lock held for a few
// instructions by a fiber on another worker is taken without a switch.
constexpr int kSpinsBeforeYield = 64;

}  // namespace
}  // namespace weft::detail

using namespace weft::detail;

extern "C" {
// libc's names, interposed: exported, unlike the rest of libweft
// (include/weft/detail/visibility.h).
#pragma GCC visibility push(default)

int sched_yield() noexcept {
  if (parking_enabled()) yield_fiber();
  return real::sched_yield()();
}

// glibc's is sched_yield made inside libc, where no hook sees it.
void thrd_yield() {
  if (parking_enabled()) yield_fiber();
  real::thrd_yield()();
}

// Deprecated: glibc's headers (2.34 on) turn a call of pthread_yield into
// one of sched_yield, so only a binary built against older headers calls
// this symbol, and glibc's is sched_yield made inside libc. Named by its
// symbol: where <pthread.h> is seen, the name pthread_yield means
// sched_yield.
int pthread_yield_hook() noexcept __asm__("pthread_yield");
int pthread_yield_hook() noexcept { return sched_yield(); }

// glibc's spins in user space until the lock is free. A fiber whose holder
// waits on the same worker (parked in a call while holding the lock, or
// preempted) never saw it free: nothing ran the holder on that thread while
// the spinner spun, and a spin makes no call that could yield. So the fiber
// spins a little, then yields to its worker's fibers between tries; the
// lock is taken as glibc's trylock takes it, and the result is glibc's (0).
int pthread_spin_lock(pthread_spinlock_t* lock) noexcept {
  if (!parking_enabled()) return real::pthread_spin_lock()(lock);
  // Only glibc's own calls touch the lock word: what it holds when free is
  // glibc's business (1 on x86-64, 0 in the generic code).
  for (int spins = 0; real::pthread_spin_trylock()(lock) != 0;) {
    if (spins < kSpinsBeforeYield) {
      ++spins;  // counted only up to the limit: a long wait must not overflow it
      cpu_relax();
    } else {
      yield_fiber();
    }
  }
  return 0;
}

#pragma GCC visibility pop
}  // extern "C"
