// Which sleeper a publisher wakes (sched/idle.h): the most recent futex
// sleeper that went to sleep on another CPU than the publisher's, else the
// most recent futex sleeper; the one polling in epoll_wait only when no
// other sleeps. The slots here sleep nowhere: prepare_sleep lists them and
// the wake's store to a slot's wake word says which one was chosen.
#include "sched/idle.h"

#include <sched.h>

#include <vector>

#include "sched/idle_poller.h"
#include "test_support.h"

namespace weft::detail {
namespace {

// Counts the wakes meant for a slot polling in epoll_wait.
class CountingPoller final : public IdlePoller {
 public:
  int wakes = 0;
  bool has_waiters() const noexcept override { return false; }
  bool poll_now() noexcept override { return false; }
  void poll_if_stale(std::chrono::nanoseconds) noexcept override {}
  bool try_begin_block(unsigned) noexcept override { return false; }
  void block(Clock::time_point) noexcept override {}
  void end_block() noexcept override {}
  void wake() noexcept override { ++wakes; }
  PollerSnapshot view() const noexcept override { return {}; }
};

// Moves the calling thread between two CPUs it may run on, and back to
// where it was allowed at the end.
class CpuPinning {
 public:
  CpuPinning() {
    ::sched_getaffinity(0, sizeof(allowed_), &allowed_);
    for (int cpu = 0; cpu < CPU_SETSIZE && cpus_.size() < 2; ++cpu)
      if (CPU_ISSET(cpu, &allowed_)) cpus_.push_back(cpu);
  }
  ~CpuPinning() { ::sched_setaffinity(0, sizeof(allowed_), &allowed_); }
  CpuPinning(const CpuPinning&) = delete;
  CpuPinning& operator=(const CpuPinning&) = delete;

  bool two_cpus() const { return cpus_.size() == 2; }
  // Runs the calling thread on the first (0) or second (1) CPU.
  void move_to(int which) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus_[which], &one);
    ASSERT_EQ(::sched_setaffinity(0, sizeof(one), &one), 0);
    ASSERT_EQ(::sched_getcpu(), cpus_[which]);
  }

 private:
  cpu_set_t allowed_{};
  std::vector<int> cpus_;
};

bool woken(const IdleSlot& slot) { return slot.wake_word.load() == 1; }

class IdleWorkersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!pinning.two_cpus()) GTEST_SKIP() << "needs two CPUs to run on";
  }
  CpuPinning pinning;
  CountingPoller poller;
  IdleWorkers idle{2, 2};
};

// A plain thread spawning two fibers woke the worker that had last slept on
// its own CPU: Linux put the worker there and ran it at once, and the
// second spawn waited for the next tick while the other CPU sat idle.
TEST_F(IdleWorkersTest, WakesASleeperFromAnotherCpuBeforeAMoreRecentOneFromThisCpu) {
  IdleSlot elsewhere, here;
  pinning.move_to(1);
  idle.prepare_sleep(elsewhere);
  pinning.move_to(0);
  idle.prepare_sleep(here);  // the most recent sleeper
  idle.notify_work();
  EXPECT_TRUE(woken(elsewhere));
  EXPECT_FALSE(woken(here));
  idle.notify_work();  // the next wake takes the one left
  EXPECT_TRUE(woken(here));
}

TEST_F(IdleWorkersTest, WithEverySleeperFromThisCpuWakesTheMostRecent) {
  IdleSlot older, recent;
  pinning.move_to(0);
  idle.prepare_sleep(older);
  idle.prepare_sleep(recent);
  idle.notify_work();
  EXPECT_TRUE(woken(recent));
  EXPECT_FALSE(woken(older));
}

// The polling sleeper watches the fds where it is: a futex sleeper is woken
// before it even when only the polling one slept on another CPU.
TEST_F(IdleWorkersTest, APollingSleeperIsWokenOnlyWhenNoOtherSleeps) {
  idle.set_poller(&poller);
  IdleSlot polling, futex_sleeper;
  pinning.move_to(1);
  idle.prepare_sleep(polling);
  ASSERT_TRUE(idle.begin_poll(polling));
  pinning.move_to(0);
  idle.prepare_sleep(futex_sleeper);
  idle.notify_work();
  EXPECT_TRUE(woken(futex_sleeper));
  EXPECT_EQ(poller.wakes, 0);
  idle.notify_work();
  EXPECT_TRUE(woken(polling));
  EXPECT_EQ(poller.wakes, 1);
}

}  // namespace
}  // namespace weft::detail
