// weft::Promise / weft::Future.
#include <weft/weft.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>

#include "sync_support.h"

namespace weft {
namespace {

using namespace std::chrono_literals;

class FutureTest : public test::SyncTest {};

TEST(Future, MisuseUsesStdFutureErrors) {
  Promise<int> p;
  Future<int> f = p.get_future();
  EXPECT_THROW(p.get_future(), std::future_error);
  p.set_value(1);
  EXPECT_THROW(p.set_value(2), std::future_error);
  EXPECT_EQ(f.get(), 1);
  EXPECT_FALSE(f.valid());
  EXPECT_THROW(f.get(), std::future_error);
}

// A value whose construction throws leaves the promise unset and usable.
TEST(Future, AValueThatThrowsLeavesThePromiseUsable) {
  struct Throws {
    bool fail;
    explicit Throws(bool f) : fail(f) {}
    Throws(const Throws& other) : fail(other.fail) {
      if (fail) throw std::runtime_error("Throws: copy throws");
    }
  };
  Promise<Throws> p;
  Future<Throws> f = p.get_future();
  const Throws bad{true};
  EXPECT_THROW(p.set_value(bad), std::runtime_error);
  EXPECT_FALSE(f.ready());
  test::completes_within(
      30s,
      [&] {
        p.set_value(Throws{false});
        EXPECT_FALSE(f.get().fail);
      },
      "a promise after a throwing set_value");
}

TEST_P(FutureTest, ValueCrossesFromOneCallerToAnother) {
  Promise<std::unique_ptr<std::string>> p;
  Future<std::unique_ptr<std::string>> f = p.get_future();
  run_callers({[&] {
                 this_fiber::sleep_for(1ms);
                 p.set_value(std::make_unique<std::string>("hello"));
               },
               [&] { EXPECT_EQ(*f.get(), "hello"); }});
}

TEST_P(FutureTest, ExceptionsAndVoid) {
  Promise<void> done;
  Future<void> done_future = done.get_future();
  Promise<int> failing;
  Future<int> failing_future = failing.get_future();
  run_callers({[&] {
                 done.set_value();
                 failing.set_exception(std::make_exception_ptr(std::runtime_error("no answer")));
               },
               [&] {
                 done_future.get();
                 EXPECT_THROW(failing_future.get(), std::runtime_error);
               }});
}

TEST_P(FutureTest, BrokenPromiseIsReported) {
  auto promise = std::make_unique<Promise<int>>();
  Future<int> f = promise->get_future();
  run_callers({[&] {
                 this_fiber::sleep_for(1ms);
                 promise.reset();  // destroyed without a value
               },
               [&] {
                 try {
                   f.get();
                   ADD_FAILURE() << "get() returned";
                 } catch (const std::future_error& e) {
                   EXPECT_EQ(e.code(), std::future_errc::broken_promise);
                 }
               }});
}

TEST_P(FutureTest, WaitForTimesOutThenSucceeds) {
  Promise<int> p;
  Future<int> f = p.get_future();
  std::atomic<bool> timed_out{false};
  run_callers({[&] {
                 EXPECT_EQ(f.wait_for(2ms), std::future_status::timeout);
                 timed_out.store(true);
                 EXPECT_EQ(f.wait_for(10s), std::future_status::ready);
                 EXPECT_EQ(f.get(), 7);
               },
               [&] {
                 while (!timed_out.load()) this_fiber::sleep_for(100us);
                 p.set_value(7);
               }});
}

WEFT_SYNC_PARAMS(FutureTest);

}  // namespace
}  // namespace weft
