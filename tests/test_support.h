// Shared by the tests: the worker-count fixture (1, 2, 4, 8: more workers
// than cores on purpose) and a scale for loop counts under ThreadSanitizer,
// which runs 5-15x slower; the checks themselves never change.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <weft/weft.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

// WEFT_UNDER_TSAN, WEFT_UNDER_ASAN: the build runs under that sanitizer
// (GCC and Clang say so differently).
#if defined(__SANITIZE_THREAD__)
#define WEFT_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WEFT_UNDER_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define WEFT_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WEFT_UNDER_ASAN 1
#endif
#endif

namespace weft::test {

#ifdef WEFT_UNDER_TSAN
constexpr std::uint64_t kSlowdown = 10;
#else
constexpr std::uint64_t kSlowdown = 1;
#endif
constexpr std::uint64_t scaled(std::uint64_t n) { return n / kSlowdown; }

// Polls `done` every millisecond until it holds (true) or `limit` passes
// (false): for tests that wait for what other threads do, bounded.
template <class Done>
bool wait_until(Done&& done, std::chrono::steady_clock::duration limit = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// The CPU time this process has used, user and system, in ms: for tests
// that tell a spinning thread from a sleeping one.
inline double process_cpu_ms() {
  timespec now{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) * 1e3 + static_cast<double>(now.tv_nsec) / 1e6;
}

// A field of /proc/self/task/<tid>/status ("SigBlk", "voluntary_ctxt_switches"),
// its value without the padding; empty if the file or the field is missing.
inline std::string thread_status_field(int tid, const std::string& field) {
  std::ifstream status("/proc/self/task/" + std::to_string(tid) + "/status");
  const std::string prefix = field + ":";
  for (std::string line; std::getline(status, line);)
    if (line.starts_with(prefix)) {
      const std::size_t value = line.find_first_not_of(" \t", prefix.size());
      return value == std::string::npos ? std::string{} : line.substr(value);
    }
  return {};
}

// Waits (up to 5 s) until the thread `tid` has slept (State "S") for
// `settled` without a break: it waits in a blocking call, or its worker
// has nothing to run, rather than sitting preempted before the call (a
// preempted thread is "R"). A brief sleep (a lock, TSan's thread start)
// does not last `settled`. For tests that order a write after a wait
// began, where a fixed delay would be a guess.
inline void await_asleep(int tid, std::chrono::milliseconds settled = std::chrono::milliseconds(10)) {
  constexpr auto kNotAsleep = std::chrono::steady_clock::time_point::max();
  auto asleep_since = kNotAsleep;
  wait_until(
      [&] {
        const auto now = std::chrono::steady_clock::now();
        if (!thread_status_field(tid, "State").starts_with("S"))
          asleep_since = kNotAsleep;
        else if (asleep_since == kNotAsleep)
          asleep_since = now;
        return asleep_since != kNotAsleep && now - asleep_since >= settled;
      },
      std::chrono::seconds(5));
}

// The threads of this process whose name (comm) begins with `prefix`,
// by id.
inline std::vector<int> threads_named(const std::string& prefix) {
  std::vector<int> tids;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    if (std::getline(comm, name) && name.starts_with(prefix))
      tids.push_back(std::stoi(task.path().filename().string()));
  }
  return tids;
}

inline Config config_with(unsigned workers) {
  Config config;
  config.workers = workers;
  config.name = "test";
  config.shutdown_grace = std::chrono::seconds(30);
  config.shutdown_policy = ShutdownPolicy::abort;  // a hang fails the test
  return config;
}

class WorkersTest : public ::testing::TestWithParam<unsigned> {
 protected:
  unsigned workers() const { return GetParam(); }
  void SetUp() override { sched_ = std::make_unique<Scheduler>(config_with(workers())); }
  Scheduler& sched() { return *sched_; }
  void TearDown() override { sched_.reset(); }

 private:
  std::unique_ptr<Scheduler> sched_;
};

inline std::string worker_count_name(const ::testing::TestParamInfo<unsigned>& info) {
  return std::to_string(info.param) + "_workers";
}

#define WEFT_WORKER_COUNTS(Fixture) \
  INSTANTIATE_TEST_SUITE_P(Workers, Fixture, ::testing::Values(1u, 2u, 4u, 8u), ::weft::test::worker_count_name)

// Runs the tests `filter` names in a new process of this test binary with
// `variable`=`value` in its environment, and expects them to pass: weft
// reads its switches (WEFT_HOOKS, WEFT_HOOK_LOCKS) once, at start.
inline void expect_pass_in_child_with(const char* variable, const char* value, const char* filter) {
  const std::string filter_flag = std::string("--gtest_filter=") + filter;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    setenv(variable, value, 1);
    execl("/proc/self/exe", program_invocation_short_name, filter_flag.c_str(), nullptr);
    _exit(127);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << filter << " with " << variable << "=" << value;
  EXPECT_EQ(WEXITSTATUS(status), 0) << filter << " with " << variable << "=" << value;
}

}  // namespace weft::test
