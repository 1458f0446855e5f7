// The scheduler: spawning, joining, yielding, sleeping, stealing, pinning,
// counters and shutdown, over 1, 2, 4 and 8 workers.
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <weft/weft.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "fork_children.h"
#include "test_support.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::WorkersTest;

// The OS thread now running the caller. Not std::this_thread::get_id():
// glibc declares pthread_self() const, so the compiler may reuse a value
// read before a suspension point, after which the fiber may have moved.
int os_thread() { return static_cast<int>(::syscall(SYS_gettid)); }

TEST_P(WorkersTest, SpawnAndJoinManyFibers) {
  const std::uint64_t count = test::scaled(100'000);
  std::vector<std::atomic<int>> ran(count);
  std::vector<Fiber> fibers;
  fibers.reserve(count);
  for (std::uint64_t i = 0; i < count; ++i) fibers.push_back(sched().spawn([&ran, i] { ran[i].fetch_add(1); }));
  for (auto& f : fibers) f.join();
  for (std::uint64_t i = 0; i < count; ++i) ASSERT_EQ(ran[i].load(), 1) << "fiber " << i;
}

TEST_P(WorkersTest, SpawnFromPlainThreads) {
  std::atomic<int> total{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      std::vector<Fiber> fibers;
      for (int i = 0; i < 500; ++i) fibers.push_back(sched().spawn([&] { total.fetch_add(1); }));
      for (auto& f : fibers) f.join();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(total.load(), 2000);
}

// A fork-join tree grown by fibers of `sched`: every node spawns `fanout`
// children with weft::spawn (the current fiber's scheduler) and joins them.
struct TreeCounts {
  std::atomic<int> leaves{0};
  std::atomic<int> alive{0};       // spawned and not yet done
  std::atomic<int> most_alive{0};  // the most at any one time
};

void grow_tree(Scheduler& sched, int depth, int fanout, TreeCounts& counts) {
  std::function<void(int)> grow = [&](int level) {
    if (level == 0) {
      counts.leaves.fetch_add(1);
      return;
    }
    std::vector<Fiber> children;
    for (int i = 0; i < fanout; ++i) {
      const int now = counts.alive.fetch_add(1) + 1;
      int most = counts.most_alive.load();
      while (now > most && !counts.most_alive.compare_exchange_weak(most, now)) {
      }
      children.push_back(weft::spawn([&, level] {
        grow(level - 1);
        counts.alive.fetch_sub(1);
      }));
    }
    for (auto& c : children) c.join();
  };
  sched.spawn([&] { grow(depth); }).join();
}

TEST_P(WorkersTest, NestedSpawnsUseTheCurrentScheduler) {
  TreeCounts counts;
  grow_tree(sched(), 4, 5, counts);  // 625 leaves
  EXPECT_EQ(counts.leaves.load(), 625);
  EXPECT_EQ(counts.alive.load(), 0);
}

// Spawned fibers that have not run go newest first (sched/spawn_deque.h), so
// a fork-join tree runs depth first: only about depth x fan-out fibers are
// alive at once, not every leaf.
TEST_P(WorkersTest, ForkJoinTreeRunsDepthFirst) {
  TreeCounts counts;
  grow_tree(sched(), 4, 10, counts);
  EXPECT_EQ(counts.leaves.load(), 10'000);
  // Breadth first would reach 10,000. One worker is strictly depth first:
  // 4 levels x 10 children. Thieves open subtrees of their own; with more
  // workers than this machine's 2 cores, descheduled workers make that
  // unbounded in practice, so only correctness is checked there.
  if (workers() == 1) {
    EXPECT_LE(counts.most_alive.load(), 100);
  } else if (workers() == 2) {
    EXPECT_LE(counts.most_alive.load(), 1000);
  }
}

TEST_P(WorkersTest, TwoYieldingFibersBothProgress) {
  // On one worker only yield lets the other run: each fiber waits until the
  // other has moved, so this finishes only if yield hands over.
  std::atomic<int> a{0}, b{0};
  const int rounds = 1000;
  Fiber fa = sched().spawn([&] {
    for (int i = 0; i < rounds; ++i) {
      a.store(i + 1);
      while (b.load() < i) this_fiber::yield();
    }
  });
  Fiber fb = sched().spawn([&] {
    for (int i = 0; i < rounds; ++i) {
      b.store(i + 1);
      while (a.load() < i) this_fiber::yield();
    }
  });
  fa.join();
  fb.join();
  EXPECT_EQ(a.load(), rounds);
  EXPECT_EQ(b.load(), rounds);
}

TEST_P(WorkersTest, TwoYieldLoopsDoNotShareAWorkerWhileAnotherSleeps) {
  // Two fibers that only yield, spawned by a plain thread onto sleeping
  // workers: however the spawns land, an idle worker must end up taking
  // one of them. A yield that leaves a fiber a thief could take while a
  // worker sleeps must get it to that worker (sched/idle.h, rule 1; a wake
  // alone is not enough: Worker::push_yielded), or the two loops can share
  // one worker for good while the other sleeps.
  if (workers() < 2) GTEST_SKIP() << "needs a second worker";
  const int kTrials = 20;
  for (int trial = 0; trial < kTrials; ++trial) {
    std::this_thread::sleep_for(5ms);  // the workers go back to sleep
    std::atomic<bool> stop{false};
    std::atomic<int> thread_of[2] = {0, 0};
    std::vector<Fiber> loops;
    for (int i = 0; i < 2; ++i) {
      loops.push_back(sched().spawn([&, i] {
        while (!stop.load(std::memory_order_relaxed)) {
          thread_of[i].store(os_thread(), std::memory_order_relaxed);
          this_fiber::yield();
        }
      }));
    }
    // Past the spawns' own placement, then up to 2 s for a moment at which
    // the two run on different threads.
    std::this_thread::sleep_for(20ms);
    bool apart = false;
    const auto give_up = std::chrono::steady_clock::now() + 2s;
    while (!apart && std::chrono::steady_clock::now() < give_up) {
      const int a = thread_of[0].load(), b = thread_of[1].load();
      apart = a != 0 && b != 0 && a != b;
      if (!apart) std::this_thread::sleep_for(1ms);
    }
    stop.store(true);
    for (Fiber& loop : loops) loop.join();
    ASSERT_TRUE(apart) << "trial " << trial << ": both yield loops ran on one worker for 2 s";
  }
}

TEST_P(WorkersTest, SleepsNeverWakeEarly) {
  std::vector<Fiber> fibers;
  std::atomic<int> early{0};
  for (int i = 0; i < 50; ++i) {
    fibers.push_back(sched().spawn([&, i] {
      const auto duration = std::chrono::microseconds(100 * (i % 10) + 50);
      const auto start = std::chrono::steady_clock::now();
      this_fiber::sleep_for(duration);
      if (std::chrono::steady_clock::now() - start < duration) early.fetch_add(1);
    }));
  }
  for (auto& f : fibers) f.join();
  EXPECT_EQ(early.load(), 0);
}

TEST_P(WorkersTest, SleepUntilAnotherClockAndPastDeadlines) {
  sched()
      .spawn([] {
        const auto deadline = std::chrono::system_clock::now() + 2ms;
        this_fiber::sleep_until(deadline);
        EXPECT_GE(std::chrono::system_clock::now(), deadline);
        this_fiber::sleep_for(-5ms);  // returns at once
        this_fiber::sleep_until(std::chrono::steady_clock::now() - 1s);
      })
      .join();
}

TEST_P(WorkersTest, ExceptionsReachJoin) {
  Fiber f = sched().spawn([] { throw std::runtime_error("boom in fiber"); });
  try {
    f.join();
    FAIL() << "join did not rethrow";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "boom in fiber");
  }
  EXPECT_FALSE(f.joinable());
}

// Each fiber has its own exceptions being handled and its own count of
// those in flight, as each thread has: a fiber that parks inside a catch
// block, or in a destructor that unwinding runs, finds its own again when
// it resumes, whatever ran on its thread meanwhile. Before, they were the
// thread's (the C++ runtime's __cxa_eh_globals): `throw;` rethrew another
// fiber's exception, std::uncaught_exceptions() counted another's, and the
// end of a catch block freed another fiber's live exception object.
TEST_P(WorkersTest, EachFiberHandlesItsOwnExceptionsAcrossParks) {
  struct CountsInFlight {
    int* seen;
    ~CountsInFlight() {
      this_fiber::sleep_for(1ms);  // parks while its exception unwinds the frame
      *seen = std::uncaught_exceptions();
    }
  };
  constexpr int kFibers = 40;
  std::atomic<int> wrong{0};
  std::vector<Fiber> fibers;
  for (int i = 0; i < kFibers; ++i) {
    fibers.push_back(sched().spawn([i, &wrong] {
      const std::string mine = "fiber " + std::to_string(i);
      try {
        try {
          throw std::runtime_error(mine);
        } catch (const std::runtime_error&) {
          this_fiber::sleep_for(std::chrono::microseconds(200 * (i % 5)));
          if (std::uncaught_exceptions() != 0) ++wrong;
          try {
            std::rethrow_exception(std::current_exception());
          } catch (const std::runtime_error& current) {
            if (mine != current.what()) ++wrong;
          }
          this_fiber::yield();
          throw;
        }
      } catch (const std::runtime_error& rethrown) {
        if (mine != rethrown.what()) ++wrong;
      }
      int in_flight = -1;
      try {
        CountsInFlight guard{&in_flight};
        throw std::logic_error(mine);
      } catch (const std::logic_error&) {
      }
      if (in_flight != 1) ++wrong;
      if (std::current_exception() != nullptr || std::uncaught_exceptions() != 0) ++wrong;
    }));
  }
  for (Fiber& fiber : fibers) fiber.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST_P(WorkersTest, DetachedExceptionGoesToTheHandler) {
  std::atomic<int> handled{0};
  std::string seen_name;
  Config config = test::config_with(workers());
  config.on_unhandled_exception = [&](std::string_view name, std::uint64_t, std::exception_ptr e) {
    seen_name = std::string(name);
    try {
      std::rethrow_exception(e);
    } catch (const std::logic_error&) {
      handled.fetch_add(1);
    }
  };
  {
    Scheduler own{config};
    own.spawn({.name = "doomed"}, [] { throw std::logic_error("escaped"); }).detach();
  }  // the destructor waits for the detached fiber
  EXPECT_EQ(handled.load(), 1);
  EXPECT_EQ(seen_name, "doomed");
}

TEST_P(WorkersTest, NamesAndIds) {
  Fiber named = sched().spawn({.name = "rpc-3"}, [] {
    EXPECT_EQ(this_fiber::name(), "rpc-3");
    this_fiber::set_name("renamed");
    EXPECT_EQ(this_fiber::name(), "renamed");
  });
  Fiber plain = sched().spawn([] { EXPECT_EQ(this_fiber::name(), "fiber-" + std::to_string(this_fiber::id())); });
  EXPECT_NE(named.id(), plain.id());
  EXPECT_NE(named.id(), 0u);
  const auto id = named.id();
  named.join();
  plain.join();
  EXPECT_EQ(named.id(), id);
}

TEST_P(WorkersTest, PinnedFiberNeverChangesWorker) {
  std::atomic<bool> stop{false};
  std::vector<Fiber> noise;
  // Busy fibers keep every worker hungry enough to steal.
  for (unsigned i = 0; i < workers() * 4; ++i) {
    noise.push_back(sched().spawn([&] {
      while (!stop.load()) this_fiber::yield();
    }));
  }
  Fiber pinned = sched().spawn([&] {
    auto guard = this_fiber::pin();
    std::set<int> tids;
    for (int i = 0; i < 2000; ++i) {
      tids.insert(os_thread());
      if (i % 2 == 0)
        this_fiber::yield();
      else
        this_fiber::sleep_for(10us);
    }
    EXPECT_EQ(tids.size(), 1u);
  });
  pinned.join();
  EXPECT_EQ(pinned.counts().steal, 0u);
  stop.store(true);
  for (auto& f : noise) f.join();
}

TEST_P(WorkersTest, AFullRunQueueSpillsAndLosesNobody) {
  // 3000 fibers spawned by one fiber, then yielding at once, overflow a
  // worker's spawn deque (1024) and run queue (256): their older halves go to
  // the global queue, pinned fibers to the worker's own inbox. Every yield
  // must come back, and no pinned fiber may move.
  constexpr int fibers = 3000, yields = 20;
  std::atomic<int> resumed{0};
  std::atomic<int> pinned_moved{0};
  Fiber parent = sched().spawn([&] {
    std::vector<Fiber> children;
    for (int i = 0; i < fibers; ++i) {
      children.push_back(spawn([&, pinned = i % 3 == 0] {
        std::optional<this_fiber::PinGuard> guard;
        if (pinned) guard.emplace(this_fiber::pin());
        const int home = os_thread();
        for (int y = 0; y < yields; ++y) {
          this_fiber::yield();
          resumed.fetch_add(1, std::memory_order_relaxed);
          if (pinned && os_thread() != home) pinned_moved.fetch_add(1);
        }
      }));
    }
    for (auto& child : children) child.join();
  });
  parent.join();
  EXPECT_EQ(resumed.load(), fibers * yields);
  EXPECT_EQ(pinned_moved.load(), 0);
}

TEST_P(WorkersTest, ActiveCountsSwitchesIn) {
  Fiber f = sched().spawn([] {
    for (int i = 0; i < 10; ++i) this_fiber::sleep_for(100us);
  });
  f.join();
  // Switched in once to start, then once after each of the 10 sleeps.
  EXPECT_EQ(f.counts().active, 11u);
  EXPECT_EQ(f.counts().park, 10u);
}

TEST_P(WorkersTest, SleepForAPositiveDurationAlwaysParks) {
  // As Go's time.Sleep: even a deadline that passes before the fiber could
  // park (1 ns) lets the worker's other fibers run.
  Fiber f = sched().spawn([] {
    for (int i = 0; i < 10; ++i) this_fiber::sleep_for(1ns);
    this_fiber::sleep_until(std::chrono::steady_clock::now() - 1s);  // past: no park
  });
  f.join();
  EXPECT_EQ(f.counts().park, 10u);
}

TEST_P(WorkersTest, StealCountsMigrations) {
  // Many sleepers woken by the timer thread land in the global queue, where
  // any worker may pick them: with several workers some must migrate, and
  // a migration is counted exactly when the worker changed.
  std::vector<Fiber> fibers;
  std::atomic<std::uint64_t> observed_moves{0};
  for (int i = 0; i < 40; ++i) {
    fibers.push_back(sched().spawn([&] {
      int where = os_thread();
      std::uint64_t moves = 0;
      for (int k = 0; k < 20; ++k) {
        this_fiber::sleep_for(50us);
        const int now = os_thread();
        if (now != where) ++moves;
        where = now;
      }
      observed_moves.fetch_add(moves);
    }));
  }
  std::uint64_t counted = 0;
  for (auto& f : fibers) {
    f.join();
    counted += f.counts().steal;
  }
  EXPECT_EQ(counted, observed_moves.load());
  if (workers() == 1) {
    EXPECT_EQ(counted, 0u);
  }
}

TEST_P(WorkersTest, IdleWorkersStealFromABusyOne) {
  if (workers() < 2) GTEST_SKIP() << "needs a second worker";
  std::atomic<int> done{0};
  std::atomic<bool> ran_elsewhere{false};
  // The children compute in slices until one of them has run on another
  // worker's thread (or 10 s pass): how soon the idle worker's thread gets
  // a CPU is up to the OS, and on a loaded machine it can take a while.
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  sched()
      .spawn([&] {
        const int parent_thread = os_thread();
        std::vector<Fiber> children;
        for (int i = 0; i < 64; ++i) {
          children.push_back(weft::spawn([&] {
            for (int k = 0; k < 20 || (!ran_elsewhere.load() && std::chrono::steady_clock::now() < give_up); ++k) {
              if (os_thread() != parent_thread) ran_elsewhere.store(true);
              volatile int sink = 0;
              for (int j = 0; j < 20000; ++j) sink = sink + j;
              this_fiber::yield();
            }
            done.fetch_add(1);
          }));
        }
        for (auto& c : children) c.join();
      })
      .join();
  EXPECT_EQ(done.load(), 64);
  EXPECT_TRUE(ran_elsewhere.load());
  std::uint64_t steals = 0;
  for (const auto& w : sched().snapshot().workers) steals += w.steals;
  EXPECT_GT(steals, 0u);
}

TEST_P(WorkersTest, FiberLocalIsPerFiber) {
  static FiberLocal<std::string> local;
  std::vector<Fiber> fibers;
  std::atomic<int> mismatches{0};
  for (int i = 0; i < 100; ++i) {
    fibers.push_back(sched().spawn([&, i] {
      *local = "value-" + std::to_string(i);
      for (int k = 0; k < 10; ++k) this_fiber::yield();
      if (*local != "value-" + std::to_string(i)) mismatches.fetch_add(1);
    }));
  }
  for (auto& f : fibers) f.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_THROW(local.get(), std::logic_error);  // not a fiber here
}

// A local's destructor that reads other locals at the fiber's end: one in
// a later slot, which this fiber did not use (made then, past the end of
// the fiber's slot array, which grows) or did (destroyed first, in reverse
// slot order, and made again), and one in an earlier slot (made then, and
// destroyed later in the same pass). Each value made is destroyed. Before,
// the growth left the destruction loop in freed memory (SIGSEGV), and the
// value made again was dropped undestroyed.
struct CountedLocal {
  static inline std::atomic<int> alive{0};
  CountedLocal() { alive.fetch_add(1); }
  ~CountedLocal() { alive.fetch_sub(1); }
};
struct TouchesOtherLocals;
FiberLocal<CountedLocal>& earlier_local() {
  static FiberLocal<CountedLocal> local;
  return local;
}
FiberLocal<TouchesOtherLocals>& toucher_local() {
  static FiberLocal<TouchesOtherLocals> local;
  return local;
}
FiberLocal<CountedLocal>& later_local() {
  static FiberLocal<CountedLocal> local;
  return local;
}
struct TouchesOtherLocals {
  ~TouchesOtherLocals() {
    (void)later_local().get();
    (void)earlier_local().get();
  }
};

TEST_P(WorkersTest, ALocalsDestructorMayTouchOtherLocals) {
  // Their slots in this order, with 40 more between the toucher's and the
  // later one's: the array grows past them.
  (void)earlier_local();
  (void)toucher_local();
  static const std::vector<FiberLocal<int>> between(40);
  (void)later_local();
  for (const bool later_used : {false, true}) {
    std::vector<Fiber> fibers;
    for (int i = 0; i < 20; ++i) {
      fibers.push_back(sched().spawn([later_used] {
        (void)toucher_local().get();
        if (later_used) (void)later_local().get();
      }));
    }
    for (Fiber& fiber : fibers) fiber.join();
    EXPECT_EQ(CountedLocal::alive.load(), 0) << "the later local " << (later_used ? "used" : "not used");
  }
}

TEST_P(WorkersTest, SnapshotListsLiveFibers) {
  std::atomic<bool> release{false};
  Fiber f = sched().spawn({.name = "snapshot-me"}, [&] {
    while (!release.load()) this_fiber::sleep_for(200us);
  });
  bool found = false;
  for (int attempt = 0; attempt < 1000 && !found; ++attempt) {
    for (const auto& fiber : sched().snapshot().fibers) found |= fiber.name == "snapshot-me";
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(sched().snapshot().workers.size(), workers());
  release.store(true);
  f.join();
}

WEFT_WORKER_COUNTS(WorkersTest);

TEST(Scheduler, SeveralIndependentSchedulers) {
  Scheduler a{test::config_with(1)};
  Scheduler b{test::config_with(2)};
  std::atomic<int> total{0};
  Fiber fa = a.spawn([&] {
    // A fiber of one scheduler spawning on another.
    b.spawn([&] { total.fetch_add(1); }).join();
    total.fetch_add(1);
  });
  fa.join();
  EXPECT_EQ(total.load(), 2);
}

TEST(Scheduler, RejectsBadConfig) {
  Config zero;
  zero.workers = 0;
  EXPECT_THROW(Scheduler{zero}, std::invalid_argument);
  Config tiny;
  tiny.stack_size = 1024;
  EXPECT_THROW(Scheduler{tiny}, std::invalid_argument);
  // A grace of 0 or less made shutdown report stuck fibers in a busy loop
  // (about 100,000 reports in 200 ms); a slice past an hour overflowed
  // sysmon's comparisons and preempted at every tick.
  for (const auto grace : {std::chrono::milliseconds(0), std::chrono::milliseconds(-1)}) {
    Config config;
    config.shutdown_grace = grace;
    EXPECT_THROW(Scheduler{config}, std::invalid_argument) << grace.count();
  }
  for (const auto slice : {std::chrono::microseconds(3'600'000'001), std::chrono::microseconds::max()}) {
    Config config;
    config.time_slice = slice;
    EXPECT_THROW(Scheduler{config}, std::invalid_argument) << slice.count();
  }
  // workers and max_threads past their variables' bounds: a bare
  // std::bad_alloc, or gigabytes for the spare threads' slots.
  Config many;
  many.workers = 1025;
  EXPECT_THROW(Scheduler{many}, std::invalid_argument);
  Config threads;
  threads.max_threads = 1'000'001;
  EXPECT_THROW(Scheduler{threads}, std::invalid_argument);
  Config hour;
  hour.time_slice = std::chrono::hours(1);
  hour.shutdown_grace = std::chrono::milliseconds::max();  // saturated, not wrapped
  Scheduler{hour}.spawn([] {}).join();
}

// Out of threads at construction (RLIMIT_NPROC, a cgroup's pids.max):
// the threads started so far end, and the constructor throws an error
// that names weft and the limit. Before, the workers already started were
// joinable std::threads destroyed in the unwinding: std::terminate. In a
// child made for it, under a uid of its own (RLIMIT_NPROC counts the
// user's threads; root is exempt from it), whose limit lets a few of the
// workers start.
TEST(Scheduler, OutOfThreadsAtConstructionThrowsANamedError) {
  if (!test::children_can_take_another_uid()) GTEST_SKIP() << "needs root in the initial user namespace";
  SKIP_IF_CHILDREN_CANNOT_ALLOCATE();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const rlimit few{4, 4};
    if (::setrlimit(RLIMIT_NPROC, &few) != 0 || ::setgid(54'321) != 0 || ::setuid(54'321) != 0) ::_exit(3);
    Config config = test::config_with(8);
    try {
      Scheduler sched{config};
      ::_exit(4);  // every thread started: the limit did not hold
    } catch (const std::system_error& error) {
      const std::string what = error.what();
      ::_exit(what.find("weft::Scheduler") != std::string::npos && what.find("RLIMIT_NPROC") != std::string::npos ? 0
                                                                                                                  : 5);
    } catch (...) {
      ::_exit(6);
    }
  }
  EXPECT_EQ(test::child_exit_status(child, std::chrono::seconds(60)), 0)
      << "-1: a signal or the time limit; 3: no uid of its own, 4: no limit, 5: another message, 6: another error";
}

TEST(Scheduler, SpawnAfterShutdownThrows) {
  Scheduler s{test::config_with(1)};
  s.shutdown();
  EXPECT_THROW(s.spawn([] {}), std::logic_error);
}

TEST(Scheduler, FiberOnlyCallsFromAPlainThread) {
  EXPECT_FALSE(this_fiber::is_fiber());
  EXPECT_EQ(this_fiber::id(), 0u);
  EXPECT_THROW(this_fiber::name(), std::logic_error);
  EXPECT_THROW(this_fiber::set_name("x"), std::logic_error);
  EXPECT_THROW((void)this_fiber::pin(), std::logic_error);
  EXPECT_THROW(weft::spawn([] {}), std::logic_error);
  this_fiber::yield();       // std::this_thread::yield
  this_fiber::checkpoint();  // no-op
  const auto start = std::chrono::steady_clock::now();
  this_fiber::sleep_for(2ms);  // std::this_thread::sleep_for
  EXPECT_GE(std::chrono::steady_clock::now() - start, 2ms);
}

TEST(Scheduler, JoinMisuseIsReported) {
  Scheduler s{test::config_with(1)};
  Fiber f = s.spawn([] {});
  f.join();
  EXPECT_THROW(f.join(), std::logic_error);
  EXPECT_THROW(f.detach(), std::logic_error);
}

TEST(SchedulerDeathTest, DroppingAJoinableHandleTerminates) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Scheduler s{test::config_with(1)};
        Fiber f = s.spawn([] {});
      },
      "joinable weft::Fiber");
}

// pthread_exit() in a fiber would end its worker's thread under the
// scheduler: the process stops, saying so. Before, glibc aborted it with
// "FATAL: exception not rethrown".
TEST(SchedulerDeathTest, PthreadExitInAFiberStopsTheProcessSayingWhy) {
#ifdef WEFT_UNDER_TSAN
  GTEST_SKIP() << "ThreadSanitizer's pthread_exit interceptor fails its own check in a fiber, before weft sees it";
#endif
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Scheduler s{test::config_with(1)};
        s.spawn({.name = "exits"}, [] { pthread_exit(nullptr); }).join();
      },
      "pthread_exit\\(\\) or a cancellation of the thread in fiber \"exits\" #[0-9]+: a fiber cannot end its "
      "worker's thread");
}

