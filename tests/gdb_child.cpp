// The process that tests/gdb_test.sh inspects with gdb, live and as a core
// file: two schedulers whose fibers wait in known places, each in a
// function of its own that the test looks for in the fiber's backtrace.
//
//   "gdb-child", 2 workers:
//     queue-taker   parked on weft::BlockingQueue (take) in park_in_queue_take_for_gdb()
//     mutex-waiter  parked on weft::Mutex (lock) in park_in_mutex_lock_for_gdb(),
//                   the mutex held by the main thread
//     sleeper       parked in weft::this_fiber (sleep) in park_in_sleep_for_gdb()
//     (no name)     parked on weft::Fiber (join), joining the sleeper
//     blocker       running: blocks its worker's thread in a system call, in
//                   block_thread_for_gdb()
//   "gdb-second", 1 worker:
//     other-taker   parked on weft::BlockingQueue (take) in park_in_queue_take_for_gdb()
//
// Once all of them are there it prints one line, "ready pid=<pid> ..." with
// the fibers' ids and the primitives' addresses, and waits to be killed
// (for at most 10 minutes, in case the test that started it is gone).
// Dumps are off: gdb needs no dump server.
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <weft/detail/raw_syscall.h>
#include <weft/weft.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <thread>

namespace {

using namespace std::chrono_literals;

// A call that is a function's last act can become a jump that leaves no
// frame (a sibling call): the empty asm after it keeps the frame, as real
// code after the call would.
void keep_frame() { asm volatile("" ::: "memory"); }

[[gnu::noinline]] int park_in_queue_take_for_gdb(weft::BlockingQueue<int>& queue) {
  const int item = queue.take();
  keep_frame();
  return item;
}

[[gnu::noinline]] void park_in_mutex_lock_for_gdb(weft::Mutex& mutex) {
  mutex.lock();
  keep_frame();
  mutex.unlock();
}

[[gnu::noinline]] void park_in_sleep_for_gdb() {
  weft::this_fiber::sleep_for(1h);
  keep_frame();
}

[[gnu::noinline]] void block_thread_for_gdb() {
  // A raw system call, which the libc hooks do not turn into a park: the
  // fiber stays running, its worker's thread blocked in the kernel.
  const timespec hour{3600, 0};
  weft::detail::raw_syscall(SYS_nanosleep, &hour, nullptr);
  keep_frame();
}

int count_where_expected(const weft::SchedulerSnapshot& snap) {
  int ready = 0;
  for (const auto& f : snap.fibers) {
    if (f.state == "running" && f.name == "blocker") ++ready;
    if (f.state != "parked") continue;
    if (f.wait_kind == "weft::BlockingQueue" || f.wait_kind == "weft::Mutex" || f.wait_kind == "weft::Fiber" ||
        f.wait_kind == "weft::this_fiber")
      ++ready;
  }
  return ready;
}

}  // namespace

int main() {
  // Yama's ptrace_scope 1 lets only ancestors attach; the test's gdb and
  // gcore are not ours.
  ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  ::alarm(600);

  weft::Config config;
  config.name = "gdb-child";
  config.workers = 2;
  config.dump = false;
  auto* sched = new weft::Scheduler(config);  // never destroyed: the process is killed
  config.name = "gdb-second";
  config.workers = 1;
  auto* second = new weft::Scheduler(config);

  static weft::BlockingQueue<int> never_fed, never_fed_either;
  static weft::Mutex mutex;
  mutex.lock();  // held by this plain thread for good

  static weft::Fiber taker = sched->spawn({.name = "queue-taker"}, [] { park_in_queue_take_for_gdb(never_fed); });
  static weft::Fiber waiter = sched->spawn({.name = "mutex-waiter"}, [] { park_in_mutex_lock_for_gdb(mutex); });
  static weft::Fiber sleeper = sched->spawn({.name = "sleeper"}, [] { park_in_sleep_for_gdb(); });
  static weft::Fiber joiner = sched->spawn([] { sleeper.join(); });
  static weft::Fiber blocker = sched->spawn({.name = "blocker"}, [] {
    for (;;) block_thread_for_gdb();
  });
  static weft::Fiber other =
      second->spawn({.name = "other-taker"}, [] { park_in_queue_take_for_gdb(never_fed_either); });

  while (count_where_expected(sched->snapshot()) != 5 || count_where_expected(second->snapshot()) != 1)
    std::this_thread::sleep_for(1ms);
  std::printf(
      "ready pid=%d queue=%p mutex=%p queue-taker=%llu mutex-waiter=%llu sleeper=%llu joiner=%llu "
      "blocker=%llu other-taker=%llu\n",
      static_cast<int>(::getpid()), static_cast<void*>(&never_fed), static_cast<void*>(&mutex),
      static_cast<unsigned long long>(taker.id()), static_cast<unsigned long long>(waiter.id()),
      static_cast<unsigned long long>(sleeper.id()), static_cast<unsigned long long>(joiner.id()),
      static_cast<unsigned long long>(blocker.id()), static_cast<unsigned long long>(other.id()));
  std::fflush(stdout);
  // Blocked in read(), not pause(): with libc's debug information the
  // innermost frame of this thread, which gdb selects, is an inlined one,
  // and weft-bt must see past it.
  int never_written[2];
  if (::pipe(never_written) != 0) return 1;
  char byte;
  for (;;) (void)::read(never_written[0], &byte, 1);
}
