// For the pool and thread tests: every test body runs in both modes, on
// schedulers of 1, 2 and 4 workers, with the mode fixed in code
// (RunMode::threads / fibers) so that WEFT_FIBERS in the test's own
// environment cannot change what is tested.
#pragma once

#include <weft/weft.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <tuple>

#include "test_support.h"

namespace weft::test {

class ModeTest : public ::testing::TestWithParam<std::tuple<unsigned, RunMode>> {
 protected:
  void SetUp() override { sched_ = std::make_unique<Scheduler>(config_with(workers())); }
  void TearDown() override { sched_.reset(); }

  unsigned workers() const { return std::get<0>(GetParam()); }
  RunMode mode() const { return std::get<1>(GetParam()); }
  bool fibers() const { return mode() == RunMode::fibers; }
  Scheduler& sched() { return *sched_; }

  PoolOptions options(std::string name, unsigned threads) {
    PoolOptions o;
    o.name = std::move(name);
    o.threads = threads;
    o.mode = mode();
    o.scheduler = sched_.get();
    return o;
  }

 private:
  std::unique_ptr<Scheduler> sched_;
};

// Polls `done` until it holds or 30 s pass (a bound, not a timing assert).
inline bool eventually(const std::function<bool()>& done) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!done()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

inline std::string mode_test_name(const ::testing::TestParamInfo<std::tuple<unsigned, RunMode>>& info) {
  return std::to_string(std::get<0>(info.param)) + "_workers_" +
         (std::get<1>(info.param) == RunMode::fibers ? "fibers" : "threads");
}

#define WEFT_MODE_PARAMS(Fixture)                                                                                    \
  INSTANTIATE_TEST_SUITE_P(Modes, Fixture,                                                                           \
                           ::testing::Combine(::testing::Values(1u, 2u, 4u),                                         \
                                              ::testing::Values(::weft::RunMode::threads, ::weft::RunMode::fibers)), \
                           ::weft::test::mode_test_name)

}  // namespace weft::test
