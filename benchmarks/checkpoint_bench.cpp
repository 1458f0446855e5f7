// checkpoint: the cost of this_fiber::checkpoint() when no preemption is
// pending (docs/sysmon.md): what a hot loop pays for being preemptible.
// Baseline: the same loop without the call, and the call on a plain thread
// (where it does nothing at all).
#include "bench_support.h"

namespace {

constexpr int kCheckpoints = 1'000'000;

void BM_FiberCheckpoint(benchmark::State& state) {
  auto sched = weft_bench::make_scheduler(1);
  for (auto _ : state) {
    weft_bench::run_in_fiber(*sched, [] {
      for (int i = 0; i < kCheckpoints; ++i) {
        weft::this_fiber::checkpoint();
        benchmark::ClobberMemory();
      }
    });
  }
  state.counters["per_checkpoint"] = weft_bench::time_per(1.0 * kCheckpoints * state.iterations());
}
BENCHMARK(BM_FiberCheckpoint)->UseRealTime()->MinTime(0.3);

// The loop alone, in a fiber: subtract it from the above.
void BM_FiberEmptyLoop(benchmark::State& state) {
  auto sched = weft_bench::make_scheduler(1);
  for (auto _ : state) {
    weft_bench::run_in_fiber(*sched, [] {
      for (int i = 0; i < kCheckpoints; ++i) benchmark::ClobberMemory();
    });
  }
  state.counters["per_iteration"] = weft_bench::time_per(1.0 * kCheckpoints * state.iterations());
}
BENCHMARK(BM_FiberEmptyLoop)->UseRealTime()->MinTime(0.3);

void BM_ThreadCheckpoint(benchmark::State& state) {
  for (auto _ : state) {
    for (int i = 0; i < kCheckpoints; ++i) {
      weft::this_fiber::checkpoint();
      benchmark::ClobberMemory();
    }
  }
  state.counters["per_checkpoint"] = weft_bench::time_per(1.0 * kCheckpoints * state.iterations());
}
BENCHMARK(BM_ThreadCheckpoint)->UseRealTime()->MinTime(0.3);

}  // namespace
