// weft::Mutex against std::mutex.
// Uncontended: one caller locks and unlocks in a loop (from a fiber, and
// from a plain thread). Contended: 4 callers on 2 workers (fibers) or 4
// std::threads share one lock and a counter; time per lock+unlock.
#include <mutex>
#include <thread>
#include <vector>

#include "bench_support.h"

namespace {

constexpr int kOps = 100'000;
constexpr int kContenders = 4;
constexpr int kOpsPerContender = 20'000;

template <class M>
void lock_loop(M& mu, long& counter, int ops) {
  for (int i = 0; i < ops; ++i) {
    std::lock_guard guard(mu);
    ++counter;
    benchmark::DoNotOptimize(counter);
  }
}

void BM_MutexUncontendedFiber(benchmark::State& state) {
  auto sched = weft_bench::make_scheduler(1);
  weft::Mutex mu;
  long counter = 0;
  for (auto _ : state) weft_bench::run_in_fiber(*sched, [&] { lock_loop(mu, counter, kOps); });
  state.counters["per_lock"] = weft_bench::time_per(1.0 * kOps * state.iterations());
}
BENCHMARK(BM_MutexUncontendedFiber)->UseRealTime()->MinTime(0.2);

void BM_MutexUncontendedThread(benchmark::State& state) {
  weft::Mutex mu;
  long counter = 0;
  for (auto _ : state) lock_loop(mu, counter, kOps);
  state.counters["per_lock"] = weft_bench::time_per(1.0 * kOps * state.iterations());
}
BENCHMARK(BM_MutexUncontendedThread)->UseRealTime()->MinTime(0.2);

void BM_StdMutexUncontended(benchmark::State& state) {
  std::mutex mu;
  long counter = 0;
  for (auto _ : state) lock_loop(mu, counter, kOps);
  state.counters["per_lock"] = weft_bench::time_per(1.0 * kOps * state.iterations());
}
BENCHMARK(BM_StdMutexUncontended)->UseRealTime()->MinTime(0.2);

// kContenders fibers on range(0) workers.
void BM_MutexContendedFibers(benchmark::State& state) {
  auto sched = weft_bench::make_scheduler(static_cast<unsigned>(state.range(0)));
  weft::Mutex mu;
  long counter = 0;
  for (auto _ : state) {
    std::vector<weft::Fiber> fibers;
    for (int i = 0; i < kContenders; ++i)
      fibers.push_back(sched->spawn([&] { lock_loop(mu, counter, kOpsPerContender); }));
    for (auto& f : fibers) f.join();
  }
  state.counters["per_lock"] = weft_bench::time_per(1.0 * kContenders * kOpsPerContender * state.iterations());
}
BENCHMARK(BM_MutexContendedFibers)->ArgName("workers")->Arg(1)->Arg(2)->UseRealTime()->MinTime(0.2);

template <class M>
void contended_threads(benchmark::State& state) {
  M mu;
  long counter = 0;
  for (auto _ : state) {
    std::vector<std::thread> threads;
    for (int i = 0; i < kContenders; ++i) threads.emplace_back([&] { lock_loop(mu, counter, kOpsPerContender); });
    for (auto& t : threads) t.join();
  }
  state.counters["per_lock"] = weft_bench::time_per(1.0 * kContenders * kOpsPerContender * state.iterations());
}

void BM_MutexContendedThreads(benchmark::State& state) { contended_threads<weft::Mutex>(state); }
BENCHMARK(BM_MutexContendedThreads)->UseRealTime()->MinTime(0.2);

void BM_StdMutexContendedThreads(benchmark::State& state) { contended_threads<std::mutex>(state); }
BENCHMARK(BM_StdMutexContendedThreads)->UseRealTime()->MinTime(0.2);

}  // namespace
