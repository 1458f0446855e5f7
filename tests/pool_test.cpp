// weft::Pool in both modes: results, exceptions, the concurrency bound,
// wait, purge, shutdown and destruction with queued work, pools on several
// schedulers, weft-dump's registry; and the latency histogram behind the
// pool's metrics.
#include <gtest/gtest.h>
#include <pthread.h>
#include <unistd.h>
#include <weft/weft.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "fork_children.h"
#include "pool/pool_registry.h"
#include "pool/thread_registry.h"
#include "pool_support.h"
#include "sched/latency_histogram.h"

namespace weft {
namespace {

using namespace std::chrono_literals;

class PoolTest : public test::ModeTest {};

TEST_P(PoolTest, SubmitReturnsEachTasksValue) {
  Pool pool{options("calc", 4)};
  EXPECT_EQ(pool.runs_on_fibers(), fibers());
  std::vector<Future<int>> answers;
  for (int i = 0; i < 200; ++i) answers.push_back(pool.submit([i] { return i * i; }));
  for (int i = 0; i < 200; ++i) EXPECT_EQ(answers[i].get(), i * i);
  Future<void> done = pool.submit([] {});
  done.get();
  Future<std::unique_ptr<int>> moved = pool.submit([] { return std::make_unique<int>(7); });
  EXPECT_EQ(*moved.get(), 7);
}

TEST_P(PoolTest, TasksRunOnFibersExactlyInFiberMode) {
  Pool pool{options("where", 2)};
  EXPECT_EQ(pool.submit([] { return this_fiber::is_fiber(); }).get(), fibers());
  if (fibers()) {
    EXPECT_EQ(pool.submit([] { return this_fiber::name(); }).get().rfind("where-", 0), 0u);
  }
}

TEST_P(PoolTest, SubmitCarriesTheTasksExceptionToTheFuture) {
  Pool pool{options("throws", 2)};
  Future<int> f = pool.submit([]() -> int { throw std::runtime_error("no backend"); });
  try {
    f.get();
    FAIL() << "expected the task's exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "no backend");
  }
  EXPECT_EQ(pool.submit([] { return 1; }).get(), 1);  // the pool keeps working
}

TEST_P(PoolTest, PostReportsAnEscapingExceptionWithThePoolsNameAndCarriesOn) {
  std::atomic<int> reports{0};
  std::string reported_pool, reported_what;
  PoolOptions o = options("reporter", 2);
  o.on_exception = [&](std::string_view pool, std::exception_ptr error) {
    reported_pool = pool;
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      reported_what = e.what();
    }
    reports.fetch_add(1);
  };
  Pool pool{std::move(o)};
  pool.post([] { throw std::runtime_error("bad request"); });
  std::atomic<int> ran{0};
  for (int i = 0; i < 10; ++i) pool.post([&] { ran.fetch_add(1); });
  pool.wait();
  EXPECT_EQ(reports.load(), 1);
  EXPECT_EQ(reported_pool, "reporter");
  EXPECT_EQ(reported_what, "bad request");
  EXPECT_EQ(ran.load(), 10);
  EXPECT_EQ(pool.completed(), 11u);
  EXPECT_EQ(pool.snapshot().failed, 1u);
}

TEST_P(PoolTest, PostWithoutAHandlerPrintsThePoolsNameOnStderr) {
  Pool pool{options("noisy-pool", 1)};
  testing::internal::CaptureStderr();
  pool.post([] { throw std::logic_error("boom"); });
  pool.wait();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("weft::Pool 'noisy-pool'"), std::string::npos) << err;
  EXPECT_NE(err.find("std::logic_error: boom"), std::string::npos) << err;
  EXPECT_EQ(pool.submit([] { return 2; }).get(), 2);
}

TEST_P(PoolTest, NeverRunsMoreThanSizeTasksAtOnce) {
  Pool pool{options("bounded", 3)};
  Semaphore gate{0};
  std::atomic<int> active{0}, most{0};
  for (int i = 0; i < 12; ++i)
    pool.post([&] {
      const int now = active.fetch_add(1) + 1;
      int seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {
      }
      gate.acquire();
      active.fetch_sub(1);
    });
  // running() counts a task just before its body starts: wait for both.
  ASSERT_TRUE(test::eventually([&] { return pool.running() == 3 && active.load() == 3; }));
  EXPECT_EQ(pool.queued(), 9u);
  gate.release(12);
  pool.wait();
  EXPECT_EQ(most.load(), 3);
  EXPECT_EQ(pool.completed(), 12u);
  EXPECT_EQ(pool.running(), 0u);
  EXPECT_EQ(pool.queued(), 0u);
}

