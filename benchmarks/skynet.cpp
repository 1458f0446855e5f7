// skynet: the fiber-spawn benchmark (github.com/atemerev/skynet), in weft.
//
// Each node spawns 10 child fibers and sums what they return, down to
// 1,000,000 leaves; leaf i returns i, so the root's sum is 499999500000. That
// is 1,111,111 fibers, spawned and joined, with up to hundreds of thousands
// alive at once.
//
//   skynet                    # 2 workers (default: one per core)
//   skynet --workers 1
//   skynet --json             # one JSON object on stdout
//
// Prints the wall time, the sum and the peak RSS (getrusage ru_maxrss);
// exits 1 if the sum is wrong, 2 on bad arguments.
#include <sys/resource.h>
#include <weft/weft.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>

#include "cli.h"

namespace {

constexpr std::uint64_t kLeaves = 1'000'000;
constexpr std::uint64_t kExpectedSum = kLeaves * (kLeaves - 1) / 2;  // 499999500000

// The sum of the leaves num .. num + size - 1, one fiber per node.
std::uint64_t skynet(std::uint64_t num, std::uint64_t size) {
  if (size == 1) return num;
  const std::uint64_t child_size = size / 10;
  std::uint64_t sums[10];
  weft::Fiber children[10];
  for (std::uint64_t i = 0; i < 10; ++i) {
    children[i] = weft::spawn([&sums, i, num, child_size] { sums[i] = skynet(num + i * child_size, child_size); });
  }
  std::uint64_t sum = 0;
  for (std::uint64_t i = 0; i < 10; ++i) {
    children[i].join();
    sum += sums[i];
  }
  return sum;
}

double peak_rss_mib() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB
}

}  // namespace

int main(int argc, char** argv) {
  weft::Config config;
  config.name = "skynet";
  // Every node is a shallow call: 16 KiB (the minimum) is plenty, and a
  // smaller stack is fewer pages to fault in and to keep in the pool.
  config.stack_size = 16 * 1024;
  bool json = false;
  unsigned workers = config.workers;
  std::size_t stack_kib = config.stack_size / 1024;
  std::size_t stack_pool = config.stack_pool_size;
  CLI::App app{"skynet: a tree of 1,111,111 fibers, each spawning ten and summing their ids", "skynet"};
  weft::bench::add_count(app, "--workers", workers, 1u, 1024u, "worker threads (default: one per core)");
  weft::bench::add_count(app, "--stack-kib", stack_kib, std::size_t{16}, std::size_t{1} << 20,
                         "usable stack per fiber in KiB, at least 16");
  weft::bench::add_count(app, "--stack-pool", stack_pool, std::size_t{0}, std::size_t{1} << 24,
                         "finished fibers' stacks kept for reuse (Config::stack_pool_size)");
  app.add_flag("--json", json, "print one JSON object on stdout");
  weft::bench::parse(app, argc, argv);
  config.workers = workers;
  config.stack_size = stack_kib * 1024;
  config.stack_pool_size = stack_pool;

  std::uint64_t sum = 0;
  double ms = 0;
  try {
    weft::Scheduler sched{config};
    const auto begin = std::chrono::steady_clock::now();
    weft::Fiber root = sched.spawn({.name = "skynet-root"}, [&] { sum = skynet(0, kLeaves); });
    root.join();
    ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "skynet: %s\n", e.what());
    return 1;
  }
  const double rss = peak_rss_mib();
  const bool ok = sum == kExpectedSum;
  if (json) {
    std::printf(
        "{\"benchmark\": \"skynet\", \"workers\": %u, \"leaves\": %llu, \"fibers\": %llu, \"ms\": %.3f, "
        "\"sum\": %llu, \"ok\": %s, \"peak_rss_mib\": %.1f}\n",
        config.workers, static_cast<unsigned long long>(kLeaves), 1'111'111ull, ms,
        static_cast<unsigned long long>(sum), ok ? "true" : "false", rss);
  } else {
    std::printf("skynet: %llu leaves (1111111 fibers), %u worker%s: %.1f ms, sum %llu%s, peak RSS %.1f MiB\n",
                static_cast<unsigned long long>(kLeaves), config.workers, config.workers == 1 ? "" : "s", ms,
                static_cast<unsigned long long>(sum), ok ? "" : " (WRONG: expected 499999500000)", rss);
  }
  return ok ? 0 : 1;
}
