// blocked_workers: what hand-off and spare workers buy (docs/sysmon.md,
// docs/benchmarks.md), side by side with plain threads, in one run.
//
// 1. Blocked workers: two workers each blocked --block-ms (default 500) in
//    a call that sleeps in the kernel, raw (a nanosleep system call, which
//    no hook could catch) or announced (the same call inside
//    detail::BlockingCall, as the hooks announce a regular file's read).
//    Meanwhile a ticker sleeps 1 ms in a loop (ticks in the first 400 ms;
//    target >= 300), 100 more fibers do the same and record how late they
//    wake, and a fiber spawned once both block records how long it waited
//    to run. weft with spares (Config::max_threads at its default), weft
//    without (max_threads = workers), and threads: two blocked threads, a
//    ticker thread, 100 sleeper threads.
// 2. A std::mutex held across a park: a holder locks it and sleeps 50 ms;
//    --waiters (default 1000) fibers on 2 workers lock and unlock it, each
//    blocking its thread in futex(2) meanwhile; how long until all are
//    done, against as many threads.
// 3. Sysmon's cost: --in-kernel (default 1000) fibers on 2 workers each
//    block 6 s in a raw nanosleep system call, so that as many threads sit
//    in the kernel (a spare takes over each blocked one, in turn); sysmon's
//    CPU time from when all have blocked to the end, as a share of one
//    CPU. Threads have no monitor to pay for.
//
//   blocked_workers
//   blocked_workers --block-ms 200 --waiters 200 --in-kernel 200
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <weft/weft.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cli.h"
#include "sched/blocking_call.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr auto kTickWindow = 400ms;
constexpr int kSleepers = 100;

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

void raw_nanosleep(int block_ms) {
  const timespec pause{block_ms / 1000, static_cast<long>(block_ms % 1000) * 1'000'000};
  ::syscall(SYS_nanosleep, &pause, nullptr);
}

struct Result {
  double first_run_ms = 0;
  int ticks = 0;  // in the first kTickWindow after both blocked
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
  std::size_t samples = 0;
  std::uint64_t handoffs = 0;  // fibers sysmon moved off blocked workers
};

void summarize(std::vector<double>& lateness, Result& r) {
  std::sort(lateness.begin(), lateness.end());
  r.samples = lateness.size();
  if (lateness.empty()) return;
  r.p50_ms = lateness[lateness.size() / 2];
  r.p99_ms = lateness[std::min(lateness.size() - 1, lateness.size() * 99 / 100)];
  r.max_ms = lateness.back();
}

// The ticker's and sleepers' loop, on a fiber or a thread: `sleep` sleeps 1 ms.
void sleep_loop(Clock::time_point end, const std::function<void()>& sleep, std::vector<double>& lateness) {
  while (Clock::now() < end) {
    const auto due = Clock::now() + 1ms;
    sleep();
    lateness.push_back(ms(Clock::now() - due));
  }
}

int count_ticks(Clock::time_point start, const std::function<void()>& sleep) {
  int ticks = 0;
  while (Clock::now() < start + kTickWindow) {
    sleep();
    ++ticks;
  }
  return ticks;
}

Result run_weft(bool spares, bool announced, int block_ms) {
  weft::Config config;
  config.workers = 2;
  config.name = spares ? "spares-on" : "spares-off";
  if (!spares) config.max_threads = config.workers;
  weft::Scheduler sched{config};
  std::atomic<int> blocked{0};
  std::vector<weft::Fiber> blockers;
  for (int i = 0; i < 2; ++i) {
    blockers.push_back(sched.spawn([&] {
      ++blocked;
      if (announced) {
        const weft::detail::BlockingCall call;
        raw_nanosleep(block_ms);
      } else {
        raw_nanosleep(block_ms);
      }
    }));
  }
  while (blocked.load() < 2) std::this_thread::sleep_for(100us);
  std::this_thread::sleep_for(1ms);  // both are in the kernel now
  const auto start = Clock::now();
  std::atomic<std::int64_t> first_run_ns{0};
  weft::Fiber first = sched.spawn([&] { first_run_ns = (Clock::now() - start).count(); });
  const auto fiber_sleep = [] { weft::this_fiber::sleep_for(1ms); };
  std::atomic<int> ticks{0};
  weft::Fiber ticker = sched.spawn([&] { ticks = count_ticks(start, fiber_sleep); });
  std::mutex lock;
  std::vector<double> lateness;
  std::vector<weft::Fiber> sleepers;
  for (int i = 0; i < kSleepers; ++i) {
    sleepers.push_back(sched.spawn([&] {
      std::vector<double> mine;
      sleep_loop(start + std::chrono::milliseconds(block_ms), fiber_sleep, mine);
      std::lock_guard guard(lock);
      lateness.insert(lateness.end(), mine.begin(), mine.end());
    }));
  }
  first.join();
  ticker.join();
  for (auto& f : sleepers) f.join();
  for (auto& f : blockers) f.join();
  Result r;
  for (const weft::WorkerSnapshot& w : sched.snapshot().workers) r.handoffs += w.handoffs;
  r.first_run_ms = static_cast<double>(first_run_ns.load()) / 1e6;
  r.ticks = ticks.load();
  summarize(lateness, r);
  return r;
}

