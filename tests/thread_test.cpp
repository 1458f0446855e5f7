// weft::Thread in both modes: std::thread's contract (join, detach,
// joinable, moves, terminate on a dropped joinable handle or an escaping
// exception), its name, and where it runs.
#include <gtest/gtest.h>
#include <pthread.h>
#include <weft/weft.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>

#include "pool_support.h"

namespace weft {
namespace {

using namespace std::chrono_literals;

class ThreadTest : public test::ModeTest {
 protected:
  ThreadOptions opts(std::string_view name) {
    return ThreadOptions{.name = name, .mode = mode(), .scheduler = &sched()};
  }
};

TEST_P(ThreadTest, JoinWaitsForTheFunctionWithItsArguments) {
  int result = 0;
  std::string seen;
  Thread t{opts("adder"),
           [&](int a, std::string s) {
             this_fiber::sleep_for(1ms);
             result = a + 1;
             seen = std::move(s);
           },
           41, std::string("copied")};
  EXPECT_TRUE(t.joinable());
  EXPECT_EQ(t.runs_on_fiber(), fibers());
  EXPECT_EQ(t.name(), "adder");
  t.join();
  EXPECT_FALSE(t.joinable());
  EXPECT_EQ(result, 42);
  EXPECT_EQ(seen, "copied");
}

TEST_P(ThreadTest, RunsAsAFiberExactlyInFiberMode) {
  bool on_fiber = !fibers();
  std::string name;
  Thread t{opts("conn-7"), [&] {
             on_fiber = this_fiber::is_fiber();
             if (on_fiber) {
               name = this_fiber::name();
             } else {
               char buf[16] = {};
               pthread_getname_np(pthread_self(), buf, sizeof buf);
               name = buf;
             }
           }};
  t.join();
  EXPECT_EQ(on_fiber, fibers());
  EXPECT_EQ(name, "conn-7");
}

TEST_P(ThreadTest, DetachedRunsToTheEnd) {
  // Shared: the detached side may still be inside count_down() (waking
  // this waiter) when wait_for returns, so the latch must outlive both.
  auto finished = std::make_shared<Latch>(1);
  Thread t{opts("detached"), [finished] {
             this_fiber::sleep_for(1ms);
             finished->count_down();
           }};
  t.detach();
  EXPECT_FALSE(t.joinable());
  EXPECT_TRUE(finished->wait_for(30s));
}

TEST_P(ThreadTest, MovesCarryTheHandle) {
  std::atomic<int> ran{0};
  Thread a{opts("moved"), [&] { ran.fetch_add(1); }};
  Thread b{std::move(a)};
  EXPECT_FALSE(a.joinable());
  EXPECT_FALSE(a.runs_on_fiber());
  EXPECT_TRUE(b.joinable());
  EXPECT_EQ(b.runs_on_fiber(), fibers());
  Thread c;
  c = std::move(b);
  c.join();
  EXPECT_EQ(ran.load(), 1);
}

TEST_P(ThreadTest, MisuseThrowsStdThreadsErrors) {
  Thread empty;
  EXPECT_THROW(empty.join(), std::system_error);
  EXPECT_THROW(empty.detach(), std::system_error);
  Thread t{opts("once"), [] {}};
  t.join();
  try {
    t.join();
    FAIL();
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), std::errc::invalid_argument);
  }
  EXPECT_THROW(Thread(ThreadOptions{.name = "", .mode = mode(), .scheduler = &sched()}, [] {}), std::invalid_argument);
}

TEST_P(ThreadTest, JoiningItselfThrows) {
  Thread t;
  Latch started{1};
  std::atomic<bool> threw{false};
  t = Thread{opts("self"), [&] {
               started.wait();
               try {
                 t.join();
               } catch (const std::system_error& e) {
                 threw = e.code() == std::errc::resource_deadlock_would_occur;
               }
             }};
  started.count_down();
  // The body touches `t` only after the assignment above is complete.
  ASSERT_TRUE(test::eventually([&] { return threw.load(); }));
  t.join();
}

TEST_P(ThreadTest, DroppingAJoinableThreadTerminates) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const ThreadOptions o = opts("dropped");
  EXPECT_DEATH({ Thread t(o, [] { this_fiber::sleep_for(1s); }); },
               "a joinable weft::Thread \\(\"dropped\"\\) was destroyed; join or detach it first");
}

TEST_P(ThreadTest, AnEscapingExceptionTerminates) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const ThreadOptions o = opts("thrower");
  EXPECT_DEATH(
      {
        Thread t(o, [] { throw std::runtime_error("escaped"); });
        t.join();
      },
      "");
}

WEFT_MODE_PARAMS(ThreadTest);

}  // namespace
}  // namespace weft
