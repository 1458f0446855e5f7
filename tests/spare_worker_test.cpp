// Spare workers (sched/worker.h, docs/sysmon.md): when every worker's
// thread is blocked in the kernel in a raw system call (which no libc hook
// could catch), sysmon starts spare threads that run the other fibers; the
// spares retire once the workers return; the stuck report names the call.
// Pass or fail rests on what ran before what; durations only bound loops.
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <weft/io.h>
#include <weft/weft.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "death_signal_child.h"
#include "fork_children.h"
#include "sched/kernel_call.h"
#include "test_support.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using test::wait_until;

struct Pipe {
  int fds[2] = {-1, -1};
  Pipe() { EXPECT_EQ(::pipe(fds), 0); }
  ~Pipe() {
    ::close(fds[0]);
    ::close(fds[1]);
  }
  void release() { EXPECT_EQ(::write(fds[1], "x", 1), 1); }
};

// Fibers run by spares, and spares ever started, as the snapshot lists them.
struct SpareUse {
  std::uint64_t fibers_run = 0;
  unsigned started = 0;
};
SpareUse spare_use(Scheduler& sched) {
  SpareUse use;
  for (const WorkerSnapshot& w : sched.snapshot().workers) {
    if (!w.spare) continue;
    ++use.started;
    use.fibers_run += w.fibers_run;
  }
  return use;
}

unsigned spares_running(Scheduler& sched) {
  unsigned n = 0;
  for (const WorkerSnapshot& w : sched.snapshot().workers)
    if (w.spare && w.state != "spare") ++n;
  return n;
}

class SpareWorkers : public ::testing::TestWithParam<unsigned> {
 protected:
  unsigned workers() const { return GetParam(); }
  Config config() {
    Config config = test::config_with(workers());
    config.on_stuck_worker = [this](const StuckWorker& stuck) {
      std::lock_guard guard(lock_);
      reports_.emplace_back(stuck.blocked_in);
    };
    return config;
  }

 public:
  std::vector<std::string> reports() {
    std::lock_guard guard(lock_);
    return reports_;
  }

 private:
  std::mutex lock_;
  std::vector<std::string> reports_;
};

TEST_P(SpareWorkers, OtherFibersRunWhileEveryWorkerIsBlockedInARawRead) {
  Scheduler sched{config()};
  std::vector<Pipe> pipes(workers());
  std::atomic<unsigned> blockers_started{0};
  std::atomic<unsigned> blockers_done{0};
  std::vector<Fiber> blockers;
  for (unsigned i = 0; i < workers(); ++i) {
    blockers.push_back(sched.spawn({.name = "blocker"}, [&, fd = pipes[i].fds[0]] {
      ++blockers_started;
      char c;
      // The raw system call: no weft call, no libc wrapper a hook could catch.
      EXPECT_EQ(::syscall(SYS_read, fd, &c, 1), 1);
      ++blockers_done;
    }));
  }
  ASSERT_TRUE(wait_until([&] { return blockers_started.load() == workers(); }));

  constexpr int kOthers = 20;
  std::atomic<int> others_done{0};
  std::vector<Fiber> others;
  for (int i = 0; i < kOthers; ++i) {
    others.push_back(sched.spawn([&] {
      this_fiber::sleep_for(1ms);
      this_fiber::yield();
      {
        // Pinned on whatever runs it, a spare most likely: the spare must
        // not retire under it.
        auto pin = this_fiber::pin();
        this_fiber::sleep_for(1ms);
      }
      ++others_done;
    }));
  }
  const bool others_finished = wait_until([&] { return others_done.load() == kOthers; });
  // The stuck report, which comes after two time slices, names the call
  // and the fd.
  std::string seen;
  const bool named = wait_until([&] {
    seen.clear();
    for (const std::string& report : reports()) {
      seen += "[" + report + "] ";
      for (const auto& pipe : pipes)
        if (report == "blocked in read(2) on fd " + std::to_string(pipe.fds[0])) return true;
    }
    return false;
  });
  const unsigned blocked_at_the_end = workers() - blockers_done.load();
  for (auto& pipe : pipes) pipe.release();
  for (auto& fiber : blockers) fiber.join();
  for (auto& fiber : others) fiber.join();

  EXPECT_TRUE(others_finished) << others_done.load() << " of " << kOthers << " ran while the workers were blocked";
  EXPECT_EQ(blocked_at_the_end, workers()) << "a blocker returned before the others ran: the test proved nothing";
  // Spares ran them (they come and go as the fibers sleep and wake, so
  // count what they ran rather than catch them running), and at most one
  // per blocked thread was ever started: spares are started lowest index
  // first, so those started were once all running. (A spare that took a
  // blocker may have needed one more.)
  const SpareUse use = spare_use(sched);
  EXPECT_GE(use.fibers_run, 1u);
  EXPECT_GE(use.started, 1u);
  EXPECT_LE(use.started, 2 * workers());

  // The workers are back: every spare retires.
  EXPECT_TRUE(wait_until([&] { return spares_running(sched) == 0; })) << spares_running(sched) << " spares still run";
  EXPECT_TRUE(named) << "reports: " << seen;
}

