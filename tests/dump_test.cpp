// weft-dump end to end: a child process (tests/dump_child.cpp) parks fibers
// on a BlockingQueue, a Mutex and in a sleep; the test runs the real CLI on
// it and checks the text and the JSON. Then the refusals, the socket's life
// and a dump taken while the only worker is stuck.
#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <weft/blocking_queue.h>
#include <weft/weft.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "dump_client.h"
#include "dump_text.h"
#include "introspect/dump_protocol.h"
#include "sched/run_latency.h"
#include "socket_pair.h"
#include "test_support.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

// Sanitized children start slowly; a deadline only bounds a broken run.
constexpr auto kChildReadyTimeout = 120s;
constexpr int kRetries = 50;

// The socket `pid` listens on, as weft-dump finds it, and its file.
bool socket_exists(pid_t pid) {
  const std::string path = tools::find_dump_socket(pid);
  struct stat st;
  return !path.empty() && ::lstat(path.c_str(), &st) == 0;
}

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Environment changes for a child: a value, or none to unset it.
using EnvChanges = std::vector<std::pair<std::string, std::optional<std::string>>>;

void apply_env(const EnvChanges& env) {
  for (const auto& [name, value] : env) {
    if (value)
      ::setenv(name.c_str(), value->c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
}

// Waits for `pid` to exit, killing it if that takes longer than
// kChildReadyTimeout; its exit code, or 128 + the signal that ended it.
int wait_bounded(pid_t pid) {
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + kChildReadyTimeout;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(5ms);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Runs weft-dump with `args`; its output goes through files, so that a
// large dump cannot fill a pipe while we wait for the exit.
CliResult run_cli(const std::vector<std::string>& args, const EnvChanges& env = {}) {
  char out_path[] = "/tmp/weft-dump-test-out-XXXXXX";
  char err_path[] = "/tmp/weft-dump-test-err-XXXXXX";
  const int out_fd = ::mkstemp(out_path);
  const int err_fd = ::mkstemp(err_path);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    apply_env(env);
    std::vector<char*> argv{const_cast<char*>(WEFT_DUMP_CLI)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  CliResult result;
  // Bounded: weft-dump's own timeouts end it long before this.
  result.exit_code = wait_bounded(pid);
  result.out = read_file(out_path);
  result.err = read_file(err_path);
  ::close(out_fd);
  ::close(err_fd);
  ::unlink(out_path);
  ::unlink(err_path);
  return result;
}

// What Child and ForkedChild share: a forked process with a pipe each way,
// its lines read with a deadline, and a kill on the way out.
class ChildProcess {
 public:
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(to_child_);
    ::close(from_child_);
  }

  pid_t pid() const { return pid_; }

  // The child's next line, "" if none came in time.
  std::string read_line() {
    std::string line;
    const auto deadline = std::chrono::steady_clock::now() + kChildReadyTimeout;
    char c;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{from_child_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      if (::read(from_child_, &c, 1) != 1) break;
      if (c == '\n') return line;
      line += c;
    }
    return line;
  }

 protected:
  // Forks; the child runs `in_child(from_test, to_test)` (the ends of the
  // two pipes it keeps), which must not return. `ignore_sigpipe`: a child
  // that died early fails the test, not the test binary.
  template <class InChild>
  ChildProcess(InChild&& in_child, bool ignore_sigpipe) {
    if (ignore_sigpipe) ::signal(SIGPIPE, SIG_IGN);
    int in[2], out[2];
    EXPECT_EQ(::pipe2(in, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(in[1]);
      ::close(out[0]);
      in_child(in[0], out[1]);
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    to_child_ = in[1];
    from_child_ = out[0];
  }

  // Sends the child an empty line.
  void send_newline() { EXPECT_EQ(::write(to_child_, "\n", 1), 1); }
  // Its exit code (wait_bounded); the process is gone afterwards.
  int wait_exit() {
    const int code = wait_bounded(pid_);
    pid_ = -1;
    return code;
  }

 private:
  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
};

// A child process started with its stdin and stdout on pipes.
class Child : public ChildProcess {
 public:
  // `dump_off` sets WEFT_DUMP=0; `env` changes the child's environment.
  explicit Child(const std::vector<std::string>& argv, bool dump_off = false, const EnvChanges& env = {})
      : ChildProcess(
            [&](int from_test, int to_test) {
              ::dup2(from_test, 0);
              ::dup2(to_test, 1);
              if (dump_off) ::setenv("WEFT_DUMP", "0", 1);
              apply_env(env);
              std::vector<char*> args;
              for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
              args.push_back(nullptr);
              ::execvp(args[0], args.data());
            },
            /*ignore_sigpipe=*/true) {}

  // Lets the child finish (dump_child waits for a line) and returns its
  // exit status.
  int finish() {
    send_newline();
    return wait_exit();
  }
};

// A copy of this test process, forked without exec (so it needs nothing
// from the file system: the build tree may be closed to `uid`), running
// `body` as `uid` if given, with lines to and from the test. `body`'s
// result is the child's last line; the child ends with _exit(), or with
// std::exit() (atexit handlers run) if `exit_normally`.
class ForkedChild : public ChildProcess {
 public:
  struct Channel {
    int in, out;
    void say(const std::string& line) const {
      const std::string text = line + "\n";
      EXPECT_EQ(::write(out, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    }
    // Blocks until the test sends a line (or goes away).
    void wait() const {
      char c;
      while (::read(in, &c, 1) == 1 && c != '\n') {
      }
    }
  };
  using Body = std::function<std::string(const Channel&)>;

  explicit ForkedChild(Body body, std::optional<uid_t> uid = {}, const EnvChanges& env = {}, bool exit_normally = false)
      : ChildProcess(
            [&](int from_test, int to_test) {
              const Channel channel{from_test, to_test};
              apply_env(env);
              if (uid && (::setgroups(0, nullptr) != 0 || ::setgid(*uid) != 0 || ::setuid(*uid) != 0)) {
                channel.say("cannot become uid " + std::to_string(*uid));
                ::_exit(126);
              }
              // As a process the user started (exec makes it dumpable again):
              // setuid() made /proc/<pid>/fd root's, which weft-dump reads.
              if (uid) ::prctl(PR_SET_DUMPABLE, 1);
              std::string result;
              try {
                result = body(channel);
              } catch (const std::exception& e) {
                result = std::string("exception: ") + e.what();
              }
              channel.say(result);
              if (exit_normally) std::exit(0);
              ::_exit(0);
            },
            /*ignore_sigpipe=*/false) {}

  // Lets a waiting child go on.
  void release() { send_newline(); }
  // Its last line and exit status; kills it if it takes too long.
  std::pair<std::string, int> finish() {
    std::string last = read_line();
    return {last, wait_exit()};
  }
};

// A strict left-to-right matcher for the CLI's lines, in place of
// std::regex (whose libstdc++ code draws -Wmaybe-uninitialized under ASan).
struct Scan {
  std::string_view text;
  std::size_t pos = 0;
  bool ok = true;

  Scan& lit(std::string_view s) {
    if (ok && text.substr(pos, s.size()) == s)
      pos += s.size();
    else
      ok = false;
    return *this;
  }
  // [0-9]+, or [1-9][0-9]* with `nonzero`; its value into `value`.
  Scan& digits(std::uint64_t* value = nullptr, bool nonzero = false) {
    const std::size_t begin = pos;
    while (ok && pos < text.size() && text[pos] >= '0' && text[pos] <= '9') ++pos;
    if (!ok || pos == begin || (nonzero && text[begin] == '0')) return fail();
    if (value != nullptr) *value = std::stoull(std::string(text.substr(begin, pos - begin)));
    return *this;
  }
  Scan& hex() {  // 0x[0-9a-f]+
    lit("0x");
    const std::size_t begin = pos;
    while (ok && pos < text.size() &&
           ((text[pos] >= '0' && text[pos] <= '9') || (text[pos] >= 'a' && text[pos] <= 'f')))
      ++pos;
    return pos == begin ? fail() : *this;
  }
  Scan& decimal() {  // [0-9.]+
    const std::size_t begin = pos;
    while (ok && pos < text.size() && ((text[pos] >= '0' && text[pos] <= '9') || text[pos] == '.')) ++pos;
    return pos == begin ? fail() : *this;
  }
  Scan& spaces() {  // " +"
    const std::size_t begin = pos;
    while (ok && pos < text.size() && text[pos] == ' ') ++pos;
    return pos == begin ? fail() : *this;
  }
  Scan& one_of(std::initializer_list<std::string_view> choices) {
    for (const std::string_view c : choices)
      if (ok && text.substr(pos, c.size()) == c) {
        pos += c.size();
        return *this;
      }
    return fail();
  }
  Scan& fail() {
    ok = false;
    return *this;
  }
};

// True if some position where `start` occurs in `text` satisfies `match`.
template <class Match>
bool search_lines(std::string_view text, std::string_view start, Match&& match) {
  for (std::size_t at = text.find(start); at != std::string_view::npos; at = text.find(start, at + 1)) {
    Scan scan{text, at};
    if (match(scan).ok) return true;
  }
  return false;
}

const Json* find_fiber(const Json& dump, const std::string& name) {
  for (const auto& s : dump["schedulers"]) {
    for (const auto& f : s["fibers"])
      if (f["name"].get<std::string>() == name) return &f;
  }
  return nullptr;
}

// The sleeper runs for an instant every 100 ms; everything else stays put.
bool all_parked(const Json& dump) {
  for (const char* name : {"queue-taker", "pong", "mutex-waiter", "sleeper"}) {
    const Json* f = find_fiber(dump, name);
    if (f == nullptr || (*f)["state"].get<std::string>() != "parked" || (*f)["wait"].is_null()) return false;
  }
  return true;
}

// The lines of the fiber block of `name`: from its "- Fiber" line to the
// next blank line.
std::string fiber_block(const std::string& text, const std::string& name) {
  const std::size_t begin = text.find("] \"" + name + "\" #");
  if (begin == std::string::npos) return {};
  const std::size_t end = text.find("\n\n", begin);
  return text.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

// The function in which each fiber of dump_child parked: the named,
// never-inlined functions that call the blocking operation.
struct ParkedIn {
  const char* fiber;
  const char* function;
};
constexpr ParkedIn kParkedIn[] = {{"queue-taker", "::take_from_queue(weft::BlockingQueue<int>&)"},
                                  {"mutex-waiter", "::lock_mutex(weft::Mutex&)"},
                                  {"sleeper", "::sleep_a_slice()"}};

bool text_shows_all_parked(const std::string& text) {
  return text.find("waiting on weft::this_fiber (sleep)") != std::string::npos &&
         text.find("(lock) for") != std::string::npos;
}

// A fixture's child: one of this test's programs, started in SetUp, which
// says "ready" when its fibers are in place and must exit with 0 when the
// test lets it finish.
class ReadyChildTest : public ::testing::Test {
 protected:
  explicit ReadyChildTest(const char* program) : program_(program) {}
  void SetUp() override {
    child_ = std::make_unique<Child>(std::vector<std::string>{program_});
    ASSERT_EQ(child_->read_line(), "ready");
  }
  void TearDown() override {
    if (child_) {
      EXPECT_EQ(child_->finish(), 0);
    }
  }
  std::string pid() const { return std::to_string(child_->pid()); }
  const char* program_;
  std::unique_ptr<Child> child_;
};

class DumpOfChild : public ReadyChildTest {
 protected:
  DumpOfChild() : ReadyChildTest(WEFT_DUMP_CHILD) {}
};

TEST_F(DumpOfChild, TextShowsEveryFiberInWispShapeWithItsWait) {
  CliResult result;
  for (int i = 0; i < kRetries; ++i) {
    result = run_cli({pid()});
    ASSERT_EQ(result.exit_code, 0) << result.err;
    if (text_shows_all_parked(result.out)) break;
  }
  const std::string& text = result.out;
  EXPECT_EQ(result.err, "");
  EXPECT_NE(text.find("Full fiber dump of pid " + pid() + " (dump_child):"), std::string::npos) << text;
  EXPECT_NE(text.find("Scheduler \"dump-child\": 2 workers, 4 fibers\n  global queue: 0 fibers; scheduling latency"
                      " since the last dump: "),
            std::string::npos)
      << text;
  EXPECT_TRUE(search_lines(text, "\n  Worker 0 [tid ", [](Scan& s) -> Scan& {
    return s.lit("\n  Worker 0 [tid ").digits(nullptr, true).lit("] ").one_of({"running ", "searching ", "sleeping "});
  })) << text;
  EXPECT_TRUE(search_lines(text, "\n  Worker 1 [tid ", [](Scan& s) -> Scan& {
    return s.lit("\n  Worker 1 [tid ").digits(nullptr, true).lit("] ");
  })) << text;

  // - Fiber [0x...] "NAME" #N active=A steal=S steal_fail=F preempt=P park=K/-1 runnable=Rms
  //    parked (last ran on worker 0|1)
  //    waiting on WAIT for T ms|s
  using Wait = Scan& (*)(Scan&);
  auto expect_fiber = [&](const std::string& name, Wait wait, std::uint64_t min_active) {
    std::uint64_t active = 0, park = 0;
    const bool found = search_lines(text, "- Fiber [", [&](Scan& s) -> Scan& {
      s.lit("- Fiber [").hex().lit("] \"" + name + "\" #").digits().lit(" active=").digits(&active);
      s.lit(" steal=").digits().lit(" steal_fail=").digits().lit(" preempt=").digits().lit(" park=").digits(&park);
      s.lit("/-1 runnable=").decimal().lit("ms\n   parked (last ran on worker ").one_of({"0", "1"});
      s.lit(")\n   waiting on ");
      return wait(s).lit(" for ").decimal().one_of({" ms\n", " s\n"});
    });
    ASSERT_TRUE(found) << name << " in\n" << text;
    EXPECT_GE(active, min_active) << name;
    EXPECT_GE(park, 1u) << name << " parked, so park= counts at least one";
  };
  expect_fiber(
      "queue-taker", [](Scan& s) -> Scan& { return s.lit("weft::BlockingQueue@").hex().lit(" (take)"); }, 1);
  expect_fiber(
      "pong", [](Scan& s) -> Scan& { return s.lit("weft::BlockingQueue@").hex().lit(" (take)"); }, 1);
  expect_fiber(
      "mutex-waiter", [](Scan& s) -> Scan& { return s.lit("weft::Mutex@").hex().lit(" (lock)"); }, 1);
  // dump_child says ready only once the sleeper parked three times: it was
  // switched in before each.
  expect_fiber(
      "sleeper", [](Scan& s) -> Scan& { return s.lit("weft::this_fiber (sleep)"); }, 3);

  // Under the wait line, its stack: "      at FUNCTION (FILE:LINE)", or
  // (MODULE+0xOFFSET) without debug information; the function that parked
  // it among them.
  for (const ParkedIn& parked : kParkedIn) {
    const std::string block = fiber_block(text, parked.fiber);
    const std::size_t wait = block.find("\n   waiting on ");
    ASSERT_NE(wait, std::string::npos) << block;
    std::istringstream lines(block.substr(block.find('\n', wait + 1) + 1));
    int frames = 0;
    bool found = false;
    for (std::string line; std::getline(lines, line); ++frames) {
      EXPECT_EQ(line.rfind("      at ", 0), 0u) << line;
      EXPECT_EQ(line.back(), ')') << line;
      const std::size_t open = line.rfind(" (");
      ASSERT_NE(open, std::string::npos) << line;
      const std::string where = line.substr(open);
      EXPECT_TRUE(where.find(':') != std::string::npos || where.find("+0x") != std::string::npos) << line;
      if (line.find(parked.function) != std::string::npos) found = true;
    }
    EXPECT_GE(frames, 2) << block;
    EXPECT_TRUE(found) << parked.function << " in\n" << block;
  }
}

// Splits a line at runs of spaces.
std::vector<std::string> words(std::string_view line) {
  std::vector<std::string> out;
  std::istringstream in{std::string(line)};
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

bool is_rate(const std::string& word) {
  return !word.empty() && word.find_first_not_of("0123456789.") == std::string::npos &&
         word.find('.') != std::string::npos;
}

TEST_F(DumpOfChild, TopShowsRatesPerWorkerAndFiber) {
  const CliResult result = run_cli({pid(), "--top", "--iterations", "2"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.err, "");
  const std::string& out = result.out;
  const std::string header = "weft-dump --top: pid " + pid() + " (dump_child)";
  const std::size_t first = out.find(header);
  ASSERT_NE(first, std::string::npos) << out;
  EXPECT_NE(out.find(header, first + 1), std::string::npos) << "two frames\n" << out;
  EXPECT_NE(out.find("Scheduler \"dump-child\": 2 workers, 4 fibers"), std::string::npos) << out;
  // The second frame: its worker rows and its fiber rows.
  std::istringstream frame(out.substr(out.find(header, first + 1)));
  bool workers_header = false, fibers_header = false, sleeper_row = false;
  int worker_rows = 0;
  for (std::string line; std::getline(frame, line);) {
    const std::vector<std::string> w = words(line);
    if (w == std::vector<std::string>{"WORKER", "TID", "STATE", "QUEUE", "RUN/s", "STEALS/s", "PARKS/s", "PREEMPTS/s"})
      workers_header = true;
    else if (w ==
             std::vector<std::string>{"FIBER", "NAME", "STATE", "ACTIVE/s", "STEAL/s", "PARK/s", "PREEMPT/s", "WAIT"})
      fibers_header = true;
    else if (workers_header && !fibers_header && w.size() == 8 && (w[0] == "0" || w[0] == "1")) {
      EXPECT_GT(std::stoll(w[1]), 0) << line;
      EXPECT_TRUE(w[2] == "running" || w[2] == "searching" || w[2] == "sleeping") << line;
      for (int i = 4; i < 8; ++i) EXPECT_TRUE(is_rate(w[i])) << line;
      ++worker_rows;
    } else if (fibers_header && w.size() >= 7 && w[1] == "sleeper") {
      sleeper_row = true;
      EXPECT_EQ(w[0].rfind("#", 0), 0u) << line;
      for (int i = 3; i < 7; ++i) EXPECT_TRUE(is_rate(w[i])) << line;
      // It wakes every 100 ms: about ten switches a second.
      EXPECT_GE(std::stod(w[3]), 1.0) << line;
    }
  }
  EXPECT_TRUE(workers_header) << out;
  EXPECT_EQ(worker_rows, 2) << out;
  EXPECT_TRUE(fibers_header) << out;
  EXPECT_TRUE(sleeper_row) << out;
}

TEST_F(DumpOfChild, JsonHoldsTheSameFactsAsFields) {
  Json dump;
  for (int i = 0; i < kRetries; ++i) {
    const CliResult result = run_cli({pid(), "--json"});
    ASSERT_EQ(result.exit_code, 0) << result.err;
    dump = Json::parse(result.out);
    if (all_parked(dump)) break;
  }
  EXPECT_EQ(dump["weft_dump"].get<std::int64_t>(), detail::kDumpFormatVersion);
  EXPECT_EQ(dump["process"]["pid"].get<std::int64_t>(), child_->pid());
  EXPECT_EQ(dump["process"]["name"].get<std::string>(), "dump_child");
  EXPECT_GT(dump["process"]["unix_time_ms"].get<std::int64_t>(), 0);
  const auto& schedulers = dump["schedulers"];
  ASSERT_EQ(schedulers.size(), 1u);
  EXPECT_EQ(schedulers[0]["name"].get<std::string>(), "dump-child");
  EXPECT_EQ(schedulers[0]["fiber_count"].get<std::uint64_t>(), 4u);
  // Every fiber is parked: nothing waits in the global queue.
  EXPECT_EQ(schedulers[0]["global_queue"].get<std::uint64_t>(), 0u);
  const Json& latency = schedulers[0]["sched_latency"];
  EXPECT_LE(latency["p50_us"].get<double>(), latency["p99_us"].get<double>()) << latency;
  EXPECT_LE(latency["p99_us"].get<double>(), latency["max_us"].get<double>()) << latency;
  const auto& workers = schedulers[0]["workers"];
  ASSERT_EQ(workers.size(), 2u);
  std::uint64_t fibers_run = 0, parks = 0;
  for (std::size_t i = 0; i < workers.size(); ++i) {
    EXPECT_EQ(workers[i]["index"].get<std::uint64_t>(), i);
    EXPECT_GT(workers[i]["os_thread_id"].get<std::int64_t>(), 0);
    EXPECT_TRUE(workers[i]["state"].get<std::string>() == "running" ||
                workers[i]["state"].get<std::string>() == "searching" ||
                workers[i]["state"].get<std::string>() == "sleeping")
        << workers[i]["state"].get<std::string>();
    fibers_run += workers[i]["fibers_run"].get<std::uint64_t>();
    parks += workers[i]["parks"].get<std::uint64_t>();
  }
  // Every fiber ran and parked at least once, the sleeper three times.
  EXPECT_GE(fibers_run, 6u);
  EXPECT_GE(parks, 6u);

  auto expect_parked = [&](const std::string& name, const std::string& kind, const std::string& operation,
                           bool has_object) {
    const Json* f = find_fiber(dump, name);
    ASSERT_NE(f, nullptr) << name;
    EXPECT_EQ((*f)["state"].get<std::string>(), "parked") << name;
    EXPECT_EQ((*f)["park_state"].get<std::int64_t>(), -1) << name;
    EXPECT_GE((*f)["park"].get<std::uint64_t>(), 1u) << name;
    EXPECT_GE((*f)["active"].get<std::uint64_t>(), 1u) << name;
    EXPECT_GE((*f)["runnable_ms"].get<double>(), 0.0) << name;
    EXPECT_GT((*f)["id"].get<std::uint64_t>(), 0u) << name;
    EXPECT_TRUE((*f)["worker"].get<std::int64_t>() == 0 || (*f)["worker"].get<std::int64_t>() == 1) << name;
    EXPECT_FALSE((*f)["pinned"].get<bool>()) << name;
    EXPECT_EQ((*f)["address"].get<std::string>().rfind("0x", 0), 0u) << name;
    const Json& wait = (*f)["wait"];
    ASSERT_FALSE(wait.is_null()) << name;
    EXPECT_EQ(wait["kind"].get<std::string>(), kind) << name;
    EXPECT_EQ(wait["operation"].get<std::string>(), operation) << name;
    EXPECT_EQ(wait["object"].is_null(), !has_object) << name;
    EXPECT_GE(wait["ms"].get<double>(), 0.0) << name;
  };
  expect_parked("queue-taker", "weft::BlockingQueue", "take", true);
  expect_parked("pong", "weft::BlockingQueue", "take", true);
  expect_parked("mutex-waiter", "weft::Mutex", "lock", true);
  expect_parked("sleeper", "weft::this_fiber", "sleep", false);
  EXPECT_GE((*find_fiber(dump, "sleeper"))["active"].get<std::uint64_t>(), 3u);
  EXPECT_GE((*find_fiber(dump, "sleeper"))["park"].get<std::uint64_t>(), 3u);
  // Each parked fiber's stack, innermost first, holds the function that
  // parked it; with debug information, its file and line.
  // The stacks hold addresses; "symbols" says what each one is.
  for (const ParkedIn& parked : kParkedIn) {
    const Json& stack = (*find_fiber(dump, parked.fiber))["stack"];
    ASSERT_GE(stack.size(), 2u) << parked.fiber;
    bool found = false;
    for (const Json& address : stack) {
      EXPECT_EQ(address.get<std::string>().rfind("0x", 0), 0u) << parked.fiber;
      ASSERT_TRUE(dump["symbols"].contains(address.get<std::string>())) << address.get<std::string>();
      const Json& frame = dump["symbols"][address.get<std::string>()];
      EXPECT_FALSE(frame["module"].is_null()) << parked.fiber;
      EXPECT_EQ(frame["offset"].get<std::string>().rfind("0x", 0), 0u) << parked.fiber;
      if (frame["function"].is_null() ||
          frame["function"].get<std::string>().find(parked.function) == std::string::npos)
        continue;
      found = true;
      if (!frame["file"].is_null()) {
        EXPECT_NE(frame["file"].get<std::string>().find("dump_child.cpp"), std::string::npos)
            << frame["file"].get<std::string>();
        EXPECT_GT(frame["line"].get<std::uint64_t>(), 0u) << parked.fiber;
      }
    }
    EXPECT_TRUE(found) << parked.function << " in the stack of " << parked.fiber;
  }

  // Two queues, two objects: the taker and pong wait on different ones.
  EXPECT_NE((*find_fiber(dump, "queue-taker"))["wait"]["object"], (*find_fiber(dump, "pong"))["wait"]["object"]);
}

TEST_F(DumpOfChild, ListShowsTheChildWithItsSchedulerAndFibers) {
  const CliResult result = run_cli({"--list"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::string start(1, '\n');  // "\n<pid>", built so as not to draw GCC 12's -Wrestrict
  start.append(pid());
  EXPECT_TRUE(search_lines(result.out, start, [&](Scan& s) -> Scan& {
    return s.lit(start).spaces().lit("dump_child").spaces().lit("1").spaces().lit("4").spaces().lit("dump-child\n");
  })) << result.out;
}

TEST(Dump, SocketIsRemovedWhenTheProcessEndsEitherWay) {
  for (const char* how : {"--orderly", "--exit-early"}) {
    Child child({WEFT_DUMP_CHILD, how});
    ASSERT_EQ(child.read_line(), "ready") << how;
    const pid_t pid = child.pid();
    EXPECT_TRUE(socket_exists(pid)) << how;
    EXPECT_EQ(child.finish(), 0) << how;
    EXPECT_FALSE(socket_exists(pid)) << how;
  }
}

TEST(Dump, RefusesAPidThatDoesNotExist) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);  // reaped: the pid is free
  const CliResult result = run_cli({std::to_string(pid)});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.out, "");
  EXPECT_NE(result.err.find("no process with pid " + std::to_string(pid)), std::string::npos) << result.err;
}

TEST(Dump, RefusesAProcessThatIsNotWeft) {
  Child sleeper({"sleep", "60"});
  // Until exec, the child is a copy of this (weft-free) test; either way
  // it has no dump socket.
  const CliResult result = run_cli({std::to_string(sleeper.pid())});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.out, "");
  EXPECT_NE(result.err.find("is not a weft process, or has dumps turned off"), std::string::npos) << result.err;
}

TEST(Dump, RefusesAWeftProcessWithDumpsTurnedOff) {
  Child child({WEFT_DUMP_CHILD}, /*dump_off=*/true);
  ASSERT_EQ(child.read_line(), "ready");
  const CliResult result = run_cli({std::to_string(child.pid())});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.out, "");
  EXPECT_NE(result.err.find("(dump_child) is not a weft process, or has dumps turned off"), std::string::npos)
      << result.err;
  EXPECT_FALSE(socket_exists(child.pid()));
  EXPECT_EQ(child.finish(), 0);
}

constexpr uid_t kNobody = 65534;

// A weft process of `uid`: a fork of this test that runs a scheduler, so
// that it needs no access to the build tree (which may be closed to `uid`).
std::unique_ptr<ForkedChild> weft_process_as(uid_t uid, const EnvChanges& env = {{"XDG_RUNTIME_DIR", {}}}) {
  return std::make_unique<ForkedChild>(
      [](const ForkedChild::Channel& channel) {
        Scheduler sched{test::config_with(1)};
        channel.say(tools::find_dump_socket(::getpid()).empty() ? "no socket" : "ready");
        channel.wait();
        return std::string("done");
      },
      uid, env);
}

TEST(Dump, RefusesAnotherUsersProcess) {
  // As root, a weft process run as nobody; otherwise init, which is root's.
  std::unique_ptr<ForkedChild> child;
  pid_t pid = 1;
  if (::geteuid() == 0) {
    child = weft_process_as(kNobody);
    ASSERT_EQ(child->read_line(), "ready");
    pid = child->pid();
  }
  const CliResult result = run_cli({std::to_string(pid)});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.out, "");
  EXPECT_NE(result.err.find("belongs to another user"), std::string::npos) << result.err;
  if (child) {
    child->release();
    EXPECT_EQ(child->finish(), (std::pair<std::string, int>{"done", 0}));
  }
}

TEST(Dump, BadArgumentsPrintUsageAndExit2) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{}, {"not-a-pid"}, {"12", "--bogus"}, {"12", "--timeout", "x"}, {"--list", "12"}}) {
    const CliResult result = run_cli(args);
    EXPECT_EQ(result.exit_code, 2);
    EXPECT_NE(result.err.find("usage: weft-dump"), std::string::npos) << result.err;
  }
}

// In this process: the server lives as long as some scheduler with dumps on.
TEST(Dump, ServerFollowsTheSchedulersThatWantIt) {
  const pid_t self = ::getpid();
  Config off = test::config_with(1);
  off.dump = false;
  {
    Scheduler quiet{off};
    EXPECT_FALSE(socket_exists(self));
    {
      Scheduler first{test::config_with(1)};
      EXPECT_TRUE(socket_exists(self));
      {
        Scheduler second{test::config_with(2)};
        const auto answer = tools::request_dump(self, "summary", 30s);
        ASSERT_EQ(answer.snapshot.schedulers.size(), 2u);  // `quiet` is not shown
      }
      EXPECT_TRUE(socket_exists(self));
    }
    EXPECT_FALSE(socket_exists(self));
  }
}

// A worker that never gives its thread back must not block the dump.
TEST(Dump, AnswersWhileTheOnlyWorkerIsStuck) {
  Scheduler sched{test::config_with(1)};
  std::atomic<bool> spinning{false}, release{false};
  Fiber stuck = sched.spawn({.name = "stuck"}, [&] {
    spinning.store(true);
    while (!release.load()) {
    }
  });
  while (!spinning.load()) std::this_thread::yield();
  const auto answer = tools::request_dump(::getpid(), "dump", 30s);
  release.store(true);
  stuck.join();
  const Json json = Json::parse(answer.text);
  const auto& schedulers = json["schedulers"];
  ASSERT_EQ(schedulers.size(), 1u);
  const auto& fibers = schedulers[0]["fibers"];
  ASSERT_EQ(fibers.size(), 1u);
  EXPECT_EQ(fibers[0]["name"].get<std::string>(), "stuck");
  EXPECT_EQ(fibers[0]["state"].get<std::string>(), "running");
  EXPECT_EQ(fibers[0]["park_state"].get<std::int64_t>(), 0);
  EXPECT_EQ(fibers[0]["worker"].get<std::int64_t>(), 0);
  EXPECT_EQ(schedulers[0]["workers"][0]["state"].get<std::string>(), "running");
}

// --- fork ---------------------------------------------------------------

// A child's exit() runs the atexit handlers it inherited: the parent's
// socket must survive them (it is the parent's, still served).
TEST(Dump, AForkedChildsExitLeavesTheParentsSocket) {
  Scheduler sched{test::config_with(1)};
  ASSERT_TRUE(socket_exists(::getpid()));
  const std::string path = tools::find_dump_socket(::getpid());
  ForkedChild child([](const ForkedChild::Channel&) { return std::string("exiting"); }, {}, {},
                    /*exit_normally=*/true);
  EXPECT_EQ(child.finish(), (std::pair<std::string, int>{"exiting", 0}));
  struct stat st;
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path << " was removed by the child";
  EXPECT_EQ(tools::request_dump(::getpid(), "summary", 30s).snapshot.schedulers.size(), 1u);
}

// docs/usage.md: after fork() the parent's scheduler is unusable in the
// child, and says so; a scheduler the child makes works, dump included.
TEST(Dump, AForkedChildRefusesTheParentsSchedulerAndRunsItsOwn) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer does not support threads started after a multi-threaded fork (die_after_fork)";
#endif
  auto parent = std::make_unique<Scheduler>(test::config_with(2));
  ForkedChild child(
      [&](const ForkedChild::Channel&) -> std::string {
        try {
          parent->spawn([] {}).join();
          return "spawn on the parent's scheduler did not throw";
        } catch (const std::logic_error& e) {
          if (std::string(e.what()).find("forked child") == std::string::npos)
            return std::string("unclear refusal: ") + e.what();
        }
        parent.reset();  // the child's copy: its worker threads are the parent's, not joinable here
        Config config = test::config_with(2);
        config.name = "child";
        Scheduler own{config};
        std::atomic<int> ran{0};
        own.spawn([&] { ran.fetch_add(1); }).join();
        if (ran.load() != 1) return "the child's fiber did not run";
        const auto answer = tools::request_dump(::getpid(), "summary", 30s);
        if (answer.snapshot.schedulers.size() != 1 || answer.snapshot.schedulers[0].name != "child")
          return "the child's dump shows " + std::to_string(answer.snapshot.schedulers.size()) + " schedulers";
        return "ok";  // `own` shuts down here; `parent` is left alone
      },
      {}, {}, /*exit_normally=*/true);
  EXPECT_EQ(child.finish(), (std::pair<std::string, int>{"ok", 0}));
  EXPECT_EQ(tools::request_dump(::getpid(), "summary", 30s).snapshot.schedulers.size(), 1u);
  parent->spawn([] {}).join();
}

// --- who may serve and be believed ----------------------------------------

// A directory made in advance by someone else where the server would put
// its socket: the server must not use it, and must still be dumpable.
TEST(Dump, ServerRefusesAPlantedDirectoryAndServesFromItsOwn) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to act as two users";
  const uid_t victim = 54321;  // no one else's: a fresh /tmp/weft-<uid>
  const std::string planted = "/tmp/weft-" + std::to_string(victim);
  ::rmdir(planted.c_str());
  ASSERT_EQ(::mkdir(planted.c_str(), 0777), 0) << planted;
  ASSERT_EQ(::chmod(planted.c_str(), 0777), 0);  // root's, open to all: the "attacker's"
  auto process = weft_process_as(victim);
  EXPECT_EQ(process->read_line(), "ready");
  const std::string path = tools::find_dump_socket(process->pid());
  EXPECT_EQ(path.rfind(planted + ".", 0), 0u) << path;  // its own /tmp/weft-<uid>.XXXXXX
  // The victim's own weft-dump finds and believes it (as that user: a
  // fork, no exec).
  ForkedChild cli(
      [&](const ForkedChild::Channel&) -> std::string {
        try {
          const auto answer = tools::request_dump(process->pid(), "dump", 30s);
          return "pid " + std::to_string(answer.snapshot.pid);
        } catch (const std::exception& e) {
          return e.what();
        }
      },
      victim);
  EXPECT_EQ(cli.finish(), (std::pair<std::string, int>{"pid " + std::to_string(process->pid()), 0}));
  process->release();
  EXPECT_EQ(process->finish(), (std::pair<std::string, int>{"done", 0}));
  EXPECT_NE(::access(path.c_str(), F_OK), 0) << path << " outlived its process";
  EXPECT_NE(::access(path.substr(0, path.rfind('/')).c_str(), F_OK), 0) << "its directory outlived it";
  ::rmdir(planted.c_str());
}

// A listening socket at `path`, answering every connection with `answer`
// from a thread, until destroyed.
class FakeServer {
 public:
  FakeServer(const std::string& path, std::string answer) : path_(path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
    ::unlink(path.c_str());
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0) << path;
    EXPECT_EQ(::listen(fd_, 16), 0);
    thread_ = std::thread([this, answer] {
      for (;;) {
        const int client = ::accept(fd_, nullptr, nullptr);
        if (client < 0) return;
        [[maybe_unused]] const ssize_t n = ::send(client, answer.data(), answer.size(), MSG_NOSIGNAL);
        ::close(client);
      }
    });
  }
  ~FakeServer() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
    ::unlink(path_.c_str());
  }

 private:
  std::string path_;
  int fd_ = -1;
  std::thread thread_;
};