TEST_P(PoolTest, RunsSizeBlockedTasksAtOnceEvenOnOneWorker) {
  // 32 tasks that can only finish together: a pool that ran fewer than 32
  // at once would never finish (the latch's wait is bounded to fail).
  Pool pool{options("together", 32)};
  Latch all{32};
  std::atomic<int> met{0};
  for (int i = 0; i < 32; ++i)
    pool.post([&] {
      all.count_down();
      if (all.wait_for(30s)) met.fetch_add(1);
    });
  pool.wait();
  EXPECT_EQ(met.load(), 32);
}

// Runners start as tasks need them (pool/pool_core.h): one task at a time
// keeps one runner, however large the pool; tasks that are all running at
// once get a runner each, up to size() and no further.
TEST_P(PoolTest, StartsRunnersOnlyAsTasksNeedThem) {
  // The pool's runners: fibers of the test's scheduler, or this process's
  // threads, named after the pool.
  auto runners = [this](const std::string& prefix) {
    std::size_t n = 0;
    if (fibers()) {
      for (const FiberSnapshot& f : sched().snapshot().fibers)
        if (f.name.rfind(prefix, 0) == 0) ++n;
      return n;
    }
    return test::threads_named(prefix).size();
  };
  Pool pool{options("ondemand", 64)};
  EXPECT_EQ(runners("ondemand-"), 0u) << "before any task";
  std::atomic<int> ran{0};
  for (int i = 0; i < 20; ++i) {
    pool.post([&] { ran.fetch_add(1); });
    pool.wait();  // returns once the runner counts as idle again
  }
  EXPECT_EQ(ran.load(), 20);
  EXPECT_EQ(runners("ondemand-"), 1u) << "one task at a time";
  Latch all{8};
  for (int i = 0; i < 8; ++i)
    pool.post([&] {
      all.count_down();
      (void)all.wait_for(30s);
    });
  pool.wait();
  EXPECT_EQ(runners("ondemand-"), 8u) << "8 tasks at once: the first runner and 7 more";
  Pool small{options("capped", 3)};
  Semaphore gate{0};
  for (int i = 0; i < 12; ++i) small.post([&] { gate.acquire(); });
  EXPECT_EQ(runners("capped-"), 3u) << "never more than size()";
  gate.release(12);
  small.wait();
}

// Posts racing shutdown(): each either queues (and runs) or throws
// std::logic_error, and no runner is started after shutdown's last join
// (one would be left unjoined: std::terminate in the pool's destructor).
TEST_P(PoolTest, PostsRacingShutdownRunOrThrowAndLeaveNoRunnerBehind) {
  for (int round = 0; round < 20; ++round) {
    std::atomic<int> ran{0}, queued{0};
    auto pool = std::make_unique<Pool>(options("racing", 64));
    std::vector<std::thread> posters;
    for (int p = 0; p < 3; ++p)
      posters.emplace_back([&] {
        // Bounded: shutdown comes within milliseconds.
        for (int i = 0; i < 100'000; ++i) {
          try {
            pool->post([&] { ran.fetch_add(1); });
            queued.fetch_add(1);
          } catch (const std::logic_error&) {
            return;
          }
        }
      });
    std::this_thread::sleep_for(std::chrono::microseconds(200 * (round % 5)));
    pool->shutdown();
    for (auto& t : posters) t.join();
    pool.reset();
    EXPECT_EQ(ran.load(), queued.load()) << "round " << round;
  }
}

TEST_P(PoolTest, TasksStartInSubmissionOrderOnOneRunner) {
  Pool pool{options("fifo", 1)};
  std::vector<int> order;
  for (int i = 0; i < 100; ++i) pool.post([&order, i] { order.push_back(i); });
  pool.wait();
  ASSERT_EQ(order.size(), 100u);
  EXPECT_TRUE(std::is_sorted(order.begin(), order.end()));
}

