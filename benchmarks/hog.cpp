// hog: what preemption at checkpoints buys (docs/sysmon.md, the "hog" row
// of docs/benchmarks.md). On one worker, one fiber computes for --seconds
// (default 1) with a checkpoint per iteration, while 100 fibers each sleep
// 1 ms in a loop and record how late they wake. Run once with preemption on
// and once with it off (Config::preemption), and print p50, p99 and max
// lateness and the hog's preempt count side by side.
//
//   hog                 # the table
//   hog --json          # {"slice_ms": 10, "preempt_on": {...}, "preempt_off": {...}}
//   hog --seconds 3
//
// Target: with preemption on, p99 lateness <= 2 x the time slice. With it
// off, a sleeper waits for the hog's whole run.
#include <weft/weft.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "cli.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kSleepers = 100;
constexpr auto kSleep = std::chrono::milliseconds(1);
constexpr auto kSlice = std::chrono::milliseconds(10);

struct Result {
  double p50_ms = 0;
  double p99_ms = 0;
  double max_ms = 0;
  std::uint64_t preempts = 0;
  std::size_t samples = 0;
};

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const auto index = static_cast<std::size_t>(p * static_cast<double>(sorted.size() - 1) + 0.5);
  return sorted[std::min(index, sorted.size() - 1)];
}

// Enough arithmetic that the compiler cannot drop it, little enough that a
// checkpoint comes every few microseconds.
std::uint64_t compute(std::uint64_t x) {
  for (int i = 0; i < 1000; ++i) x = x * 6364136223846793005ull + 1442695040888963407ull;
  return x;
}

Result run(bool preemption, double seconds) {
  weft::Config config;
  config.workers = 1;
  config.name = preemption ? "hog-on" : "hog-off";
  config.preemption = preemption;
  config.time_slice = kSlice;
  config.dump = false;
  weft::Scheduler sched{config};

  std::atomic<bool> hog_done{false};
  std::vector<std::vector<double>> lateness(kSleepers);
  std::vector<weft::Fiber> sleepers;
  for (int i = 0; i < kSleepers; ++i) {
    sleepers.push_back(sched.spawn([&hog_done, &samples = lateness[i]] {
      samples.reserve(4096);
      for (;;) {
        const auto deadline = Clock::now() + kSleep;
        weft::this_fiber::sleep_until(deadline);
        samples.push_back(std::chrono::duration<double, std::milli>(Clock::now() - deadline).count());
        if (hog_done.load(std::memory_order_relaxed)) return;  // the sample that saw the end counts
      }
    }));
  }
  std::atomic<std::uint64_t> sink{0};
  weft::Fiber hog = sched.spawn({.name = "hog"}, [&] {
    const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    std::uint64_t x = 1;
    while (Clock::now() < end) {
      x = compute(x);
      weft::this_fiber::checkpoint();
    }
    sink.store(x);
    hog_done.store(true);
  });
  hog.join();
  for (auto& f : sleepers) f.join();

  std::vector<double> all;
  for (const auto& samples : lateness) all.insert(all.end(), samples.begin(), samples.end());
  std::sort(all.begin(), all.end());
  Result result;
  result.p50_ms = percentile(all, 0.50);
  result.p99_ms = percentile(all, 0.99);
  result.max_ms = all.empty() ? 0 : all.back();
  result.preempts = hog.counts().preempt;
  result.samples = all.size();
  return result;
}

void print_json_side(const char* name, const Result& r, bool last) {
  std::printf("\"%s\": {\"p50_ms\": %.3f, \"p99_ms\": %.3f, \"max_ms\": %.3f, \"preempts\": %llu}%s", name, r.p50_ms,
              r.p99_ms, r.max_ms, static_cast<unsigned long long>(r.preempts), last ? "" : ", ");
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 1.0;
  bool json = false;
  CLI::App app{"hog: a CPU-bound fiber beside a ticker, with and without preemption", "hog"};
  app.add_option("--seconds", seconds, "how long each run lasts")
      ->check(CLI::Range(0.001, 600.0))
      ->capture_default_str();
  app.add_flag("--json", json, "print one JSON object on stdout");
  weft::bench::parse(app, argc, argv);
  const Result on = run(true, seconds);
  const Result off = run(false, seconds);
  const long long slice_ms = std::chrono::duration_cast<std::chrono::milliseconds>(kSlice).count();
  if (json) {
    std::printf("{\"slice_ms\": %lld, ", slice_ms);
    print_json_side("preempt_on", on, false);
    print_json_side("preempt_off", off, true);
    std::printf("}\n");
    return 0;
  }
  std::printf("hog: 1 worker, one fiber computing for %.1f s with a checkpoint per iteration,\n", seconds);
  std::printf("     %d fibers sleeping %lld ms in a loop; time slice %lld ms. Lateness of their wakes:\n\n", kSleepers,
              static_cast<long long>(kSleep.count()), slice_ms);
  std::printf("%-12s %10s %10s %10s %10s %10s\n", "preemption", "p50 ms", "p99 ms", "max ms", "preempts", "samples");
  std::printf("%-12s %10.3f %10.3f %10.3f %10llu %10zu\n", "on", on.p50_ms, on.p99_ms, on.max_ms,
              static_cast<unsigned long long>(on.preempts), on.samples);
  std::printf("%-12s %10.3f %10.3f %10.3f %10llu %10zu\n", "off", off.p50_ms, off.p99_ms, off.max_ms,
              static_cast<unsigned long long>(off.preempts), off.samples);
  std::printf("\ntarget: p99 with preemption on <= 2 x slice = %lld ms: %s\n", 2 * slice_ms,
              on.p99_ms <= 2.0 * static_cast<double>(slice_ms) ? "met" : "missed");
  return 0;
}