// A private directory of this user, removed with what is in it.
struct TempDirectory {
  std::string path;
  explicit TempDirectory(mode_t mode = 0700) {
    char name[] = "/tmp/weft-dump-test-XXXXXX";
    path = ::mkdtemp(name);
    ::chmod(path.c_str(), mode);
  }
  ~TempDirectory() { EXPECT_EQ(std::system(("rm -rf " + path).c_str()), 0); }
};

// The victim (a weft process) listens on DIR/<pid>.sock; someone replaces
// that name with a socket of their own that answers a forged dump. The CLI
// reaches the impostor, and must see that its peer is not the victim.
TEST(Dump, CliRefusesASocketServedByAnotherProcess) {
  TempDirectory xdg;
  const std::string directory = xdg.path + "/weft";
  Child victim({WEFT_DUMP_CHILD}, false, {{"XDG_RUNTIME_DIR", xdg.path}});
  ASSERT_EQ(victim.read_line(), "ready");
  const std::string path = detail::dump_socket_path(directory, victim.pid());
  ASSERT_EQ(tools::find_dump_socket(victim.pid()), path);
  const std::string forged = "{\"weft_dump\":" + std::to_string(detail::kDumpFormatVersion) +
                             ",\"process\":{\"pid\":" + std::to_string(victim.pid()) +
                             ",\"name\":\"FORGED\",\"time\":\"x\",\"unix_time_ms\":1},\"schedulers\":[]}\n";
  FakeServer impostor(path, forged);  // unlinks the victim's name and binds its own
  const CliResult result = run_cli({std::to_string(victim.pid())}, {{"XDG_RUNTIME_DIR", xdg.path}});
  EXPECT_EQ(result.exit_code, 1) << result.out;
  EXPECT_EQ(result.out.find("FORGED"), std::string::npos) << result.out;
  EXPECT_NE(result.err.find("refusing the dump socket " + path + ": it is served by pid " + std::to_string(::getpid())),
            std::string::npos)
      << result.err;
}