TEST_P(PoolTest, SubmitLoopRunsEveryIndexOnceInContiguousBlocks) {
  Pool pool{options("loop", 3)};
  constexpr int kFirst = 3, kLast = 1003;
  std::vector<std::atomic<int>> hits(kLast);
  pool.submit_loop(
          kFirst, kLast, [&](int i) { hits[static_cast<std::size_t>(i)].fetch_add(1); }, 7)
      .get();
  for (int i = 0; i < kLast; ++i) EXPECT_EQ(hits[static_cast<std::size_t>(i)].load(), i < kFirst ? 0 : 1) << i;
  // Each block is one task. (The Future is ready as the last block ends,
  // before the pool counts its task completed: wait() first.)
  auto tasks_of = [&pool](auto&& loop) {
    pool.wait();
    const std::uint64_t before = pool.completed();
    loop();
    pool.wait();
    return pool.completed() - before;
  };
  EXPECT_EQ(tasks_of([&] {
              pool.submit_loop(
                      0, 1000, [](int) {}, 7)
                  .get();
            }),
            7u);
  // blocks = 0 is size(); more blocks than indices is one per index.
  EXPECT_EQ(tasks_of([&] { pool.submit_loop(0, 100, [](int) {}).get(); }), 3u);
  EXPECT_EQ(tasks_of([&] {
              pool.submit_loop(
                      std::int64_t{10}, std::int64_t{12}, [](std::int64_t) {}, 50)
                  .get();
            }),
            2u);
}

TEST_P(PoolTest, SubmitLoopRethrowsTheFirstExceptionAfterEveryBlockFinished) {
  Pool pool{options("loop-throws", 4)};
  std::atomic<int> ran{0};
  Future<void> done = pool.submit_loop(
      0, 400,
      [&](int i) {
        if (i == 5) throw std::runtime_error("index 5");
        ran.fetch_add(1);
      },
      4);
  try {
    done.get();
    FAIL() << "expected the block's exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "index 5");
  }
  // Ready only after every block: the three others ran to their end, the
  // failing one (0..99) stopped at 5.
  EXPECT_EQ(ran.load(), 5 + 300);
}

TEST_P(PoolTest, DetachLoopThenWaitRunsEveryIndex) {
  Pool pool{options("detached", 2)};
  std::atomic<long> sum{0};
  pool.detach_loop(1u, 1001u, [&](unsigned i) { sum.fetch_add(i); });
  pool.wait();
  EXPECT_EQ(sum.load(), 500500);
}

TEST_P(PoolTest, LoopsOverEmptyAndReversedRanges) {
  Pool pool{options("ranges", 2)};
  Future<void> empty = pool.submit_loop(5, 5, [](int) { FAIL() << "no index to run"; });
  EXPECT_TRUE(empty.ready());
  empty.get();
  pool.detach_loop(5, 5, [](int) { FAIL() << "no index to run"; });
  pool.wait();
  EXPECT_EQ(pool.completed(), 0u);
  try {
    pool.submit_loop(5, 4, [](int) {});
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "weft::Pool::submit_loop: last is before first");
  }
  EXPECT_THROW(pool.detach_loop(1, -1, [](int) {}), std::invalid_argument);
  // The whole range of a narrow type, whose width last - first overflows.
  std::atomic<int> count{0};
  pool.submit_loop(
          std::int8_t{-128}, std::int8_t{127}, [&](std::int8_t) { count.fetch_add(1); }, 3)
      .get();
  EXPECT_EQ(count.load(), 255);
}

TEST_P(PoolTest, WaitWaitsForEverythingSubmittedSoFar) {
  Pool pool{options("waiter", 4)};
  std::atomic<int> done{0};
  for (int round = 0; round < 5; ++round) {
    for (int i = 0; i < 100; ++i)
      pool.post([&] {
        this_fiber::sleep_for(10us);
        done.fetch_add(1);
      });
    pool.wait();
    EXPECT_EQ(done.load(), (round + 1) * 100);
  }
  pool.wait();  // nothing pending: returns at once
}

TEST_P(PoolTest, WaitFromAFiberParksIt) {
  Pool pool{options("from-fiber", 2)};
  std::atomic<int> done{0};
  Fiber f = sched().spawn([&] {
    for (int i = 0; i < 50; ++i) pool.post([&] { done.fetch_add(1); });
    pool.wait();
    EXPECT_EQ(done.load(), 50);
  });
  f.join();
}

