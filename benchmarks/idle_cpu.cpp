// idle_cpu: what an idle scheduler costs in CPU (the "idle scheduler" row of
// docs/benchmarks.md). Starts a scheduler (one worker per core, the dump
// server on), parks 1000 fibers on a queue, lets one fiber sleep --tick-ms
// (default 10) in a loop (a timer-driven service at rest), and measures the whole process's
// CPU time (getrusage: user + system, every thread) over --seconds (default 2).
//
//   idle_cpu                 # prints the CPU use as % of one core
//   idle_cpu --tick-ms 0     # no sleeping fiber: a scheduler with nothing to do at all
//   idle_cpu --seconds 5 --json
#include <sys/resource.h>
#include <weft/weft.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cli.h"

namespace {

double cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  unsigned seconds = 2;
  unsigned tick_ms = 10;
  bool json = false;
  CLI::App app{"idle_cpu: the CPU an idle scheduler costs, as % of one core", "idle_cpu"};
  weft::bench::add_count(app, "--seconds", seconds, 1u, 3600u, "how long to measure");
  weft::bench::add_count(app, "--tick-ms", tick_ms, 0u, 60'000u, "one fiber sleeps this long in a loop (0: none)");
  app.add_flag("--json", json, "print one JSON object on stdout");
  weft::bench::parse(app, argc, argv);

  weft::Config config;
  config.name = "idle_cpu";
  weft::Scheduler sched{config};
  weft::BlockingQueue<int> queue;
  std::atomic<bool> stop{false};
  std::vector<weft::Fiber> fibers;
  for (int i = 0; i < 1000; ++i) fibers.push_back(sched.spawn([&] { queue.take(); }));
  if (tick_ms > 0) {
    fibers.push_back(sched.spawn([&] {
      while (!stop.load()) weft::this_fiber::sleep_for(std::chrono::milliseconds(tick_ms));
    }));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let everything park

  const double cpu_before = cpu_seconds();
  const auto begin = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  const double percent = 100.0 * (cpu_seconds() - cpu_before) / wall;

  stop = true;
  for (int i = 0; i < 1000; ++i) queue.put(i);
  for (auto& f : fibers) f.join();
  if (json) {
    std::printf(
        "{\"benchmark\": \"idle_cpu\", \"workers\": %u, \"tick_ms\": %u, \"seconds\": %.3f, \"cpu_percent\": %.3f}\n",
        sched.worker_count(), tick_ms, wall, percent);
  } else {
    const std::string sleeper =
        tick_ms > 0 ? "one sleeping " + std::to_string(tick_ms) + " ms in a loop" : "nothing else";
    std::printf("idle_cpu: %u workers, 1000 parked fibers and %s: %.2f %% of one core over %.1f s\n",
                sched.worker_count(), sleeper.c_str(), percent, wall);
  }
  return 0;
}
