// Helpers shared by the weft_bench micro-benchmarks.
#pragma once

#include <benchmark/benchmark.h>
#include <weft/weft.h>

#include <cstdint>
#include <memory>
#include <string>

namespace weft_bench {

// A scheduler for one benchmark run, built outside the timed loop.
inline std::unique_ptr<weft::Scheduler> make_scheduler(unsigned workers) {
  weft::Config config;
  config.workers = workers;
  config.name = "bench";
  config.dump = false;  // no dump thread: one thread less to share the cores with
  return std::make_unique<weft::Scheduler>(config);
}

// Runs `fn` in a fiber of `sched` and waits for it.
template <class F>
void run_in_fiber(weft::Scheduler& sched, F&& fn) {
  weft::Fiber f = sched.spawn(std::forward<F>(fn));
  f.join();
}

// A counter shown as time per operation (e.g. "per_switch=24.1ns"), from
// the benchmark's (real, where set) time and `ops` operations in all.
inline benchmark::Counter time_per(double ops) {
  return benchmark::Counter(ops, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

}  // namespace weft_bench
