// Sysmon: preemption at checkpoints, the preempt counters, and the hand-off
// of a stuck worker's queue (sched/sysmon.h, docs/sysmon.md). Pass or fail
// rests on counters and on the order of events the fibers record, never on
// how long anything took; durations below only bound loops.
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <weft/weft.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "run_delays.h"
#include "test_support.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

Config sysmon_config(unsigned workers, bool preemption, std::chrono::microseconds slice) {
  Config config = test::config_with(workers);
  config.preemption = preemption;
  config.time_slice = slice;
  return config;
}

// Something for a hog to compute between checkpoints.
std::uint64_t work(std::uint64_t x) {
  for (int i = 0; i < 200; ++i) x = x * 6364136223846793005ull + 1442695040888963407ull;
  return x;
}

TEST(Sysmon, HogThatReachesCheckpointsIsPreempted) {
  Scheduler sched{sysmon_config(1, true, 1ms)};
  std::atomic<bool> stop{false};
  std::atomic<bool> stopped_by_sleeper{false};
  std::atomic<std::uint64_t> sleeper_preempts{~0ull};
  // The hog spawns the sleeper, so on one worker the sleeper runs, and
  // runs again after each sleep, only if the hog yields: it is what ends
  // the hog's loop (the deadline is a safety net, not the test).
  Fiber hog = sched.spawn({.name = "hog"}, [&] {
    Fiber sleeper = spawn({.name = "sleeper"}, [&] {
      for (int i = 0; i < 3; ++i) this_fiber::sleep_for(1ms);
      stop.store(true);
    });
    const auto safety = Clock::now() + 20s;
    std::uint64_t x = 1;
    while (!stop.load(std::memory_order_relaxed) && Clock::now() < safety) {
      x = work(x);
      this_fiber::checkpoint();
    }
    stopped_by_sleeper.store(stop.load());
    sleeper.join();
    sleeper_preempts.store(sleeper.counts().preempt);
    EXPECT_NE(x, 0u);
  });
  hog.join();
  EXPECT_TRUE(stopped_by_sleeper.load()) << "the sleeper never ran while the hog computed";
  EXPECT_GT(hog.counts().preempt, 0u);
  EXPECT_EQ(sleeper_preempts.load(), 0u) << "a fiber that runs for microseconds was preempted";
  const SchedulerSnapshot snap = sched.snapshot();
  ASSERT_EQ(snap.workers.size(), 1u);
  EXPECT_GE(snap.workers[0].preempts, hog.counts().preempt);
}

TEST(Sysmon, WellBehavedFibersAreNeverPreempted) {
  // These fibers switch every few microseconds, but on a loaded 2-core
  // machine (and under TSan) an OS thread can be held off its CPU for a
  // whole slice between two switches, which sysmon rightly counts as a
  // long run: each preemption allowed needs a slice of the process's
  // threads' waits for a CPU (RunDelays, summed).
  constexpr auto kSlice = 10ms;
  Scheduler sched{sysmon_config(2, true, kSlice)};
  const test::RunDelays delays;
  std::vector<Fiber> fibers;
  for (int f = 0; f < 8; ++f) {
    fibers.push_back(sched.spawn([f] {
      for (int i = 0; i < 200; ++i) {
        if ((i + f) % 2 == 0)
          this_fiber::yield();
        else
          this_fiber::sleep_for(50us);
        this_fiber::checkpoint();
      }
    }));
  }
  for (auto& f : fibers) f.join();
  std::uint64_t preempts = 0;
  for (auto& f : fibers) preempts += f.counts().preempt;
  if (preempts > 0) {
    const double slice_ms = std::chrono::duration<double, std::milli>(kSlice).count();
    EXPECT_LE(static_cast<double>(preempts), delays.total_ms() / slice_ms)
        << "preemptions of fibers that switch every few microseconds, beyond what the OS held threads up for";
  }
}

TEST(Sysmon, PreemptionOffLeavesTheCounterAtZero) {
  Scheduler sched{sysmon_config(1, false, 1ms)};
  std::atomic<bool> hog_done{false};
  std::atomic<bool> other_saw_hog_done{false};
  Fiber hog = sched.spawn([&] {
    // Queued behind the hog on the one worker: without preemption it runs
    // only once the hog is done.
    Fiber other = spawn([&] { other_saw_hog_done.store(hog_done.load()); });
    const auto end = Clock::now() + 30ms;  // many slices
    std::uint64_t x = 1;
    while (Clock::now() < end) {
      x = work(x);
      this_fiber::checkpoint();
    }
    hog_done.store(true);
    other.join();
    EXPECT_NE(x, 0u);
  });
  hog.join();
  EXPECT_EQ(hog.counts().preempt, 0u);
  EXPECT_EQ(sched.snapshot().workers[0].preempts, 0u);
  EXPECT_TRUE(other_saw_hog_done.load()) << "without preemption the queued fiber must wait for the hog";
}