Result run_threads(int block_ms) {
  std::atomic<int> blocked{0};
  std::vector<std::thread> blockers;
  for (int i = 0; i < 2; ++i) {
    blockers.emplace_back([&] {
      ++blocked;
      raw_nanosleep(block_ms);
    });
  }
  while (blocked.load() < 2) std::this_thread::sleep_for(100us);
  std::this_thread::sleep_for(1ms);
  const auto start = Clock::now();
  std::atomic<std::int64_t> first_run_ns{0};
  std::thread first([&] { first_run_ns = (Clock::now() - start).count(); });
  const auto thread_sleep = [] { std::this_thread::sleep_for(1ms); };
  std::atomic<int> ticks{0};
  std::thread ticker([&] { ticks = count_ticks(start, thread_sleep); });
  std::mutex lock;
  std::vector<double> lateness;
  std::vector<std::thread> sleepers;
  for (int i = 0; i < kSleepers; ++i) {
    sleepers.emplace_back([&] {
      std::vector<double> mine;
      sleep_loop(start + std::chrono::milliseconds(block_ms), thread_sleep, mine);
      std::lock_guard guard(lock);
      lateness.insert(lateness.end(), mine.begin(), mine.end());
    });
  }
  first.join();
  ticker.join();
  for (auto& t : sleepers) t.join();
  for (auto& t : blockers) t.join();
  Result r;
  r.first_run_ms = static_cast<double>(first_run_ns.load()) / 1e6;
  r.ticks = ticks.load();
  summarize(lateness, r);
  return r;
}

void print(const char* name, const Result& r, bool weft) {
  std::printf("%-24s %12.2f %8d %9.2f %9.2f %9.2f %8zu ", name, r.first_run_ms, r.ticks, r.p50_ms, r.p99_ms, r.max_ms,
              r.samples);
  if (weft)
    std::printf("%9llu\n", static_cast<unsigned long long>(r.handoffs));
  else
    std::printf("%9s\n", "-");
}

// The mutex's holder sleeps kHold with it held; every waiter locks and
// unlocks it once. Returns how long until all are done, or -1 if they were
// not within 60 s (a deadlock: the process is then ended, since joining
// would hang it).
constexpr auto kHold = 50ms;

double mutex_fibers(int waiters) {
  weft::Config config;
  config.workers = 2;
  config.name = "mutex";
  weft::Scheduler sched{config};
  std::mutex mutex;
  std::atomic<bool> held{false};
  std::atomic<int> done{0};
  const auto start = Clock::now();
  weft::Fiber holder = sched.spawn([&] {
    std::lock_guard guard(mutex);
    held = true;
    weft::this_fiber::sleep_for(kHold);  // parks, holding it
  });
  while (!held.load()) std::this_thread::sleep_for(100us);
  std::vector<weft::Fiber> fibers;
  for (int i = 0; i < waiters; ++i) {
    fibers.push_back(sched.spawn([&] {
      std::lock_guard guard(mutex);
      ++done;
    }));
  }
  while (done.load() < waiters) {
    if (Clock::now() - start > 60s) {
      std::printf("std::mutex across a park: %d of %d fibers done after 60 s: deadlocked\n", done.load(), waiters);
      std::fflush(stdout);
      std::_Exit(1);
    }
    std::this_thread::sleep_for(1ms);
  }
  const double took = ms(Clock::now() - start);
  holder.join();
  for (auto& f : fibers) f.join();
  return took;
}

double mutex_threads(int waiters) {
  std::mutex mutex;
  std::atomic<bool> held{false};
  const auto start = Clock::now();
  std::thread holder([&] {
    std::lock_guard guard(mutex);
    held = true;
    std::this_thread::sleep_for(kHold);
  });
  while (!held.load()) std::this_thread::sleep_for(100us);
  std::vector<std::thread> threads;
  for (int i = 0; i < waiters; ++i) threads.emplace_back([&] { std::lock_guard guard(mutex); });
  for (auto& t : threads) t.join();
  const double took = ms(Clock::now() - start);
  holder.join();
  return took;
}

