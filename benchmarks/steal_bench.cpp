// Stealing: one fiber spawns 1000 fibers of ~7 us of CPU each, all on its
// own worker's queue, and joins them. On 2 workers the idle one must steal
// half for the batch to finish in about half the time of 1 worker; compare
// the two lines (ideal: workers:2 at ~0.5x workers:1 when the cores are free).
// Baseline: the same work on 1 and 2 std::threads splitting it statically.
#include <cstdint>
#include <thread>
#include <vector>

#include "bench_support.h"

namespace {

constexpr int kFibers = 1000;
constexpr int kSpin = 20'000;  // loop iterations, ~7 us here

void work() {
  std::uint64_t x = 0;
  for (int i = 0; i < kSpin; ++i) {
    x += static_cast<std::uint64_t>(i) * 2654435761u;
    benchmark::DoNotOptimize(x);
  }
}

void BM_StealSpawnedOnOneWorker(benchmark::State& state) {
  auto sched = weft_bench::make_scheduler(static_cast<unsigned>(state.range(0)));
  for (auto _ : state) {
    weft_bench::run_in_fiber(*sched, [] {
      std::vector<weft::Fiber> fibers;
      fibers.reserve(kFibers);
      for (int i = 0; i < kFibers; ++i) fibers.push_back(weft::spawn(work));
      for (auto& f : fibers) f.join();
    });
  }
  state.counters["per_fiber"] = weft_bench::time_per(1.0 * kFibers * state.iterations());
}
BENCHMARK(BM_StealSpawnedOnOneWorker)->ArgName("workers")->Arg(1)->Arg(2)->UseRealTime()->MinTime(0.5);

void BM_StaticSplitThreads(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  for (auto _ : state) {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([=] {
        for (int i = t; i < kFibers; i += threads) work();
      });
    }
    for (auto& t : pool) t.join();
  }
  state.counters["per_fiber"] = weft_bench::time_per(1.0 * kFibers * state.iterations());
}
BENCHMARK(BM_StaticSplitThreads)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->MinTime(0.5);

}  // namespace
