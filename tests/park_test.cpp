// park/unpark on its own (include/weft/detail/park.h): one CAS decides between a timeout
// and a wake, for fibers and plain threads alike.
#include <weft/detail/park.h>
#include <weft/weft.h>

#include <atomic>
#include <cmath>
#include <memory>
#include <stdexcept>
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

// deadline_after and to_deadline saturate for every Rep and Period. Before
// they did, hours::max() in sleep_for wrapped to a deadline in the past.
TEST(Deadline, HugeTimeoutsMeanNever) {
  using namespace std::chrono;
  EXPECT_EQ(detail::deadline_after(hours::max()), detail::no_deadline);
  EXPECT_EQ(detail::deadline_after(nanoseconds::max()), detail::no_deadline);
  EXPECT_EQ(detail::deadline_after(duration<std::uint64_t, std::milli>(~std::uint64_t{0})), detail::no_deadline);
  EXPECT_EQ(detail::deadline_after(duration<double>(1e300)), detail::no_deadline);
  EXPECT_EQ(detail::deadline_after(duration<double>(HUGE_VAL)), detail::no_deadline);
  EXPECT_EQ(detail::deadline_after(duration<float, std::ratio<3600>>(1e30f)), detail::no_deadline);
  EXPECT_EQ(detail::to_deadline(time_point<steady_clock, hours>::max()), detail::no_deadline);
  // system_clock's max is 234 years after 2026: far, but not "never".
  EXPECT_GT(detail::to_deadline(system_clock::time_point::max()), Clock::now() + hours(24 * 365 * 200));
  EXPECT_EQ(detail::to_deadline(time_point<system_clock, hours>::max()), detail::no_deadline);
}

TEST(Deadline, NegativeAndPastMeanNow) {
  using namespace std::chrono;
  const auto before = Clock::now();
  for (const Clock::time_point d :
       {detail::deadline_after(hours::min()), detail::deadline_after(nanoseconds::min()),
        detail::deadline_after(duration<double>(-HUGE_VAL)), detail::deadline_after(duration<unsigned>(0)),
        detail::to_deadline(system_clock::time_point::min()),
        detail::to_deadline(time_point<steady_clock, hours>::min()),
        detail::to_deadline(steady_clock::time_point::min())}) {
    EXPECT_GE(d, before);
    EXPECT_LE(d, Clock::now());
  }
}

TEST(Deadline, OrdinaryTimeoutsAreExactAndRoundUp) {
  using namespace std::chrono;
  const auto before = Clock::now();
  const auto five = detail::deadline_after(duration<unsigned>(5));
  const auto after = Clock::now();
  EXPECT_GE(five, before + 5s);
  EXPECT_LE(five, after + 5s);
  // A positive timeout smaller than the clock's tick still lies ahead.
  // (The clock is read first: the operands of > may be evaluated in either
  // order, and Clang reads the later clock after the call.)
  const auto just_before = Clock::now();
  EXPECT_GT(detail::deadline_after(duration<double>(1e-12)), just_before);
  EXPECT_GE(detail::deadline_after(duration<double>(1e-12)) - Clock::now(), -1s);  // a thread held off its CPU
  const auto in_a_minute = detail::to_deadline(system_clock::now() + 60s);
  EXPECT_GE(in_a_minute, before + 59s);
  EXPECT_LE(in_a_minute, Clock::now() + 61s);
  const auto same_clock = steady_clock::now() + 123456789ns;
  EXPECT_EQ(detail::to_deadline(same_clock), same_clock);
}

TEST(Deadline, NaNIsRefused) {
  using namespace std::chrono;
  EXPECT_THROW(detail::deadline_after(duration<double>(std::nan(""))), std::invalid_argument);
  EXPECT_THROW(detail::to_deadline(time_point<system_clock, duration<double>>(duration<double>(std::nan("")))),
               std::invalid_argument);
}

// this_fiber::sleep_for(hours::max()) used to return at once, in a fiber
// and on a thread. On a thread: it must still be asleep a while later.
TEST(Deadline, ThreadSleepForMaxSleeps) {
  auto returned = std::make_shared<std::atomic<bool>>(false);
  std::thread([returned] {
    this_fiber::sleep_for(std::chrono::hours::max());
    returned->store(true);
  }).detach();
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(returned->load()) << "sleep_for(hours::max()) returned on a thread";
}

// In a fiber: the fiber is still asleep when shutdown gives up on it.
TEST(DeadlineDeathTest, FiberSleepForMaxSleeps) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Config config = test::config_with(1);
        config.shutdown_grace = 100ms;
        Scheduler s{config};
        s.spawn({.name = "max"}, [] { this_fiber::sleep_for(std::chrono::hours::max()); }).detach();
        s.spawn({.name = "max-until"}, [] {
           this_fiber::sleep_until(std::chrono::time_point<std::chrono::system_clock, std::chrono::hours>::max());
         }).detach();
      },
      "2 fiber\\(s\\) are still alive.*\"max");
}

}  // namespace
}  // namespace weft
