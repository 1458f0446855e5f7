// gRPC's synchronous C++ client on fibers (issue 27, docs/io.md, "Libraries
// that are not fiber-safe, and why"): 10 and 100 fibers on 2 workers make
// unary calls to an echo server on 127.0.0.1 (tests/grpc/echo_server.cpp,
// a child process), with weft's default settings, and every reply must be
// the request's.
//
// Parked in its epoll_wait, gRPC's client crashed (a fiber resumed on
// another thread, where ExecCtx::Get() was null) or deadlocked (a fiber
// waiting in gRPC's absl::CondVar blocked the very thread its poller was
// parked on); the default WEFT_HOOKS_EXCLUDE keeps gRPC's calls on their
// thread. A hang fails the test by its watchdog, not by a timeout of the
// whole suite: every call has a deadline, and the run a time limit.
#include <gtest/gtest.h>
#include <weft/weft.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "echo_support.h"
#include "test_support.h"

namespace weft {
namespace {

using namespace std::chrono_literals;

// The default settings: whatever the shell that runs the test says.
const bool default_exclusions = unsetenv("WEFT_HOOKS_EXCLUDE") == 0;

constexpr auto kCallDeadline = 30s;
constexpr auto kRunLimit = 180s;

// Aborts the process, naming `what`, unless disarmed within `limit`: a
// deadlocked run must fail, not wait for the suite's timeout. (The server
// goes with the process: its stdin closes.)
class Watchdog {
 public:
  Watchdog(const char* what, std::chrono::seconds limit)
      : thread_([this, what, limit] {
          std::unique_lock lock(mutex_);
          if (!disarmed_.wait_for(lock, limit, [this] { return done_; })) {
            std::fprintf(stderr, "grpc_client_test: %s did not finish within %lld s: a hang\n", what,
                         static_cast<long long>(limit.count()));
            std::abort();
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    disarmed_.notify_one();
    thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable disarmed_;
  bool done_ = false;
  std::thread thread_;
};

class GrpcSyncClient : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = std::make_unique<test::EchoServerProcess>(WEFT_GRPC_ECHO_SERVER); }
  static void TearDownTestSuite() { server_.reset(); }

  // `fibers` fibers on 2 workers, each making `calls` calls on one shared
  // channel; every reply is checked.
  static void run(int fibers, int calls) {
    ASSERT_TRUE(default_exclusions);
    ASSERT_NE(server_, nullptr);
    const auto channel = ::grpc::CreateChannel(server_->target(), ::grpc::InsecureChannelCredentials());
    const auto stub = echo::Echo::NewStub(channel);
    std::vector<test::CallResults> results(static_cast<std::size_t>(fibers));
    {
      const Watchdog watchdog("the calls", kRunLimit);
      Config config = test::config_with(2);
      Scheduler sched(config);
      std::vector<Fiber> clients;
      for (int i = 0; i < fibers; ++i)
        clients.push_back(sched.spawn([&, i] {
          results[static_cast<std::size_t>(i)] =
              test::make_calls(*stub, std::int64_t{i} * 1'000'000, calls, kCallDeadline);
        }));
      for (Fiber& client : clients) client.join();
    }
    std::uint64_t ok = 0;
    for (const test::CallResults& r : results) {
      ok += r.ok;
      EXPECT_EQ(r.failed, 0u) << r.first_error;
    }
    EXPECT_EQ(ok, static_cast<std::uint64_t>(fibers) * static_cast<std::uint64_t>(calls));
  }

 private:
  static inline std::unique_ptr<test::EchoServerProcess> server_;
};

TEST_F(GrpcSyncClient, TenFibersOnTwoWorkers) { run(10, 200); }

TEST_F(GrpcSyncClient, HundredFibersOnTwoWorkers) { run(100, 20); }

}  // namespace
}  // namespace weft