// The same victim, with its directory opened to others afterwards: the CLI
// refuses the socket before connecting.
TEST(Dump, CliRefusesASocketInADirectoryOpenToOthers) {
  TempDirectory xdg;
  const std::string directory = xdg.path + "/weft";
  Child victim({WEFT_DUMP_CHILD}, false, {{"XDG_RUNTIME_DIR", xdg.path}});
  ASSERT_EQ(victim.read_line(), "ready");
  ASSERT_EQ(::chmod(directory.c_str(), 0777), 0);
  const CliResult result = run_cli({std::to_string(victim.pid())}, {{"XDG_RUNTIME_DIR", xdg.path}});
  EXPECT_EQ(result.exit_code, 1) << result.out;
  EXPECT_NE(result.err.find("refusing the dump socket of process " + std::to_string(victim.pid())), std::string::npos)
      << result.err;
  EXPECT_NE(result.err.find("has mode 0777, not 0700"), std::string::npos) << result.err;
  ASSERT_EQ(::chmod(directory.c_str(), 0700), 0);
  EXPECT_EQ(victim.finish(), 0);
}

// --- discovery ------------------------------------------------------------

// The target chose its directory from its own environment; the CLI, run
// without that environment (as after sudo -u), still finds it.
TEST(Dump, FindsATargetWhoseEnvironmentDiffersFromTheCallers) {
  TempDirectory xdg;
  Child child({WEFT_DUMP_CHILD}, false, {{"XDG_RUNTIME_DIR", xdg.path}});
  ASSERT_EQ(child.read_line(), "ready");
  const CliResult result = run_cli({std::to_string(child.pid())}, {{"XDG_RUNTIME_DIR", {}}});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("Full fiber dump of pid " + std::to_string(child.pid()) + " (dump_child):"),
            std::string::npos)
      << result.out;
  const CliResult list = run_cli({"--list"}, {{"XDG_RUNTIME_DIR", {}}});
  EXPECT_NE(list.out.find("\n" + std::to_string(child.pid()) + " "), std::string::npos) << list.out;
  EXPECT_EQ(child.finish(), 0);
}

