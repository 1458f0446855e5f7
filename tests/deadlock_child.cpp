// The process that tests/dump_deadlock_test.cpp dumps: two deadlocks that
// never end, each in functions of its own, so that the report's stacks
// name them.
//
//   "left" and "right"   each holds a weft::Mutex and waits for the
//                        other's, in lock_both()
//   "ping" and "pong"    each joins the other, in join_peer(): a fiber
//                        joining itself through another
//   "bystander"          waits on a weft::Mutex that "left" holds: it waits
//                        for the deadlock, and is in no cycle
//
// It prints "ready" once all five wait where they should, then waits to be
// killed.
#include <weft/mutex.h>
#include <weft/weft.h>

#include <chrono>
#include <iostream>
#include <mutex>
#include <thread>

namespace {

using namespace std::chrono_literals;

void keep_frame() { asm volatile("" ::: "memory"); }

[[gnu::noinline]] void lock_both(weft::Mutex& mine, weft::Mutex& theirs, weft::Latch& both_hold) {
  std::lock_guard first(mine);
  both_hold.arrive_and_wait();
  std::lock_guard second(theirs);
  keep_frame();
}

[[gnu::noinline]] void join_peer(weft::Fiber& peer) {
  peer.join();
  keep_frame();
}

[[gnu::noinline]] void wait_for_left(weft::Mutex& held_by_left) {
  std::lock_guard guard(held_by_left);
  keep_frame();
}

// How many fibers wait on something another fiber holds.
int waiting(const weft::SchedulerSnapshot& snap) {
  int n = 0;
  for (const auto& f : snap.fibers)
    if (f.park_state == -1 && f.held_by_fiber != 0) ++n;
  return n;
}

}  // namespace

int main() {
  weft::Config config;
  config.name = "deadlock-child";
  config.workers = 2;
  config.max_threads = config.workers;  // no spares
  // Never destroyed: its fibers never finish, and the test kills us.
  auto* sched = new weft::Scheduler(config);
  auto* a = new weft::Mutex;
  auto* b = new weft::Mutex;
  auto* both_hold = new weft::Latch(2);
  sched->spawn({.name = "left"}, [=] { lock_both(*a, *b, *both_hold); }).detach();
  sched->spawn({.name = "right"}, [=] { lock_both(*b, *a, *both_hold); }).detach();

  auto* ping = new weft::Fiber;
  auto* pong = new weft::Fiber;
  auto* handles_set = new weft::Latch(1);
  *ping = sched->spawn({.name = "ping"}, [=] {
    handles_set->wait();
    join_peer(*pong);
  });
  *pong = sched->spawn({.name = "pong"}, [=] {
    handles_set->wait();
    join_peer(*ping);
  });
  handles_set->count_down();

  // Once "left" holds `a` (and the other three wait too).
  while (waiting(sched->snapshot()) < 4) std::this_thread::sleep_for(1ms);
  sched->spawn({.name = "bystander"}, [=] { wait_for_left(*a); }).detach();
  while (waiting(sched->snapshot()) < 5) std::this_thread::sleep_for(1ms);
  std::cout << "ready" << std::endl;
  for (;;) std::this_thread::sleep_for(1h);
}