TEST(SchedulerDeathTest, ShutdownReportsStuckFibers) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Config config = test::config_with(1);
        config.shutdown_grace = 100ms;
        config.shutdown_policy = ShutdownPolicy::abort;
        Scheduler s{config};
        s.spawn({.name = "sleeps-forever"}, [] { this_fiber::sleep_for(1h); }).detach();
        // Parked before the grace begins (a first run is slow under TSan).
        test::wait_until([&] { return s.snapshot().fiber_states.parked == 1; });
      },
      "\"sleeps-forever\" #[0-9]+ parked, waiting on weft::this_fiber@.*\\(sleep\\)");
}

// Before shutdown was idempotent, two callers both joined sysmon's thread
// and the workers: a hang, or std::system_error from a second join.
TEST(Scheduler, ShutdownFromManyThreadsAtOnce) {
  Scheduler s{test::config_with(2)};
  std::atomic<bool> release{false};
  Fiber f = s.spawn([&] {
    while (!release.load()) this_fiber::sleep_for(1ms);
  });
  f.detach();
  constexpr int kCallers = 4;
  std::atomic<int> returned{0};
  std::vector<std::thread> callers;
  for (int i = 0; i < kCallers; ++i)
    callers.emplace_back([&] {
      s.shutdown();
      returned.fetch_add(1);
    });
  std::this_thread::sleep_for(20ms);  // let them all wait on the fiber
  EXPECT_EQ(returned.load(), 0) << "shutdown returned while a fiber was alive";
  release.store(true);
  const auto bound = std::chrono::steady_clock::now() + 60s;
  while (returned.load() < kCallers && std::chrono::steady_clock::now() < bound) std::this_thread::sleep_for(1ms);
  ASSERT_EQ(returned.load(), kCallers) << "concurrent shutdown() calls hung";
  for (auto& t : callers) t.join();
  s.shutdown();  // and once more, afterwards
  EXPECT_THROW(s.spawn([] {}), std::logic_error);
}

