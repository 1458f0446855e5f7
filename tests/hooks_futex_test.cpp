// Futex waits through syscall(2), and pthread_once's, in a fiber
// (hooks/hooks_futex.cpp): a function-local static's waiters, std::call_once's
// and C++20's atomic waits park the fiber while a helper waits in the
// kernel, and the call answers as on a thread.
#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <threads.h>
#include <unistd.h>
#include <weft/weft.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <ctime>
#include <functional>
#include <latch>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "hooks_test_support.h"

namespace weft {
namespace {

using namespace std::chrono_literals;

// Fibers of `sched` parked in a futex wait (the hook's wait site).
std::size_t parked_in_futex(const Scheduler& sched) {
  std::size_t n = 0;
  for (const FiberSnapshot& fiber : sched.snapshot().fibers)
    if (fiber.state == "parked" && fiber.wait_kind == "futex") ++n;
  return n;
}

// Waits (up to 20 s) until `n` fibers are parked in a futex wait.
bool futex_waiters_reach(const Scheduler& sched, std::size_t n) {
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < until) {
    if (parked_in_futex(sched) >= n) return true;
    std::this_thread::sleep_for(1ms);
  }
  return false;
}

// A function-local static whose initializer waits for the test.
std::atomic<bool> initializer_entered{false};
Latch* let_initializer_finish = nullptr;

int slow_initial_value() {
  initializer_entered = true;
  let_initializer_finish->wait();
  return 42;
}

int guarded_value() {
  static const int value = slow_initial_value();
  return value;
}

constexpr int kWaiters = 8;

// Spawns `first` on 2 workers and, once `entered` says it is inside what
// the others will wait for, kWaiters fibers running `waiter`; expects them
// all parked in a futex wait before `release` lets `first` finish, then
// joins them all.
void expect_waiters_park(Latch& release, const std::atomic<bool>& entered, const std::function<void()>& first,
                         const std::function<void()>& waiter) {
  Scheduler sched{test::config_with(2)};
  Fiber first_fiber = sched.spawn(first);
  while (!entered) std::this_thread::sleep_for(1ms);
  std::vector<Fiber> waiters;
  for (int i = 0; i < kWaiters; ++i) waiters.push_back(sched.spawn(waiter));
  EXPECT_TRUE(futex_waiters_reach(sched, kWaiters)) << parked_in_futex(sched) << " of " << kWaiters << " parked";
  release.count_down();
  first_fiber.join();
  for (Fiber& fiber : waiters) fiber.join();
}

// Fibers that reach a static another fiber is initializing park, rather
// than hold their threads in __cxa_guard_acquire's futex wait. Before,
// each took its worker's thread (sysmon started a spare for the next): 100
// fibers behind a 5 ms initializer took 100 ms.
TEST(HooksFutex, AStaticsWaitersParkWhileAnotherFiberInitializesIt) {
#if defined(WEFT_UNDER_TSAN)
  GTEST_SKIP() << "under TSan futex waits and pthread_once pass through (docs/io.md)";
#endif
  Latch release{1};
  let_initializer_finish = &release;
  std::atomic<int> sum{0};
  expect_waiters_park(
      release, initializer_entered, [] { EXPECT_EQ(guarded_value(), 42); }, [&] { sum += guarded_value(); });
  EXPECT_EQ(sum, 42 * kWaiters);
}

// std::call_once (pthread_once, whose wait is inside libc): the fibers
// that find another running the callable park until it has returned, and
// none runs its own.
TEST(HooksFutex, CallOnceWaitersParkWhileAnotherFiberRunsIt) {
#if defined(WEFT_UNDER_TSAN)
  GTEST_SKIP() << "under TSan futex waits and pthread_once pass through (docs/io.md)";
#endif
  std::once_flag flag;
  Latch release{1};
  std::atomic<bool> entered{false};
  std::atomic<int> runs{0};
  expect_waiters_park(
      release, entered,
      [&] {
        std::call_once(flag, [&] {
          entered = true;
          release.wait();
          ++runs;
        });
      },
      [&] { std::call_once(flag, [&] { ++runs; }); });
  EXPECT_EQ(runs, 1);
}

// std::call_once whose first callable parks and throws, while another
// fiber of the same worker waits on the flag and a third runs a call_once
// of its own: the waiter then runs its own callable, as a thread would.
// libstdc++ hands the callable to pthread_once in two thread_locals,
// which the third fiber's call_once cleared while the waiter was parked:
// glibc then ran __once_proxy with none (SIGSEGV at address 0) or with
// another fiber's callable.
TEST(HooksFutex, CallOnceWhoseFirstCallableThrowsRunsTheWaitersOwn) {
#if defined(WEFT_UNDER_TSAN)
  GTEST_SKIP() << "under TSan futex waits and pthread_once pass through (docs/io.md)";
#endif
  Scheduler sched{test::config_with(1)};
  std::once_flag flag;
  std::once_flag unrelated;
  std::atomic<bool> first_entered{false};
  std::string events;
  Fiber first = sched.spawn([&] {
    try {
      std::call_once(flag, [&] {
        first_entered = true;
        ::usleep(50'000);  // parks: the other fibers run meanwhile
        throw std::runtime_error("first attempt failed");
      });
    } catch (const std::runtime_error&) {
      events += "first threw; ";
    }
  });
  Fiber waiter = sched.spawn([&] {
    while (!first_entered.load()) this_fiber::yield();
    std::call_once(flag, [&] { events += "waiter's callable ran; "; });
    events += "waiter returned; ";
  });
  Fiber other = sched.spawn([&] {
    while (!first_entered.load()) this_fiber::yield();
    this_fiber::yield();  // the waiter is parked on the flag
    std::call_once(unrelated, [&] { events += "unrelated ran; "; });
  });
  first.join();
  waiter.join();
  other.join();
  EXPECT_EQ(events, "unrelated ran; first threw; waiter's callable ran; waiter returned; ");
}

// C11's call_once (glibc's runs its internal pthread_once, which no hook
// sees): as std::call_once. Before, the waiters blocked their workers.
std::atomic<bool> c11_entered{false};
std::atomic<int> c11_runs{0};
Latch* c11_release = nullptr;
void c11_routine() {
  c11_entered = true;
  c11_release->wait();
  ++c11_runs;
}
void c11_late_routine() { ++c11_runs; }

TEST(HooksFutex, C11CallOnceWaitersParkWhileAnotherFiberRunsIt) {
#if defined(WEFT_UNDER_TSAN)
  GTEST_SKIP() << "under TSan futex waits and pthread_once pass through (docs/io.md)";
#endif
  static once_flag flag = ONCE_FLAG_INIT;
  Latch release{1};
  c11_release = &release;
  expect_waiters_park(
      release, c11_entered, [] { call_once(&flag, c11_routine); }, [] { call_once(&flag, c11_late_routine); });
  EXPECT_EQ(c11_runs, 1);
}

// pthread_once from fibers and threads at once: the routine runs once, and
// every call returns 0 after it has.
TEST(HooksFutex, PthreadOnceRunsTheRoutineOnceForFibersAndThreads) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  static std::atomic<int> runs{0};
  static std::atomic<bool> done{false};
  Scheduler sched{test::config_with(2)};
  std::atomic<int> good{0};
  auto call = [&] {
    if (pthread_once(&once,
                     [] {
                       std::this_thread::sleep_for(5ms);  // parks a fiber, holds a thread
                       ++runs;
                       done = true;
                     }) == 0 &&
        done)
      ++good;
  };
  std::vector<Fiber> fibers;
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) {
    fibers.push_back(sched.spawn(call));
    threads.emplace_back(call);
  }
  for (Fiber& fiber : fibers) fiber.join();
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(good, 32);
}

