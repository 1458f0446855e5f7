// park/unpark on its own (include/weft/detail/park.h): one CAS decides between a timeout
// and a wake, for fibers and plain threads alike.
#include <weft/detail/park.h>
#include <weft/weft.h>

#include <atomic>
#include <thread>
#include <vector>

#include "test_support.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using detail::Clock;
using detail::SpinLock;
using detail::Waiter;
using detail::WaitList;
using detail::WakeReason;

// A one-slot mailbox built the way every sync type is built.
struct Mailbox {
  SpinLock lock;
  WaitList waiters;

  WakeReason wait(Clock::time_point deadline) {
    Waiter waiter;
    lock.lock();
    waiters.push_back(waiter);
    const WakeReason reason = detail::park(waiter, &lock, {"test::Mailbox", this, "wait"}, deadline);
    if (reason == WakeReason::timed_out) {
      std::lock_guard guard(lock);
      waiters.remove(waiter);
    }
    return reason;
  }
  // Wakes one waiter; false if none could be woken.
  bool notify() {
    std::lock_guard guard(lock);
    while (Waiter* w = waiters.pop_front()) {
      if (detail::unpark(*w)) return true;
    }
    return false;
  }
};

class ParkTest : public test::WorkersTest {};

TEST_P(ParkTest, FiberTimesOutWhenNobodyWakesIt) {
  Mailbox box;
  sched()
      .spawn([&] {
        const auto start = Clock::now();
        EXPECT_EQ(box.wait(start + 2ms), WakeReason::timed_out);
        EXPECT_GE(Clock::now() - start, 2ms);
      })
      .join();
  EXPECT_TRUE(box.waiters.empty());
}

TEST_P(ParkTest, FiberIsWokenBeforeItsDeadline) {
  Mailbox box;
  std::atomic<bool> parked{false};
  Fiber waiter = sched().spawn([&] {
    parked.store(true);
    EXPECT_EQ(box.wait(Clock::now() + 1h), WakeReason::notified);
  });
  while (!parked.load() || !box.notify()) std::this_thread::yield();
  waiter.join();
}

TEST_P(ParkTest, ParkedFiberRecordsWhatItWaitsOn) {
  Mailbox box;
  Fiber waiter = sched().spawn({.name = "waits"}, [&] { box.wait(detail::no_deadline); });
  bool seen = false;
  while (!seen) {
    for (const auto& f : sched().snapshot().fibers) {
      if (f.name == "waits" && f.state == "parked") {
        EXPECT_EQ(f.wait_kind, "test::Mailbox");
        EXPECT_EQ(f.wait_object, &box);
        EXPECT_EQ(f.wait_operation, "wait");
        seen = true;
      }
    }
    std::this_thread::yield();
  }
  while (!box.notify()) std::this_thread::yield();
  waiter.join();
  EXPECT_EQ(waiter.counts().park, 1u);
}

// Timeout against notify in a tight loop: every round ends with exactly one
// of them winning, and a notify that loses is seen to lose.
TEST_P(ParkTest, TimeoutRacesNotifyWithoutLostOrDoubleWakes) {
  const int rounds = static_cast<int>(test::scaled(20'000));
  Mailbox box;
  std::atomic<int> round_started{-1};
  std::atomic<int> woken{0}, timed_out{0}, notifies_won{0};
  Fiber waiter = sched().spawn([&] {
    for (int i = 0; i < rounds; ++i) {
      round_started.store(i);
      const auto reason = box.wait(Clock::now() + std::chrono::microseconds(i % 50));
      (reason == WakeReason::notified ? woken : timed_out).fetch_add(1);
    }
  });
  std::thread notifier([&] {
    for (int i = 0; i < rounds; ++i) {
      while (round_started.load() < i) std::this_thread::yield();
      if (box.notify()) notifies_won.fetch_add(1);
    }
  });
  waiter.join();
  notifier.join();
  EXPECT_EQ(woken.load() + timed_out.load(), rounds);
  EXPECT_EQ(woken.load(), notifies_won.load());
  EXPECT_TRUE(box.waiters.empty());
}

TEST(Park, PlainThreadWaitsInTheKernel) {
  Mailbox box;
  EXPECT_EQ(box.wait(Clock::now() + 2ms), WakeReason::timed_out);
  std::atomic<bool> parked{false};
  std::thread waiter([&] {
    parked.store(true);
    EXPECT_EQ(box.wait(detail::no_deadline), WakeReason::notified);
  });
  while (!parked.load() || !box.notify()) std::this_thread::yield();
  waiter.join();
}

TEST(Park, FiberWakesThreadAndThreadWakesFiber) {
  Scheduler s{test::config_with(2)};
  Mailbox to_thread, to_fiber;
  std::atomic<int> step{0};
  std::thread thread([&] {
    EXPECT_EQ(to_thread.wait(detail::no_deadline), WakeReason::notified);
    step.store(1);
    while (!to_fiber.notify()) std::this_thread::yield();
  });
  s.spawn([&] {
     while (!to_thread.notify()) this_fiber::yield();
     EXPECT_EQ(to_fiber.wait(detail::no_deadline), WakeReason::notified);
     EXPECT_EQ(step.load(), 1);
   }).join();
  thread.join();
}

WEFT_WORKER_COUNTS(ParkTest);

}  // namespace
}  // namespace weft
