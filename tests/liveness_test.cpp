// Liveness of the idle protocol (sched/idle.h): while a fiber waits in a
// queue, no worker sleeps. With preemption off a CPU-bound fiber keeps its
// worker, so a fiber queued behind it runs only if an idle worker is woken
// for it; these tests fail when a wake-up is lost or skipped.
#include <sched.h>
#include <time.h>
#include <weft/detail/spin_lock.h>
#include <weft/weft.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "run_delays.h"
#include "test_support.h"

namespace weft::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

Config without_preemption(unsigned workers) {
  Config config = config_with(workers);
  config.preemption = false;
  return config;
}

void spin_for(std::chrono::nanoseconds duration) {
  const auto end = Clock::now() + duration;
  while (Clock::now() < end) {
  }
}

// Spins for `duration` of this thread's CPU time: on a loaded machine its
// wall time stretches, and a peer worker that the OS runs late still starts
// before the spin ends. Only a worker left asleep starts after it.
void spin_cpu_for(std::chrono::nanoseconds duration) {
  auto cpu_now = [] {
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
  };
  const auto end = cpu_now() + duration;
  const auto give_up = Clock::now() + 10 * duration + 2s;  // bounded however slow the machine
  while (cpu_now() < end && Clock::now() < give_up) {
    // Lets the OS run a peer worker it has woken: with autogroup
    // scheduling on a loaded machine, a woken worker of this process
    // otherwise waited tens of ms for this thread's CPU. The fiber still
    // keeps its worker (the thread's yield, not libc's sched_yield, which
    // yields the fiber); a worker that nobody woke still never runs.
    detail::yield_thread();
  }
}

// Issue 15: a plain thread spawning two CPU-bound fibers onto 2 idle workers
// sometimes ran the second only after the first had finished, while the
// other worker slept. A second start after the first's end is that bug.
// Each trial first runs a trivial fiber, so that its worker is searching
// (just back from it) while the two are spawned: the publisher then skips
// its wake, and only the searcher's rule 2 (sched/idle.h) wakes the other
// worker. The spawn gap varies a little to cover the search's phases. On
// the code before the rule, 1 to 6 trials of 200 failed in every run.
TEST(Liveness, TwoSpawnsFromAThreadRunAtOnceOnTwoIdleWorkers) {
  Scheduler sched(without_preemption(2));
  constexpr int kTrials = 200;
  int serialized = 0, excused = 0;
  Clock::duration worst_gap{};
  for (int trial = 0; trial < kTrials; ++trial) {
    // Idle first: both workers asleep, as in the report.
    std::this_thread::sleep_for(2ms);
    Clock::time_point start[2], end[2];
    long thread_of[2] = {0, 0};
    std::atomic<bool> went{false};
    sched.spawn([&] { went.store(true); }).detach();
    const auto give_up = Clock::now() + 5s;
    while (!went.load() && Clock::now() < give_up) {
    }
    const test::RunDelays delays;
    Fiber a = sched.spawn([&] {
      start[0] = Clock::now();
      thread_of[0] = test::RunDelays::this_thread_id();
      spin_cpu_for(20ms);
      end[0] = Clock::now();
    });
    spin_for(std::chrono::microseconds(trial % 4));
    Fiber b = sched.spawn([&] {
      start[1] = Clock::now();
      thread_of[1] = test::RunDelays::this_thread_id();
      spin_cpu_for(20ms);
      end[1] = Clock::now();
    });
    a.join();
    b.join();
    if (start[1] >= end[0] || start[0] >= end[1]) {
      // The other worker was woken and runnable, but the OS ran it late
      // (a quarter of the spin or more): the machine's delay, not a lost
      // wake-up, which leaves that worker asleep in futex(2), waiting for
      // no CPU. Excused, and counted.
      const long first = start[0] <= start[1] ? thread_of[0] : thread_of[1];
      if (delays.longest_ms_except(first) >= 5.0)
        ++excused;
      else
        ++serialized;
    }
    worst_gap = std::max(worst_gap, start[1] > start[0] ? start[1] - start[0] : start[0] - start[1]);
  }
  EXPECT_EQ(serialized, 0) << "trials of " << kTrials << " in which one fiber started only after the other finished"
                           << " while no thread of the process waited for a CPU (worst gap between the starts "
                           << std::chrono::duration_cast<std::chrono::microseconds>(worst_gap).count() << " us; "
                           << excused << " more trials serialized while the OS held a thread up)";
}

// As many CPU-bound fibers as workers, each spinning until all of them run
// (bounded): the time until the last starts is time that a queued fiber
// waited while a worker slept, or the OS's delay in running a woken thread.
class LivenessTest : public ::testing::TestWithParam<unsigned> {
 protected:
  unsigned workers() const { return GetParam(); }

  // `launch(body)` starts workers() fibers running body; returns the worst
  // time, over the trials, from the launch to the last fiber's start.
  template <class Launch>
  Clock::duration worst_until_all_run(Scheduler& sched, Launch&& launch) {
    constexpr int kTrials = 30;
    Clock::duration worst{};
    for (int trial = 0; trial < kTrials; ++trial) {
      std::this_thread::sleep_for(2ms);  // every worker idle
      std::atomic<unsigned> running{0};
      std::atomic<std::int64_t> last_start_ns{0};
      auto body = [&] {
        const auto now = Clock::now().time_since_epoch().count();
        std::int64_t seen = last_start_ns.load();
        while (seen < now && !last_start_ns.compare_exchange_weak(seen, now)) {
        }
        running.fetch_add(1);
        // Keep the worker (no checkpoints, preemption off) until every
        // fiber runs, so that none of them can run behind another.
        const auto give_up = Clock::now() + 2s;
        while (running.load() < workers() && Clock::now() < give_up) detail::yield_thread();  // as in spin_cpu_for
      };
      const auto launched = Clock::now();
      launch(sched, body);
      EXPECT_EQ(running.load(), workers());
      worst = std::max(worst, Clock::duration(last_start_ns.load()) - launched.time_since_epoch());
    }
    return worst;
  }
};