TEST(Sysmon, CheckpointOffAFiberIsANoOp) {
  this_fiber::checkpoint();
  std::thread plain([] {
    for (int i = 0; i < 1000; ++i) this_fiber::checkpoint();
  });
  plain.join();
  // And with a scheduler running, from the thread that owns it.
  Scheduler sched{sysmon_config(1, true, 1ms)};
  this_fiber::checkpoint();
  Fiber f = sched.spawn([] {
    for (int i = 0; i < 1000; ++i) this_fiber::checkpoint();  // nothing pending: no switch
  });
  f.join();
  EXPECT_EQ(f.counts().preempt, 0u);
}

TEST(Sysmon, FibersQueuedBehindAStuckWorkerRunBeforeItReturns) {
  // Preemption off, so that only the hand-off can move the queued fibers
  // (the stuck fiber never yields anyway: it sits in a raw nanosleep, which
  // the libc hooks cannot turn into a park, docs/io.md).
  Config config = sysmon_config(2, false, 20ms);
  std::mutex report_lock;
  StuckWorker reported;
  std::string reported_name;
  SchedulerSnapshot snap_when_stuck;
  std::atomic<int> reports{0};
  Scheduler* sched_ptr = nullptr;
  config.on_stuck_worker = [&](const StuckWorker& stuck) {
    std::lock_guard guard(report_lock);
    reported = stuck;
    reported_name = std::string(stuck.fiber_name);
    snap_when_stuck = sched_ptr->snapshot();
    reports.fetch_add(1);
  };
  Scheduler sched{config};
  sched_ptr = &sched;

  std::atomic<bool> sleep_returned{false};
  std::atomic<std::uint64_t> stuck_id{0};
  constexpr int kQueued = 20;
  std::vector<std::atomic<int>> ran_before_return(kQueued + 1);  // 1 yes, -1 no
  Semaphore wake_me;

  // Parks, so that the stuck fiber's release() puts it in that worker's
  // next slot, which no thief takes: only sysmon's hand-off frees it.
  Fiber woken = sched.spawn({.name = "woken"}, [&] {
    wake_me.acquire();
    ran_before_return[kQueued].store(sleep_returned.load() ? -1 : 1);
  });
  Fiber stuck = sched.spawn({.name = "stuck"}, [&] {
    stuck_id.store(this_fiber::id());
    while (woken.counts().park == 0) this_fiber::yield();  // it is waiting
    wake_me.release();                                     // -> this worker's next slot
    std::vector<Fiber> queued;
    for (int i = 0; i < kQueued; ++i)
      queued.push_back(spawn([&, i] { ran_before_return[i].store(sleep_returned.load() ? -1 : 1); }));
    // Blocks the worker's thread (::usleep would park) for 200 ms, and on
    // until the others ran (a loaded machine, or TSan's slow first runs,
    // may take longer to start 21 fibers elsewhere), for up to 20 s.
    const auto all_ran = [&] {
      return std::all_of(ran_before_return.begin(), ran_before_return.end(),
                         [](const std::atomic<int>& ran) { return ran.load() != 0; });
    };
    const auto stuck_since = Clock::now();
    while ((Clock::now() - stuck_since < 200ms || !all_ran()) && Clock::now() - stuck_since < 20s) {
      const timespec stuck_for{0, 10'000'000};
      syscall(SYS_nanosleep, &stuck_for, nullptr);
    }
    sleep_returned.store(true);
    for (auto& f : queued) f.join();
  });
  stuck.join();
  woken.join();
  for (int i = 0; i <= kQueued; ++i)
    EXPECT_EQ(ran_before_return[i].load(), 1)
        << (i == kQueued ? "the woken fiber" : "queued fiber " + std::to_string(i));

  const SchedulerSnapshot after = sched.snapshot();
  std::uint64_t handoffs = 0;
  for (const auto& w : after.workers) handoffs += w.handoffs;
  EXPECT_GE(handoffs, 1u) << "the next slot can only have been emptied by sysmon";

  // 200 ms > 2 x 20 ms: reported once, with the fiber, while it was stuck.
  ASSERT_GE(reports.load(), 1);
  std::lock_guard guard(report_lock);
  EXPECT_EQ(reports.load(), 1);
  EXPECT_EQ(reported.fiber_id, stuck_id.load());
  EXPECT_EQ(reported_name, "stuck");
  EXPECT_EQ(reported.scheduler, "test");
  ASSERT_LT(reported.worker, snap_when_stuck.workers.size());
  const WorkerSnapshot& w = snap_when_stuck.workers[reported.worker];
  EXPECT_TRUE(w.stuck);
  EXPECT_EQ(w.stuck_fiber, stuck_id.load());
  EXPECT_GT(w.running_ms, 0.0);
}

