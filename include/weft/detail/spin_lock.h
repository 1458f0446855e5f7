// SpinLock: a tiny test-and-test-and-set lock for critical sections of a few
// dozen instructions (wait lists, run-queue overflow, fiber names).
//
// Why not std::mutex: every sync primitive takes one of these on its fast
// path, and an uncontended std::mutex costs two locked instructions plus a
// futex check on unlock. Never hold a SpinLock across a park: park() releases
// it after the fiber's context is saved (include/weft/detail/park.h).
#pragma once

#include <sys/syscall.h>

#include <atomic>

#include "raw_syscall.h"

namespace weft::detail {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Gives the thread's CPU to another thread: the kernel's sched_yield, not
// libc's name, which libweft interposes to yield the calling fiber
// (hooks/hooks_yields.cpp). A spin in weft must never switch fibers: the
// spinning fiber may be halfway into a park.
inline void yield_thread() noexcept { (void)raw_syscall(SYS_sched_yield); }

class SpinLock {
 public:
  void lock() noexcept {
    for (int spins = 0; locked_.exchange(true, std::memory_order_acquire); ++spins) {
      while (locked_.load(std::memory_order_relaxed)) {
        // More workers than cores is normal: the holder may be descheduled,
        // so give its core back instead of burning our slice.
        if (++spins > 64)
          yield_thread();
        else
          cpu_relax();
      }
    }
  }
  bool try_lock() noexcept { return !locked_.exchange(true, std::memory_order_acquire); }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace weft::detail
