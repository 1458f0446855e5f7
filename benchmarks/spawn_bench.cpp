// spawn+join: the cost of a fiber's whole life (stack from the pool, control
// block, first switch in, exit, join), batched: spawn 1000, then join all.
// Also one at a time (spawn, join, repeat), and from a plain thread (the
// fibers go through the global queue and wake a worker).
// Baseline: std::thread create+join, batched the same way.
#include <thread>
#include <vector>

#include "bench_support.h"

namespace {

constexpr int kBatch = 1000;
// Batches per benchmark iteration. Each iteration starts one fiber from the
// benchmark's thread and waits for it: waking the idle worker costs tens of
// microseconds on this VM, which over a single batch added ~50-90 ns to
// every fiber's figure. Ten batches dilute it to a few.
constexpr int kBatchesPerIteration = 10;
constexpr int kThreadBatch = 100;

void spawn_batch(int count) {
  std::vector<weft::Fiber> fibers;
  fibers.reserve(count);
  for (int i = 0; i < count; ++i) fibers.push_back(weft::spawn([] { benchmark::ClobberMemory(); }));
  for (auto& f : fibers) f.join();
}

// Spawned and joined by a fiber; range(0) workers.
void BM_FiberSpawnJoinBatch(benchmark::State& state) {
  auto sched = weft_bench::make_scheduler(static_cast<unsigned>(state.range(0)));
  for (auto _ : state) {
    weft_bench::run_in_fiber(*sched, [] {
      for (int b = 0; b < kBatchesPerIteration; ++b) spawn_batch(kBatch);
    });
  }
  state.counters["per_fiber"] = weft_bench::time_per(1.0 * kBatch * kBatchesPerIteration * state.iterations());
}
BENCHMARK(BM_FiberSpawnJoinBatch)->ArgName("workers")->Arg(1)->Arg(2)->UseRealTime()->MinTime(0.3);

void BM_FiberSpawnJoinOneAtATime(benchmark::State& state) {
  auto sched = weft_bench::make_scheduler(static_cast<unsigned>(state.range(0)));
  for (auto _ : state) {
    weft_bench::run_in_fiber(*sched, [] {
      for (int i = 0; i < kBatch * kBatchesPerIteration; ++i) weft::spawn([] { benchmark::ClobberMemory(); }).join();
    });
  }
  state.counters["per_fiber"] = weft_bench::time_per(1.0 * kBatch * kBatchesPerIteration * state.iterations());
}
BENCHMARK(BM_FiberSpawnJoinOneAtATime)->ArgName("workers")->Arg(1)->Arg(2)->UseRealTime()->MinTime(0.2);

// Spawned and joined by the benchmark's own (plain) thread.
void BM_FiberSpawnFromThread(benchmark::State& state) {
  auto sched = weft_bench::make_scheduler(static_cast<unsigned>(state.range(0)));
  std::vector<weft::Fiber> fibers;
  fibers.reserve(kBatch);
  for (auto _ : state) {
    for (int i = 0; i < kBatch; ++i) fibers.push_back(sched->spawn([] { benchmark::ClobberMemory(); }));
    for (auto& f : fibers) f.join();
    fibers.clear();
  }
  state.counters["per_fiber"] = weft_bench::time_per(1.0 * kBatch * state.iterations());
}
BENCHMARK(BM_FiberSpawnFromThread)->ArgName("workers")->Arg(1)->Arg(2)->UseRealTime()->MinTime(0.2);

void BM_ThreadCreateJoinBatch(benchmark::State& state) {
  std::vector<std::thread> threads;
  threads.reserve(kThreadBatch);
  for (auto _ : state) {
    for (int i = 0; i < kThreadBatch; ++i) threads.emplace_back([] { benchmark::ClobberMemory(); });
    for (auto& t : threads) t.join();
    threads.clear();
  }
  state.counters["per_thread"] = weft_bench::time_per(1.0 * kThreadBatch * state.iterations());
}
BENCHMARK(BM_ThreadCreateJoinBatch)->UseRealTime()->MinTime(0.2);

}  // namespace
