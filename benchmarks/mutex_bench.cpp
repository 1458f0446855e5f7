// weft::Mutex against std::mutex, and std::mutex through weft's lock hooks
// (hooks/locks.h: libweft defines pthread_mutex_lock, so every std::mutex
// here is weft's) against glibc's own functions, called directly.
// Uncontended: one caller locks and unlocks in a loop (from a fiber, and
// from a plain thread). Contended: 4 callers on 2 workers (fibers) or 4
// std::threads share one lock and a counter; time per lock+unlock.
// The bounded queue: std::mutex + std::condition_variable between 4
// plain-thread producers and 100 consumers, fibers or threads.
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "bench_support.h"
#include "hooks/real_calls.h"

namespace {

// A std::mutex-shaped lock on glibc's own pthread_mutex_lock and _unlock
// (through the pointers the hooks pass through to): what a thread pays
// without weft.
class GlibcMutex {
 public:
  void lock() { weft::detail::real::pthread_mutex_lock()(&mutex_); }
  void unlock() { weft::detail::real::pthread_mutex_unlock()(&mutex_); }
  pthread_mutex_t* native() { return &mutex_; }

 private:
  pthread_mutex_t mutex_ = PTHREAD_MUTEX_INITIALIZER;
};

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

// One caller locks and unlocks M in a loop, in a fiber or on this thread.
template <class M>
void uncontended_fiber(benchmark::State& state) {
  auto sched = weft_bench::make_scheduler(1);
  M mu;
  long counter = 0;
  for (auto _ : state) weft_bench::run_in_fiber(*sched, [&] { lock_loop(mu, counter, kOps); });
  state.counters["per_lock"] = weft_bench::time_per(1.0 * kOps * state.iterations());
}

template <class M>
void uncontended_thread(benchmark::State& state) {
  M mu;
  long counter = 0;
  for (auto _ : state) lock_loop(mu, counter, kOps);
  state.counters["per_lock"] = weft_bench::time_per(1.0 * kOps * state.iterations());
}

void BM_MutexUncontendedFiber(benchmark::State& state) { uncontended_fiber<weft::Mutex>(state); }
BENCHMARK(BM_MutexUncontendedFiber)->UseRealTime()->MinTime(0.2);

void BM_MutexUncontendedThread(benchmark::State& state) { uncontended_thread<weft::Mutex>(state); }
BENCHMARK(BM_MutexUncontendedThread)->UseRealTime()->MinTime(0.2);

void BM_StdMutexUncontended(benchmark::State& state) { uncontended_thread<std::mutex>(state); }
BENCHMARK(BM_StdMutexUncontended)->UseRealTime()->MinTime(0.2);

// std::mutex in a fiber: the hooks' fast path, against glibc's on a thread.
void BM_StdMutexUncontendedFiber(benchmark::State& state) { uncontended_fiber<std::mutex>(state); }
BENCHMARK(BM_StdMutexUncontendedFiber)->UseRealTime()->MinTime(0.2);

void BM_GlibcMutexUncontended(benchmark::State& state) { uncontended_thread<GlibcMutex>(state); }
BENCHMARK(BM_GlibcMutexUncontended)->UseRealTime()->MinTime(0.2);

// kContenders fibers on range(0) workers, or kContenders plain threads.
template <class M>
void contended_fibers(benchmark::State& state) {
  auto sched = weft_bench::make_scheduler(static_cast<unsigned>(state.range(0)));
  M mu;
  long counter = 0;
  for (auto _ : state) {
    std::vector<weft::Fiber> fibers;
    for (int i = 0; i < kContenders; ++i)
      fibers.push_back(sched->spawn([&] { lock_loop(mu, counter, kOpsPerContender); }));
    for (auto& f : fibers) f.join();
  }
  state.counters["per_lock"] = weft_bench::time_per(1.0 * kContenders * kOpsPerContender * state.iterations());
}

void BM_MutexContendedFibers(benchmark::State& state) { contended_fibers<weft::Mutex>(state); }
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

void BM_GlibcMutexContendedThreads(benchmark::State& state) { contended_threads<GlibcMutex>(state); }
BENCHMARK(BM_GlibcMutexContendedThreads)->UseRealTime()->MinTime(0.2);

// std::mutex contended by 4 fibers on range(0) workers: parks, hand-offs.
void BM_StdMutexContendedFibers(benchmark::State& state) { contended_fibers<std::mutex>(state); }
BENCHMARK(BM_StdMutexContendedFibers)->ArgName("workers")->Arg(1)->Arg(2)->UseRealTime()->MinTime(0.2);

// The bounded queue of the lock hooks' issue: 4 plain-thread producers put
// 1,000,000 items through a std::deque of 64 under one std::mutex and two
// std::condition_variables, and 100 consumers take them, as fibers on 2
// workers or as plain threads; time per item.
constexpr int kQueueItems = 1'000'000;
constexpr int kQueueProducers = 4;
constexpr int kQueueConsumers = 100;
constexpr std::size_t kQueueCapacity = 64;

struct BoundedQueue {
  std::mutex mu;
  std::condition_variable not_empty;
  std::condition_variable not_full;
  std::deque<int> items;
  bool closed = false;

