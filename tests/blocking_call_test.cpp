// Announced blocking (sched/blocking_call.h): a fiber that marks its worker
// "in a blocking call" for longer than the grace has the fibers queued
// behind it run elsewhere, by a spare or an idle worker, also when its
// thread is not asleep in the kernel (a big read from the page cache runs
// on a CPU, in the kernel), which an unannounced call would not get.
// Pass or fail rests on what ran while the call lasted; durations only
// bound loops.
#include "sched/blocking_call.h"

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <weft/detail/raw_syscall.h>
#include <weft/weft.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "sched/worker.h"
#include "test_support.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using test::wait_until;

bool in_call(detail::Worker* worker) { return (worker->blocking_call() & 1) != 0; }

// No spares, and a slice of a second: a timer due while every worker runs
// a fiber fires only where the fibers let it, not at sysmon's backstop.
Config without_backstop(unsigned workers) {
  Config config = test::config_with(workers);
  config.max_threads = config.workers;
  config.time_slice = 1s;
  return config;
}

// A short call as a hook makes it (hooks/announced.h, announced_hook): the
// announced call, then the hook's checkpoint.
void short_hooked_call() {
  {
    const detail::BlockingCall announced;
    detail::raw_syscall(SYS_getppid);
  }
  this_fiber::checkpoint();
}

TEST(BlockingCall, OnAPlainThreadDoesNothing) {
  EXPECT_EQ(detail::enter_blocking_call(), nullptr);
  detail::exit_blocking_call(nullptr);
  const detail::BlockingCall announced;  // and the scope neither
}

TEST(BlockingCall, MarksItsWorkerForItsScopeAndNests) {
  Scheduler sched{test::config_with(1)};
  sched
      .spawn([] {
        detail::Worker* worker = detail::current_worker();
        ASSERT_NE(worker, nullptr);
        EXPECT_FALSE(in_call(worker));
        const std::uint32_t before = worker->blocking_call();
        {
          const detail::BlockingCall outer;
          EXPECT_TRUE(in_call(worker));
          // An inner announcement does nothing: the outer one's exit ends it.
          EXPECT_EQ(detail::enter_blocking_call(), nullptr);
          EXPECT_TRUE(in_call(worker));
        }
        EXPECT_FALSE(in_call(worker));
        EXPECT_EQ(worker->blocking_call(), before + 2) << "one store at the entry, one at the exit";
      })
      .join();
}

// exit_blocking_call reports sysmon's verdict on the call itself (it
// outlasted the grace), not a verdict on the worker given while the
// fiber's short calls came and went (Worker::stuck, which a fiber holding
// the worker draws): that one is cleared at the exit, and does not send a
// cached read back to the slow way (hooks_files.cpp). Before, any standing
// verdict was reported as the call's.
TEST(BlockingCall, ReportsTheVerdictOnTheCallItself) {
  bool hold_up_reported = true;
  bool hold_up_cleared = false;
  bool blocked_reported = false;
  {
    // No spare and one worker: nobody could take its fibers, so sysmon
    // judges no call here, however long a loaded machine holds it.
    Scheduler sched{without_backstop(1)};
    sched
        .spawn([&] {
          detail::Worker* worker = detail::enter_blocking_call();
          ASSERT_NE(worker, nullptr);
          worker->set_stuck(true);  // as sysmon's verdict on a fiber holding the worker
          hold_up_reported = detail::exit_blocking_call(worker);
          hold_up_cleared = !worker->stuck();
        })
        .join();
  }
  Scheduler sched{test::config_with(1)};
  sched
      .spawn([&] {
        detail::Worker* worker = detail::enter_blocking_call();
        const timespec long_call{0, 50'000'000};  // 500 graces
        detail::raw_syscall(SYS_nanosleep, &long_call, nullptr);
        blocked_reported = detail::exit_blocking_call(worker);
      })
      .join();
  EXPECT_FALSE(hold_up_reported) << "a verdict on the worker was reported as the call's";
  EXPECT_TRUE(hold_up_cleared);
  EXPECT_TRUE(blocked_reported) << "a call blocked 50 ms was not reported judged blocked";
}

// Every worker is in an announced call that spins on a CPU (sched_yield:
// the thread stays runnable, never asleep in the kernel, as in a long copy
// from the page cache). Fibers spawned by a blocked fiber before its call
// (held for its worker) and by a plain thread (the global queue) must run
// before any call ends. Unannounced, such a worker looks like a fiber
// burning its CPU, for which no spare starts.
class AnnouncedCall : public ::testing::TestWithParam<unsigned> {};

