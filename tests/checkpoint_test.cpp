// Checkpoints (include/weft/detail/checkpoint.h): every weft call that does
// not wait lets a fiber that has used up its time slice yield, so a loop
// that never parks still shares its worker (docs/sync.md lists the calls).
#include <gtest/gtest.h>
#include <unistd.h>
#include <weft/detail/checkpoint.h>
#include <weft/weft.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <ostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "test_support.h"
#include "ticker.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

Config checkpoint_config(unsigned workers, std::chrono::microseconds slice) {
  Config config = test::config_with(workers);
  config.time_slice = slice;
  // No spare to take the queued fibers over: only the checkpoint may.
  config.max_threads = config.workers;  // no spares
  return config;
}

// --- The never-parking consumers of issue 15 -----------------------------

class NeverParkingConsumers : public ::testing::TestWithParam<unsigned> {};

// 16 consumers loop on take() and put() of a queue that is never empty, so
// neither call ever parks; a ticker sleeps 1 ms at a time on the same
// workers. Without checkpoints in take() and put() the first consumers
// kept their workers: the ticker was a second late and most consumers
// never ran.
TEST_P(NeverParkingConsumers, ShareTheWorkersWithATicker) {
  constexpr auto kSlice = 5ms;
  constexpr int kConsumers = 16;
  constexpr auto kRun = 1000ms;
  Scheduler sched(checkpoint_config(GetParam(), kSlice));
  BlockingQueue<int> queue;
  for (int i = 0; i < 4 * kConsumers; ++i) queue.put(i);
  std::atomic<bool> stop{false};
  test::Ticker ticker(sched);

  std::array<std::atomic<std::uint64_t>, kConsumers> served{};
  const test::RunDelays delays;  // from the loops' start
  std::vector<Fiber> consumers;
  for (int c = 0; c < kConsumers; ++c) {
    consumers.push_back(sched.spawn({.name = "consumer"}, [&, c] {
      // Bounded in count as well as by `stop`.
      for (std::uint64_t n = 0; n < 500'000'000 && !stop.load(std::memory_order_relaxed); ++n) {
        const int item = queue.take();
        served[c].fetch_add(1, std::memory_order_relaxed);
        queue.put(item);
      }
    }));
  }
  // The bound is for the consumers' steady state. Until each has run once,
  // a tick may wait behind the consumers spawned before it woke, in FIFO
  // order, each for its slice: under ASan, where the 16 spawns take as
  // long as the first ticks, the worst tick came 86-98 ms late in 13 of 18
  // runs, at tick 2 or 3 in the 5 of them that printed it. So the worst counts
  // from two ticks after every consumer ran.
  const auto settle_until = std::chrono::steady_clock::now() + 10s;
  const auto all_served = [&] {
    for (const auto& s : served)
      if (s.load() == 0) return false;
    return true;
  };
  while (!all_served() && std::chrono::steady_clock::now() < settle_until) std::this_thread::sleep_for(1ms);
  const int ticks_then = ticker.ticks();
  while (ticker.ticks() < ticks_then + 2 && std::chrono::steady_clock::now() < settle_until)
    std::this_thread::sleep_for(1ms);
  ticker.forget_worst();
  const double control_ms = test::plain_thread_worst_late_ms(kRun);
  const double os_wait_ms = delays.two_worst_ms();
  stop.store(true);
  for (Fiber& f : consumers) f.join();
  ticker.stop();

  // Plus what the OS held this process's busy threads up for (RunDelays,
  // tests/ticker.h): on a loaded machine an always-runnable worker waits
  // far longer for a CPU than the sleeping control thread.
  // 2.5 slices, as issue 15 asks, and a generous margin: 60 ms and twice
  // the control's worst (the ticker goes through the timer thread and a
  // worker's thread, each of which the machine may hold up as long).
  // Without the checkpoints the lateness was the whole run. Under
  // ThreadSanitizer (kSlowdown) the 60 ms grow too: there the ticker was
  // once 125 ms late while the control's worst was 4 ms.
  const double bound_ms = 2.5 * std::chrono::duration<double, std::milli>(kSlice).count() +
                          60.0 * static_cast<double>(test::kSlowdown) + 2 * control_ms + os_wait_ms;
  EXPECT_LE(ticker.worst_late_ms(), bound_ms)
      << "the ticker's worst lateness in ms, over " << ticker.ticks() << " ticks (a plain thread's: " << control_ms
      << " ms; the two longest waits for a CPU of this process's threads: " << os_wait_ms << " ms)";
  EXPECT_GE(ticker.ticks(), 10) << "the ticker hardly ran in " << kRun.count() << " ms";
  RecordProperty("worst_late_us", static_cast<int>(ticker.worst_late_ms() * 1000));
  RecordProperty("control_late_us", static_cast<int>(control_ms * 1000));
  int idle = 0;
  for (const auto& s : served) idle += s.load() == 0 ? 1 : 0;
  EXPECT_EQ(idle, 0) << idle << " of " << kConsumers << " consumers served nothing";
}

