// The soak: a mixed workload for --minutes N (default 1) with invariant
// checks, so that the next class of bugs is found here and not by users.
// Registered only with -Dsoak=true (meson_options.txt); run it as
//   meson test -C build soak            or
//   build/tests/soak_test --minutes 30
//
// Each round (a few hundred ms) runs, at once, on one 4-worker scheduler:
// fibers and plain threads putting and taking on a bounded BlockingQueue
// (with put_for/poll_for timeouts), counting under a Mutex (lock and
// try_lock_for), inside a Semaphore (never more holders than permits),
// waiting on a ConditionVariable, a WaitGroup, a Latch and Futures, and a
// burst of short spawns. Every few seconds the real weft-dump prints the
// process, and now and then the process forks a child that must exit
// cleanly. Checked: every item put is taken exactly once and every count is
// exact (nothing lost), every round ends within a generous bound (nothing
// stuck: otherwise the fibers are printed and the test aborts), and the
// resident set at the end is within a bound of the one after warm-up (RSS
// flat).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <weft/weft.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "test_support.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

double soak_minutes = 1.0;

std::size_t rss_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10);
  return 0;
}

// Runs `argv` and waits at most `bound`; its exit code, or -1 if it had to
// be killed.
int run_bounded(std::vector<std::string> args, std::chrono::seconds bound) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) ::dup2(null, 1);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  const auto deadline = SteadyClock::now() + bound;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (SteadyClock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(5ms);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A fork in a process full of workers: the child may only do what is
// async-signal-safe, and must get there.
int fork_and_exit() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(42);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

struct Totals {
  std::uint64_t items = 0;
  std::uint64_t rounds = 0;
  std::uint64_t dumps = 0;
  std::uint64_t forks = 0;
  std::uint64_t spawns = 0;
};

// One round of everything at once; a broken invariant is a test failure.
void run_round(Scheduler& sched, std::uint64_t round, Totals& totals) {
  constexpr int kProducers = 4;  // per kind: fibers and threads
  constexpr std::uint64_t kItemsEach = 500;
  constexpr int kCounters = 4;
  constexpr std::uint64_t kIncrements = 300;
  constexpr std::uint64_t kPermits = 3;

  BlockingQueue<std::uint64_t> queue{64};
  std::atomic<std::uint64_t> taken_count{0};
  std::atomic<std::uint64_t> taken_sum{0};
  Mutex mutex;
  std::uint64_t counter = 0;  // guarded by mutex
  Semaphore permits{kPermits};
  std::atomic<std::uint64_t> holders{0};
  std::atomic<bool> too_many_holders{false};
  ConditionVariable cv;
  bool flag = false;  // guarded by mutex
  WaitGroup group;
  Latch start{2 * kProducers};
  Promise<std::uint64_t> promise;
  Future<std::uint64_t> future = promise.get_future();

  const auto producer = [&](std::uint64_t base) {
    start.count_down();
    start.wait();
    for (std::uint64_t i = 0; i < kItemsEach; ++i) {
      std::uint64_t item = base + i;
      if (i % 7 == 0) {
        while (!queue.put_for(std::move(item), 1ms)) {
        }
      } else {
        queue.put(std::move(item));
      }
    }
  };
  const std::uint64_t total_items = 2 * kProducers * kItemsEach;
  const auto consumer = [&] {
    while (taken_count.load() < total_items) {
      if (auto item = queue.poll_for(2ms)) {
        taken_sum.fetch_add(*item);
        taken_count.fetch_add(1);
      }
    }
  };
  const auto count_up = [&] {
    for (std::uint64_t i = 0; i < kIncrements; ++i) {
      if (i % 5 == 0) {
        std::unique_lock lock(mutex, std::defer_lock);
        while (!lock.try_lock_for(1ms)) {
        }
        ++counter;
      } else {
        std::lock_guard lock(mutex);
        ++counter;
      }
      if (i % 50 == 0) {
        permits.acquire();
        if (holders.fetch_add(1) + 1 > kPermits) too_many_holders.store(true);
        this_fiber::yield();
        holders.fetch_sub(1);
        permits.release();
      }
    }
  };

  std::vector<std::thread> threads;
  std::vector<Fiber> fibers;
  for (int p = 0; p < kProducers; ++p) {
    const std::uint64_t base = (static_cast<std::uint64_t>(p) + 1) << 32;
    fibers.push_back(sched.spawn({.name = "producer"}, [&, base] { producer(base); }));
    threads.emplace_back([&, base] { producer(base | (1ull << 31)); });
  }
  for (int c = 0; c < 2; ++c) {
    fibers.push_back(sched.spawn({.name = "consumer"}, consumer));
    threads.emplace_back(consumer);
  }
  for (int k = 0; k < kCounters; ++k) {
    fibers.push_back(sched.spawn({.name = "counter"}, count_up));
    threads.emplace_back(count_up);
  }
  // A waiter on the condition variable, woken by a thread; a future
  // crossing from a thread to a fiber.
  fibers.push_back(sched.spawn({.name = "cv-waiter"}, [&] {
    std::unique_lock lock(mutex);
    cv.wait(lock, [&] { return flag; });
  }));
  fibers.push_back(sched.spawn({.name = "future-reader"}, [&] { EXPECT_EQ(future.get(), round); }));
  threads.emplace_back([&] {
    std::this_thread::sleep_for(1ms);
    {
      std::lock_guard lock(mutex);
      flag = true;
    }
    cv.notify_all();
    promise.set_value(round);
  });
  // A burst of short spawns, joined through a WaitGroup, some of which
  // time out on a queue nobody feeds.
  BlockingQueue<int> nobody;
  constexpr int kBurst = 300;
  group.add(kBurst);
  std::atomic<int> burst_ran{0};
  for (int i = 0; i < kBurst; ++i) {
    sched
        .spawn([&, i] {
          if (i % 30 == 0) {
            EXPECT_EQ(nobody.poll_for(100us), std::nullopt);
          }
          burst_ran.fetch_add(1);
          group.done();
        })
        .detach();
  }
  group.wait();
  for (auto& f : fibers) f.join();
  for (auto& t : threads) t.join();

  std::uint64_t expected_sum = 0;
  for (int p = 0; p < kProducers; ++p) {
    const std::uint64_t base = (static_cast<std::uint64_t>(p) + 1) << 32;
    for (std::uint64_t i = 0; i < kItemsEach; ++i) expected_sum += (base + i) + ((base | (1ull << 31)) + i);
  }
  EXPECT_EQ(taken_count.load(), total_items) << "round " << round;
  EXPECT_EQ(taken_sum.load(), expected_sum) << "round " << round << ": an item was lost or duplicated";
  EXPECT_EQ(queue.size(), 0u);
  EXPECT_EQ(counter, 2 * kCounters * kIncrements) << "round " << round;
  EXPECT_FALSE(too_many_holders.load()) << "round " << round << ": the semaphore let too many in";
  EXPECT_EQ(burst_ran.load(), kBurst);
  totals.items += total_items;
  totals.spawns += fibers.size() + kBurst;
}

TEST(Soak, MixedWorkloadKeepsItsInvariants) {
  Config config = test::config_with(4);
  config.name = "soak";
  Scheduler sched{config};
  const auto begin = SteadyClock::now();
  const auto end = begin + std::chrono::duration_cast<SteadyClock::duration>(
                               std::chrono::duration<double, std::ratio<60>>(soak_minutes));
  const auto warm_up = begin + (end - begin) / 10;
  std::size_t rss_after_warm_up = 0;
  auto next_dump = begin + 3s;
  auto next_fork = begin + 5s;
  Totals totals;
  // Nothing stuck: a watchdog prints the fibers and aborts if a round
  // takes more than a minute (a round takes well under a second).
  std::atomic<std::uint64_t> progress{0};
  std::atomic<bool> finished{false};
  std::thread watchdog([&] {
    std::uint64_t seen = ~0ull;
    auto since = SteadyClock::now();
    while (!finished.load()) {
      std::this_thread::sleep_for(100ms);
      if (progress.load() != seen) {
        seen = progress.load();
        since = SteadyClock::now();
      } else if (SteadyClock::now() - since > 60s) {
        std::fprintf(stderr, "soak: round %llu stuck for 60 s; fibers:\n", static_cast<unsigned long long>(seen));
        for (const FiberSnapshot& f : sched.snapshot().fibers)
          std::fprintf(stderr, "  \"%s\" #%llu %s %s %s\n", f.name.c_str(), static_cast<unsigned long long>(f.id),
                       f.state.c_str(), f.wait_kind.c_str(), f.wait_operation.c_str());
        std::abort();
      }
    }
  });
  while (SteadyClock::now() < end && !HasFailure()) {
    run_round(sched, totals.rounds, totals);
    progress.store(++totals.rounds);
    const auto now = SteadyClock::now();
    if (rss_after_warm_up == 0 && now >= warm_up) rss_after_warm_up = rss_kib();
    if (now >= next_dump) {
      const int code = run_bounded({WEFT_DUMP_CLI, std::to_string(::getpid()), "--timeout", "10"}, 30s);
      EXPECT_EQ(code, 0) << "weft-dump of the soak failed";
      ++totals.dumps;
      next_dump = now + 3s;
    }
    if (now >= next_fork) {
      EXPECT_EQ(fork_and_exit(), 42) << "a forked child did not exit cleanly";
      ++totals.forks;
      next_fork = now + 7s;
    }
  }
  finished.store(true);
  watchdog.join();
  const std::size_t rss_end = rss_kib();
  if (rss_after_warm_up == 0) rss_after_warm_up = rss_end;
  std::printf("soak: %.1f min, %llu rounds, %llu items, %llu spawns, %llu dumps, %llu forks; RSS %zu -> %zu KiB\n",
              soak_minutes, static_cast<unsigned long long>(totals.rounds),
              static_cast<unsigned long long>(totals.items), static_cast<unsigned long long>(totals.spawns),
              static_cast<unsigned long long>(totals.dumps), static_cast<unsigned long long>(totals.forks),
              rss_after_warm_up, rss_end);
  EXPECT_GT(totals.rounds, 0u);
  // RSS flat: what warm-up reached plus a generous margin (allocator
  // caches, stack pools filling), not a growth with the number of rounds.
  EXPECT_LE(rss_end, rss_after_warm_up + rss_after_warm_up / 2 + 32 * 1024)
      << "resident set grew from " << rss_after_warm_up << " to " << rss_end << " KiB";
}

}  // namespace
}  // namespace weft

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--minutes") == 0 && i + 1 < argc) {
      char* rest = nullptr;
      weft::soak_minutes = std::strtod(argv[i + 1], &rest);
      if (rest == argv[i + 1] || *rest != '\0' || !(weft::soak_minutes > 0) || weft::soak_minutes > 24 * 60) {
        std::fprintf(stderr, "soak_test: --minutes wants a number of minutes in (0, 1440], got \"%s\"\n", argv[i + 1]);
        return 2;
      }
      ++i;
    } else {
      std::fprintf(stderr, "soak_test: unknown argument \"%s\" (usage: soak_test [--minutes N] [gtest flags])\n",
                   argv[i]);
      return 2;
    }
  }
  return RUN_ALL_TESTS();
}
