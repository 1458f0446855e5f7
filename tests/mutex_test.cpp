// weft::Mutex and weft::ConditionVariable.
#include <weft/weft.h>

#include <atomic>
#include <mutex>
#include <vector>

#include "sync_support.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::Caller;

class MutexTest : public test::SyncTest {};

TEST(Mutex, WorksWithTheStdLockTypes) {
  Mutex a, b;
  {
    std::lock_guard guard(a);
    EXPECT_FALSE(a.try_lock());
  }
  {
    std::scoped_lock both(a, b);
    EXPECT_FALSE(b.try_lock());
  }
  std::unique_lock lock(a, std::defer_lock);
  EXPECT_TRUE(lock.try_lock_for(1ms));
  lock.unlock();
  EXPECT_TRUE(lock.try_lock_until(std::chrono::system_clock::now() + 1ms));
}

// One worker, a fiber that releases and retakes the lock in a loop with no
// switch in between, and a waiter on the same worker: the waiter must still
// get the lock. A mutex that let the releaser barge back in would wake the
// waiter into the releaser's own run queue and never let it run, since
// fibers are not preempted between checkpoints (docs/benchmarks.md, "Mutex
// from plain threads": a Go-style barging Mutex livelocked here).
TEST(Mutex, AReleaserRetakingAtOnceDoesNotStarveAWaiterOnItsWorker) {
  Scheduler sched{test::config_with(1)};
  Mutex mu;
  bool waiter_done = false;  // one worker: no data race
  int retakes = 0;
  Fiber releaser = sched.spawn([&] {
    mu.lock();
    Fiber waiter = spawn([&] {
      mu.lock();
      waiter_done = true;
      mu.unlock();
    });
    this_fiber::yield();  // the waiter runs and parks in lock()
    while (!waiter_done && retakes < 1000) {
      mu.unlock();
      mu.lock();  // no switch unless the lock went to the waiter
      ++retakes;
    }
    mu.unlock();
    waiter.join();
  });
  releaser.join();
  EXPECT_TRUE(waiter_done);
  EXPECT_LT(retakes, 1000) << "the waiter never got the lock while the releaser kept retaking it";
}

// The same for plain threads, whose waiters are woken to compete rather than
// handed the lock: a releaser that retakes at once wins every race against a
// waiter that has to wake up first, so only the starvation rule (a waiter
// past 1 ms is handed the lock) lets the waiter in. Without it this test
// runs into its 5 s bound.
TEST(Mutex, AReleaserRetakingAtOnceDoesNotStarveAWaitingThread) {
  Mutex mu;
  std::atomic<bool> waiter_done{false};
  std::atomic<bool> held{false};
  std::atomic<long> retakes{0};
  std::thread releaser([&] {
    mu.lock();
    held = true;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!waiter_done && std::chrono::steady_clock::now() < give_up) {
      mu.unlock();
      mu.lock();
      retakes.fetch_add(1, std::memory_order_relaxed);
      // A critical section of a few microseconds: a waiter that wakes up
      // finds the lock taken again.
      for (const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(5);
           std::chrono::steady_clock::now() < until;) {
      }
    }
    mu.unlock();
  });
  while (!held) std::this_thread::yield();
  const auto start = std::chrono::steady_clock::now();
  mu.lock();
  const auto waited = std::chrono::steady_clock::now() - start;
  waiter_done = true;
  mu.unlock();
  releaser.join();
  EXPECT_LT(waited, std::chrono::seconds(2))
      << "the waiting thread starved while the releaser retook the lock " << retakes << " times";
}