// CPU time, in ns, of the process's threads named `name` (schedstat's
// first field).
std::int64_t threads_cpu_ns(const std::string& name) {
  std::int64_t total = 0;
  std::error_code error;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", error)) {
    char comm[32] = {};
    if (std::FILE* file = std::fopen((task.path() / "comm").c_str(), "r")) {
      if (std::fgets(comm, sizeof comm, file) == nullptr) comm[0] = 0;
      std::fclose(file);
    }
    if (std::string(comm) != name + "\n") continue;
    long long ran = 0;
    if (std::FILE* file = std::fopen((task.path() / "schedstat").c_str(), "r")) {
      if (std::fscanf(file, "%lld", &ran) != 1) ran = 0;
      std::fclose(file);
    }
    total += ran;
  }
  return total;
}

// Sysmon's share of one CPU while `fibers` fibers block in the kernel,
// over what is left of their block once every one of them has entered it
// (a spare takes over each blocked thread in turn: about a millisecond
// each, a second or so for a thousand).
double sysmon_cpu_share(int fibers) {
  constexpr int kBlockMs = 6000;
  weft::Config config;
  config.workers = 2;
  config.name = "kernel";  // sysmon: "kernel/sysmon", within a thread name's 15 characters
  weft::Scheduler sched{config};
  const auto begin = Clock::now();
  std::atomic<int> entered{0};
  std::vector<weft::Fiber> blocked;
  for (int i = 0; i < fibers; ++i) {
    blocked.push_back(sched.spawn([&] {
      ++entered;
      raw_nanosleep(kBlockMs);
    }));
  }
  const auto end = begin + std::chrono::milliseconds(kBlockMs) - 200ms;
  while (entered.load() < fibers && Clock::now() < end - 500ms) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(20ms);  // the last one judged blocked
  const auto start = Clock::now();
  const std::int64_t before = threads_cpu_ns("kernel/sysmon");
  std::this_thread::sleep_until(end);
  const std::int64_t after = threads_cpu_ns("kernel/sysmon");
  const double share = static_cast<double>(after - before) / static_cast<double>((Clock::now() - start).count());
  for (auto& f : blocked) f.join();
  return share;
}

}  // namespace

int main(int argc, char** argv) {
  int block_ms = 500;
  int waiters = 1000;
  int in_kernel = 1000;
  CLI::App app{"blocked_workers: fibers beside workers blocked in the kernel, and a std::mutex held across a park",
               "blocked_workers"};
  weft::bench::add_count(app, "--block-ms", block_ms, 1, 60'000, "how long each worker stays blocked");
  weft::bench::add_count(app, "--waiters", waiters, 1, 5'000, "fibers (and threads) waiting on the std::mutex");
  weft::bench::add_count(app, "--in-kernel", in_kernel, 1, 5'000, "fibers blocked in the kernel for sysmon's cost");
  weft::bench::parse(app, argc, argv);
  std::printf(
      "2 workers (or threads), both blocked %d ms in a nanosleep system call; a 1 ms ticker (ticks in %lld ms) and "
      "%d fibers sleeping 1 ms in a loop (lateness)\n",
      block_ms, static_cast<long long>(kTickWindow.count()), kSleepers);
  std::printf("%-24s %12s %8s %9s %9s %9s %8s %9s\n", "", "first run ms", "ticks", "p50 ms", "p99 ms", "max ms",
              "wakes", "handoffs");
  print("weft raw, spares", run_weft(true, false, block_ms), true);
  print("weft announced, spares", run_weft(true, true, block_ms), true);
  print("weft raw, no spares", run_weft(false, false, block_ms), true);
  print("threads", run_threads(block_ms), false);
  std::printf("\nstd::mutex held across a %lld ms park, %d waiters on 2 workers (threads: %d threads)\n",
              static_cast<long long>(kHold.count()), waiters, waiters);
  const double fibers = mutex_fibers(waiters);
  const double threads = mutex_threads(waiters);
  std::printf("%-24s %10.1f ms\n%-24s %10.1f ms\n", "weft", fibers, "threads", threads);
  std::printf("\nsysmon's CPU while %d fibers on 2 workers block 6 s in a nanosleep system call: %.1f%% of a CPU\n",
              in_kernel, 100 * sysmon_cpu_share(in_kernel));
}
