// The process that tests/dump_test.cpp inspects with weft-dump: a scheduler
// whose fibers wait in known places, each under a name the test looks for.
//
//   queue-taker   parked on weft::BlockingQueue (take) in take_from_queue();
//                 never got an item
//   pong          parked on weft::BlockingQueue (take) after 100 round trips
//                 with the main thread
//   mutex-waiter  parked on weft::Mutex (lock) in lock_mutex(), held by the
//                 main thread
//   sleeper       parked in weft::this_fiber (sleep) in sleep_a_slice(), in
//                 100 ms slices, at least kSleeps of them
//
// With `--block`, a fifth fiber, "blocker", sleeps in a raw read(2) of a
// pipe (which no hook sees) in read_the_pipe(), holding its worker: what
// WEFT_TRACE_BLOCKING reports.
//
// It prints "ready" once all of them are where they should be, then waits
// for a line on stdin, releases everyone and exits 0: through the
// Scheduler's destructor, or with `--exit-early` through std::exit() while
// the scheduler still runs (the dump server's atexit path).
#include <sys/syscall.h>
#include <unistd.h>
#include <weft/blocking_queue.h>
#include <weft/detail/raw_syscall.h>
#include <weft/mutex.h>
#include <weft/weft.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

namespace {

using namespace std::chrono_literals;

constexpr int kRoundTrips = 100;
constexpr std::uint64_t kSleeps = 3;  // ready only once the sleeper has slept (and woken) a few times

// Where the fibers park, as named functions that are never inlined, so
// that each parked fiber's stack in the dump holds its own function's name
// (tests/dump_test.cpp looks for them). A call that is a function's last
// act can become a jump that leaves no frame (a sibling call, as in
// take_from_queue without its barrier): the empty asm after it keeps the
// frame, as real code after the call would.
void keep_frame() { asm volatile("" ::: "memory"); }

[[gnu::noinline]] int take_from_queue(weft::BlockingQueue<int>& queue) {
  const int item = queue.take();
  keep_frame();
  return item;
}

[[gnu::noinline]] void lock_mutex(weft::Mutex& mutex) { std::lock_guard guard(mutex); }

[[gnu::noinline]] void sleep_a_slice() {
  weft::this_fiber::sleep_for(100ms);
  keep_frame();
}

[[gnu::noinline]] void read_the_pipe(int fd) {
  char c;
  // The instruction itself: libc's syscall() is a hook's name (it passes a
  // read through, but stands in the stack between this frame and the kernel).
  [[maybe_unused]] const long n = weft::detail::raw_syscall(SYS_read, fd, &c, 1);
  keep_frame();
}

bool parked_where_expected(const weft::SchedulerSnapshot& snap) {
  int ready = 0;
  for (const auto& f : snap.fibers) {
    if (f.state != "parked") continue;
    if (f.name == "queue-taker" && f.wait_kind == "weft::BlockingQueue") ++ready;
    if (f.name == "pong" && f.wait_kind == "weft::BlockingQueue") ++ready;
    if (f.name == "mutex-waiter" && f.wait_kind == "weft::Mutex") ++ready;
    if (f.name == "sleeper" && f.wait_kind == "weft::this_fiber" && f.counts.park >= kSleeps) ++ready;
  }
  return ready == 4;
}

}  // namespace

int main(int argc, char** argv) {
  const bool exit_early = argc > 1 && std::string(argv[1]) == "--exit-early";
  const bool block = argc > 1 && std::string(argv[1]) == "--block";
  weft::Config config;
  config.name = "dump-child";
  config.workers = 2;
  // The tests count its workers, and a spare started while the machine is
  // loaded would be one more.
  config.max_threads = config.workers;        // no spares
  auto* sched = new weft::Scheduler(config);  // deleted only on the orderly path

  weft::BlockingQueue<int> never_fed;
  weft::BlockingQueue<int> pings, pongs;
  weft::Mutex mutex;
  std::atomic<bool> stopping{false};
  mutex.lock();  // held by this plain thread until the end

  weft::Fiber taker = sched->spawn({.name = "queue-taker"}, [&] {
    try {
      take_from_queue(never_fed);
    } catch (const weft::QueueClosed&) {
    }
  });
  weft::Fiber pong = sched->spawn({.name = "pong"}, [&] {
    try {
      for (;;) pongs.put(pings.take());
    } catch (const weft::QueueClosed&) {
    }
  });
  weft::Fiber waiter = sched->spawn({.name = "mutex-waiter"}, [&] { lock_mutex(mutex); });
  weft::Fiber sleeper = sched->spawn({.name = "sleeper"}, [&] {
    while (!stopping.load()) sleep_a_slice();
  });
  int blocker_pipe[2] = {-1, -1};
  weft::Fiber blocker;
  if (block) {
    if (::pipe(blocker_pipe) != 0) return 4;
    blocker = sched->spawn({.name = "blocker"}, [&] { read_the_pipe(blocker_pipe[0]); });
  }

  for (int i = 0; i < kRoundTrips; ++i) {
    pings.put(i);
    if (pongs.take() != i) return 3;
  }
  while (!parked_where_expected(sched->snapshot())) std::this_thread::sleep_for(1ms);
  std::cout << "ready" << std::endl;

  std::string line;
  std::getline(std::cin, line);
  if (exit_early) std::exit(0);  // the scheduler and its fibers are still there

  stopping.store(true);
  if (block) {
    if (::write(blocker_pipe[1], "x", 1) != 1) return 5;
    blocker.join();
  }
  never_fed.close();
  pings.close();
  mutex.unlock();
  taker.join();
  pong.join();
  waiter.join();
  sleeper.join();
  delete sched;
  return 0;
}
