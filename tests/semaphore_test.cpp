// weft::Semaphore.
#include <weft/weft.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "sync_support.h"

namespace weft {
namespace {

using namespace std::chrono_literals;

class SemaphoreTest : public test::SyncTest {};

TEST(Semaphore, CountsPermits) {
  Semaphore s{2};
  EXPECT_TRUE(s.try_acquire());
  EXPECT_TRUE(s.try_acquire());
  EXPECT_FALSE(s.try_acquire());
  s.release(3);
  EXPECT_EQ(s.available(), 3u);
}

// A release past the count's range is refused, the count kept: it wrapped
// to a few permits, silently.
TEST(Semaphore, AReleasePastTheCountsRangeThrowsAndKeepsTheCount) {
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  Semaphore s{kMax - 1};
  s.release(1);
  EXPECT_EQ(s.available(), kMax);
  EXPECT_THROW(s.release(2), std::logic_error);
  EXPECT_EQ(s.available(), kMax);
}

TEST_P(SemaphoreTest, BoundsConcurrency) {
  Semaphore slots{3};
  std::atomic<int> inside{0}, peak{0};
  std::vector<std::function<void()>> bodies(12, [&] {
    for (int i = 0; i < 50; ++i) {
      slots.acquire();
      const int now = inside.fetch_add(1) + 1;
      int seen = peak.load();
      while (now > seen && !peak.compare_exchange_weak(seen, now)) {
      }
      this_fiber::yield();
      inside.fetch_sub(1);
      slots.release();
    }
  });
  run_callers(bodies);
  EXPECT_LE(peak.load(), 3);
  EXPECT_GE(peak.load(), 1);
  EXPECT_EQ(slots.available(), 3u);
}

TEST_P(SemaphoreTest, TimeoutsFailWhenNothingArrivesAndSucceedWhenSomethingDoes) {
  Semaphore s{0};
  std::atomic<bool> timed_out{false};
  run_callers({[&] {
                 EXPECT_FALSE(s.try_acquire_for(2ms));
                 timed_out.store(true);
                 EXPECT_TRUE(s.try_acquire_for(10s));
               },
               [&] {
                 while (!timed_out.load()) this_fiber::sleep_for(100us);
                 s.release();
               }});
  EXPECT_EQ(s.available(), 0u);
}

// try_acquire_for's timeout against release in a tight loop: permits are
// neither lost nor duplicated.
TEST_P(SemaphoreTest, TimeoutRacesRelease) {
  const int rounds = static_cast<int>(test::scaled(100'000));
  Semaphore s{0};
  int acquired = 0;
  run_callers({[&] {
                 for (int i = 0; i < rounds; ++i) {
                   s.release();
                   if (i % 64 == 0) this_fiber::yield();
                 }
               },
               [&] {
                 int attempts = 0;
                 while (acquired < rounds) {
                   if (s.try_acquire_for(std::chrono::microseconds(++attempts % 20))) ++acquired;
                 }
               }});
  EXPECT_EQ(acquired, rounds);
  EXPECT_EQ(s.available(), 0u);
}

WEFT_SYNC_PARAMS(SemaphoreTest);

// Destroyed while a fiber waits on it: it aborts, naming itself, the caller
// and the waiter (before, the waiter stayed parked on freed memory).
TEST(SemaphoreDeathTest, SemaphoreDestroyedWhileWaitedOnAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Scheduler s{test::config_with(2)};
        auto* sem = new Semaphore{0};
        s.spawn({.name = "waiter"}, [sem] { sem->acquire(); }).detach();
        if (!test::wait_until_parked_on(s, "weft::Semaphore")) std::_Exit(2);
        delete sem;
      },
      "weft::Semaphore@0x[0-9a-f]+ destroyed by thread [0-9]+ while 1 caller\\(s\\) wait on it: fiber \"waiter\" "
      "#[0-9]+");
}

}  // namespace
}  // namespace weft