TEST_P(AnnouncedCall, FibersQueuedBehindALongCallRunElsewhere) {
  const unsigned workers = GetParam();
  Scheduler sched{test::config_with(workers)};
  std::atomic<bool> release{false};
  std::atomic<unsigned> in_calls{0};
  std::atomic<unsigned> calls_ended{0};
  std::atomic<unsigned> others_ran{0};
  std::vector<Fiber> callers;
  for (unsigned i = 0; i < workers; ++i) {
    callers.push_back(sched.spawn({.name = "caller"}, [&] {
      Fiber queued = spawn([&] { ++others_ran; });
      {
        const detail::BlockingCall announced;
        ++in_calls;
        const auto limit = Clock::now() + 30s;
        while (!release.load() && Clock::now() < limit) detail::raw_syscall(SYS_sched_yield);
      }
      ++calls_ended;
      queued.join();
    }));
  }
  ASSERT_TRUE(wait_until([&] { return in_calls.load() == workers; }));
  std::vector<Fiber> from_thread;
  for (int i = 0; i < 4; ++i) from_thread.push_back(sched.spawn([&] { ++others_ran; }));
  const unsigned expected = workers + 4;
  const bool ran_during_calls = wait_until([&] { return others_ran.load() == expected; }, 10s);
  const unsigned ended_before = calls_ended.load();
  release = true;
  for (auto& fiber : callers) fiber.join();
  for (auto& fiber : from_thread) fiber.join();
  EXPECT_TRUE(ran_during_calls) << others_ran.load() << " of " << expected << " ran during the calls";
  EXPECT_EQ(ended_before, 0u) << "a call ended before the others ran: the test proved nothing";
}

INSTANTIATE_TEST_SUITE_P(Workers, AnnouncedCall, ::testing::Values(1u, 2u), ::weft::test::worker_count_name);

// Go's exitsyscall: a fiber whose announced call sysmon judged blocked
// yields at its next checkpoint once the call returns if a timer is due
// meanwhile, so that its worker fires it: while every worker runs fibers,
// only their switches fire timers. Here nothing else would: the other
// worker spins in a fiber that never switches, there are no spares, and
// the slice (after which sysmon fires overdue timers itself) is a second.
TEST(BlockingCall, AFiberWhoseCallWasJudgedBlockedLetsADueTimerFire) {
  Scheduler sched{without_backstop(2)};
  std::atomic<bool> hog_running{false};
  std::atomic<bool> stop_hog{false};
  std::atomic<bool> sleeper_woke{false};
  bool woke_before_caller_went_on = false;
  bool hog_elsewhere = false;
  Fiber hog = sched.spawn({.name = "hog"}, [&] {
    hog_running = true;
    const auto limit = Clock::now() + 30s;
    while (!stop_hog.load() && Clock::now() < limit) {
    }
  });
  Fiber caller = sched.spawn({.name = "caller"}, [&] {
    const auto limit = Clock::now() + 10s;
    while (!hog_running.load() && Clock::now() < limit) this_fiber::yield();
    // The hog never switches: a fiber that runs now runs on the other worker.
    hog_elsewhere = hog_running.load();
    Fiber sleeper = spawn({.name = "sleeper"}, [&] {
      this_fiber::sleep_for(1ms);
      sleeper_woke = true;
    });
    this_fiber::yield();  // the sleeper runs and parks, its timer armed
    {
      const detail::BlockingCall announced;
      const timespec long_call{0, 100'000'000};
      detail::raw_syscall(SYS_nanosleep, &long_call, nullptr);  // not a hook: the raw call
    }
    this_fiber::checkpoint();
    woke_before_caller_went_on = sleeper_woke.load();
    stop_hog = true;
    sleeper.join();
  });
  caller.join();
  stop_hog = true;
  hog.join();
  ASSERT_TRUE(hog_elsewhere) << "the hog never ran: the test proved nothing";
  EXPECT_TRUE(woke_before_caller_went_on)
      << "the caller went on after its blocked call, its worker's due timer unfired";
}

// A fiber whose call sysmon judged blocked, with nothing left waiting for
// its worker (its queue went to other threads), is not asked to yield
// however long the call lasts: it hogs no CPU, and yielding at its hook's
// return it would take fibers from the global queue and wait behind them,
// pinned to its thread, through their blocking calls.
TEST(BlockingCall, AFiberHandedOffInALongCallIsNotAskedToYield) {
  Scheduler sched{test::config_with(1)};
  std::atomic<detail::Worker*> worker{nullptr};
  std::atomic<bool> done{false};
  Fiber caller = sched.spawn({.name = "caller"}, [&] {
    const detail::BlockingCall announced;
    worker = detail::current_worker();
    const timespec long_call{0, 200'000'000};  // 20 slices
    detail::raw_syscall(SYS_nanosleep, &long_call, nullptr);
    done = true;
  });
  ASSERT_TRUE(wait_until([&] { return worker.load() != nullptr; }));
  bool asked = false;
  while (!done.load()) {
    asked = asked || worker.load()->preempt_requested();
    std::this_thread::sleep_for(1ms);
  }
  caller.join();
  EXPECT_FALSE(asked) << "sysmon asked a fiber blocked in its call, with nothing waiting, to yield";
}