TEST_P(PoolTest, WaitForTimesOutWhileATaskIsBlocked) {
  Pool pool{options("slow", 1)};
  Semaphore gate{0};
  pool.post([&] { gate.acquire(); });
  EXPECT_FALSE(pool.wait_for(5ms));
  gate.release();
  EXPECT_TRUE(pool.wait_for(30s));
}

TEST_P(PoolTest, WaitAndShutdownFromOwnTaskThrowInsteadOfHanging) {
  Pool pool{options("self", 2)};
  Future<void> waits = pool.submit([&] { pool.wait(); });
  EXPECT_THROW(waits.get(), std::logic_error);
  Future<void> stops = pool.submit([&] { pool.shutdown(); });
  EXPECT_THROW(stops.get(), std::logic_error);
  EXPECT_FALSE(pool.is_shut_down());
}

TEST_P(PoolTest, PurgeDropsQueuedTasksAndBreaksTheirFutures) {
  Pool pool{options("purge", 1)};
  Semaphore gate{0};
  Future<void> first = pool.submit([&] { gate.acquire(); });
  ASSERT_TRUE(test::eventually([&] { return pool.running() == 1; }));
  std::atomic<int> ran{0};
  std::vector<Future<int>> dropped;
  for (int i = 0; i < 5; ++i) dropped.push_back(pool.submit([&] { return ran.fetch_add(1); }));
  EXPECT_EQ(pool.purge(), 5u);
  gate.release();
  first.get();
  pool.wait();  // the purged tasks no longer count
  for (auto& f : dropped) {
    try {
      f.get();
      FAIL() << "a purged task ran";
    } catch (const std::future_error& e) {
      EXPECT_EQ(e.code(), std::future_errc::broken_promise);
    }
  }
  EXPECT_EQ(ran.load(), 0);
}

TEST_P(PoolTest, PauseHoldsQueuedTasksBackUntilUnpause) {
  Pool pool{options("paused", 3)};
  pool.pause();
  EXPECT_TRUE(pool.is_paused());
  std::atomic<int> ran{0};
  std::vector<Future<int>> results;
  for (int i = 0; i < 6; ++i)
    results.push_back(pool.submit([&ran, i] {
      ran.fetch_add(1);
      return i;
    }));
  // Queued and held: a runner free to take them would have started one by
  // now (RunsSizeBlockedTasksAtOnce shows they start at once).
  this_fiber::sleep_for(20ms);
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ(pool.queued(), 6u);
  EXPECT_TRUE(pool.wait_for(30s)) << "paused with nothing running: wait() has nothing to wait for";
  pool.unpause();
  EXPECT_FALSE(pool.is_paused());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(results[static_cast<std::size_t>(i)].get(), i);
  pool.wait();
  EXPECT_EQ(ran.load(), 6);
  EXPECT_EQ(pool.queued(), 0u);
}

TEST_P(PoolTest, WhilePausedRunningTasksFinishAndWaitReturnsWhenTheyHave) {
  Pool pool{options("pause-running", 2)};
  Semaphore gate{0};
  std::atomic<int> ran{0};
  for (int i = 0; i < 2; ++i)
    pool.post([&] {
      gate.acquire();
      ran.fetch_add(1);
    });
  ASSERT_TRUE(test::eventually([&] { return pool.running() == 2; }));
  // A wait() that began before the pause ends when the running tasks have,
  // with the queued ones left queued.
  std::atomic<bool> waited{false};
  std::thread waiter([&] {
    pool.wait();
    waited.store(true);
  });
  pool.pause();
  for (int i = 0; i < 3; ++i) pool.post([&] { ran.fetch_add(1); });
  EXPECT_FALSE(pool.wait_until(std::chrono::steady_clock::now() + 5ms)) << "two tasks still run";
  gate.release(2);
  waiter.join();
  EXPECT_TRUE(waited.load());
  EXPECT_EQ(ran.load(), 2);
  EXPECT_EQ(pool.running(), 0u);
  EXPECT_EQ(pool.queued(), 3u);
  pool.unpause();
  pool.wait();
  EXPECT_EQ(ran.load(), 5);
}

TEST_P(PoolTest, ShutdownWhilePausedRunsTheQueuedTasks) {
  std::atomic<int> ran{0};
  std::vector<Future<void>> done;
  {
    Pool pool{options("pause-close", 2)};
    pool.pause();
    for (int i = 0; i < 10; ++i) done.push_back(pool.submit([&] { ran.fetch_add(1); }));
    pool.shutdown();
    EXPECT_EQ(ran.load(), 10);
  }
  for (auto& f : done) f.get();  // none broken
}