TEST_P(SpareWorkers, ASpareTakesOverFromAWorkerLoopingInRawNanosleep) {
  Scheduler sched{config()};
  std::atomic<bool> release{false};
  std::atomic<unsigned> sleepers_started{0};
  std::vector<Fiber> sleepers;
  for (unsigned i = 0; i < workers(); ++i) {
    sleepers.push_back(sched.spawn([&] {
      ++sleepers_started;
      const auto limit = Clock::now() + 30s;
      while (!release.load() && Clock::now() < limit) {
        const timespec pause{0, 20'000'000};
        ::syscall(SYS_nanosleep, &pause, nullptr);
      }
    }));
  }
  ASSERT_TRUE(wait_until([&] { return sleepers_started.load() == workers(); }));
  std::atomic<bool> ran{false};
  Fiber other = sched.spawn([&] { ran = true; });
  const bool ran_while_asleep = wait_until([&] { return ran.load(); });
  // While they sleep, the snapshot names the call on the stuck workers.
  bool named = false;
  wait_until([&] {
    for (const WorkerSnapshot& w : sched.snapshot().workers)
      if (w.stuck && w.blocked_in == "blocked in nanosleep(2)") named = true;
    return named;
  });
  release = true;
  other.join();
  for (auto& fiber : sleepers) fiber.join();
  EXPECT_TRUE(ran_while_asleep);
  EXPECT_TRUE(named);
  EXPECT_TRUE(wait_until([&] { return spares_running(sched) == 0; }));
}

// A std::mutex held by a fiber across a call that parks it, while other
// fibers block every worker's thread on it in the kernel: weft does not
// interpose pthread mutexes, so those threads sleep in futex(2). A spare
// must run the holder once it wakes, or the scheduler is deadlocked; the
// stuck report and the snapshot (weft-dump's source) name the futex.
// `park_holding_the_lock(fd)` returns once `fd` has a byte to read.
template <class Park>
void holder_and_futex_waiters(SpareWorkers& test, Scheduler& sched, Park&& park_holding_the_lock) {
  const unsigned workers = test.GetParam();
  Pipe pipe;
  std::mutex mutex;
  std::atomic<bool> held{false};
  std::atomic<unsigned> waiters_started{0};
  std::atomic<unsigned> done{0};
  Fiber holder = sched.spawn({.name = "holder"}, [&] {
    std::lock_guard guard(mutex);
    held = true;
    park_holding_the_lock(pipe.fds[0]);
    ++done;
  });
  ASSERT_TRUE(wait_until([&] { return held.load(); }));
  std::vector<Fiber> waiters;
  for (unsigned i = 0; i < workers; ++i) {
    waiters.push_back(sched.spawn({.name = "waiter"}, [&] {
      ++waiters_started;
      std::lock_guard guard(mutex);
      ++done;
    }));
  }
  ASSERT_TRUE(wait_until([&] { return waiters_started.load() == workers; }));
  const std::string expected = "blocked in futex(2)";
  bool in_snapshot = false;
  std::string seen;
  wait_until([&] {
    for (const WorkerSnapshot& w : sched.snapshot().workers) {
      if (!w.blocked_in.empty()) seen = w.blocked_in;
      in_snapshot |= w.stuck && w.blocked_in == expected;
    }
    return in_snapshot;
  });
  bool reported = false;
  wait_until([&] {
    for (const std::string& report : test.reports()) reported |= report == expected;
    return reported;
  });
  pipe.release();  // the holder's wait ends: it must run somewhere
  const bool finished = wait_until([&] { return done.load() == workers + 1; }, 30s);
  if (!finished) {
    // Deadlocked: joining would hang the test binary instead of failing it.
    std::fprintf(stderr, "deadlock: %u of %u fibers finished; the holder never ran again\n", done.load(), workers + 1);
    std::_Exit(1);
  }
  holder.join();
  for (auto& fiber : waiters) fiber.join();
  EXPECT_TRUE(reported) << "reports: " << ::testing::PrintToString(test.reports());
  EXPECT_TRUE(in_snapshot) << "last blocked_in seen: " << seen;
}