// std::latch, std::atomic::wait: their waits park too.
TEST(HooksFutex, CxxAtomicWaitsPark) {
#if defined(WEFT_UNDER_TSAN)
  GTEST_SKIP() << "under TSan futex waits and pthread_once pass through (docs/io.md)";
#endif
  constexpr int kWaiters = 6;
  Scheduler sched{test::config_with(2)};
  std::latch done{1};
  std::atomic<int> word{0};
  std::atomic<int> finished{0};
  std::vector<Fiber> fibers;
  for (int i = 0; i < kWaiters / 2; ++i) {
    fibers.push_back(sched.spawn([&] {
      done.wait();
      ++finished;
    }));
    fibers.push_back(sched.spawn([&] {
      word.wait(0);
      ++finished;
    }));
  }
  EXPECT_TRUE(futex_waiters_reach(sched, kWaiters)) << parked_in_futex(sched) << " of " << kWaiters << " parked";
  done.count_down();
  word = 1;
  word.notify_all();
  for (Fiber& fiber : fibers) fiber.join();
  EXPECT_EQ(finished, kWaiters);
}

struct Answer {
  long result;
  int error;
};

Answer futex_wait(int* word, int op, int value, const timespec* timeout, int bitset = 0) {
  errno = 0;
  const long result = syscall(SYS_futex, word, op, value, timeout, nullptr, bitset);
  return {result, errno};
}

// Each case in a fiber answers as the same call on a plain thread.
void expect_same_answers_on_thread_and_fiber(const std::vector<std::function<Answer()>>& cases) {
  Scheduler sched{test::config_with(2)};
  for (std::size_t i = 0; i < cases.size(); ++i) {
    Answer on_thread{};
    std::thread([&] { on_thread = cases[i](); }).join();
    Answer on_fiber{};
    sched.spawn([&] { on_fiber = cases[i](); }).join();
    EXPECT_EQ(on_fiber.result, on_thread.result) << "case " << i;
    EXPECT_EQ(on_fiber.error, on_thread.error) << "case " << i;
  }
}