// A lost wake-up costs the 2 s that the running fibers wait before they
// give up; a woken worker that the OS runs late costs less: on this 2-core
// machine at load 15-300, with two copies of these tests at once, the worst
// such delay seen was 0.9 s, and 200 ms, the bound before, failed a few runs
// in a hundred of each test here, before the spawn hold's fix as after. A
// lost wake-up that sysmon repairs within the bound is not caught here.
constexpr auto kBound = 1s;

std::string ms(Clock::duration d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(d).count() / 1000.0) + " ms";
}

TEST_P(LivenessTest, SpawnsFromAThreadAllRun) {
  Scheduler sched(without_preemption(workers()));
  const auto worst = worst_until_all_run(sched, [this](Scheduler& s, auto& body) {
    std::vector<Fiber> fibers;
    for (unsigned i = 0; i < workers(); ++i) fibers.push_back(s.spawn(body));
    for (auto& f : fibers) f.join();
  });
  EXPECT_LT(worst, kBound) << "worst " << ms(worst);
}

// A fiber's spawns wait in its worker's spawn deque, whose newest one is
// held for the owner (sched/spawn_deque.h) while the spawner runs. Issue 15:
// the hold used to pass to whatever was newest, so when the owner ran the
// newest spawn (CPU-bound, preemption off), the one below it waited where
// only that busy owner could take it, while a thief that had looked before
// slept; sysmon's rescue needs the owner's thread to have had half a core,
// which 4-8 spinning workers on 2 loaded cores do not get. On that code,
// --gtest_repeat=10 on a loaded machine failed 23 of the 28 runs at 2, 4
// and 8 workers that finished, 22 of them on a 2 s give-up (and 10 of 10
// at 1 worker passed). Now a pop ends the hold, and so does the owner's
// next pick of anything else, which publishes the spawn (sched/idle.h).
TEST_P(LivenessTest, SpawnsFromAFiberAllRun) {
  Scheduler sched(without_preemption(workers()));
  const auto worst = worst_until_all_run(sched, [this](Scheduler& s, auto& body) {
    s.spawn([&] {
       std::vector<Fiber> fibers;
       for (unsigned i = 0; i < workers(); ++i) fibers.push_back(weft::spawn(body));
       for (auto& f : fibers) f.join();
     }).join();
  });
  EXPECT_LT(worst, kBound) << "worst " << ms(worst);
}

// The other end of the hold: the spawner picks something other than its
// newest spawn to run next, here a CPU-bound fiber it woke into its
// worker's next slot. That pick releases the hold and publishes the spawn;
// without it the spawn waits behind the woken fiber, which keeps the
// worker, until sysmon finds the worker stuck (at 4-8 workers on 2 cores,
// often not before the 2 s give-up).
TEST_P(LivenessTest, SpawnsLeftBehindAWokenFiberAllRun) {
  Scheduler sched(without_preemption(workers()));
  const auto worst = worst_until_all_run(sched, [this](Scheduler& s, auto& body) {
    Latch gate(1);
    std::atomic<bool> parked{false};
    Fiber woken = s.spawn([&] {
      parked.store(true);
      gate.wait();
      body();
    });
    // Bounded: it parks at once; the pause lets it be parked, not about to.
    const auto give_up = Clock::now() + 5s;
    while (!parked.load() && Clock::now() < give_up) std::this_thread::sleep_for(100us);
    std::this_thread::sleep_for(2ms);
    s.spawn([&] {
       std::vector<Fiber> fibers;
       for (unsigned i = 1; i < workers(); ++i) fibers.push_back(weft::spawn(body));
       gate.count_down();  // into this worker's next slot, which runs before the spawns
       for (auto& f : fibers) f.join();
     }).join();
    woken.join();
  });
  // Measured from before the woken fiber was spawned, as below.
  EXPECT_LT(worst, kBound + 10ms) << "worst " << ms(worst);
}

// Parked fibers woken at once by a plain thread (through the global queue).
TEST_P(LivenessTest, FibersWokenByAThreadAllRun) {
  Scheduler sched(without_preemption(workers()));
  const auto worst = worst_until_all_run(sched, [this](Scheduler& s, auto& body) {
    Latch gate(1);
    std::atomic<unsigned> parked{0};
    std::vector<Fiber> fibers;
    for (unsigned i = 0; i < workers(); ++i) {
      fibers.push_back(s.spawn([&] {
        parked.fetch_add(1);
        gate.wait();
        body();
      }));
    }
    // Bounded: the fibers park at once; then let the workers fall asleep.
    const auto give_up = Clock::now() + 5s;
    while (parked.load() < workers() && Clock::now() < give_up) std::this_thread::sleep_for(100us);
    std::this_thread::sleep_for(2ms);
    gate.count_down();
    for (auto& f : fibers) f.join();
  });
  // Measured from before the fibers were spawned: the bound includes the
  // parking and the 2 ms pause.
  EXPECT_LT(worst, kBound + 10ms) << "worst " << ms(worst);
}

WEFT_WORKER_COUNTS(LivenessTest);

}  // namespace
}  // namespace weft::test