// A socket named after a pid that now belongs to another program (here it
// is even being served, by this test): not that program's.
TEST(Dump, ASocketNamedAfterAReusedPidIsNotThatProcesss) {
  Child sleeper({"sleep", "60"});
  const std::string directory = detail::preferred_dump_socket_directory();
  ::mkdir(directory.c_str(), 0700);
  ASSERT_EQ(detail::check_private_directory(directory, ::geteuid()), "");
  const std::string path = detail::dump_socket_path(directory, sleeper.pid());
  FakeServer stale(path, "{\"weft_dump\":" + std::to_string(detail::kDumpFormatVersion) + ",\"error\":\"stale\"}\n");
  const CliResult list = run_cli({"--list"});
  EXPECT_EQ(list.exit_code, 0) << list.err;
  EXPECT_EQ(list.out.find("\n" + std::to_string(sleeper.pid()) + " "), std::string::npos) << list.out;
  const CliResult dump = run_cli({std::to_string(sleeper.pid())});
  EXPECT_EQ(dump.exit_code, 1);
  EXPECT_NE(dump.err.find("is not a weft process"), std::string::npos) << dump.err;
}

// --- names ----------------------------------------------------------------

// Names are the application's bytes: control characters must not reach
// the terminal (nor forge lines), and invalid UTF-8 must not break --json.
TEST(Dump, NamesWithControlBytesAndInvalidUtf8AreEscaped) {
  Config config = test::config_with(1);
  // The header's worker count counts spares too: one started while the
  // machine was loaded made it "2 workers" (a CI run).
  config.max_threads = config.workers;  // no spares
  config.name = "evil\x1b[2J\r\nScheduler \"forged\": 9 workers";
  Scheduler sched{config};
  BlockingQueue<int> never;
  Fiber fiber = sched.spawn({.name = "f\x1b]0;title\x07\n- Fiber [0x1] \"forged\" #1\xff\xfe"}, [&] {
    try {
      never.take();
    } catch (const QueueClosed&) {
    }
  });
  const CliResult text = run_cli({std::to_string(::getpid())});
  const CliResult json = run_cli({std::to_string(::getpid()), "--json"});
  never.close();
  fiber.join();
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(text.out.find('\x1b'), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find('\r'), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find('\x07'), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("\n- Fiber [0x1]"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("\nScheduler \"forged\""), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("Scheduler \"evil\\x1b[2J\\x0d\\x0aScheduler \"forged\": 9 workers\": 1 workers"),
            std::string::npos)
      << text.out;
  ASSERT_EQ(json.exit_code, 0) << json.err;
  Json dump;
  ASSERT_NO_THROW(dump = Json::parse(json.out)) << json.out;
  EXPECT_EQ(dump["schedulers"][0]["name"].get<std::string>(), config.name);
  EXPECT_EQ(dump["schedulers"][0]["fibers"][0]["name"].get<std::string>(),
            "f\x1b]0;title\x07\n- Fiber [0x1] \"forged\" #1\xef\xbf\xbd\xef\xbf\xbd");  // U+FFFD twice
}

// --- clients that hold the server -----------------------------------------

// A connection to this process's server; `request` sent, nothing read.
int connect_to_self(const std::string& request = "") {
  const std::string path = tools::find_dump_socket(::getpid());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return -1;
  }
  if (!request.empty()) {
    EXPECT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL), ssize_t(request.size()));
  }
  return fd;
}

