// For the sync tests: every test runs over 1, 2, 4 and 8 workers and with
// its callers as fibers or as plain threads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "test_support.h"

namespace weft::test {

enum class Caller { fiber, thread };

class SyncTest : public ::testing::TestWithParam<std::tuple<unsigned, Caller>> {
 protected:
  void SetUp() override { sched_ = std::make_unique<Scheduler>(config_with(workers())); }
  void TearDown() override { sched_.reset(); }

  unsigned workers() const { return std::get<0>(GetParam()); }
  Caller caller() const { return std::get<1>(GetParam()); }
  Scheduler& sched() { return *sched_; }

  // Runs each function as a caller of the test's kind, concurrently, and
  // waits for all of them.
  void run_callers(const std::vector<std::function<void()>>& bodies) { run_as(caller(), bodies); }
  void run_as(Caller kind, const std::vector<std::function<void()>>& bodies) {
    if (kind == Caller::fiber) {
      std::vector<Fiber> fibers;
      for (const auto& body : bodies) fibers.push_back(sched().spawn(body));
      for (auto& f : fibers) f.join();
    } else {
      std::vector<std::thread> threads;
      for (const auto& body : bodies) threads.emplace_back(body);
      for (auto& t : threads) t.join();
    }
  }
  // One caller of the test's kind.
  void run_one(const std::function<void()>& body) { run_callers({body}); }

 private:
  std::unique_ptr<Scheduler> sched_;
};

// Runs `body` on a thread of its own and waits at most `bound` for it. A
// primitive left locked by an exception hangs its next caller: that is
// reported as a failure and the process ends, instead of hanging the run.
inline void completes_within(std::chrono::seconds bound, const std::function<void()>& body, const char* what) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread runner([body, done] {
    body();
    done->store(true);
  });
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (!done->load() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!done->load()) {
    std::fprintf(stderr, "FAILED: %s did not complete within %lld s (a lock left held?)\n", what,
                 static_cast<long long>(bound.count()));
    std::fflush(stderr);
    std::_Exit(1);
  }
  runner.join();
}

// Waits (at most 30 s) until a fiber of `sched` is parked on a `kind`.
inline bool wait_until_parked_on(Scheduler& sched, const std::string& kind) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    for (const FiberSnapshot& f : sched.snapshot().fibers)
      if (f.wait_kind == kind && f.park_state == -1) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

inline std::string sync_test_name(const ::testing::TestParamInfo<std::tuple<unsigned, Caller>>& info) {
  return std::to_string(std::get<0>(info.param)) + "_workers_" +
         (std::get<1>(info.param) == Caller::fiber ? "fibers" : "threads");
}

#define WEFT_SYNC_PARAMS(Fixture)                                                                       \
  INSTANTIATE_TEST_SUITE_P(                                                                             \
      Sync, Fixture,                                                                                    \
      ::testing::Combine(::testing::Values(1u, 2u, 4u, 8u),                                             \
                         ::testing::Values(::weft::test::Caller::fiber, ::weft::test::Caller::thread)), \
      ::weft::test::sync_test_name)

}  // namespace weft::test
