// sched_yield, thrd_yield, pthread_yield and std::this_thread::yield in a fiber
// (hooks/hooks_yields.cpp): the fiber yields to the fibers of its worker,
// keeping errno and its thread as a thread's yield does. Internal: it reads
// the yielder's pin count.
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <threads.h>
#include <unistd.h>
#include <weft/weft.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "hooks_test_support.h"
#include "runtime/fiber_control.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using test::one_worker;

// The pthread_yield symbol, as a binary built against glibc's headers
// before 2.34 calls it (newer headers make the name sched_yield).
int old_pthread_yield() {
  static const auto call = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "pthread_yield"));
  EXPECT_NE(call, nullptr) << "no pthread_yield symbol";
  return call != nullptr ? call() : -1;
}

// A fiber spinning with a yield in its loop lets the fiber that ends its
// spin run on the same worker: the yield is the fiber's, not only the
// thread's. Before, the spinner never made a weft call, so nothing
// preempted it, and the thread's yield gave the CPU back to it: it spun
// until its bound (20 s here; for good without one).
TEST(HooksYield, ASpinWithAYieldLetsTheFiberItWaitsForRun) {
  const std::vector<std::pair<const char*, void (*)()>> yields = {
      {"std::this_thread::yield", [] { std::this_thread::yield(); }},
      {"sched_yield", [] { EXPECT_EQ(sched_yield(), 0); }},
      {"thrd_yield", [] { thrd_yield(); }},
      {"pthread_yield (the symbol)", [] { EXPECT_EQ(old_pthread_yield(), 0); }},
  };
  for (const auto& entry : yields) {
    const char* name = entry.first;
    void (*yield)() = entry.second;
    Config config = test::config_with(1);
    config.max_threads = config.workers;  // no spares
    config.preemption = false;            // only the yield can let the setter run
    Scheduler sched{config};
    bool seen = false;
    sched
        .spawn([&] {
          std::atomic<bool> flag{false};
          Fiber setter = spawn([&] { flag = true; });
          const auto give_up = Clock::now() + 20s;  // only a failing test waits it out
          while (!flag.load() && Clock::now() < give_up) yield();
          seen = flag.load();
          setter.join();
        })
        .join();
    EXPECT_TRUE(seen) << name << " never let the setter run";
  }
}

// The yield keeps what a thread's keeps: the caller's errno (the fiber it
// yields to fails a call on the same thread), and the thread: the yielder
// is pinned to its worker meanwhile, as in any hooked call (else it could
// resume on another worker, with the caller's cached &errno still this
// thread's).
TEST(HooksYield, AYieldKeepsTheCallersErrnoAndThread) {
  Scheduler sched = one_worker();
  int errno_after = 0;
  std::atomic<bool> other_failed{false};
  bool failed_during_yields = false;
  bool yielder_pinned = false;
  sched
      .spawn([&] {
        const detail::FiberControl* yielder = detail::current_fiber();
        Fiber other = spawn([&] {
          yielder_pinned = yielder->pin_count.load() != 0;
          other_failed = ::close(-1) == -1 && errno == EBADF;
        });
        errno = 4321;
        for (int i = 0; i < 10 && !other_failed.load(); ++i) EXPECT_EQ(sched_yield(), 0);
        errno_after = errno;
        failed_during_yields = other_failed.load();
        other.join();
        EXPECT_EQ(yielder->pin_count.load(), 0u) << "unpinned after the yield";
      })
      .join();
  EXPECT_TRUE(failed_during_yields) << "the other fiber did not run during the yields";
  EXPECT_EQ(errno_after, 4321);
  EXPECT_TRUE(yielder_pinned);
}

// A fiber waiting for a spin lock whose holder is parked on the same
// worker (asleep in a hooked call while holding it) lets the holder run:
// glibc's pthread_spin_lock spins in user space and made no call that
// could yield, so the holder, pinned to this thread by its hooked sleep,
// never resumed (a watchdog thread unlocked the lock from outside after
// 20 s; for good without one).
TEST(HooksYield, ASpinLockWaiterLetsTheHolderOnItsWorkerRun) {
  Config config = test::config_with(1);
  config.max_threads = config.workers;  // no spares
  config.preemption = false;            // only the spin's yield can let the holder run
  Scheduler sched{config};
  pthread_spinlock_t lock;
  ASSERT_EQ(pthread_spin_init(&lock, PTHREAD_PROCESS_PRIVATE), 0);
  std::atomic<bool> finished{false};
  std::atomic<bool> rescued{false};
  std::thread watchdog([&] {
    const auto give_up = Clock::now() + 20s;  // only a failing test waits it out
    while (!finished.load() && Clock::now() < give_up) std::this_thread::sleep_for(1ms);
    if (!finished.load()) {
      rescued = true;
      pthread_spin_unlock(&lock);
    }
  });
  int spin_result = -1;
  bool holder_done_first = false;
  std::atomic<bool> held{false};
  std::atomic<bool> holder_done{false};
  sched
      .spawn([&] {
        Fiber holder = spawn([&] {
          EXPECT_EQ(pthread_spin_lock(&lock), 0);
          held = true;
          ::usleep(20'000);  // parks, pinned to this worker, holding the lock
          holder_done = true;
          pthread_spin_unlock(&lock);
        });
        while (!held.load()) this_fiber::yield();
        spin_result = pthread_spin_lock(&lock);
        holder_done_first = holder_done.load();
        pthread_spin_unlock(&lock);
        holder.join();
      })
      .join();
  finished = true;
  watchdog.join();
  EXPECT_FALSE(rescued) << "the spinner never let the holder run";
  EXPECT_EQ(spin_result, 0);
  EXPECT_TRUE(holder_done_first) << "the spinner took a lock that was still held";
  pthread_spin_destroy(&lock);
}

}  // namespace
}  // namespace weft