// Clients that connect and say nothing, that ask and never read, or that
// trickle their request, each take only their own time.
TEST(Dump, ClientsThatHoldTheServerDoNotBlockOthers) {
  Scheduler sched{test::config_with(1)};
  // Enough parked fibers that a dump does not fit in a socket's buffers.
  constexpr int kFibers = 3000;
  BlockingQueue<int> never;
  std::vector<Fiber> fibers;
  for (int i = 0; i < kFibers; ++i)
    fibers.push_back(sched.spawn({.name = "parked"}, [&] {
      try {
        never.take();
      } catch (const QueueClosed&) {
      }
    }));
  std::vector<int> held;
  held.push_back(connect_to_self());          // silent
  held.push_back(connect_to_self("dump\n"));  // never reads its answer
  held.push_back(connect_to_self("d"));       // and trickles the rest:
  std::atomic<bool> trickling{true};
  std::thread trickle([&] {
    for (const char c : std::string("ump\n")) {
      for (int i = 0; i < 100 && trickling.load(); ++i) std::this_thread::sleep_for(10ms);
      [[maybe_unused]] const ssize_t n = ::send(held.back(), &c, 1, MSG_NOSIGNAL);
    }
  });
  for (const int fd : held) EXPECT_GE(fd, 0);
  // Each of these within its own time, with all three still held; the
  // server used to take one client at a time, 5 s each.
  for (int i = 0; i < 3; ++i) {
    try {
      const auto answer = tools::request_dump(::getpid(), "dump", 4s);
      EXPECT_EQ(answer.snapshot.schedulers.at(0).fibers.size(), std::size_t{kFibers});
    } catch (const tools::DumpUnavailable& e) {
      ADD_FAILURE() << "dump " << i << ": " << e.what();
    }
  }
  trickling.store(false);
  trickle.join();
  for (const int fd : held) ::close(fd);
  never.close();
  for (Fiber& f : fibers) f.join();
}

