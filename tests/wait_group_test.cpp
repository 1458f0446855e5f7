// weft::WaitGroup and weft::Latch.
#include <weft/weft.h>

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "sync_support.h"

namespace weft {
namespace {

using namespace std::chrono_literals;

class WaitGroupTest : public test::SyncTest {};

TEST(WaitGroup, BelowZeroIsAClearError) {
  WaitGroup wg;
  wg.add(1);
  wg.done();
  EXPECT_THROW(wg.done(), std::logic_error);
  EXPECT_EQ(wg.count(), 0);
  wg.wait();  // zero: returns at once
}

// A count past INT64_MAX is an error of its own, and the counter stays;
// the sum was computed with signed overflow (undefined) and reported as
// going below zero, and -INT64_MIN overflowed again in the message.
TEST(WaitGroup, AnOverflowIsAClearError) {
  const auto message = [](WaitGroup& wg, std::int64_t delta) {
    try {
      wg.add(delta);
    } catch (const std::logic_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  WaitGroup wg;
  wg.add(1);
  EXPECT_EQ(message(wg, INT64_MAX), "weft::WaitGroup: counter would overflow (1 + 9223372036854775807)");
  EXPECT_EQ(message(wg, INT64_MIN), "weft::WaitGroup: counter would go below zero (1 - 9223372036854775808)");
  EXPECT_EQ(message(wg, -2), "weft::WaitGroup: counter would go below zero (1 - 2)");
  EXPECT_EQ(wg.count(), 1);
  wg.done();
}

TEST(Latch, MisuseIsAClearError) {
  EXPECT_THROW(Latch{-1}, std::invalid_argument);
  Latch latch{2};
  EXPECT_THROW(latch.count_down(3), std::logic_error);
  EXPECT_FALSE(latch.try_wait());
  latch.count_down(2);
  EXPECT_TRUE(latch.try_wait());
}

TEST_P(WaitGroupTest, WaitsForEveryDone) {
  WaitGroup wg;
  std::atomic<int> finished{0};
  constexpr int tasks = 16;
  wg.add(tasks);
  std::vector<std::function<void()>> bodies(tasks, [&] {
    this_fiber::sleep_for(1ms);
    finished.fetch_add(1);
    wg.done();
  });
  bodies.push_back([&] {
    wg.wait();
    EXPECT_EQ(finished.load(), tasks);
  });
  run_callers(bodies);
}

TEST_P(WaitGroupTest, WaitForTimesOutThenSucceeds) {
  WaitGroup wg;
  wg.add(1);
  std::atomic<bool> timed_out{false};
  run_callers({[&] {
                 EXPECT_FALSE(wg.wait_for(2ms));
                 timed_out.store(true);
                 EXPECT_TRUE(wg.wait_for(10s));
               },
               [&] {
                 while (!timed_out.load()) this_fiber::sleep_for(100us);
                 wg.done();
               }});
}

TEST_P(WaitGroupTest, LatchReleasesEveryWaiterAtZero) {
  constexpr int parties = 6;
  Latch latch{parties};
  std::atomic<int> arrived{0};
  std::vector<std::function<void()>> bodies(parties, [&] {
    arrived.fetch_add(1);
    latch.arrive_and_wait();
    EXPECT_EQ(arrived.load(), parties);
  });
  run_callers(bodies);
  EXPECT_TRUE(latch.try_wait());
}

WEFT_SYNC_PARAMS(WaitGroupTest);

// Destroyed while a fiber waits on it: it aborts, naming itself, the caller
// and the waiter (before, the waiter stayed parked on freed memory).
TEST(WaitGroupDeathTest, WaitGroupDestroyedWhileWaitedOnAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Scheduler s{test::config_with(2)};
        auto* wg = new WaitGroup;
        wg->add(1);
        s.spawn({.name = "waiter"}, [wg] { wg->wait(); }).detach();
        if (!test::wait_until_parked_on(s, "weft::WaitGroup")) std::_Exit(2);
        delete wg;
      },
      "weft::WaitGroup@0x[0-9a-f]+ destroyed by thread [0-9]+ while 1 caller\\(s\\) wait on it: fiber \"waiter\" "
      "#[0-9]+");
}

// Destroyed while a fiber waits on it: it aborts, naming itself, the caller
// and the waiter (before, the waiter stayed parked on freed memory).
TEST(WaitGroupDeathTest, LatchDestroyedWhileWaitedOnAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Scheduler s{test::config_with(2)};
        auto* latch = new Latch{1};
        s.spawn({.name = "waiter"}, [latch] { latch->wait(); }).detach();
        if (!test::wait_until_parked_on(s, "weft::Latch")) std::_Exit(2);
        delete latch;
      },
      "weft::Latch@0x[0-9a-f]+ destroyed by thread [0-9]+ while 1 caller\\(s\\) wait on it: fiber \"waiter\" #[0-9]+");
}

}  // namespace
}  // namespace weft