TEST_P(PoolTest, PurgeWhilePausedDropsTheQueueAndTheRunnersServeLaterTasks) {
  Pool pool{options("pause-purge", 2)};
  pool.pause();
  std::atomic<int> ran{0};
  for (int i = 0; i < 4; ++i) pool.post([&] { ran.fetch_add(1); });
  EXPECT_EQ(pool.purge(), 4u);
  pool.unpause();
  // Both runners, started for the dropped tasks, are free for these: two
  // tasks that wait for each other finish only if they run at once.
  Semaphore first{0}, second{0};
  Future<void> a = pool.submit([&] {
    first.release();
    second.acquire();
  });
  Future<void> b = pool.submit([&] {
    second.release();
    first.acquire();
  });
  a.get();
  b.get();
  EXPECT_EQ(ran.load(), 0);
}

TEST_P(PoolTest, ShutdownRunsWhatIsQueuedThenRejectsNewWork) {
  auto pool = std::make_unique<Pool>(options("closing", 1));
  Semaphore gate{0};
  std::atomic<int> ran{0};
  pool->post([&] {
    gate.acquire();
    ran.fetch_add(1);
  });
  for (int i = 0; i < 20; ++i) pool->post([&] { ran.fetch_add(1); });
  std::thread closer([&] { pool->shutdown(); });
  ASSERT_TRUE(test::eventually([&] { return pool->is_shut_down(); }));
  try {
    pool->post([] {});
    FAIL() << "post after shutdown";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("'closing'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(pool->submit([] { return 1; }), std::logic_error);
  gate.release();
  closer.join();
  EXPECT_EQ(ran.load(), 21);
  pool->shutdown();  // again: nothing left to do
  pool->wait();
  pool.reset();
}

TEST_P(PoolTest, DestructionRunsQueuedWork) {
  std::atomic<int> ran{0};
  {
    Pool pool{options("dying", 2)};
    for (int i = 0; i < 500; ++i)
      pool.post([&ran, i] {
        if (i % 50 == 0) this_fiber::sleep_for(100us);
        ran.fetch_add(1);
      });
  }
  EXPECT_EQ(ran.load(), 500);
}

TEST_P(PoolTest, ConcurrentSubmittersAllGetTheirResults) {
  Pool pool{options("busy", 4)};
  std::vector<std::thread> submitters;
  std::atomic<long> total{0};
  for (int t = 0; t < 4; ++t)
    submitters.emplace_back([&, t] {
      std::vector<Future<long>> fs;
      for (long i = 0; i < static_cast<long>(test::scaled(2000)); ++i) fs.push_back(pool.submit([=] { return i + t; }));
      for (auto& f : fs) total.fetch_add(f.get());
    });
  for (auto& s : submitters) s.join();
  // A Future is ready before its task is counted complete (the task's
  // captures die first); wait() is what promises the count.
  pool.wait();
  const long n = static_cast<long>(test::scaled(2000));
  EXPECT_EQ(total.load(), 4 * (n * (n - 1) / 2) + n * (0 + 1 + 2 + 3));
  EXPECT_EQ(pool.completed(), static_cast<std::uint64_t>(4 * n));
}

TEST_P(PoolTest, SnapshotShowsShapeCountersAndLatencies) {
  Pool pool{options("shown", 2)};
  for (int i = 0; i < 20; ++i) pool.post([] { this_fiber::sleep_for(200us); });
  pool.wait();
  const PoolSnapshot s = pool.snapshot();
  EXPECT_EQ(s.name, "shown");
  EXPECT_EQ(s.mode, fibers() ? "fibers" : "threads");
  EXPECT_EQ(s.scheduler, fibers() ? "test" : "");
  EXPECT_EQ(s.size, 2u);
  EXPECT_EQ(s.completed, 20u);
  EXPECT_EQ(s.queued, 0u);
  EXPECT_EQ(s.running, 0u);
  EXPECT_EQ(s.wait.count, 20u);
  EXPECT_EQ(s.run.count, 20u);
  // Each ran for at least the 200 us it slept.
  EXPECT_GE(s.run.p50_us, 200.0);
  EXPECT_GE(s.run.max_us, s.run.p99_us);
  EXPECT_GE(s.run.p99_us, s.run.p50_us);
}

TEST_P(PoolTest, TheRegistryListsLivePoolsOnly) {
  const auto named = [](const std::string& name) {
    for (const PoolSnapshot& s : detail::snapshot_pools())
      if (s.name == name) return true;
    return false;
  };
  {
    Pool pool{options("registered", 1)};
    EXPECT_TRUE(named("registered"));
  }
  EXPECT_FALSE(named("registered"));
}

WEFT_MODE_PARAMS(PoolTest);

TEST(Pool, RejectsAnEmptyNameAndZeroThreadsWithAClearMessage) {
  try {
    Pool pool{{.name = "", .threads = 2}};
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("PoolOptions::name is empty"), std::string::npos) << e.what();
  }
  try {
    Pool pool{{.name = "none", .threads = 0}};
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'none': PoolOptions::threads is 0"), std::string::npos) << e.what();
  }
  // A runner's stack size outside weft's range, in either mode, at once.
  for (const RunMode mode : {RunMode::threads, RunMode::fibers}) {
    try {
      Pool pool{{.name = "tiny", .threads = 1, .mode = mode, .stack_size = 100}};
      FAIL() << "a 100-byte stack was taken";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(
          std::string(e.what()).find("'tiny': PoolOptions::stack_size (0: the scheduler's) must be at least 16 KiB"),
          std::string::npos)
          << e.what();
    }
  }
}

TEST(Pool, FiberPoolsOnSeveralSchedulersRunOnTheirOwn) {
  Scheduler a{test::config_with(2)};
  Config cb = test::config_with(1);
  cb.name = "other";
  Scheduler b{cb};
  Pool on_a{{.name = "on-a", .threads = 2, .mode = RunMode::fibers, .scheduler = &a}};
  Pool on_b{{.name = "on-b", .threads = 2, .mode = RunMode::fibers, .scheduler = &b}};
  EXPECT_EQ(on_a.snapshot().scheduler, "test");
  EXPECT_EQ(on_b.snapshot().scheduler, "other");
  const auto has_fiber = [](const SchedulerSnapshot& s, const std::string& name) {
    return std::any_of(s.fibers.begin(), s.fibers.end(), [&](const FiberSnapshot& f) { return f.name == name; });
  };
  // A task on one pool waits (parks) on a task of the other.
  Future<int> chained = on_a.submit([&] { return on_b.submit([] { return 40; }).get() + 2; });
  EXPECT_EQ(chained.get(), 42);
  // Each pool's runner (started by its task) is a fiber of its scheduler.
  EXPECT_TRUE(has_fiber(a.snapshot(), "on-a-0"));
  EXPECT_FALSE(has_fiber(a.snapshot(), "on-b-0"));
  EXPECT_TRUE(has_fiber(b.snapshot(), "on-b-0"));
}

TEST(Pool, FiberPoolsWithoutASchedulerUseTheDefaultOne) {
  Pool pool{{.name = "defaulted", .threads = 2, .mode = RunMode::fibers}};
  EXPECT_EQ(pool.snapshot().scheduler, "weft-default");
  EXPECT_EQ(&default_scheduler(), &default_scheduler());
  EXPECT_EQ(default_scheduler().config().name, "weft-default");
  EXPECT_TRUE(pool.submit([] { return this_fiber::is_fiber(); }).get());
}

TEST(Pool, ThreadPoolThreadsAreNamedAfterThePool) {
  Pool pool{{.name = "a-long-pool-name", .threads = 1, .mode = RunMode::threads}};
  const std::string name = pool.submit([] {
                                 char buf[16] = {};
                                 pthread_getname_np(pthread_self(), buf, sizeof buf);
                                 return std::string(buf);
                               })
                               .get();
  EXPECT_EQ(name, std::string("a-long-pool-name-0").substr(0, 15));
}

// Static pools at exit: their destructors run after main returns, in an
// order relative to other statics that the program does not control, and
// still run their queued tasks on the default scheduler, which is never
// destroyed. The child queues 100 tasks in a static fiber pool and a static
// thread pool and returns at once; a static constructed before them counts,
// in its destructor, what ran.
std::atomic<int> ran_at_exit{0};

TEST(PoolChild, StaticPoolsRunTheirQueuedTasksAtExit) {
  if (!test::child_mode("static")) GTEST_SKIP() << "runs in the child of Pool.StaticPoolsRunTheirQueuedTasksAtExit";
  struct Report {
    ~Report() { std::printf("ran at exit: %d of 200\n", ran_at_exit.load()); }
  };
  static Report report;  // constructed first, so destroyed after both pools
  static Pool fibers{{.name = "static-fibers", .threads = 2, .mode = RunMode::fibers}};
  static Pool threads{{.name = "static-threads", .threads = 2, .mode = RunMode::threads}};
  for (int i = 0; i < 100; ++i) {
    fibers.post([] {
      this_fiber::sleep_for(100us);
      ran_at_exit.fetch_add(1);
    });
    threads.post([] {
      this_fiber::sleep_for(100us);
      ran_at_exit.fetch_add(1);
    });
  }
}

TEST(Pool, StaticPoolsRunTheirQueuedTasksAtExit) {
  int status = -1;
  const std::string out = test::run_child("static", "", "PoolChild.StaticPoolsRunTheirQueuedTasksAtExit", status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("ran at exit: 200 of 200"), std::string::npos) << out;
}

// A thread pool's runner in the child of a fork its task made ends there
// (pool/pool.cpp) and unlists its thread for weft-dump. The list's lock is
// held across fork(): taken by another thread at the fork (a dump reading
// the threads, a thread starting or ending), the child's copy would be
// held by a thread it does not have, and the runner would wait for it for
// good. Before, the child hung (killed after 5 s).
TEST(PoolFork, AThreadRunnersEndInAForkChildFindsTheThreadListFree) {
  SKIP_UNDER_TSAN();
  SKIP_IF_CHILDREN_CANNOT_ALLOCATE();
  PoolOptions options;
  options.name = "forks-in-a-task";
  options.threads = 1;
  options.mode = RunMode::threads;
  Pool pool(options);
  pool.submit([] { return 0; }).get();  // its runner is listed
  Latch reading(1);
  Latch forking(1);
  // A reader of the list that holds its lock until 100 ms after the task
  // says it forks: the fork comes while the lock is held, and waits for it.
  std::thread reader([&] {
    detail::for_each_listed_thread([&](const detail::ListedThread&) {
      if (reading.try_wait()) return;
      reading.count_down();
      forking.wait();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    });
  });
  reading.wait();
  pid_t child = -1;
  pool.submit([&] {
        std::fflush(nullptr);
        forking.count_down();
        child = fork();
        if (child == 0) alarm(20);  // then returns into the child's runner
      })
      .get();
  reader.join();
  ASSERT_GT(child, 0);
  EXPECT_TRUE(test::child_exited_cleanly(child, std::chrono::seconds(5)))
      << "the child did not exit with 0 within 5 s (killed)";
}

TEST(LatencyHistogram, BucketsCoverEveryValueInOrder) {
  using H = detail::LatencyHistogram;
  std::uint64_t previous_top = 0;
  for (unsigned b = 0; b < H::bucket_count; ++b) {
    const std::uint64_t top = H::bucket_top(b);
    EXPECT_EQ(H::bucket_of(top), b) << b;
    if (b > 0) {
      EXPECT_EQ(H::bucket_of(previous_top + 1), b) << b;
      EXPECT_GT(top, previous_top);
    }
    previous_top = top;
  }
  EXPECT_EQ(previous_top, ~std::uint64_t{0});
}

TEST(LatencyHistogram, PercentilesAreWithinABucketAndMaxIsExact) {
  detail::LatencyHistogram h;
  EXPECT_EQ(h.summary().count, 0u);
  for (int i = 1; i <= 1000; ++i) h.record(std::chrono::microseconds(i));
  const LatencySummary s = h.summary();
  EXPECT_EQ(s.count, 1000u);
  EXPECT_DOUBLE_EQ(s.max_us, 1000.0);
  EXPECT_GE(s.p50_us, 500.0);
  EXPECT_LE(s.p50_us, 500.0 * 1.125);
  EXPECT_GE(s.p99_us, 990.0);
  EXPECT_LE(s.p99_us, 1000.0);
  h.record(std::chrono::nanoseconds(-5));  // a clock step back counts as 0
  EXPECT_EQ(h.summary().count, 1001u);
}

}  // namespace
}  // namespace weft