TEST(Sysmon, IdleSchedulerShowsNoStuckWorker) {
  Scheduler sched{sysmon_config(2, true, 1ms)};
  Fiber f = sched.spawn([] { this_fiber::sleep_for(5ms); });
  f.join();
  for (const auto& w : sched.snapshot().workers) {
    EXPECT_FALSE(w.stuck);
    EXPECT_EQ(w.stuck_fiber, 0u);
  }
}

// Counts on_stuck_worker's reports (it runs on the sysmon thread).
struct StuckReports {
  std::atomic<int> count{0};
  std::atomic<std::int64_t> longest_ms{0};
  void install(Config& config) {
    config.on_stuck_worker = [this](const StuckWorker& stuck) {
      count.fetch_add(1);
      longest_ms.store(std::max<std::int64_t>(longest_ms.load(), stuck.running_for.count()));
    };
  }
};

// Issue 15: a fiber that answers every preemption request within a small
// part of the slice is not stuck, however long it runs. With nothing else
// to run it keeps its worker, so the switch tick stands and sysmon renews
// its request every slice; before, a request still pending at sysmon's
// next look (20 us later) made it STUCK. Checkpoints 1 ms apart make that
// look find it pending nearly every time (5 us apart, as in the issue,
// only when the thread waits for a CPU); the rule now needs a request
// ignored for a further full slice (50 ms here).
TEST(Sysmon, AFiberThatKeepsReachingCheckpointsIsNeverStuck) {
  struct Case {
    unsigned workers;
    std::chrono::microseconds every;  // between two checkpoints
  };
  for (const Case& c : {Case{1, 1ms}, Case{2, 1ms}, Case{1, 5us}, Case{2, 5us}}) {
    const unsigned workers = c.workers;
    const std::chrono::microseconds every = c.every;
    Config config = sysmon_config(workers, true, 50ms);
    StuckReports reports;
    reports.install(config);
    Scheduler sched{config};
    bool stuck_seen = false;
    std::atomic<bool> done{false};
    Fiber checkpointer = sched.spawn({.name = "checkpointer"}, [&] {
      const auto end = Clock::now() + 600ms;  // 12 slices, 10 renewed requests
      std::uint64_t x = 1;
      while (Clock::now() < end) {
        const auto next = Clock::now() + every;
        while (Clock::now() < next) x = work(x);
        this_fiber::checkpoint();
      }
      EXPECT_NE(x, 0u);
      done.store(true);
    });
    // The snapshot as well as the report: a stuck mark stays until the
    // fiber switches. Bounded by the fiber's own end.
    while (!done.load()) {
      for (const auto& w : sched.snapshot().workers) stuck_seen = stuck_seen || w.stuck;
      std::this_thread::sleep_for(5ms);
    }
    checkpointer.join();
    const std::string setting =
        std::to_string(workers) + " workers, a checkpoint every " + std::to_string(every.count()) + " us";
    EXPECT_EQ(reports.count.load(), 0) << setting << ": reported stuck after " << reports.longest_ms.load() << " ms";
    EXPECT_FALSE(stuck_seen) << setting;
  }
}

// Runs in a child of the test: stops its parent as soon as told, for
// `pause`, then lets it go. Only system calls, as fork's child of a
// threaded process must.
void stop_parent_when_told(int told_fd, std::chrono::milliseconds pause) {
  char c;
  if (::syscall(SYS_read, told_fd, &c, 1) != 1) ::_exit(1);
  const pid_t parent = ::getppid();
  ::kill(parent, SIGSTOP);
  const timespec t{static_cast<time_t>(pause.count() / 1000), static_cast<long>(pause.count() % 1000) * 1'000'000};
  ::syscall(SYS_nanosleep, &t, nullptr);
  ::kill(parent, SIGCONT);
  ::_exit(0);
}

