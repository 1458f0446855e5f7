// yield: the cost of one fiber switch. Two fibers on one worker yield to
// each other, so every yield() is one switch (A -> B or B -> A).
// Baseline: two std::threads calling std::this_thread::yield() (a
// sched_yield syscall each; on 2 cores the threads mostly do not switch at
// all, so this is the cost of asking, not of a switch).
#include <thread>

#include "bench_support.h"

namespace {

constexpr int kYieldsPerFiber = 10'000;

void BM_FiberYield(benchmark::State& state) {
  auto sched = weft_bench::make_scheduler(1);
  for (auto _ : state) {
    auto body = [] {
      for (int i = 0; i < kYieldsPerFiber; ++i) weft::this_fiber::yield();
    };
    weft::Fiber a = sched->spawn(body);
    weft::Fiber b = sched->spawn(body);
    a.join();
    b.join();
  }
  state.counters["per_switch"] = weft_bench::time_per(2.0 * kYieldsPerFiber * state.iterations());
}
BENCHMARK(BM_FiberYield)->UseRealTime()->MinTime(0.3);

// One fiber alone: yield() finds nothing else to run and returns.
void BM_FiberYieldAlone(benchmark::State& state) {
  auto sched = weft_bench::make_scheduler(1);
  for (auto _ : state) {
    weft_bench::run_in_fiber(*sched, [] {
      for (int i = 0; i < kYieldsPerFiber; ++i) weft::this_fiber::yield();
    });
  }
  state.counters["per_yield"] = weft_bench::time_per(1.0 * kYieldsPerFiber * state.iterations());
}
BENCHMARK(BM_FiberYieldAlone)->UseRealTime()->MinTime(0.2);

void BM_ThreadYield(benchmark::State& state) {
  for (auto _ : state) {
    auto body = [] {
      for (int i = 0; i < kYieldsPerFiber; ++i) std::this_thread::yield();
    };
    std::thread a(body), b(body);
    a.join();
    b.join();
  }
  state.counters["per_yield"] = weft_bench::time_per(2.0 * kYieldsPerFiber * state.iterations());
}
BENCHMARK(BM_ThreadYield)->UseRealTime()->MinTime(0.2);

}  // namespace