// But a fiber pinned to that worker, which no hand-off moves, still gets
// its turn after a slice, at the caller's next checkpoint.
TEST(BlockingCall, AFiberPinnedBehindLongCallsGetsItsTurn) {
  Scheduler sched{test::config_with(1)};
  constexpr int kCalls = 5;
  std::atomic<int> calls_done{0};
  int calls_when_pinned_ran = -1;
  Fiber caller = sched.spawn({.name = "caller"}, [&] {
    Fiber pinned = spawn({.name = "pinned"}, [&] {
      const auto pin = this_fiber::pin();
      this_fiber::yield();  // back in the queue, pinned to this worker
      calls_when_pinned_ran = calls_done.load();
    });
    this_fiber::yield();  // the pinned fiber runs, pins itself and yields
    for (int i = 0; i < kCalls; ++i) {
      {
        const detail::BlockingCall announced;
        const timespec long_call{0, 30'000'000};  // 3 slices
        detail::raw_syscall(SYS_nanosleep, &long_call, nullptr);
      }
      ++calls_done;
      this_fiber::checkpoint();
    }
    pinned.join();
  });
  caller.join();
  EXPECT_GE(calls_when_pinned_ran, 0) << "the pinned fiber never ran";
  EXPECT_LT(calls_when_pinned_ran, kCalls) << "the pinned fiber waited for every call";
}

// Short announced calls one after another (a file written block by block)
// never switch and are never judged blocked: a timer due meanwhile fires
// at one of their returns, not at sysmon's backstop a slice later (here a
// second, and no spare or other worker could run it).
TEST(BlockingCall, ATimerDueDuringShortCallsFiresBetweenThem) {
  Scheduler sched{without_backstop(1)};
  std::atomic<bool> sleeper_woke{false};
  bool woke_during_calls = false;
  long calls = 0;
  sched
      .spawn({.name = "caller"},
             [&] {
               Fiber sleeper = spawn({.name = "sleeper"}, [&] {
                 this_fiber::sleep_for(1ms);
                 sleeper_woke = true;
               });
               this_fiber::yield();  // the sleeper runs and parks, its timer armed
               const auto limit = Clock::now() + 500ms;
               while (!sleeper_woke.load() && Clock::now() < limit) {
                 short_hooked_call();
                 ++calls;
               }
               woke_during_calls = sleeper_woke.load();
               sleeper.join();
             })
      .join();
  EXPECT_TRUE(woke_during_calls) << "the sleeper's timer waited for the calls to end (" << calls << " calls)";
}

// The timer's fiber runs at the preemption its timer asked for, before a
// fiber waiting in the global queue, which never switches either and would
// keep it waiting for a whole slice (here a second).
TEST(BlockingCall, ATimersFiberRunsBeforeTheGlobalQueuesAtItsPreemption) {
  Scheduler sched{without_backstop(1)};
  std::atomic<bool> armed{false};
  std::atomic<bool> sleeper_woke{false};
  std::atomic<bool> first_started{false};
  std::atomic<int> saw_the_wake{0};
  Fiber sleeper = sched.spawn({.name = "sleeper"}, [&] {
    armed = true;
    this_fiber::sleep_for(20ms);
    sleeper_woke = true;
  });
  while (!armed.load()) std::this_thread::yield();
  const auto caller = [&] {
    first_started = true;
    const auto limit = Clock::now() + 500ms;
    while (!sleeper_woke.load() && Clock::now() < limit) {
      short_hooked_call();
    }
    if (sleeper_woke.load()) ++saw_the_wake;
  };
  Fiber first = sched.spawn({.name = "first caller"}, caller);
  while (!first_started.load()) std::this_thread::yield();
  // From a plain thread while the first one runs: into the global queue.
  Fiber second = sched.spawn({.name = "second caller"}, caller);
  first.join();
  second.join();
  sleeper.join();
  EXPECT_EQ(saw_the_wake.load(), 2) << "a caller ran 500 ms while the sleeper's timer had fired";
}