// Issue 15: after SIGSTOP/SIGCONT (or any stall of sysmon's own) the time
// the whole process stood still is nobody's fault. A fiber runs without a
// switch for 150 ms before the stop and 100 ms after it, with preemption
// off and a 500 ms slice: stuck needs 1 s of running. Across a 3 s stop
// sysmon, which saw it before, used to count the stop as running time and
// report it; it must notice that its own look came 3 s late and watch
// afresh.
TEST(Sysmon, AStopOfTheWholeProcessIsNotBlamedOnAFiber) {
  int told[2];
  ASSERT_EQ(::pipe(told), 0);
  constexpr auto kPause = 3000ms;  // beyond sysmon's pause bound of max(2 x slice, 1 s)
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) stop_parent_when_told(told[0], kPause);
  ::close(told[0]);

  Config config = sysmon_config(1, false, 500ms);
  StuckReports reports;
  reports.install(config);
  Scheduler sched{config};
  std::atomic<int> phase{0};  // 1: after the stop; 2: the test thread has looked
  bool stop_seen = false;
  Fiber runner = sched.spawn({.name = "runner"}, [&] {
    const auto spin = [](Clock::time_point until) {
      std::uint64_t x = 1;
      while (Clock::now() < until) x = work(x);
      return x;
    };
    EXPECT_NE(spin(Clock::now() + 150ms), 0u);  // sysmon looks at least twice meanwhile
    // The stop shows as a jump of the clock, which may come before the
    // write returns; bounded in case it never comes.
    auto last = Clock::now();
    const auto limit = last + 10s;
    EXPECT_EQ(::write(told[1], "x", 1), 1);
    while (last < limit) {
      const auto now = Clock::now();
      if (now - last > kPause / 2) {
        stop_seen = true;
        break;
      }
      last = now;
    }
    EXPECT_NE(spin(Clock::now() + 100ms), 0u);
    phase.store(1);
    const auto wait_limit = Clock::now() + 10s;
    while (phase.load() != 2 && Clock::now() < wait_limit) {
    }
  });
  const auto limit = Clock::now() + 20s;
  while (phase.load() != 1 && Clock::now() < limit) std::this_thread::sleep_for(1ms);
  const SchedulerSnapshot snap = sched.snapshot();
  phase.store(2);
  runner.join();
  ::close(told[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_TRUE(stop_seen) << "the process was never stopped";
  EXPECT_EQ(reports.count.load(), 0) << "reported stuck after " << reports.longest_ms.load() << " ms";
  ASSERT_EQ(snap.workers.size(), 1u);
  EXPECT_FALSE(snap.workers[0].stuck);
  // What it shows: the run since sysmon watched again, not the stop. (The
  // report is also kept off by the CPU rule, the fiber's thread having
  // burned no CPU while stopped; running_ms is what only the restart
  // gets right.) The stop alone is kPause; what follows it is a 100 ms
  // spin and the hand-back, which a loaded machine (TSan beside other
  // builds) stretched past a second: the bound stays well below the stop.
  const double pause_ms = std::chrono::duration<double, std::milli>(kPause).count();
  EXPECT_LT(snap.workers[0].running_ms, pause_ms * 2 / 3);
}

// Issue 15: with every worker blocked in the kernel there is nobody to hand
// fibers to. Two workers, no spares, 20 fibers that each block their
// worker's thread for 50 ms in a raw nanosleep and then yield: each worker
// comes back for a moment between two calls. Before, sysmon moved the
// blocked worker's queue to the global queue at every look, the other
// worker took it up when it came back, and so on: over 700 moves in a
// second. The fibers still all run, on the workers that queued them.
// A look that finds the other worker in its moment between two calls sees
// it running, and hands the blocked one's queue over (about 10 fibers):
// by design, and rare. Under ThreadSanitizer the moment is longer: with
// 20 ms calls, three such looks in one run (27 fibers) failed the bound;
// 50 ms calls make the moments rarer without changing what a storm costs.
TEST(Sysmon, NoHandOffWhenEveryWorkerIsBlocked) {
  Config config = sysmon_config(2, true, 10ms);
  config.max_threads = config.workers;  // no spares
  Scheduler sched{config};
  constexpr int kFibers = 20;
  std::atomic<bool> stop{false};
  std::vector<std::atomic<int>> rounds(kFibers);
  std::vector<Fiber> fibers;
  for (int i = 0; i < kFibers; ++i) {
    fibers.push_back(sched.spawn([&, i] {
      for (int round = 0; round < 1000 && !stop.load(); ++round) {
        const timespec pause{0, 50'000'000};
        ::syscall(SYS_nanosleep, &pause, nullptr);  // blocks the thread: no hook turns it into a park
        rounds[i].fetch_add(1);
        this_fiber::yield();
      }
    }));
  }
  // Until every fiber has run twice (so the workers went round their
  // queues), for at least a second; bounded.
  const auto start = Clock::now();
  const auto all_ran_twice = [&] {
    for (const auto& r : rounds)
      if (r.load() < 2) return false;
    return true;
  };
  while ((Clock::now() - start < 1s || !all_ran_twice()) && Clock::now() - start < 30s)
    std::this_thread::sleep_for(10ms);
  stop.store(true);
  for (auto& f : fibers) f.join();
  EXPECT_TRUE(all_ran_twice());
  std::uint64_t handoffs = 0;
  for (const auto& w : sched.snapshot().workers) handoffs += w.handoffs;
  // About 10 fibers per such look, a few looks per run; a worker held off
  // its CPU in its moment stretches it, so a loaded machine or a
  // sanitizer gives more (ThreadSanitizer's once gave 3 looks, 29 fibers,
  // even with 50 ms calls). A storm is over 700 a second: 150 leaves room
  // for the machine and still catches one.
  EXPECT_LE(handoffs, 150u) << "fibers moved between blocked workers";
}

// Issue 28: a fiber that only a blocked thread may run (pinned to it) waits
// for that thread. Sysmon's hand-off found nothing it could move, yet woke
// the idle worker at every look, which found nothing either: beside 8 fsync
// writers whose fibers yielded inside their hooks, about 4,800 polls a second.
TEST(Sysmon, NoWakesForAFiberOnlyABlockedThreadMayRun) {
  Scheduler sched{sysmon_config(2, true, 10ms)};
  std::atomic<int> pinned_tid{0};
  std::atomic<bool> blocking{false};
  constexpr auto kBlockFor = 400ms;
  // Spawns from its own thread until a child starts there and blocks it in
  // the kernel (a child starts on its spawner's worker unless the idle one
  // steals it first; the stolen end at once), and waits queued behind it.
  // Before, the tries were spawned from outside, and under load every one
  // could land on the other worker. Bounded in count and time.
  Fiber pinned = sched.spawn({.name = "pinned"}, [&] {
    const auto pin = this_fiber::pin();
    pinned_tid.store(::gettid());
    std::vector<Fiber> tries;
    for (const auto give_up = Clock::now() + 30s;
         !blocking.load() && tries.size() < 10'000 && Clock::now() < give_up;) {
      tries.push_back(spawn([&] {
        if (::gettid() != pinned_tid.load() || blocking.exchange(true)) return;
        const timespec blocked_for{0, std::chrono::nanoseconds(kBlockFor).count()};
        ::syscall(SYS_nanosleep, &blocked_for, nullptr);  // no hook turns it into a park
      }));
      this_fiber::yield();
    }
    for (auto& f : tries) f.join();
  });
  std::string before;
  std::string after;
  int idle_tid = 0;
  if (test::wait_until([&] { return blocking.load(); }, 30s)) {
    for (const WorkerSnapshot& worker : sched.snapshot().workers)
      if (!worker.spare && worker.os_thread_id != pinned_tid.load()) idle_tid = worker.os_thread_id;
    std::this_thread::sleep_for(50ms);  // the tries stolen meanwhile have ended
    // How often the idle worker went to sleep: once per wake.
    before = test::thread_status_field(idle_tid, "voluntary_ctxt_switches");
    std::this_thread::sleep_for(kBlockFor / 2);
    after = test::thread_status_field(idle_tid, "voluntary_ctxt_switches");
  }
  pinned.join();
  ASSERT_TRUE(blocking.load()) << "no try started on the pinned fiber's thread";
  ASSERT_NE(idle_tid, 0) << "no worker but the pinned fiber's";
  ASSERT_FALSE(before.empty() || after.empty()) << "no voluntary_ctxt_switches in /proc";
  // A wake at each of sysmon's looks was 214-225 in this time.
  EXPECT_LT(std::stol(after) - std::stol(before), 20) << "the idle worker woke for a fiber it may not run";
}

TEST(Sysmon, ZeroTimeSliceIsRejected) {
  Config config = test::config_with(1);
  config.time_slice = std::chrono::microseconds(0);
  EXPECT_THROW(Scheduler{config}, std::invalid_argument);
}

}  // namespace
}  // namespace weft