// A plain thread spawning without pause used to hold shutdown off for
// ever: shutdown waited for the live count to reach zero, which the stream
// of new fibers never let happen. Now a spawn from outside is refused as
// soon as shutdown begins; the scheduler's own fibers may still spawn.
TEST(Scheduler, ShutdownRefusesSpawnsFromOutside) {
  Scheduler s{test::config_with(2)};
  BlockingQueue<int> gate;
  std::atomic<bool> child_ran{false};
  Fiber holder = s.spawn([&] {
    gate.take();  // alive until the test lets it go
    // Shutdown has begun: a fiber of the scheduler may still spawn.
    weft::spawn([&] { child_ran.store(true); }).join();
  });
  holder.detach();
  std::thread stopper([&] { s.shutdown(); });
  std::atomic<std::uint64_t> accepted{0};
  std::atomic<std::uint64_t> ran{0};
  bool refused = false;
  const auto bound = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < bound) {
    try {
      s.spawn([&] { ran.fetch_add(1); }).detach();
      accepted.fetch_add(1);
    } catch (const std::logic_error& e) {
      EXPECT_NE(std::string(e.what()).find("shutdown began"), std::string::npos) << e.what();
      refused = true;
      break;
    }
  }
  EXPECT_TRUE(refused) << accepted.load() << " spawns accepted during shutdown, none refused";
  gate.put(1);
  stopper.join();
  EXPECT_TRUE(child_ran.load());
  EXPECT_EQ(ran.load(), accepted.load()) << "an accepted spawn never ran";
}

TEST(SchedulerDeathTest, ShutdownReportOfManyStuckFibersIsBounded) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Config config = test::config_with(2);
        config.shutdown_grace = 100ms;
        config.shutdown_policy = ShutdownPolicy::abort;
        BlockingQueue<int> never;  // outlives the scheduler
        std::atomic<int> started{0};
        Scheduler s{config};
        for (int i = 0; i < 200; ++i)
          s.spawn({.name = "stuck"}, [&] {
             started.fetch_add(1);
             this_fiber::sleep_for(1h);
           }).detach();
        s.spawn({.name = "taker"}, [&] {
           started.fetch_add(1);
           never.take();
         }).detach();
        // Each at its wait site before the grace begins: a fiber takes its
        // stack when it first runs, which under TSan costs a TSan fiber
        // (milliseconds) each.
        test::wait_until([&] { return started.load() == 201; });
      },
      "201 fiber\\(s\\) are still alive.*\\.\\.\\. and 169 more\n"
      "weft: by wait site:\n  1 weft::BlockingQueue \\(take\\)\n  200 weft::this_fiber \\(sleep\\)\n");
}

}  // namespace
}  // namespace weft