// A call with nothing queued behind it and no timer armed awaits no
// verdict: nothing would be handed off, nothing fired at its return. Such
// calls one after another leave sysmon at its running tick (here the
// slice's eighth, 10 ms). Before, each woke it from its nap and kept it
// looking every 100 us (the grace) for 50 looks; beside a hundred fibers
// writing and fsyncing files it looked 2,400-3,600 times a second.
TEST(BlockingCall, CallsWithNothingBehindThemLeaveSysmonAtItsTick) {
  Config config = test::config_with(2);
  config.time_slice = 80ms;
  Scheduler sched{config};
  const std::vector<int> sysmon = test::threads_named("test/sysmon");
  ASSERT_EQ(sysmon.size(), 1u);
  const int sysmon_tid = sysmon.front();
  std::atomic<bool> stop{false};
  std::atomic<bool> calling{false};
  // One fiber on two workers: nothing is ever queued behind its calls.
  Fiber caller = sched.spawn({.name = "caller"}, [&] {
    const auto limit = Clock::now() + 30s;
    while (!stop.load() && Clock::now() < limit) {
      const detail::BlockingCall announced;
      calling = true;
      const timespec short_call{0, 50'000};  // within the grace
      detail::raw_syscall(SYS_nanosleep, &short_call, nullptr);
    }
  });
  ASSERT_TRUE(wait_until([&] { return calling.load(); }));
  std::this_thread::sleep_for(50ms);
  // How often sysmon went to sleep: once per look.
  const std::string before = test::thread_status_field(sysmon_tid, "voluntary_ctxt_switches");
  std::this_thread::sleep_for(300ms);
  const std::string after = test::thread_status_field(sysmon_tid, "voluntary_ctxt_switches");
  stop = true;
  caller.join();
  ASSERT_FALSE(before.empty() || after.empty()) << "no voluntary_ctxt_switches in /proc";
  // At its tick 28-196 sleeps here; at the grace, 1,505-1,674.
  EXPECT_LT(std::stol(after) - std::stol(before), 600) << "sysmon looked at the grace for calls nobody waited on";
}

// How long a fiber in the global queue (spawned by a plain thread) waits
// when every worker then enters an announced call, with nothing queued
// behind the calls and no timer armed: it runs on a spare, which starts
// once a call is judged blocked. The global queue awaits that verdict as a
// worker's own queue does, so the calls wake a napping sysmon, which
// judges them at the grace. Before, they were judged at its running tick
// (here 10 ms), two looks after they began: 10-20 ms. The calls run on a
// CPU, so that only their announcement says they block (a thread asleep in
// the kernel is found so at a look, after another grace). The first trial
// starts the spare's thread and is not counted: the others wake it.
TEST(BlockingCall, AFiberInTheGlobalQueueRunsSoonAfterEveryWorkerEntersACall) {
  constexpr int kTrials = 9;
  Config config = test::config_with(2);
  config.time_slice = 80ms;  // sysmon's running tick: its eighth
  Scheduler sched{config};
  std::vector<double> waited_ms;
  for (int trial = 0; trial <= kTrials; ++trial) {
    std::atomic<unsigned> spinning{0};
    std::atomic<bool> go{false};
    std::atomic<bool> release{false};
    std::atomic<bool> queued_ran{false};
    std::atomic<std::int64_t> queued_ran_at{0};
    const auto limit = Clock::now() + 20s;
    std::vector<Fiber> callers;
    for (int i = 0; i < 2; ++i) {
      callers.push_back(sched.spawn({.name = "caller"}, [&] {
        ++spinning;  // both at once: one on each worker
        while (!go.load() && Clock::now() < limit) {
        }
        // On a CPU, never asleep in the kernel: only the announcement
        // tells sysmon this worker is blocked.
        const detail::BlockingCall announced;
        while (!release.load() && Clock::now() < limit) detail::raw_syscall(SYS_sched_yield);
      }));
    }
    ASSERT_TRUE(wait_until([&] { return spinning.load() == 2; }));
    std::this_thread::sleep_for(50ms);  // sysmon back at its running tick
    const auto entered = Clock::now();
    Fiber queued = sched.spawn([&] {
      queued_ran_at = Clock::now().time_since_epoch().count();
      queued_ran = true;
    });
    go = true;
    const bool ran = wait_until([&] { return queued_ran.load(); }, 10s);
    release = true;
    for (auto& fiber : callers) fiber.join();
    queued.join();
    ASSERT_TRUE(ran) << "the queued fiber did not run while the calls lasted";
    const double waited = static_cast<double>(queued_ran_at.load() - entered.time_since_epoch().count()) / 1e6;
    if (trial > 0) waited_ms.push_back(waited);
    // The spares of this trial retire: one left would run the next
    // trial's fiber at once, or one of its callers.
    ASSERT_TRUE(wait_until([&] { return sched.snapshot().spares.running == 0; })) << "a spare did not retire";
  }
  std::sort(waited_ms.begin(), waited_ms.end());
  // Medians here: 0.22-0.50 ms at the grace (release and TSan builds;
  // 2.1-5.4 ms with six CPU-bound processes beside them), 18-19 ms at the
  // running tick, where the verdict takes two looks 10 ms apart.
  EXPECT_LT(waited_ms[kTrials / 2], 8.0) << "median wait of the queued fiber, ms (worst " << waited_ms.back()
                                         << "): the calls were judged at sysmon's running tick";
}

}  // namespace
}  // namespace weft
