// For the pool and thread tests: every test body runs in both modes, on
// schedulers of 1, 2 and 4 workers, with the mode fixed in code
// (RunMode::threads / fibers) so that WEFT_FIBERS in the test's own
// environment cannot change what is tested.
#pragma once

#include <unistd.h>
#include <weft/weft.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
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

// Child processes for what only a fresh process shows (the environment is
// read once; static destructors at exit): this test binary again, running
// only `test`, with `env` ("NAME=value ...") set and WEFT_TEST_CHILD=`mode`.
// Returns its output and sets `status` to its wait status.
inline std::string run_child(const std::string& mode, const std::string& env, const std::string& test, int& status) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return "readlink /proc/self/exe failed";
  const std::string command = "WEFT_TEST_CHILD=" + mode + " " + env + " WEFT_DUMP=0 '" +
                              std::string(self, static_cast<std::size_t>(n)) + "' --gtest_filter=" + test + " 2>&1";
  std::FILE* child = popen(command.c_str(), "r");
  if (child == nullptr) return "popen failed";
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, child) != nullptr) out += buf;
  status = pclose(child);
  return out;
}

// True in a child started by run_child with this mode; the child-side tests
// skip themselves otherwise.
inline bool child_mode(const char* mode) {
  const char* value = std::getenv("WEFT_TEST_CHILD");
  return value != nullptr && std::string(value) == mode;
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