TEST_P(SpareWorkers, AStdMutexHeldAcrossAParkDoesNotDeadlockItsFutexWaiters) {
  Scheduler sched{config()};
  holder_and_futex_waiters(*this, sched, [](int fd) {
    EXPECT_TRUE(io::wait_readable(fd));  // parks the holder on the netpoller
    char c;
    EXPECT_EQ(::read(fd, &c, 1), 1);
  });
}

// A libc hook's park pins the fiber to its worker (hooks/hook_support.h,
// ParkScope: the caller may have cached &errno), and that worker's thread
// is the one asleep in the futex: sysmon must release the pin, or the
// holder's wake-up waits in that worker's inbox forever.
TEST_P(SpareWorkers, AStdMutexHeldAcrossAHookedReadDoesNotDeadlockItsFutexWaiters) {
  Scheduler sched{config()};
  holder_and_futex_waiters(*this, sched, [](int fd) {
    char c;
    EXPECT_EQ(::read(fd, &c, 1), 1);  // the hook parks, pinned
  });
}

TEST_P(SpareWorkers, NoSpareForFibersThatBurnTheCpu) {
  // A loop without checkpoints runs on a CPU: a spare would only add a
  // thread competing for the same cores, beyond Config::workers.
  Config cfg = config();
  Scheduler sched{cfg};
  std::atomic<unsigned> hogs_started{0};
  std::atomic<bool> stop{false};
  std::vector<Fiber> hogs;
  for (unsigned i = 0; i < workers(); ++i) {
    hogs.push_back(sched.spawn([&] {
      ++hogs_started;
      // Pure computation, no call that might sleep in the kernel (under a
      // sanitizer even a clock read might take a lock); bounded in count.
      std::uint64_t x = 1;
      for (std::uint64_t i = 0; i < 20'000'000'000ull && !stop.load(std::memory_order_relaxed); ++i)
        x = x * 6364136223846793005ull + 1442695040888963407ull;
      EXPECT_NE(x, 0u);
    }));
  }
  std::atomic<bool> waiting_ran{false};
  Fiber waiting = sched.spawn([&] { waiting_ran = true; });
  std::this_thread::sleep_for(150ms);  // sysmon's chance to (wrongly) start a spare
  stop = true;
  for (auto& fiber : hogs) fiber.join();
  waiting.join();
  EXPECT_TRUE(waiting_ran);
  EXPECT_EQ(spare_use(sched).started, 0u);
}

INSTANTIATE_TEST_SUITE_P(Workers, SpareWorkers, ::testing::Values(1u, 2u, 4u), ::weft::test::worker_count_name);

// Many fibers wait in futex(2) for a std::mutex whose holder is parked in
// a hooked read, on 2 workers: each waiter blocks the thread that runs it,
// so spares start one after another, as many as there are waiters (no
// fixed cap), until one is left free to run the holder when its read
// completes. With the 16 spares of before, 20 waiters deadlocked.
class ManyFutexWaiters : public ::testing::TestWithParam<unsigned> {};

TEST_P(ManyFutexWaiters, AStdMutexHeldAcrossAParkNeverDeadlocks) {
  const unsigned waiters = GetParam();
  // Every one of those threads is a TSan thread too: 1,000 took minutes.
  if (test::kSlowdown > 1 && waiters > 200) GTEST_SKIP() << "the release, ASan and Clang builds run it";
  Scheduler sched{test::config_with(2)};
  Pipe pipe;
  std::mutex mutex;
  std::atomic<bool> held{false};
  std::atomic<unsigned> started{0};
  std::atomic<unsigned> done{0};
  Fiber holder = sched.spawn({.name = "holder"}, [&] {
    std::lock_guard guard(mutex);
    held = true;
    char c;
    EXPECT_EQ(::read(pipe.fds[0], &c, 1), 1);  // the hook parks, pinned
    ++done;
  });
  ASSERT_TRUE(wait_until([&] { return held.load(); }));
  std::vector<Fiber> fibers;
  for (unsigned i = 0; i < waiters; ++i) {
    fibers.push_back(sched.spawn({.name = "waiter"}, [&] {
      ++started;
      std::lock_guard guard(mutex);
      ++done;
    }));
  }
  // Every waiter got a thread to block: none is left queued.
  const bool all_started = wait_until([&] { return started.load() == waiters; }, 120s);
  const SchedulerSnapshot during = sched.snapshot();
  pipe.release();
  const bool finished = wait_until([&] { return done.load() == waiters + 1; }, 120s);
  if (!finished) {
    std::fprintf(stderr, "deadlock: %u of %u fibers finished, %u started\n", done.load(), waiters + 1, started.load());
    std::_Exit(1);  // joining would hang the binary instead of failing it
  }
  holder.join();
  for (auto& fiber : fibers) fiber.join();
  EXPECT_TRUE(all_started) << started.load() << " of " << waiters << " waiters started";
  EXPECT_GE(during.spares.threads, waiters - 2) << "a spare per blocked thread";
  EXPECT_EQ(during.spares.max_threads, Config{}.max_threads);
  EXPECT_FALSE(during.spares.limit_reached);
  // The workers are back: every spare retires.
  EXPECT_TRUE(wait_until([&] { return spares_running(sched) == 0; })) << spares_running(sched) << " spares still run";
}

INSTANTIATE_TEST_SUITE_P(Waiters, ManyFutexWaiters, ::testing::Values(20u, 200u, 1000u),
                         [](const ::testing::TestParamInfo<unsigned>& info) { return std::to_string(info.param); });

// At Config::max_threads no spare starts: one message on stderr names the
// limit and how to raise it, the snapshot says so, and the fibers wait for
// a blocked thread to return.
// A fiber blocks its worker in a raw read(2) of a pipe (stdio's own
// calls, which no hook sees, make such reads) that another fiber of the
// worker will write once its hooked sleep ends: a park that resumes only
// on that thread. Sysmon releases the sleeper's pin after the read has
// lasted kReleaseHookPinsAfter, as it does behind a raw futex wait. Before,
// only a futex wait released pins, and the two waited for each other until
// the watchdog's write (here after 5 s; for good without it).
TEST(SpareWorkersRelease, AFiberParkedInAHookGoesFromAWorkerBlockedInARawRead) {
  Scheduler sched{test::config_with(1)};
  Pipe pipe;
  std::atomic<bool> sleeping{false};
  Fiber writer = sched.spawn([&] {
    sleeping = true;
    ::usleep(50'000);  // hooked: parks, pinned to this worker
    EXPECT_EQ(::write(pipe.fds[1], "w", 1), 1);
  });
  char got = 0;
  Fiber reader = sched.spawn([&] {
    while (!sleeping.load()) this_fiber::yield();
    EXPECT_EQ(::syscall(SYS_read, pipe.fds[0], &got, 1), 1);  // raw: blocks the worker
  });
  std::atomic<bool> done{false};
  std::thread watchdog([&] {
    for (int i = 0; i < 50 && !done.load(); ++i) std::this_thread::sleep_for(100ms);
    if (!done.load()) pipe.release();
  });
  reader.join();
  done = true;
  writer.join();
  watchdog.join();
  EXPECT_EQ(got, 'w') << "the sleeper stayed pinned behind the raw read";
}

TEST(SpareWorkersLimit, ReachingMaxThreadsIsReportedOnceAndShown) {
  Config config = test::config_with(1);
  config.max_threads = 2;  // one spare
  constexpr unsigned kBlockers = 3;
  std::vector<Pipe> pipes(kBlockers);
  ::testing::internal::CaptureStderr();
  std::string messages;
  {
    Scheduler sched{config};
    std::atomic<unsigned> blocked{0};
    std::vector<Fiber> blockers;
    for (unsigned i = 0; i < kBlockers; ++i) {
      blockers.push_back(sched.spawn([&, fd = pipes[i].fds[0]] {
        ++blocked;
        char c;
        EXPECT_EQ(::syscall(SYS_read, fd, &c, 1), 1);
      }));
    }
    // The worker and the one spare block; the third blocker waits for them.
    const bool two_blocked = wait_until([&] { return blocked.load() == 2; });
    bool reached = false;
    const bool seen = wait_until([&] {
      const SchedulerSnapshot snap = sched.snapshot();
      reached = snap.spares.limit_reached;
      return reached && snap.spares.threads == 1;
    });
    const unsigned blocked_at_limit = blocked.load();
    for (auto& pipe : pipes) pipe.release();
    for (auto& fiber : blockers) fiber.join();
    EXPECT_TRUE(two_blocked);
    EXPECT_TRUE(seen) << "limit_reached " << reached;
    EXPECT_EQ(blocked_at_limit, 2u) << "a thread beyond max_threads ran the third blocker";
  }
  messages = ::testing::internal::GetCapturedStderr();
  const std::string needle = "reached its thread limit, Config::max_threads = 2";
  const std::size_t first = messages.find(needle);
  EXPECT_NE(first, std::string::npos) << messages;
  EXPECT_EQ(messages.find(needle, first + 1), std::string::npos) << "reported more than once:\n" << messages;
  EXPECT_NE(messages.find("WEFT_MAX_THREADS"), std::string::npos) << messages;
}

// /proc/self/status's Threads.
unsigned threads_of_this_process() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.starts_with("Threads:")) return unsigned(std::stoul(line.substr(8)));
  return 0;
}