// 1,000 fibers each increment a Mutex-protected counter 1,000 times.
TEST_P(MutexTest, CountIsExact) {
  Mutex mu;
  std::uint64_t counter = 0;  // plain: the mutex is all that protects it
  const int callers = caller() == Caller::fiber ? 1000 : 8;
  const int increments = static_cast<int>(test::scaled(caller() == Caller::fiber ? 1000 : 20'000));
  std::vector<std::function<void()>> bodies(callers, [&] {
    for (int i = 0; i < increments; ++i) {
      std::lock_guard guard(mu);
      ++counter;
      if (i % 100 == 0) this_fiber::yield();  // switch while holding it
    }
  });
  run_callers(bodies);
  EXPECT_EQ(counter, static_cast<std::uint64_t>(callers) * increments);
}

TEST_P(MutexTest, TryLockForTimesOutAndThenSucceeds) {
  Mutex mu;
  std::atomic<bool> held{false}, timed_out{false};
  run_callers({[&] {
                 std::lock_guard guard(mu);
                 held.store(true);
                 while (!timed_out.load()) this_fiber::sleep_for(100us);
               },
               [&] {
                 while (!held.load()) this_fiber::yield();
                 EXPECT_FALSE(mu.try_lock_for(2ms));
                 timed_out.store(true);
                 EXPECT_TRUE(mu.try_lock_for(10s));
                 mu.unlock();
               }});
}

// try_lock_for's timeout against unlock in a tight loop: every round ends
// with the lock either taken (and released) or refused, never both, never
// lost (a lost hand-off would leave the mutex locked forever).
TEST_P(MutexTest, TimeoutRacesUnlock) {
  // Plain threads do not run on the workers, and each of their rounds is a
  // futex wake (~25 s for 100,000 here): one run covers them.
  if (caller() == Caller::thread && workers() != 1) GTEST_SKIP() << "covered by the 1-worker run";
  const int rounds = static_cast<int>(test::scaled(100'000));
  Mutex mu;
  std::atomic<int> round{0};
  // Guarded by `mu` only: a timed-out waiter that was also handed the lock
  // (a double wake) would find the other owner inside.
  bool inside = false;
  int overlaps = 0;
  auto critical_section = [&](bool yield) {
    if (inside) ++overlaps;
    inside = true;
    if (yield) this_fiber::yield();
    inside = false;
  };
  run_callers({[&] {
                 for (int i = 0; i < rounds; ++i) {
                   mu.lock();
                   round.store(i + 1);
                   critical_section(true);
                   mu.unlock();
                 }
               },
               [&] {
                 while (round.load() < rounds) {
                   if (mu.try_lock_for(std::chrono::microseconds(round.load() % 20))) {
                     critical_section(false);
                     mu.unlock();
                   }
                 }
               }});
  EXPECT_EQ(overlaps, 0);
  EXPECT_TRUE(mu.try_lock());  // not left locked by a lost hand-off
  mu.unlock();
}

TEST_P(MutexTest, NoWaiterStarves) {
  // Every contender must get the lock at least once while the others keep
  // hammering it; a barging mutex can starve one indefinitely.
  Mutex mu;
  constexpr int contenders = 4;
  std::atomic<int> satisfied{0};
  std::vector<std::function<void()>> bodies;
  for (int c = 0; c < contenders; ++c) {
    bodies.push_back([&] {
      bool counted = false;
      for (int i = 0; satisfied.load() < contenders; ++i) {
        std::lock_guard guard(mu);
        if (!counted && i >= 10) {
          counted = true;
          satisfied.fetch_add(1);
        }
        // Let the others queue up behind us: a mutex that lets the releaser
        // barge back in would now starve them.
        this_fiber::yield();
      }
    });
  }
  run_callers(bodies);
  EXPECT_EQ(satisfied.load(), contenders);
}

TEST_P(MutexTest, ConditionVariableWaitsForThePredicate) {
  Mutex mu;
  ConditionVariable cv;
  int stage = 0;
  std::vector<std::function<void()>> bodies;
  for (int waiter = 0; waiter < 4; ++waiter) {
    bodies.push_back([&] {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return stage == 1; });
      EXPECT_TRUE(lock.owns_lock());
    });
  }
  bodies.push_back([&] {
    this_fiber::sleep_for(1ms);
    {
      std::lock_guard guard(mu);
      stage = 1;
    }
    cv.notify_all();
  });
  run_callers(bodies);
}

TEST_P(MutexTest, ConditionVariableTimeouts) {
  Mutex mu;
  ConditionVariable cv;
  bool flag = false;
  run_one([&] {
    std::unique_lock lock(mu);
    EXPECT_EQ(cv.wait_for(lock, 2ms), std::cv_status::timeout);
    EXPECT_FALSE(cv.wait_for(lock, 2ms, [&] { return flag; }));
    EXPECT_FALSE(cv.wait_until(lock, std::chrono::system_clock::now() + 1ms, [&] { return flag; }));
    EXPECT_TRUE(lock.owns_lock());
  });
  run_callers({[&] {
                 std::unique_lock lock(mu);
                 EXPECT_TRUE(cv.wait_for(lock, 10s, [&] { return flag; }));
               },
               [&] {
                 this_fiber::sleep_for(1ms);
                 std::lock_guard guard(mu);
                 flag = true;
                 cv.notify_one();
               }});
}

// notify_one against wait_for's timeout, in a tight loop: no notification
// is lost (the producer's count of handed-over tokens is all consumed).
TEST_P(MutexTest, ConditionVariableTimeoutRacesNotify) {
  const int rounds = static_cast<int>(test::scaled(100'000));
  Mutex mu;
  ConditionVariable cv;
  int tokens = 0, consumed = 0;
  run_callers({[&] {
                 while (consumed < rounds) {
                   std::unique_lock lock(mu);
                   if (cv.wait_for(lock, std::chrono::microseconds(consumed % 20), [&] { return tokens > 0; })) {
                     --tokens;
                     ++consumed;
                   }
                 }
               },
               [&] {
                 for (int i = 0; i < rounds; ++i) {
                   {
                     std::lock_guard guard(mu);
                     ++tokens;
                   }
                   cv.notify_one();
                   if (i % 64 == 0) this_fiber::yield();
                 }
               }});
  EXPECT_EQ(consumed, rounds);
  EXPECT_EQ(tokens, 0);
}

WEFT_SYNC_PARAMS(MutexTest);

// In every build: the release build (-DNDEBUG) is where a silent foreign
// unlock would do its damage.
TEST(MutexDeathTest, UnlockByANonOwnerIsDetected) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Mutex mu;
        mu.lock();
        std::thread([&] { mu.unlock(); }).join();
      },
      "weft::Mutex@0x[0-9a-f]+ unlocked by thread [0-9]+, which does not own it");
  EXPECT_DEATH(
      {
        Config config;
        config.workers = 1;
        Scheduler sched{config};
        Mutex mu;
        mu.lock();
        sched.spawn({.name = "intruder"}, [&] { mu.unlock(); }).join();
      },
      "unlocked by fiber \"intruder\" #[0-9]+, which does not own it");
  EXPECT_DEATH(
      {
        Mutex mu;
        mu.unlock();
      },
      "but it was not locked");
}

// A fiber that ends holding a mutex aborts, naming itself and the count
// (before, the mutex stayed locked for good, and a later fiber given the
// same control block unlocked it as its owner). The locks it took and gave
// back, by every way of taking one, are not counted.
TEST(MutexDeathTest, AFiberThatEndsHoldingAMutexIsDetected) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Config config;
        config.workers = 1;
        Scheduler sched{config};
        Mutex mu;
        sched.spawn({.name = "leaver"}, [&] { mu.lock(); }).join();
      },
      "fiber \"leaver\" #[0-9]+ ended holding 1 weft::Mutex lock");
  EXPECT_DEATH(
      {
        Config config;
        config.workers = 1;
        Scheduler sched{config};
        Mutex first;
        Mutex second;
        Mutex third;
        sched
            .spawn({.name = "keeper"},
                   [&] {
                     if (!first.try_lock() || !second.try_lock_for(std::chrono::seconds(1))) std::_Exit(2);
                     { std::lock_guard guard(third); }
                   })
            .join();
      },
      "fiber \"keeper\" #[0-9]+ ended holding 2 weft::Mutex lock");
}

