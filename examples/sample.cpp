// weft-sample: spawns fibers from one fiber (so they all start on one
// worker), lets the idle workers steal them, and prints what each worker
// ran and stole. Runs for --seconds N (default: until the work is done),
// which also makes it a live target for weft-dump.
#include <weft/weft.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  unsigned workers = 0;
  int fibers = 1000;
  double seconds = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--workers" && i + 1 < argc)
      workers = static_cast<unsigned>(std::atoi(argv[++i]));
    else if (arg == "--fibers" && i + 1 < argc)
      fibers = std::atoi(argv[++i]);
    else if (arg == "--seconds" && i + 1 < argc)
      seconds = std::atof(argv[++i]);
    else {
      std::fprintf(stderr, "usage: weft-sample [--workers N] [--fibers N] [--seconds S]\n");
      return 2;
    }
  }
  weft::Config config;
  config.name = "sample";
  if (workers != 0) config.workers = workers;
  weft::Scheduler sched{config};

  const auto start = std::chrono::steady_clock::now();
  const auto until =
      start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
  std::atomic<std::uint64_t> steps{0};
  weft::Fiber root = sched.spawn({.name = "root"}, [&] {
    std::vector<weft::Fiber> children;
    for (int i = 0; i < fibers; ++i) {
      const std::string name = "worker-fiber-" + std::to_string(i);
      children.push_back(weft::spawn({.name = name}, [&] {
        do {
          for (int round = 0; round < 100; ++round) {
            volatile int sink = 0;
            for (int k = 0; k < 1000; ++k) sink = sink + k;
            steps.fetch_add(1, std::memory_order_relaxed);
            weft::this_fiber::yield();
          }
          if (seconds > 0) weft::this_fiber::sleep_for(std::chrono::milliseconds(10));
        } while (std::chrono::steady_clock::now() < until);
      }));
    }
    for (auto& child : children) child.join();
  });
  root.join();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  const weft::SchedulerSnapshot snap = sched.snapshot();
  std::printf("weft sample: %d fibers spawned from one fiber on %zu workers, %llu steps in %.1f ms\n", fibers,
              snap.workers.size(), static_cast<unsigned long long>(steps.load()), ms);
  std::printf("%-8s %12s %10s %14s %8s\n", "worker", "fibers_run", "steals", "failed_steals", "parks");
  for (const auto& w : snap.workers) {
    std::printf("%-8u %12llu %10llu %14llu %8llu\n", w.index, static_cast<unsigned long long>(w.fibers_run),
                static_cast<unsigned long long>(w.steals), static_cast<unsigned long long>(w.failed_steals),
                static_cast<unsigned long long>(w.parks));
  }
  return 0;
}
