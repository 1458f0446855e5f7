// Cross-worker wake-up latency: fiber A is pinned to one worker and fiber B
// to the other; they pass a token back and forth through two queues, so
// every hand-off unparks a fiber whose worker has gone idle (searching or
// asleep on its futex). Time per wake = round trip / 2.
// Baseline: two std::threads on a std::condition_variable, the same shape.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "bench_support.h"

namespace {

constexpr int kRoundTrips = 1000;
constexpr int kThreadRoundTrips = 200;

void BM_CrossWorkerWake(benchmark::State& state) {
  auto sched = weft_bench::make_scheduler(2);
  weft::BlockingQueue<int> control, done, to_a, to_b;
  std::atomic<bool> a_pinned{false}, b_pinned{false};
  // A pins itself, then holds its worker (spinning, no runtime call) until
  // B is pinned: B can only have started on the other worker.
  weft::Fiber a = sched->spawn({.name = "wake-a"}, [&] {
    auto pin = weft::this_fiber::pin();
    a_pinned = true;
    while (!b_pinned) benchmark::ClobberMemory();
    // A drives: for each `control` item, that many round trips with B.
    try {
      for (;;) {
        const int rounds = control.take();
        for (int i = 0; i < rounds; ++i) {
          to_b.put(i);
          to_a.take();
        }
        done.put(rounds);
      }
    } catch (const weft::QueueClosed&) {
    }
    to_b.close();
  });
  while (!a_pinned) std::this_thread::yield();
  weft::Fiber b = sched->spawn({.name = "wake-b"}, [&] {
    auto pin = weft::this_fiber::pin();
    b_pinned = true;
    try {
      for (;;) to_a.put(to_b.take());
    } catch (const weft::QueueClosed&) {
    }
  });
  for (auto _ : state) {
    control.put(kRoundTrips);
    done.take();
  }
  control.close();
  a.join();
  b.join();
  state.counters["per_wake"] = weft_bench::time_per(2.0 * kRoundTrips * state.iterations());
}
BENCHMARK(BM_CrossWorkerWake)->UseRealTime()->MinTime(0.3);

void BM_ThreadCondvarWake(benchmark::State& state) {
  std::mutex lock;
  std::condition_variable cv;
  int turn = 0;  // 0: A's, 1: B's
  for (auto _ : state) {
    auto side = [&](int me) {
      for (int i = 0; i < kThreadRoundTrips; ++i) {
        std::unique_lock guard(lock);
        cv.wait(guard, [&] { return turn == me; });
        turn = 1 - me;
        cv.notify_one();
      }
    };
    std::thread a(side, 0), b(side, 1);
    a.join();
    b.join();
  }
  state.counters["per_wake"] = weft_bench::time_per(2.0 * kThreadRoundTrips * state.iterations());
}
BENCHMARK(BM_ThreadCondvarWake)->UseRealTime()->MinTime(0.2);

}  // namespace