TEST(Mutex, LocksTakenAndGivenBackEveryWayLeaveAFiberHoldingNone) {
  Config config;
  config.workers = 2;
  Scheduler sched{config};
  Mutex mu;
  ConditionVariable cv;
  bool ready = false;
  std::vector<Fiber> fibers;
  for (int i = 0; i < 8; ++i) {
    fibers.push_back(sched.spawn([&, i] {
      for (int round = 0; round < 200; ++round) {
        switch ((i + round) % 3) {
          case 0: {
            std::lock_guard guard(mu);
            this_fiber::yield();
            break;
          }
          case 1:
            if (mu.try_lock()) mu.unlock();
            break;
          default:
            if (mu.try_lock_for(std::chrono::milliseconds(5))) mu.unlock();
        }
      }
      std::unique_lock lock(mu);
      if (i == 0) {
        ready = true;
        cv.notify_all();
      }
      cv.wait(lock, [&] { return ready; });
    }));
  }
  for (Fiber& fiber : fibers) fiber.join();  // a miscount aborts at a fiber's end
}

// Destroyed while a fiber waits on it: it aborts, naming itself, the caller
// and the waiter (before, the waiter stayed parked on freed memory).
TEST(MutexDeathTest, MutexDestroyedWhileWaitedOnAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Scheduler s{test::config_with(2)};
        auto* m = new Mutex;
        m->lock();
        s.spawn({.name = "waiter"}, [m] { m->lock(); }).detach();
        if (!test::wait_until_parked_on(s, "weft::Mutex")) std::_Exit(2);
        delete m;
      },
      "weft::Mutex@0x[0-9a-f]+ destroyed by thread [0-9]+ while 1 caller\\(s\\) wait on it: fiber \"waiter\" #[0-9]+");
}

// Destroyed while a fiber waits on it: it aborts, naming itself, the caller
// and the waiter (before, the waiter stayed parked on freed memory).
TEST(MutexDeathTest, ConditionVariableDestroyedWhileWaitedOnAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Scheduler s{test::config_with(2)};
        static Mutex m;
        auto* cv = new ConditionVariable;
        s.spawn({.name = "waiter"}, [cv] {
           std::unique_lock lock(m);
           cv->wait(lock);
         }).detach();
        if (!test::wait_until_parked_on(s, "weft::ConditionVariable")) std::_Exit(2);
        delete cv;
      },
      "weft::ConditionVariable@0x[0-9a-f]+ destroyed by thread [0-9]+ while 1 caller\\(s\\) wait on it: fiber "
      "\"waiter\" #[0-9]+");
}

}  // namespace
}  // namespace weft