TEST(HooksFutex, AWaitAnswersAsOnAThread) {
  static int word = 1;
  const timespec one_ms{0, 1'000'000};
  const std::vector<std::function<Answer()>> cases = {
      [&] { return futex_wait(&word, FUTEX_WAIT_PRIVATE, 2, nullptr); },    // the word moved on: EAGAIN
      [&] { return futex_wait(&word, FUTEX_WAIT_PRIVATE, 1, &one_ms); },    // timed out
      [&] { return futex_wait(&word, FUTEX_WAIT, 1, &one_ms); },            // shared, timed out
      [&] { return futex_wait(nullptr, FUTEX_WAIT_PRIVATE, 1, &one_ms); },  // EFAULT
      // A bitset wait with an empty bitset: EINVAL.
      [&] { return futex_wait(&word, FUTEX_WAIT_BITSET_PRIVATE, 1, nullptr, 0); },
      [&] {  // an absolute deadline, already past
        timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        return futex_wait(&word, FUTEX_WAIT_BITSET_PRIVATE, 1, &now, FUTEX_BITSET_MATCH_ANY);
      },
  };
  expect_same_answers_on_thread_and_fiber(cases);
}

// Calls the kernel refuses before it compares the word answer so, as on a
// thread, whatever the word holds: a timeout it cannot read (EFAULT) or
// that is no time (EINVAL), FUTEX_CLOCK_REALTIME on a FUTEX_WAIT (ENOSYS),
// a bitset wait with an empty bitset (EINVAL). Before, a fiber's call
// whose word had moved on answered EAGAIN.
TEST(HooksFutex, ACallTheKernelRefusesBeforeTheWordAnswersAsOnAThread) {
  static int word = 1;
  static const timespec too_many_ns{0, 1'000'000'000};
  static const timespec negative{-1, 0};
  static const timespec one_ms{0, 1'000'000};
  const auto* unreadable = reinterpret_cast<const timespec*>(16);
  std::vector<std::function<Answer()>> cases;
  for (const int value : {1, 2}) {  // the word's value, then another
    cases.push_back([=] { return futex_wait(&word, FUTEX_WAIT_PRIVATE, value, &too_many_ns); });
    cases.push_back([=] { return futex_wait(&word, FUTEX_WAIT_PRIVATE, value, &negative); });
    cases.push_back([=] { return futex_wait(&word, FUTEX_WAIT_PRIVATE, value, unreadable); });
    cases.push_back([=] { return futex_wait(&word, FUTEX_WAIT_PRIVATE | FUTEX_CLOCK_REALTIME, value, &one_ms); });
    cases.push_back([=] { return futex_wait(&word, FUTEX_WAIT_BITSET_PRIVATE, value, nullptr, 0); });
  }
  expect_same_answers_on_thread_and_fiber(cases);
}

// Other calls through syscall() reach the kernel with their arguments.
TEST(HooksFutex, OtherSystemCallsPassThrough) {
  Scheduler sched{test::config_with(1)};
  sched
      .spawn([] {
        EXPECT_EQ(syscall(SYS_getpid), getpid());
        EXPECT_EQ(syscall(SYS_gettid), gettid());
        int word = 0;
        EXPECT_EQ(syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0), 0);  // nobody to wake
      })
      .join();
}

// syscall() with fewer than six arguments, from a frame whose lowest
// word is an AddressSanitizer redzone (a local whose address is passed,
// as io_uring_setup's parameters are): the hook reads the sixth argument
// from the caller's stack, as glibc's syscall does, where ASan's checks
// in the hook reported a stack-buffer-underflow (files_test, in the
// ASan build). A real call, uname, whose result is checked.
[[gnu::noinline]] int machine_through_syscall() {
  utsname name{};
  if (syscall(SYS_uname, &name) != 0) return -1;
  return name.machine[0];
}

TEST(HooksFutex, AShortSyscallReadsNoMoreThanACallerMayHaveLeft) {
  utsname name{};
  ASSERT_EQ(uname(&name), 0);
  EXPECT_EQ(machine_through_syscall(), name.machine[0]);
}

// With the helpers' share for such waits taken (half of
// max_blocking_threads), a further wait blocks its thread as before, and
// every waiter still ends: nothing waits in a queue behind the waits.
TEST(HooksFutex, BeyondTheHelpersShareAWaitBlocksItsThread) {
#if defined(WEFT_UNDER_TSAN)
  GTEST_SKIP() << "under TSan futex waits and pthread_once pass through (docs/io.md)";
#endif
  constexpr int kWaiters = 4;
  Config config = test::config_with(2);
  config.max_blocking_threads = 2;  // one for futex waits
  Scheduler sched{config};
  std::atomic<int> word{0};
  std::atomic<int> finished{0};
  std::vector<Fiber> fibers;
  for (int i = 0; i < kWaiters; ++i)
    fibers.push_back(sched.spawn([&] {
      word.wait(0);
      ++finished;
    }));
  EXPECT_TRUE(futex_waiters_reach(sched, 1));
  std::this_thread::sleep_for(20ms);  // the others have blocked their threads meanwhile
  EXPECT_EQ(parked_in_futex(sched), 1u);
  word = 1;
  word.notify_all();
  for (Fiber& fiber : fibers) fiber.join();
  EXPECT_EQ(finished, kWaiters);
}

}  // namespace
}  // namespace weft
