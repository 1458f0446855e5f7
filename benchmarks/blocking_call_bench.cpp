// blocking_call: what announcing a blocking call costs (sched/blocking_call.h,
// docs/sysmon.md), the entry and the exit around nothing: on a fiber (a
// store each way on its worker, and sysmon's napping flag), and on a plain
// thread (where it does nothing). Compare with a 4 KiB cached pread, about
// a microsecond (docs/benchmarks.md).
#include "bench_support.h"
#include "sched/blocking_call.h"

namespace {

constexpr int kCalls = 1'000'000;

void BM_FiberBlockingCall(benchmark::State& state) {
  auto sched = weft_bench::make_scheduler(1);
  for (auto _ : state) {
    weft_bench::run_in_fiber(*sched, [] {
      for (int i = 0; i < kCalls; ++i) {
        const weft::detail::BlockingCall announced;
        benchmark::ClobberMemory();
      }
    });
  }
  state.counters["per_call"] = weft_bench::time_per(1.0 * kCalls * state.iterations());
}
BENCHMARK(BM_FiberBlockingCall)->UseRealTime()->MinTime(0.3);

void BM_ThreadBlockingCall(benchmark::State& state) {
  for (auto _ : state) {
    for (int i = 0; i < kCalls; ++i) {
      const weft::detail::BlockingCall announced;
      benchmark::ClobberMemory();
    }
  }
  state.counters["per_call"] = weft_bench::time_per(1.0 * kCalls * state.iterations());
}
BENCHMARK(BM_ThreadBlockingCall)->UseRealTime()->MinTime(0.3);

}  // namespace