// A thousand connections that say nothing: the CLI says the server is
// busy (or is served, once they time out), never a socket error.
TEST(Dump, AThousandPendingConnectionsMakeTheServerBusy) {
  rlimit files{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &files), 0);
  const rlimit saved = files;
  files.rlim_cur = std::min<rlim_t>(files.rlim_max, 4096);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &files), 0);
  if (files.rlim_cur < 1100) GTEST_SKIP() << "cannot open 1000 files";
  {
    Scheduler sched{test::config_with(1)};
    std::vector<int> pending;
    for (int i = 0; i < 1000; ++i)
      if (const int fd = connect_to_self(); fd >= 0) pending.push_back(fd);
    EXPECT_GT(pending.size(), 16u);
    const CliResult result = run_cli({std::to_string(::getpid()), "--timeout", "3"});
    if (result.exit_code != 0) {
      EXPECT_EQ(result.exit_code, 1);
      EXPECT_NE(result.err.find("busy"), std::string::npos) << result.err;
    }
    EXPECT_EQ(result.err.find("Transport endpoint"), std::string::npos) << result.err;
    for (const int fd : pending) ::close(fd);
    // Once they are gone, dumps are served again. Not at once: the closed
    // connections still wait in the listener's backlog, and while the
    // server accepts them up to 16 at a time a request may still be told
    // "busy" (one ASan run was).
    const auto give_up = std::chrono::steady_clock::now() + 30s;
    std::size_t schedulers = 0;
    for (;;) {
      try {
        schedulers = tools::request_dump(::getpid(), "summary", 30s).snapshot.schedulers.size();
        break;
      } catch (const std::exception& e) {
        const bool busy = std::string(e.what()).find("busy") != std::string::npos;
        ASSERT_TRUE(busy && std::chrono::steady_clock::now() < give_up) << e.what();
        std::this_thread::sleep_for(10ms);
      }
    }
    EXPECT_EQ(schedulers, 1u);
  }
  ::setrlimit(RLIMIT_NOFILE, &saved);
}