// Not more workers than this machine's 2 cores: then a worker's thread
// waits for a CPU as well, which no checkpoint can help.
INSTANTIATE_TEST_SUITE_P(Workers, NeverParkingConsumers, ::testing::Values(1u, 2u), test::worker_count_name);

// --- Each call on its own ------------------------------------------------

// One call that does not wait, repeated by a hog fiber (with whatever keeps
// it from ever waiting).
struct NonWaitingCall {
  std::string name;
  std::function<std::function<void()>()> make;  // per test: state, then the call
  friend void PrintTo(const NonWaitingCall& call, std::ostream* out) { *out << call.name; }
};

std::vector<NonWaitingCall> non_waiting_calls() {
  return {
      {"QueueTakeAndPut",
       [] {
         auto q = std::make_shared<BlockingQueue<int>>();
         q->put(1);
         return [q] { q->put(q->take()); };
       }},
      {"QueueOfferAndPoll",
       [] {
         auto q = std::make_shared<BlockingQueue<int>>(4);
         return [q] {
           (void)q->offer(1);
           (void)q->poll();
         };
       }},
      {"QueueDrainTo",
       [] {
         auto q = std::make_shared<BlockingQueue<int>>();
         return [q] {
           int sink[1];
           (void)q->drain_to(sink, 1);
         };
       }},
      {"MutexLockUnlock",
       [] {
         auto m = std::make_shared<Mutex>();
         return [m] {
           m->lock();
           m->unlock();
         };
       }},
      {"MutexTryLock",
       [] {
         auto m = std::make_shared<Mutex>();
         return [m] {
           if (m->try_lock()) m->unlock();
         };
       }},
      {"MutexTryLockFor",
       [] {
         auto m = std::make_shared<Mutex>();
         return [m] {
           if (m->try_lock_for(1s)) m->unlock();
         };
       }},
      {"SemaphoreReleaseAcquire",
       [] {
         auto s = std::make_shared<Semaphore>(0);
         return [s] {
           s->release();
           s->acquire();
         };
       }},
      {"SemaphoreTryAcquire",
       [] {
         auto s = std::make_shared<Semaphore>(0);
         return [s] { (void)s->try_acquire(); };
       }},
      {"ConditionVariableNotify",
       [] {
         auto cv = std::make_shared<ConditionVariable>();
         return [cv] {
           cv->notify_one();
           cv->notify_all();
         };
       }},
      {"WaitGroupAddDoneWait",
       [] {
         auto wg = std::make_shared<WaitGroup>();
         return [wg] {
           wg->add(1);
           wg->done();
           wg->wait();
         };
       }},
      {"LatchTryWaitAndWait",
       [] {
         auto latch = std::make_shared<Latch>(0);
         return [latch] {
           (void)latch->try_wait();
           latch->wait();
         };
       }},
      {"LatchCountDown",
       [] {
         auto latch = std::make_shared<Latch>(std::numeric_limits<std::int64_t>::max());
         return [latch] { latch->count_down(); };
       }},
      {"FutureGetWhenReady",
       [] {
         return [] {
           Promise<int> p;
           Future<int> f = p.get_future();
           p.set_value(1);
           (void)f.get();
         };
       }},
      {"IoWaitOnAReadyFd",
       [] {
         struct Pipe {
           int fds[2] = {-1, -1};
           Pipe() {
             if (::pipe(fds) != 0 || ::write(fds[1], "x", 1) != 1) throw std::runtime_error("pipe");
           }
           ~Pipe() {
             ::close(fds[0]);
             ::close(fds[1]);
           }
         };
         auto p = std::make_shared<Pipe>();
         return [p] {
           (void)io::wait_readable(p->fds[0]);
           (void)io::wait_writable(p->fds[1]);
         };
       }},
  };
}

