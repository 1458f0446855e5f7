// weft::BlockingQueue put/take.
// PingPong: one token between two fibers through two queues (as the
// pingpong program), on 1 worker and on 2; time per round trip (two
// hand-offs). Stream: a producer puts 10,000 items into a queue of capacity
// 64 and a consumer takes them; time per item.
// Baselines: the same between two std::threads, on weft::BlockingQueue and
// on a std::mutex + std::condition_variable + std::deque queue.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>

#include "bench_support.h"

namespace {

constexpr int kRoundTrips = 10'000;
constexpr int kThreadRoundTrips = 200;  // ~10-50 us each here: futex wakes across cores
constexpr int kItems = 10'000;
constexpr std::size_t kCapacity = 64;

class StdQueue {
 public:
  explicit StdQueue(std::size_t capacity = SIZE_MAX) : capacity_(capacity) {}
  void put(int item) {
    std::unique_lock guard(lock_);
    not_full_.wait(guard, [&] { return items_.size() < capacity_; });
    items_.push_back(item);
    guard.unlock();
    not_empty_.notify_one();
  }
  int take() {
    std::unique_lock guard(lock_);
    not_empty_.wait(guard, [&] { return !items_.empty(); });
    const int item = items_.front();
    items_.pop_front();
    guard.unlock();
    not_full_.notify_one();
    return item;
  }

 private:
  std::size_t capacity_;
  std::mutex lock_;
  std::condition_variable not_empty_, not_full_;
  std::deque<int> items_;
};

template <class Queue>
void relay(Queue& in, Queue& out, int rounds) {
  for (int i = 0; i < rounds; ++i) out.put(in.take());
}

void BM_QueuePingPongFibers(benchmark::State& state) {
  auto sched = weft_bench::make_scheduler(static_cast<unsigned>(state.range(0)));
  weft::BlockingQueue<int> a_in, b_in;
  for (auto _ : state) {
    weft::Fiber a = sched->spawn([&] { relay(a_in, b_in, kRoundTrips); });
    weft::Fiber b = sched->spawn([&] { relay(b_in, a_in, kRoundTrips); });
    a_in.put(1);
    a.join();
    b.join();
    a_in.take();
  }
  state.counters["per_round_trip"] = weft_bench::time_per(1.0 * kRoundTrips * state.iterations());
}
BENCHMARK(BM_QueuePingPongFibers)->ArgName("workers")->Arg(1)->Arg(2)->UseRealTime()->MinTime(0.3);

template <class Queue>
void pingpong_threads(benchmark::State& state) {
  Queue a_in, b_in;
  for (auto _ : state) {
    std::thread a([&] { relay(a_in, b_in, kThreadRoundTrips); });
    std::thread b([&] { relay(b_in, a_in, kThreadRoundTrips); });
    a_in.put(1);
    a.join();
    b.join();
    a_in.take();
  }
  state.counters["per_round_trip"] = weft_bench::time_per(1.0 * kThreadRoundTrips * state.iterations());
}

void BM_QueuePingPongThreads(benchmark::State& state) { pingpong_threads<weft::BlockingQueue<int>>(state); }
BENCHMARK(BM_QueuePingPongThreads)->UseRealTime()->MinTime(0.2);

void BM_StdQueuePingPongThreads(benchmark::State& state) { pingpong_threads<StdQueue>(state); }
BENCHMARK(BM_StdQueuePingPongThreads)->UseRealTime()->MinTime(0.2);

void BM_QueueStreamFibers(benchmark::State& state) {
  auto sched = weft_bench::make_scheduler(static_cast<unsigned>(state.range(0)));
  weft::BlockingQueue<int> queue{kCapacity};
  for (auto _ : state) {
    weft::Fiber producer = sched->spawn([&] {
      for (int i = 0; i < kItems; ++i) queue.put(i);
    });
    weft::Fiber consumer = sched->spawn([&] {
      for (int i = 0; i < kItems; ++i) benchmark::DoNotOptimize(queue.take());
    });
    producer.join();
    consumer.join();
  }
  state.counters["per_item"] = weft_bench::time_per(1.0 * kItems * state.iterations());
}
BENCHMARK(BM_QueueStreamFibers)->ArgName("workers")->Arg(1)->Arg(2)->UseRealTime()->MinTime(0.3);

template <class Queue>
void stream_threads(benchmark::State& state) {
  Queue queue{kCapacity};
  for (auto _ : state) {
    std::thread producer([&] {
      for (int i = 0; i < kItems; ++i) queue.put(i);
    });
    std::thread consumer([&] {
      for (int i = 0; i < kItems; ++i) benchmark::DoNotOptimize(queue.take());
    });
    producer.join();
    consumer.join();
  }
  state.counters["per_item"] = weft_bench::time_per(1.0 * kItems * state.iterations());
}

void BM_QueueStreamThreads(benchmark::State& state) { stream_threads<weft::BlockingQueue<int>>(state); }
BENCHMARK(BM_QueueStreamThreads)->UseRealTime()->MinTime(0.2);

void BM_StdQueueStreamThreads(benchmark::State& state) { stream_threads<StdQueue>(state); }
BENCHMARK(BM_StdQueueStreamThreads)->UseRealTime()->MinTime(0.2);

}  // namespace