  void put(int item) {
    std::unique_lock lock(mu);
    not_full.wait(lock, [&] { return items.size() < kQueueCapacity; });
    items.push_back(item);
    lock.unlock();
    not_empty.notify_one();
  }
  // False once closed and drained.
  bool take(long& sum) {
    std::unique_lock lock(mu);
    not_empty.wait(lock, [&] { return !items.empty() || closed; });
    if (items.empty()) return false;
    sum += items.front();
    items.pop_front();
    lock.unlock();
    not_full.notify_one();
    return true;
  }
  void close() {
    {
      std::lock_guard guard(mu);
      closed = true;
    }
    not_empty.notify_all();
  }
};

template <class StartConsumers, class JoinConsumers>
void bounded_queue(benchmark::State& state, StartConsumers start, JoinConsumers join) {
  long total = 0;
  for (auto _ : state) {
    BoundedQueue queue;
    std::vector<long> sums(kQueueConsumers, 0);
    start(queue, sums);
    std::vector<std::thread> producers;
    for (int p = 0; p < kQueueProducers; ++p)
      producers.emplace_back([&, p] {
        for (int item = p; item < kQueueItems; item += kQueueProducers) queue.put(item);
      });
    for (auto& t : producers) t.join();
    queue.close();
    join();
    for (long sum : sums) total += sum;
  }
  const long expected = static_cast<long>(kQueueItems) * (kQueueItems - 1) / 2 * state.iterations();
  if (total != expected) state.SkipWithError("items lost or taken twice");
  state.counters["per_item"] = weft_bench::time_per(1.0 * kQueueItems * state.iterations());
}

void BM_StdQueueFiberConsumers(benchmark::State& state) {
  auto sched = weft_bench::make_scheduler(2);
  std::vector<weft::Fiber> consumers;
  bounded_queue(
      state,
      [&](BoundedQueue& queue, std::vector<long>& sums) {
        for (int c = 0; c < kQueueConsumers; ++c)
          consumers.push_back(sched->spawn([&queue, &sum = sums[c]] {
            while (queue.take(sum)) {
            }
          }));
      },
      [&] {
        for (auto& f : consumers) f.join();
        consumers.clear();
      });
}
BENCHMARK(BM_StdQueueFiberConsumers)->UseRealTime()->Iterations(3)->Unit(benchmark::kMillisecond);

void BM_StdQueueThreadConsumers(benchmark::State& state) {
  std::vector<std::thread> consumers;
  bounded_queue(
      state,
      [&](BoundedQueue& queue, std::vector<long>& sums) {
        for (int c = 0; c < kQueueConsumers; ++c)
          consumers.emplace_back([&queue, &sum = sums[c]] {
            while (queue.take(sum)) {
            }
          });
      },
      [&] {
        for (auto& t : consumers) t.join();
        consumers.clear();
      });
}
BENCHMARK(BM_StdQueueThreadConsumers)->UseRealTime()->Iterations(3)->Unit(benchmark::kMillisecond);

// Pairs of plain threads, each pair passing a turn back and forth over its
// own mutex and condition variable: the hooks' condvar wait on a thread
// against glibc's own. The pairs share nothing, so a process-wide lock in
// the wait would show as the gap (hooks/cancellable_wait.cpp).
constexpr int kCondvarPairs = 8;
constexpr int kCondvarRounds = 5'000;

// glibc's own pthread_cond_wait and _signal, as GlibcMutex.
class GlibcCondvar {
 public:
  void wait(std::unique_lock<GlibcMutex>& lock) {
    weft::detail::real::pthread_cond_wait()(&cond_, lock.mutex()->native());
  }
  void notify_one() { weft::detail::real::pthread_cond_signal()(&cond_); }

 private:
  pthread_cond_t cond_ = PTHREAD_COND_INITIALIZER;
};

template <class M, class C>
void condvar_pairs(benchmark::State& state) {
  struct Pair {
    M mu;
    C cv;
    int turn = 0;
  };
  for (auto _ : state) {
    std::vector<Pair> pairs(kCondvarPairs);
    std::vector<std::thread> threads;
    for (Pair& pair : pairs)
      for (int side = 0; side < 2; ++side)
        threads.emplace_back([&pair, side] {
          for (int i = 0; i < kCondvarRounds; ++i) {
            std::unique_lock lock(pair.mu);
            while (pair.turn != side) pair.cv.wait(lock);
            pair.turn = 1 - side;
            pair.cv.notify_one();
          }
        });
    for (auto& t : threads) t.join();
  }
  state.counters["per_handoff"] = weft_bench::time_per(2.0 * kCondvarPairs * kCondvarRounds * state.iterations());
}

void BM_StdCondvarPairsThreads(benchmark::State& state) { condvar_pairs<std::mutex, std::condition_variable>(state); }
BENCHMARK(BM_StdCondvarPairsThreads)->UseRealTime()->MinTime(0.5)->Unit(benchmark::kMillisecond);

void BM_GlibcCondvarPairsThreads(benchmark::State& state) { condvar_pairs<GlibcMutex, GlibcCondvar>(state); }
BENCHMARK(BM_GlibcCondvarPairsThreads)->UseRealTime()->MinTime(0.5)->Unit(benchmark::kMillisecond);

}  // namespace