class NonWaitingCallIsACheckpoint : public ::testing::TestWithParam<NonWaitingCall> {};

// On one worker, a hog that repeats the call must let a fiber queued
// behind it run: only a checkpoint in the call can.
TEST_P(NonWaitingCallIsACheckpoint, LetsAQueuedFiberRunOnOneWorker) {
  Scheduler sched(checkpoint_config(1, 2ms));
  const std::function<void()> call = GetParam().make();
  std::atomic<bool> started{false};
  std::atomic<bool> other_ran{false};
  std::atomic<bool> gave_up{false};
  Fiber hog = sched.spawn({.name = "hog"}, [&] {
    started.store(true);
    const auto give_up_at = Clock::now() + 5s;
    for (std::uint64_t n = 0; !other_ran.load(std::memory_order_relaxed); ++n) {
      call();
      if (n % 256 == 0 && Clock::now() > give_up_at) {
        gave_up.store(true);
        break;
      }
    }
  });
  while (!started.load()) std::this_thread::sleep_for(100us);
  Fiber other = sched.spawn({.name = "other"}, [&] { other_ran.store(true); });
  other.join();
  hog.join();
  EXPECT_FALSE(gave_up.load()) << GetParam().name << " never yielded to the fiber queued behind it in 5 s";
  EXPECT_GT(hog.counts().preempt, 0u);
}

INSTANTIATE_TEST_SUITE_P(Calls, NonWaitingCallIsACheckpoint, ::testing::ValuesIn(non_waiting_calls()),
                         [](const ::testing::TestParamInfo<NonWaitingCall>& info) { return info.param.name; });

// A request left pending when its fiber stops running (here: it finishes)
// is dropped then, not kept until the worker runs a fiber again: while any
// is pending, every checkpoint in the process takes the slow path.
TEST(Checkpoint, ARequestIsDroppedWhenItsFiberStopsRunning) {
  ASSERT_EQ(detail::pending_preempt_requests.load(), 0u) << "left over by an earlier test";
  {
    Scheduler sched(checkpoint_config(1, 1ms));
    Fiber hog = sched.spawn([] {
      // No checkpoint: the request stays pending while this runs.
      const auto give_up_at = Clock::now() + 10s;
      while (detail::pending_preempt_requests.load(std::memory_order_relaxed) == 0 && Clock::now() < give_up_at) {
      }
    });
    hog.join();
    // Dropped by the worker when it has nothing to run, or by sysmon when
    // it sees the worker idle (a request re-issued just after the first).
    const auto until = Clock::now() + 10s;
    while (detail::pending_preempt_requests.load() != 0 && Clock::now() < until) std::this_thread::sleep_for(1ms);
    EXPECT_EQ(detail::pending_preempt_requests.load(), 0u) << "after the hog finished, with its worker idle";
  }
  EXPECT_EQ(detail::pending_preempt_requests.load(), 0u) << "after the scheduler is gone";
}

}  // namespace
}  // namespace weft
