// weft's messages (include/weft/log.h, runtime/log.cpp): stderr by default,
// every message to the handler once one is set, stderr again when it is
// cleared or throws, stderr in a forked child until the child sets its own,
// handlers swapped while other threads write, and the level of a fatal
// message, written by weft itself right before it ends the process.
#include "runtime/log.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <weft/weft.h>

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/environment_switch.h"

namespace weft {
namespace {

struct Received {
  LogLevel level;
  std::string text;
};

// Collects what a handler receives; clears the handler when it goes.
class Collector {
 public:
  Collector() {
    set_log_handler([this](LogLevel level, std::string_view text) {
      const std::lock_guard guard(lock_);
      received_.push_back({level, std::string(text)});
    });
  }
  ~Collector() { set_log_handler(nullptr); }
  std::vector<Received> received() {
    const std::lock_guard guard(lock_);
    return received_;
  }

 private:
  std::mutex lock_;
  std::vector<Received> received_;
};

TEST(Log, GoesToStderrByDefault) {
  testing::internal::CaptureStderr();
  detail::log_message(LogLevel::warning, "weft: %s %d", "to stderr", 1);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "weft: to stderr 1\n");
}

TEST(Log, AHandlerReceivesEveryMessageWithItsLevelInstead) {
  Collector collector;
  testing::internal::CaptureStderr();
  detail::log_message(LogLevel::warning, "weft: one");
  detail::log_message(LogLevel::error, "weft: %s", "two");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  const std::vector<Received> received = collector.received();
  ASSERT_EQ(received.size(), 2u);
  EXPECT_EQ(received[0].level, LogLevel::warning);
  EXPECT_EQ(received[0].text, "weft: one");
  EXPECT_EQ(received[1].level, LogLevel::error);
  EXPECT_EQ(received[1].text, "weft: two");
}

TEST(Log, MessagesAreWholeWhateverTheirLength) {
  Collector collector;
  const std::string long_name(100'000, 'x');
  detail::log_message(LogLevel::error, "weft: [%s]", long_name.c_str());
  const std::vector<Received> received = collector.received();
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].text, "weft: [" + long_name + "]");
}

TEST(Log, AMessageOfWeftsOwnReachesTheHandler) {
  // A posted task that throws, with no on_exception handler: the pool says
  // so and carries on (docs/pools.md).
  Collector collector;
  {
    Pool pool{{.name = "log-test", .threads = 1, .mode = RunMode::threads}};
    pool.post([] { throw std::runtime_error("boom"); });
    pool.wait();
  }
  const std::vector<Received> received = collector.received();
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].level, LogLevel::error);
  EXPECT_NE(received[0].text.find("weft::Pool 'log-test': a posted task threw"), std::string::npos) << received[0].text;
  EXPECT_NE(received[0].text.find("boom"), std::string::npos) << received[0].text;
}

TEST(Log, AnEmptyHandlerRestoresStderr) {
  { Collector collector; }
  testing::internal::CaptureStderr();
  detail::log_message(LogLevel::error, "weft: back on stderr");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "weft: back on stderr\n");
}

TEST(Log, AHandlerThatThrowsLosesNothing) {
  set_log_handler([](LogLevel, std::string_view) { throw std::runtime_error("handler failed"); });
  testing::internal::CaptureStderr();
  detail::log_message(LogLevel::error, "weft: kept");
  const std::string err = testing::internal::GetCapturedStderr();
  set_log_handler(nullptr);
  EXPECT_EQ(err, "weft: the log handler threw; its message follows\nweft: kept\n");
}