// A fiber parked on a socket: the text says which fd, which way and what
// it is connected to; the scheduler's line says who polls; --json the same.
// Fibers spawned by a plain thread while the only worker runs a fiber that
// never switches wait in the global queue, which is no worker's: the dump
// counts them there (issue 15: workers showed queue=0 while 98 waited).
TEST(Dump, FibersInTheGlobalQueueAreCountedThere) {
  Config config = test::config_with(1);
  config.name = "global-queue";
  config.preemption = false;            // the hog keeps its worker however long it runs
  config.max_threads = config.workers;  // no spares
  Scheduler sched{config};
  std::atomic<bool> started{false}, release{false};
  Fiber hog = sched.spawn({.name = "hog"}, [&] {
    started.store(true);
    const auto give_up = std::chrono::steady_clock::now() + 30s;
    while (!release.load(std::memory_order_relaxed) && std::chrono::steady_clock::now() < give_up) {
    }
  });
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (!started.load() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(started.load());
  constexpr unsigned kQueued = 5;
  std::vector<Fiber> queued;
  for (unsigned i = 0; i < kQueued; ++i) queued.push_back(sched.spawn({.name = "queued"}, [] {}));
  const auto answer = tools::request_dump(::getpid(), "dump", 30s);
  release.store(true);
  hog.join();
  for (Fiber& f : queued) f.join();

  const Json json = Json::parse(answer.text);
  const Json* scheduler = nullptr;
  for (const Json& s : json["schedulers"])
    if (s["name"].get<std::string>() == "global-queue") scheduler = &s;
  ASSERT_NE(scheduler, nullptr) << answer.text;
  EXPECT_EQ((*scheduler)["global_queue"].get<std::uint64_t>(), kQueued) << answer.text;
  EXPECT_EQ((*scheduler)["workers"][0]["queue_length"].get<std::uint64_t>(), 0u) << "the worker's own queues";
  const std::string text = tools::render_dump_text(answer.snapshot);
  EXPECT_NE(text.find("Scheduler \"global-queue\": 1 workers, 6 fibers\n  global queue: 5 fibers;"), std::string::npos)
      << text;
}

// Scheduling latency: sampled at one in kRunLatencyPeriod times a fiber is made runnable,
// summed over the workers, reported for the interval since the previous
// snapshot; each fiber's runnable time grows with what it waited.
TEST(Dump, SchedulingLatencyIsSampledPerIntervalAndPerFiber) {
  Config config = test::config_with(1);
  Scheduler sched{config};
  (void)sched.snapshot();  // the interval starts here
  constexpr int kFibers = 32, kYields = 100;
  Latch yielded(kFibers);
  Latch release(1);
  const auto started = std::chrono::steady_clock::now();
  std::vector<Fiber> fibers;
  Latch all_started(kFibers);
  for (int i = 0; i < kFibers; ++i)
    fibers.push_back(sched.spawn({.name = "yielder"}, [&] {
      all_started.arrive_and_wait();  // so that every yield has others to wait behind
      for (int y = 0; y < kYields; ++y) this_fiber::yield();
      yielded.count_down();
      release.wait();
    }));
  yielded.wait();
  const SchedulerSnapshot snap = sched.snapshot();
  const SchedulerSnapshot again = sched.snapshot();
  const double elapsed_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - started).count();
  release.count_down();
  for (Fiber& f : fibers) f.join();

  const LatencySummary& l = snap.sched_latency;
  // At least every kRunLatencyPeriod-th of each fiber's yields (its spawn
  // and wake add more).
  constexpr int kPeriod = static_cast<int>(detail::kRunLatencyPeriod);
  EXPECT_GE(l.count, static_cast<std::uint64_t>(kFibers * (kYields / kPeriod))) << "samples";
  EXPECT_LE(l.count, static_cast<std::uint64_t>(kFibers * (kYields + 4))) << "samples";
  EXPECT_GT(l.p50_us, 0.0);
  EXPECT_LE(l.p50_us, l.p99_us);
  EXPECT_LE(l.p99_us, l.max_us);
  EXPECT_LE(l.max_us, elapsed_us * 1.125) << "no wait is longer than the test";
  // Nothing ran between the two snapshots but the parked fibers' wake-ups
  // that did not happen: the second interval is empty.
  EXPECT_EQ(again.sched_latency.count, 0u);
  int yielders = 0;
  for (const FiberSnapshot& f : snap.fibers) {
    if (f.name != "yielder") continue;
    ++yielders;
    EXPECT_GT(f.runnable_ms, 0.0) << "fiber " << f.id << " waited behind the others " << kYields << " times";
    EXPECT_LE(f.runnable_ms, elapsed_us * kPeriod / 1000) << "fiber " << f.id;
  }
  EXPECT_EQ(yielders, kFibers);
}