// The system refuses a spare's thread (RLIMIT_NPROC, a cgroup's pids.max):
// reported once, naming the error and the likely limit. Before, sysmon
// tried again at every look and nothing said why the fibers waited. In a
// child under a uid of its own (root is exempt from RLIMIT_NPROC), whose
// limit is the threads it has once the scheduler runs.
TEST(SpareWorkersLimit, ASpareThreadTheSystemRefusesIsReportedOnce) {
  if (!test::children_can_take_another_uid()) GTEST_SKIP() << "needs root in the initial user namespace";
  SKIP_IF_CHILDREN_CANNOT_ALLOCATE();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::setgid(54'322) != 0 || ::setuid(54'322) != 0) ::_exit(3);
    static std::mutex lock;
    static std::string messages;
    set_log_handler([](LogLevel, std::string_view text) {
      std::lock_guard guard(lock);
      messages.append(text).append("\n");
    });
    Pipe pipe;
    int reported = 0;
    {
      Scheduler sched{test::config_with(1)};
      const rlim_t threads = threads_of_this_process();
      const rlimit none_more{threads, threads};
      if (::setrlimit(RLIMIT_NPROC, &none_more) != 0) ::_exit(4);
      Fiber blocker = sched.spawn([&] {
        char c;
        (void)::syscall(SYS_read, pipe.fds[0], &c, 1);  // raw: the worker's thread sleeps in the kernel
      });
      Fiber queued = sched.spawn([] {});
      const auto seen = [&] {
        std::lock_guard guard(lock);
        return messages.find("could not start a spare thread") != std::string::npos;
      };
      const bool found = wait_until(seen);
      pipe.release();
      blocker.join();
      queued.join();
      std::lock_guard guard(lock);
      const std::size_t first = messages.find("could not start a spare thread");
      reported = !found                                                                            ? 5
                 : messages.find("RLIMIT_NPROC", first) == std::string::npos                       ? 6
                 : messages.find("could not start a spare thread", first + 1) != std::string::npos ? 7
                                                                                                   : 0;
    }
    ::_exit(reported);
  }
  EXPECT_EQ(test::child_exit_status(child, std::chrono::seconds(60)), 0)
      << "-1: a signal or the time limit; 3: no uid of its own, 4: no limit, 5: not reported, 6: no limit named, "
         "7: reported twice";
}