TEST(Log, AForkedChildWritesToStderrUntilItSetsAHandler) {
  Collector collector;
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The parent's handler is not called here: its collector's lock may
    // have been held by a thread the child does not have.
    dup2(out[1], STDERR_FILENO);
    detail::log_message(LogLevel::error, "weft: from the child");
    bool own = false;
    set_log_handler([&own](LogLevel, std::string_view text) { own = text == "weft: to the child's own"; });
    detail::log_message(LogLevel::error, "weft: to the child's own");
    _exit(own && collector.received().empty() ? 0 : 1);
  }
  close(out[1]);
  std::string err;
  char buffer[256];
  for (ssize_t n; (n = read(out[0], buffer, sizeof buffer)) > 0;) err.append(buffer, static_cast<std::size_t>(n));
  close(out[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(err, "weft: from the child\n");
  EXPECT_TRUE(collector.received().empty());
}

TEST(Log, HandlersMaySwapWhileThreadsWrite) {
  // Every message reaches exactly one place, a handler or stderr, whatever
  // the swaps; TSan checks the handover.
  constexpr int kThreads = 4, kMessages = 500;
  std::atomic<int> handled{0};
  std::atomic<bool> done{false};
  testing::internal::CaptureStderr();
  std::thread swapper([&] {
    for (int i = 0; !done.load(); ++i) {
      if (i % 2 == 0)
        set_log_handler([&handled](LogLevel, std::string_view) { handled.fetch_add(1); });
      else
        set_log_handler(nullptr);
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t)
    writers.emplace_back([] {
      for (int i = 0; i < kMessages; ++i) detail::log_message(LogLevel::warning, "weft: message %d", i);
    });
  for (std::thread& writer : writers) writer.join();
  done.store(true);
  swapper.join();
  set_log_handler(nullptr);
  const std::string err = testing::internal::GetCapturedStderr();
  std::size_t lines = 0;
  for (std::size_t at = 0; (at = err.find("weft: message ", at)) != std::string::npos; ++at) ++lines;
  EXPECT_EQ(static_cast<int>(lines) + handled.load(), kThreads * kMessages);
}

// WEFT_HOOKS, WEFT_HOOK_LOCKS and WEFT_DUMP read one way
// (runtime/environment_switch.h): the words in any case, blanks around
// them ignored, and anything else said on stderr. Before, only the
// lowercase words counted, and "OFF" or "0 " left the feature on without
// a word.
TEST(EnvironmentSwitch, ReadsTheWordsInAnyCaseAndSaysWhatItCannotRead) {
  const char* const name = "WEFT_TEST_SWITCH";
  const auto read = [&](const char* value, std::string* said = nullptr) {
    ::setenv(name, value, 1);
    ::testing::internal::CaptureStderr();
    const bool off = detail::environment_says_off(name);
    const std::string text = ::testing::internal::GetCapturedStderr();
    if (said != nullptr) *said = text;
    return off;
  };
  for (const char* off : {"0", "off", "OFF", "False", "no", "NO", " 0", "0 ", "\toff\n"}) EXPECT_TRUE(read(off)) << off;
  for (const char* on : {"1", "on", "TRUE", "yes", "", " "}) {
    std::string said;
    EXPECT_FALSE(read(on, &said)) << on;
    EXPECT_EQ(said, "") << on;
  }
  std::string said;
  EXPECT_FALSE(read("disable", &said));
  EXPECT_NE(said.find("WEFT_TEST_SWITCH=\"disable\""), std::string::npos) << said;
  EXPECT_NE(said.find("taken as on"), std::string::npos) << said;
  ::unsetenv(name);
  EXPECT_FALSE(detail::environment_says_off(name));
}

TEST(LogDeathTest, AFatalMessageReachesTheHandlerBeforeTheProcessEnds) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        set_log_handler([](LogLevel level, std::string_view text) {
          std::fprintf(stderr, "handler got %s: %.*s\n", std::string(to_string(level)).c_str(),
                       static_cast<int>(text.size()), text.data());
        });
        Scheduler sched{[] {
          Config config;
          config.workers = 1;
          return config;
        }()};
        Fiber fiber = sched.spawn([] {});
        // Destroyed joinable: std::terminate(), after the message.
      },
      "handler got fatal: weft: a joinable weft::Fiber \\(#[0-9]+ \"[^\"]*\"\\) was destroyed");
}

}  // namespace
}  // namespace weft
