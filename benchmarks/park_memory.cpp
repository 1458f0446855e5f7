// park_memory: what a parked fiber costs in resident memory.
//
// Parks N fibers (default 100,000), each in take() on its own
// weft::BlockingQueue<int>, reads the process's RSS before and after
// (/proc/self/statm), prints the RSS per parked fiber, then feeds every
// queue and joins every fiber. The fibers are spawned by one fiber.
//
//   park_memory                     # 100,000 fibers, 256 KiB stacks (weft's default)
//   park_memory --fibers 1000000    # the "1,000,000 parked fibers with guard pages" target
//   park_memory --json
//   park_memory --hold &            # keeps them parked until a line on stdin
//   weft-dump $!                    #   (or EOF): something big to dump
//
// The per-fiber figure includes the fiber's queue (about 100 bytes here) and
// its weft::Fiber handle; both are printed apart as well. Every stack has
// its guard page (weft has no way to turn it off). If spawning fails (out of
// mappings: vm.max_map_count), the error is printed with how many fibers
// were parked by then, and the program exits 1.
#include <unistd.h>
#include <weft/weft.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cli.h"

namespace {

// Resident set size in bytes, from /proc/self/statm (pages).
std::uint64_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

// Mappings in this process (each counts against vm.max_map_count).
std::uint64_t mapping_count() {
  std::ifstream maps("/proc/self/maps");
  std::uint64_t lines = 0;
  for (std::string line; std::getline(maps, line);) ++lines;
  return lines;
}

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line.empty() ? "unknown" : line;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t fibers = 100'000;
  weft::Config config;
  config.name = "park_memory";
  bool json = false, hold = false;
  unsigned workers = config.workers;
  std::size_t stack_kib = config.stack_size / 1024;
  CLI::App app{"park_memory: the resident memory of a parked fiber", "park_memory"};
  weft::bench::add_count(app, "--fibers", fibers, std::uint64_t{1}, std::uint64_t{100'000'000}, "fibers to park");
  weft::bench::add_count(app, "--workers", workers, 1u, 1024u, "worker threads (default: one per core)");
  weft::bench::add_count(app, "--stack-kib", stack_kib, std::size_t{16}, std::size_t{1} << 20,
                         "usable stack per fiber in KiB, at least 16 (default: weft's)");
  app.add_flag("--json", json, "print one JSON object on stdout");
  app.add_flag("--hold", hold, "once all are parked, print \"parked\" and wait for a line on stdin");
  weft::bench::parse(app, argc, argv);
  config.workers = workers;
  config.stack_size = stack_kib * 1024;

  weft::Scheduler sched{config};
  // The handles' vector first, so that its memory is in the baseline.
  std::vector<weft::Fiber> handles;
  handles.reserve(fibers);
  const std::uint64_t rss_start = rss_bytes();
  std::vector<std::unique_ptr<weft::BlockingQueue<int>>> queues;
  queues.reserve(fibers);
  for (std::uint64_t i = 0; i < fibers; ++i) queues.push_back(std::make_unique<weft::BlockingQueue<int>>());
  const std::uint64_t rss_queues = rss_bytes();

  std::atomic<std::uint64_t> started{0};
  std::atomic<std::uint64_t> taken{0};
  std::string error;
  const auto begin = std::chrono::steady_clock::now();
  // Spawned from a fiber, as a server's acceptor would: a spawn from a plain
  // thread goes through the global queue and wakes a worker each time.
  weft::Fiber spawner = sched.spawn({.name = "spawner"}, [&] {
    try {
      for (std::uint64_t i = 0; i < fibers; ++i) {
        weft::BlockingQueue<int>* queue = queues[i].get();
        handles.push_back(weft::spawn([queue, &started, &taken] {
          started.fetch_add(1, std::memory_order_relaxed);
          if (queue->take() == 1) taken.fetch_add(1, std::memory_order_relaxed);
        }));
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  spawner.join();
  const std::uint64_t spawned = handles.size();
  const double spawn_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
  // Wait until every fiber has parked: the snapshot's park_state is -1 for
  // a fiber waiting in take().
  for (;;) {
    if (started.load() == spawned) {
      std::uint64_t parked = 0;
      for (const auto& f : sched.snapshot().fibers) parked += f.park_state == -1 ? 1 : 0;
      if (parked == spawned) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const double park_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
  const std::uint64_t rss_parked = rss_bytes();
  const std::uint64_t maps = mapping_count();
  if (hold) {
    std::printf("parked\n");
    std::fflush(stdout);
    for (int c = std::getchar(); c != EOF && c != '\n';) c = std::getchar();
  }

  const auto wake_begin = std::chrono::steady_clock::now();
  for (std::uint64_t i = 0; i < spawned; ++i) queues[i]->put(1);
  for (auto& f : handles) f.join();
  const double finish_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wake_begin).count();
  const bool ok = taken.load() == spawned;

  const double per_fiber = spawned == 0 ? 0 : static_cast<double>(rss_parked - rss_start) / spawned;
  const double per_queue = spawned == 0 ? 0 : static_cast<double>(rss_queues - rss_start) / spawned;
  const std::string max_map_count = read_first_line("/proc/sys/vm/max_map_count");
  if (json) {
    std::printf(
        "{\"benchmark\": \"park_memory\", \"fibers\": %llu, \"parked\": %llu, \"stack_kib\": %zu, \"workers\": %u, "
        "\"rss_before_mib\": %.1f, \"rss_parked_mib\": %.1f, \"bytes_per_fiber\": %.0f, \"queue_bytes_per_fiber\": "
        "%.0f, \"mappings\": %llu, \"max_map_count\": %s, \"spawn_ms\": %.1f, \"park_ms\": %.1f, \"finish_ms\": %.1f, "
        "\"error\": \"%s\"}\n",
        static_cast<unsigned long long>(fibers), static_cast<unsigned long long>(spawned), config.stack_size / 1024,
        config.workers, rss_start / 1048576.0, rss_parked / 1048576.0, per_fiber, per_queue,
        static_cast<unsigned long long>(maps), max_map_count.c_str(), spawn_ms, park_ms, finish_ms, error.c_str());
  } else {
    if (!error.empty())
      std::printf("park_memory: spawning stopped after %llu of %llu fibers: %s\n",
                  static_cast<unsigned long long>(spawned), static_cast<unsigned long long>(fibers), error.c_str());
    std::printf(
        "park_memory: %llu fibers parked (%zu KiB stacks, %u workers): spawned in %.0f ms, all parked at %.0f ms\n",
        static_cast<unsigned long long>(spawned), config.stack_size / 1024, config.workers, spawn_ms, park_ms);
    std::printf("  RSS before %.1f MiB, with all parked %.1f MiB\n", rss_start / 1048576.0, rss_parked / 1048576.0);
    std::printf("  RSS per parked fiber: %.0f bytes (%.2f KiB), of which its queue %.0f bytes\n", per_fiber,
                per_fiber / 1024.0, per_queue);
    std::printf("  mappings: %llu (vm.max_map_count %s)\n", static_cast<unsigned long long>(maps),
                max_map_count.c_str());
    std::printf("  woken and joined in %.0f ms\n", finish_ms);
    if (!ok) std::printf("  ERROR: %llu fibers took their item\n", static_cast<unsigned long long>(taken.load()));
  }
  return ok && error.empty() ? 0 : 1;
}
