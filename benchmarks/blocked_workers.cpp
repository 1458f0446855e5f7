// blocked_workers: what spare workers buy (docs/sysmon.md, docs/benchmarks.md).
// Two workers; two fibers each block their worker's thread for --block-ms
// (default 500) in a raw nanosleep system call, which no hook could catch.
// Meanwhile 100 fibers sleep 1 ms in a loop and record how late they wake.
// Run with spares (Config::spare_workers = 16) and without (0), and print
// p50, p99 and max lateness, and how long the first fiber spawned after the
// workers blocked waited to run.
//
//   blocked_workers
//   blocked_workers --block-ms 200
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <weft/weft.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "cli.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Result {
  double first_run_ms = 0;
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
  std::size_t samples = 0;
  std::uint64_t handoffs = 0;  // fibers sysmon moved off stuck workers (WorkerSnapshot::handoffs)
};

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

Result run(unsigned spares, int block_ms) {
  weft::Config config;
  config.workers = 2;
  config.name = spares != 0 ? "spares-on" : "spares-off";
  config.spare_workers = spares;
  weft::Scheduler sched{config};
  std::atomic<int> blocked{0};
  std::vector<weft::Fiber> blockers;
  for (int i = 0; i < 2; ++i) {
    blockers.push_back(sched.spawn([&] {
      ++blocked;
      const timespec pause{block_ms / 1000, static_cast<long>(block_ms % 1000) * 1'000'000};
      ::syscall(SYS_nanosleep, &pause, nullptr);
    }));
  }
  while (blocked.load() < 2) std::this_thread::sleep_for(std::chrono::microseconds(100));
  std::this_thread::sleep_for(std::chrono::milliseconds(1));  // both are in the kernel now
  const auto spawned = Clock::now();
  std::atomic<std::int64_t> first_run_ns{0};
  weft::Fiber first = sched.spawn([&] { first_run_ns = (Clock::now() - spawned).count(); });
  std::mutex lock;
  std::vector<double> lateness;
  std::vector<weft::Fiber> sleepers;
  const auto end = spawned + std::chrono::milliseconds(block_ms);
  for (int i = 0; i < 100; ++i) {
    sleepers.push_back(sched.spawn([&] {
      std::vector<double> mine;
      while (Clock::now() < end) {
        const auto due = Clock::now() + std::chrono::milliseconds(1);
        weft::this_fiber::sleep_for(std::chrono::milliseconds(1));
        mine.push_back(ms(Clock::now() - due));
      }
      std::lock_guard guard(lock);
      lateness.insert(lateness.end(), mine.begin(), mine.end());
    }));
  }
  first.join();
  for (auto& f : sleepers) f.join();
  for (auto& f : blockers) f.join();
  std::sort(lateness.begin(), lateness.end());
  Result r;
  for (const weft::WorkerSnapshot& w : sched.snapshot().workers) r.handoffs += w.handoffs;
  r.first_run_ms = static_cast<double>(first_run_ns.load()) / 1e6;
  r.samples = lateness.size();
  if (!lateness.empty()) {
    r.p50_ms = lateness[lateness.size() / 2];
    r.p99_ms = lateness[std::min(lateness.size() - 1, lateness.size() * 99 / 100)];
    r.max_ms = lateness.back();
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int block_ms = 500;
  CLI::App app{"blocked_workers: fibers beside two workers blocked in the kernel, with and without spares",
               "blocked_workers"};
  weft::bench::add_count(app, "--block-ms", block_ms, 1, 60'000, "how long each worker stays blocked");
  weft::bench::parse(app, argc, argv);
  std::printf("2 workers, both blocked %d ms in a raw nanosleep; 100 fibers sleep 1 ms in a loop\n", block_ms);
  std::printf("%-12s %14s %10s %10s %10s %8s %9s\n", "", "first run ms", "p50 ms", "p99 ms", "max ms", "wakes",
              "handoffs");
  for (unsigned spares : {16u, 0u}) {
    const Result r = run(spares, block_ms);
    std::printf("%-12s %14.2f %10.2f %10.2f %10.2f %8zu %9llu\n", spares != 0 ? "spares 16" : "spares 0",
                r.first_run_ms, r.p50_ms, r.p99_ms, r.max_ms, r.samples, static_cast<unsigned long long>(r.handoffs));
  }
}