TEST(SpareWorkersLimit, MaxThreadsBelowWorkersIsRejected) {
  Config config = test::config_with(2);
  config.max_threads = 1;
  try {
    Scheduler sched{config};
    FAIL() << "a scheduler was made with max_threads below workers";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("Config::max_threads (1) must be at least Config::workers (2)"),
              std::string::npos)
        << e.what();
  }
}

// A retired spare's thread ends after Config::spare_keep_alive, and the
// next blocked worker gets a spare again, on a new thread.
TEST(SpareWorkersKeepAlive, IdleSpareThreadsEndAndComeBack) {
  Config config = test::config_with(1);
  config.spare_keep_alive = 20ms;
  Scheduler sched{config};
  for (int round = 0; round < 2; ++round) {
    Pipe pipe;
    std::atomic<bool> blocked{false};
    Fiber blocker = sched.spawn([&] {
      blocked = true;
      char c;
      EXPECT_EQ(::syscall(SYS_read, pipe.fds[0], &c, 1), 1);
    });
    ASSERT_TRUE(wait_until([&] { return blocked.load(); }));
    std::atomic<bool> ran{false};
    Fiber other = sched.spawn([&] { ran = true; });
    EXPECT_TRUE(wait_until([&] { return ran.load(); })) << "round " << round << ": no spare ran it";
    pipe.release();
    blocker.join();
    other.join();
    EXPECT_TRUE(wait_until([&] { return sched.snapshot().spares.threads == 0; }))
        << "round " << round << ": the spare's thread outlived its keep-alive";
  }
}