TEST(Dump, ShowsAFiberParkedOnASocketAndThePoller) {
  const test::LoopbackTcpPair tcp;
  const int client = tcp.client;
  ASSERT_GE(tcp.server, 0);

  Scheduler sched{test::config_with(2)};
  Fiber reader = sched.spawn({.name = "socket-reader"}, [&] { EXPECT_TRUE(io::wait_readable(client)); });
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (sched.snapshot().poller.io_waiters == 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(1ms);
  const std::string fd_line =
      "waiting on fd " + std::to_string(client) + " (readable) " + tcp.client_description() + " for ";
  const auto answer = tools::request_dump(::getpid(), "dump", 30s);
  const std::string text = tools::render_dump_text(answer.snapshot);
  ASSERT_EQ(::write(tcp.server, "x", 1), 1);
  reader.join();

  EXPECT_NE(text.find(fd_line), std::string::npos) << text;
  EXPECT_NE(text.find("\n  Poller: "), std::string::npos) << text;
  EXPECT_NE(text.find(" fds registered, 1 fibers waiting on I/O, "), std::string::npos) << text;
  const Json json = Json::parse(answer.text);
  const auto& scheduler = json["schedulers"][0];
  EXPECT_EQ(scheduler["poller"]["io_waiters"].get<std::uint64_t>(), 1u);
  EXPECT_GE(scheduler["poller"]["fds_registered"].get<std::uint64_t>(), 1u);
  const auto& fiber = scheduler["fibers"][0];
  EXPECT_EQ(fiber["wait"]["kind"].get<std::string>(), "fd");
  EXPECT_EQ(fiber["wait"]["operation"].get<std::string>(), "readable");
  EXPECT_EQ(fiber["wait"]["fd"].get<int>(), client);
  EXPECT_EQ(fiber["wait"]["fd_info"].get<std::string>(), tcp.client_description());
}

// A worker blocked in a raw read: the dump names the call and the fd, in
// the JSON and in the STUCK line, and shows the blocking pool once used.
TEST(Dump, TheStuckLineNamesTheSystemCall) {
  Scheduler sched{test::config_with(1)};
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  std::atomic<bool> started{false};
  Fiber pool_user = sched.spawn([] { EXPECT_EQ(blocking([] { return 3; }), 3); });
  pool_user.join();
  Fiber blocker = sched.spawn({.name = "reader"}, [&] {
    started = true;
    char c;
    EXPECT_EQ(::syscall(SYS_read, fds[0], &c, 1), 1);
  });
  while (!started.load()) std::this_thread::yield();
  const std::string expected = "blocked in read(2) on fd " + std::to_string(fds[0]);
  std::string text;
  std::string blocked_in;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < deadline) {
    const auto answer = tools::request_dump(::getpid(), "dump", 30s);
    blocked_in = Json::parse(answer.text)["schedulers"][0]["workers"][0]["blocked_in"].get<std::string>();
    if (blocked_in == expected) {
      text = tools::render_dump_text(answer.snapshot);
      if (text.find("STUCK") != std::string::npos) break;
    }
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_EQ(::write(fds[1], "x", 1), 1);
  blocker.join();
  ::close(fds[0]);
  ::close(fds[1]);
  EXPECT_EQ(blocked_in, expected);
  EXPECT_NE(text.find("without a switch, " + expected), std::string::npos) << text;
  EXPECT_NE(text.find("weft::blocking: 1 of 16 helper threads, 0 busy, 0 calls queued, 1 done"), std::string::npos)
      << text;
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

// weft::Pool in the dump: text, JSON, --list and --top show each pool's
// name, mode, size, counters and latencies (tests/pool_dump_child.cpp).
class DumpOfPools : public ReadyChildTest {
 protected:
  DumpOfPools() : ReadyChildTest(WEFT_POOL_DUMP_CHILD) {}
};

TEST_F(DumpOfPools, TextAndJsonShowEveryPool) {
  const CliResult text = run_cli({pid()});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("Pool \"rpc-handler\" fibers on \"weft-default\" size=4 queued=0 running=1 completed=100 "
                          "failed=0\n   wait p50="),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("Pool \"db-writer\" threads size=2 queued=0 running=1 completed=100 failed=0\n"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("Scheduler \"weft-default\""), std::string::npos) << text.out;

  const CliResult json = run_cli({pid(), "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const Json dump = Json::parse(json.out);
  const auto& pools = dump["pools"];
  ASSERT_EQ(pools.size(), 2u);
  const auto& rpc = pools[0];
  EXPECT_EQ(rpc["name"].get<std::string>(), "rpc-handler");
  EXPECT_EQ(rpc["mode"].get<std::string>(), "fibers");
  EXPECT_EQ(rpc["scheduler"].get<std::string>(), "weft-default");
  EXPECT_EQ(rpc["size"].get<std::uint64_t>(), 4u);
  EXPECT_EQ(rpc["queued"].get<std::uint64_t>(), 0u);
  EXPECT_EQ(rpc["running"].get<std::uint64_t>(), 1u);
  EXPECT_EQ(rpc["completed"].get<std::uint64_t>(), 100u);
  EXPECT_EQ(rpc["wait"]["count"].get<std::uint64_t>(), 101u);  // the running task has started
  EXPECT_EQ(rpc["run"]["count"].get<std::uint64_t>(), 100u);
  // Each of the 100 slept 100 us.
  EXPECT_GE(rpc["run"]["p50_us"].get<double>(), 100.0);
  EXPECT_GE(rpc["run"]["max_us"].get<double>(), rpc["run"]["p99_us"].get<double>());
  EXPECT_EQ(pools[1]["name"].get<std::string>(), "db-writer");
  EXPECT_EQ(pools[1]["mode"].get<std::string>(), "threads");
  EXPECT_EQ(pools[1]["scheduler"].get<std::string>(), "");
}

TEST_F(DumpOfPools, ListAndTopShowThePools) {
  const CliResult list = run_cli({"--list"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_NE(list.out.find("pool \"rpc-handler\" fibers size=4 queued=0 running=1 completed=100\n"), std::string::npos)
      << list.out;
  EXPECT_NE(list.out.find("pool \"db-writer\" threads size=2 queued=0 running=1 completed=100\n"), std::string::npos)
      << list.out;

  const CliResult top = run_cli({pid(), "--top", "--iterations", "1"});
  ASSERT_EQ(top.exit_code, 0) << top.err;
  bool header = false, rpc = false, db = false;
  std::istringstream lines(top.out);
  for (std::string line; std::getline(lines, line);) {
    const std::vector<std::string> w = words(line);
    if (w == std::vector<std::string>{"POOL", "MODE", "SIZE", "QUEUED", "RUNNING", "DONE/s", "WAIT_ms(p50/p99/max)",
                                      "RUN_ms(p50/p99/max)"})
      header = true;
    else if (header && w.size() == 8 && w[0] == "rpc-handler")
      rpc = w[1] == "fibers" && w[2] == "4" && w[3] == "0" && w[4] == "1" && is_rate(w[5]) &&
            std::count(w[6].begin(), w[6].end(), '/') == 2 && std::count(w[7].begin(), w[7].end(), '/') == 2;
    else if (header && w.size() >= 6 && w[0] == "db-writer")
      db = w[1] == "threads" && w[2] == "2" && w[4] == "1";
  }
  EXPECT_TRUE(header) << top.out;
  EXPECT_TRUE(rpc) << top.out;
  EXPECT_TRUE(db) << top.out;
}

TEST(Dump, AThreadPoolAloneKeepsTheServerUp) {
  Child child({WEFT_POOL_DUMP_CHILD, "--threads-only"});
  ASSERT_EQ(child.read_line(), "ready");
  const CliResult text = run_cli({std::to_string(child.pid())});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("Pool \"db-writer\" threads size=2 queued=0 running=1 completed=100"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("(no running weft schedulers)"), std::string::npos) << text.out;
  EXPECT_EQ(child.finish(), 0);
}

}  // namespace
}  // namespace weft