// A fiber on a spare makes a child process that asks for SIGTERM when
// its parent thread ends (PR_SET_PDEATHSIG): the spare's thread, its
// parent, stays past its keep-alive, and the child lives. Before, the
// thread ended 20 ms after the spare retired, and the kernel killed the
// child while the process lived on.
TEST(SpareWorkersKeepAlive, ASpareThatMadeAChildProcessKeepsItsThread) {
  Config config = test::config_with(1);
  config.spare_keep_alive = 20ms;
  Scheduler sched{config};
  Pipe pipe;
  std::atomic<long> blocker_tid{0};
  Fiber blocker = sched.spawn([&] {
    blocker_tid = ::syscall(SYS_gettid);
    char c;
    EXPECT_EQ(::syscall(SYS_read, pipe.fds[0], &c, 1), 1);
  });
  ASSERT_TRUE(wait_until([&] { return blocker_tid.load() != 0; }));
  test::DeathSignalChild child;
  long maker_tid = 0;
  // The one worker's thread is blocked: a spare runs it.
  sched
      .spawn([&] {
        maker_tid = ::syscall(SYS_gettid);
        child.start();
      })
      .join();
  pipe.release();
  blocker.join();
  ASSERT_GT(child.pid(), 0);
  EXPECT_NE(maker_tid, blocker_tid.load()) << "the child was not made on a spare";
  EXPECT_TRUE(wait_until([&] { return spares_running(sched) == 0; })) << "the spare did not retire";
  std::this_thread::sleep_for(200ms);  // ten keep-alives
  EXPECT_EQ(sched.snapshot().spares.threads, 1u) << "the spare's thread ended";
  const int status = child.finish();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << test::DeathSignalChild::describe(status);
}

TEST(SpareWorkersOff, WithNoSparesNothingIsStarted) {
  Config config = test::config_with(1);
  config.max_threads = config.workers;  // no spares
  Scheduler sched{config};
  Pipe pipe;
  std::atomic<bool> started{false};
  Fiber blocker = sched.spawn([&] {
    started = true;
    char c;
    ::syscall(SYS_read, pipe.fds[0], &c, 1);
  });
  ASSERT_TRUE(wait_until([&] { return started.load(); }));
  std::this_thread::sleep_for(50ms);  // sysmon's chance to (wrongly) start one
  EXPECT_EQ(sched.snapshot().workers.size(), 1u);
  pipe.release();
  blocker.join();
}

TEST(KernelCall, NamesTheCallAndItsFd) {
  EXPECT_STREQ(detail::syscall_name(SYS_read), "read");
  EXPECT_STREQ(detail::syscall_name(SYS_nanosleep), "nanosleep");
  EXPECT_EQ(detail::syscall_name(-5), nullptr);
  Pipe pipe;
  std::atomic<int> tid{0};
  std::thread reader([&] {
    tid = static_cast<int>(::syscall(SYS_gettid));
    char c;
    EXPECT_EQ(::syscall(SYS_read, pipe.fds[0], &c, 1), 1);
  });
  std::string seen;
  const bool named = wait_until([&] {
    seen = detail::describe_kernel_call(tid.load());
    return seen == "blocked in read(2) on fd " + std::to_string(pipe.fds[0]);
  });
  pipe.release();
  reader.join();
  EXPECT_TRUE(named) << seen;
  // A thread running on a CPU is in no call. (Not this thread: reading the
  // file is itself a read(2) on it.)
  std::atomic<bool> stop{false};
  std::atomic<int> spinner_tid{0};
  std::thread spinner([&] {
    spinner_tid = static_cast<int>(::syscall(SYS_gettid));
    while (!stop.load()) {
    }
  });
  const bool saw_running =
      wait_until([&] { return spinner_tid.load() != 0 && detail::describe_kernel_call(spinner_tid.load()).empty(); });
  stop = true;
  spinner.join();
  EXPECT_TRUE(saw_running);
  EXPECT_EQ(detail::describe_kernel_call(-1), "");
}

}  // namespace
}  // namespace weft
