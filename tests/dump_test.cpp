// weft-dump end to end: a child process (tests/dump_child.cpp) parks fibers
// on a BlockingQueue, a Mutex and in a sleep; the test runs the real CLI on
// it and checks the text and the JSON. Then the refusals, the socket's life
// and a dump taken while the only worker is stuck.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <weft/weft.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "dump_client.h"
#include "introspect/dump_socket.h"
#include "json.h"
#include "test_support.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using tools::JsonValue;

// Sanitized children start slowly; a deadline only bounds a broken run.
constexpr auto kChildReadyTimeout = 120s;
constexpr int kRetries = 50;

bool socket_exists(pid_t pid) {
  for (const std::string& directory : detail::dump_socket_directories()) {
    struct stat st;
    if (::lstat(detail::dump_socket_path(directory, pid).c_str(), &st) == 0) return true;
  }
  return false;
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

// Runs weft-dump with `args`; its output goes through files, so that a
// large dump cannot fill a pipe while we wait for the exit.
CliResult run_cli(const std::vector<std::string>& args) {
  char out_path[] = "/tmp/weft-dump-test-out-XXXXXX";
  char err_path[] = "/tmp/weft-dump-test-err-XXXXXX";
  const int out_fd = ::mkstemp(out_path);
  const int err_fd = ::mkstemp(err_path);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    std::vector<char*> argv{const_cast<char*>(WEFT_DUMP_CLI)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  CliResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = read_file(out_path);
  result.err = read_file(err_path);
  ::close(out_fd);
  ::close(err_fd);
  ::unlink(out_path);
  ::unlink(err_path);
  return result;
}

// A child process started with its stdin and stdout on pipes.
class Child {
 public:
  // `dump_off` sets WEFT_DUMP=0; `uid`, if set, is the child's user.
  explicit Child(const std::vector<std::string>& argv, bool dump_off = false, std::optional<uid_t> uid = {}) {
    ::signal(SIGPIPE, SIG_IGN);  // a child that died early fails the test, not the test binary
    int in[2], out[2];
    EXPECT_EQ(::pipe2(in, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      if (dump_off) ::setenv("WEFT_DUMP", "0", 1);
      if (uid && (::setgid(*uid) != 0 || ::setuid(*uid) != 0)) ::_exit(126);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execvp(args[0], args.data());
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    stdin_ = in[1];
    stdout_ = out[0];
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(stdin_);
    ::close(stdout_);
  }

  pid_t pid() const { return pid_; }

  // The child's first line, or "" if none came in time.
  std::string read_line() {
    std::string line;
    const auto deadline = std::chrono::steady_clock::now() + kChildReadyTimeout;
    char c;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{stdout_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      if (::read(stdout_, &c, 1) != 1) break;
      if (c == '\n') return line;
      line += c;
    }
    return line;
  }

  // Lets the child finish (dump_child waits for a line) and returns its
  // exit status.
  int finish() {
    EXPECT_EQ(::write(stdin_, "\n", 1), 1);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  int stdout_ = -1;
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

const JsonValue* find_fiber(const JsonValue& dump, const std::string& name) {
  for (const auto& s : dump["schedulers"].as_array()) {
    for (const auto& f : s["fibers"].as_array())
      if (f.str("name") == name) return &f;
  }
  return nullptr;
}

// The sleeper runs for an instant every 100 ms; everything else stays put.
bool all_parked(const JsonValue& dump) {
  for (const char* name : {"queue-taker", "pong", "mutex-waiter", "sleeper"}) {
    const JsonValue* f = find_fiber(dump, name);
    if (f == nullptr || f->str("state") != "parked" || (*f)["wait"].is_null()) return false;
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

class DumpOfChild : public ::testing::Test {
 protected:
  void SetUp() override {
    child_ = std::make_unique<Child>(std::vector<std::string>{WEFT_DUMP_CHILD});
    ASSERT_EQ(child_->read_line(), "ready");
  }
  void TearDown() override {
    if (child_) {
      EXPECT_EQ(child_->finish(), 0);
    }
  }
  std::string pid() const { return std::to_string(child_->pid()); }
  std::unique_ptr<Child> child_;
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
  EXPECT_NE(text.find("Scheduler \"dump-child\": 2 workers, 4 fibers"), std::string::npos) << text;
  EXPECT_TRUE(search_lines(text, "\n  Worker 0 [tid ", [](Scan& s) -> Scan& {
    return s.lit("\n  Worker 0 [tid ").digits(nullptr, true).lit("] ").one_of({"running ", "searching ", "sleeping "});
  })) << text;
  EXPECT_TRUE(search_lines(text, "\n  Worker 1 [tid ", [](Scan& s) -> Scan& {
    return s.lit("\n  Worker 1 [tid ").digits(nullptr, true).lit("] ");
  })) << text;

  // - Fiber [0x...] "NAME" #N active=A steal=S steal_fail=F preempt=P park=K/-1
  //    parked (last ran on worker 0|1)
  //    waiting on WAIT for T ms|s
  using Wait = Scan& (*)(Scan&);
  auto expect_fiber = [&](const std::string& name, Wait wait, std::uint64_t min_active) {
    std::uint64_t active = 0, park = 0;
    const bool found = search_lines(text, "- Fiber [", [&](Scan& s) -> Scan& {
      s.lit("- Fiber [").hex().lit("] \"" + name + "\" #").digits().lit(" active=").digits(&active);
      s.lit(" steal=").digits().lit(" steal_fail=").digits().lit(" preempt=").digits().lit(" park=").digits(&park);
      s.lit("/-1\n   parked (last ran on worker ").one_of({"0", "1"}).lit(")\n   waiting on ");
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
  JsonValue dump;
  for (int i = 0; i < kRetries; ++i) {
    const CliResult result = run_cli({pid(), "--json"});
    ASSERT_EQ(result.exit_code, 0) << result.err;
    dump = tools::parse_json(result.out);
    if (all_parked(dump)) break;
  }
  EXPECT_EQ(dump.integer("weft_dump"), 1);
  EXPECT_EQ(dump["process"].integer("pid"), child_->pid());
  EXPECT_EQ(dump["process"].str("name"), "dump_child");
  EXPECT_GT(dump["process"].integer("unix_time_ms"), 0);
  const auto& schedulers = dump["schedulers"].as_array();
  ASSERT_EQ(schedulers.size(), 1u);
  EXPECT_EQ(schedulers[0].str("name"), "dump-child");
  EXPECT_EQ(schedulers[0].uint("fiber_count"), 4u);
  const auto& workers = schedulers[0]["workers"].as_array();
  ASSERT_EQ(workers.size(), 2u);
  std::uint64_t fibers_run = 0, parks = 0;
  for (std::size_t i = 0; i < workers.size(); ++i) {
    EXPECT_EQ(workers[i].uint("index"), i);
    EXPECT_GT(workers[i].integer("os_thread_id"), 0);
    EXPECT_TRUE(workers[i].str("state") == "running" || workers[i].str("state") == "searching" ||
                workers[i].str("state") == "sleeping")
        << workers[i].str("state");
    fibers_run += workers[i].uint("fibers_run");
    parks += workers[i].uint("parks");
  }
  // Every fiber ran and parked at least once, the sleeper three times.
  EXPECT_GE(fibers_run, 6u);
  EXPECT_GE(parks, 6u);

  auto expect_parked = [&](const std::string& name, const std::string& kind, const std::string& operation,
                           bool has_object) {
    const JsonValue* f = find_fiber(dump, name);
    ASSERT_NE(f, nullptr) << name;
    EXPECT_EQ(f->str("state"), "parked") << name;
    EXPECT_EQ(f->integer("park_state"), -1) << name;
    EXPECT_GE(f->uint("park"), 1u) << name;
    EXPECT_GE(f->uint("active"), 1u) << name;
    EXPECT_GT(f->uint("id"), 0u) << name;
    EXPECT_TRUE(f->integer("worker") == 0 || f->integer("worker") == 1) << name;
    EXPECT_FALSE((*f)["pinned"].as_bool()) << name;
    EXPECT_EQ(f->str("address").rfind("0x", 0), 0u) << name;
    const JsonValue& wait = (*f)["wait"];
    ASSERT_FALSE(wait.is_null()) << name;
    EXPECT_EQ(wait.str("kind"), kind) << name;
    EXPECT_EQ(wait.str("operation"), operation) << name;
    EXPECT_EQ(wait["object"].is_null(), !has_object) << name;
    EXPECT_GE(wait["ms"].as_double(), 0.0) << name;
  };
  expect_parked("queue-taker", "weft::BlockingQueue", "take", true);
  expect_parked("pong", "weft::BlockingQueue", "take", true);
  expect_parked("mutex-waiter", "weft::Mutex", "lock", true);
  expect_parked("sleeper", "weft::this_fiber", "sleep", false);
  EXPECT_GE(find_fiber(dump, "sleeper")->uint("active"), 3u);
  EXPECT_GE(find_fiber(dump, "sleeper")->uint("park"), 3u);
  // Each parked fiber's stack, innermost first, holds the function that
  // parked it; with debug information, its file and line.
  // The stacks hold addresses; "symbols" says what each one is.
  for (const ParkedIn& parked : kParkedIn) {
    const JsonValue& stack = (*find_fiber(dump, parked.fiber))["stack"];
    ASSERT_GE(stack.as_array().size(), 2u) << parked.fiber;
    bool found = false;
    for (const JsonValue& address : stack.as_array()) {
      EXPECT_EQ(address.as_string().rfind("0x", 0), 0u) << parked.fiber;
      ASSERT_TRUE(dump["symbols"].has(address.as_string())) << address.as_string();
      const JsonValue& frame = dump["symbols"][address.as_string()];
      EXPECT_FALSE(frame["module"].is_null()) << parked.fiber;
      EXPECT_EQ(frame.str("offset").rfind("0x", 0), 0u) << parked.fiber;
      if (frame["function"].is_null() || frame.str("function").find(parked.function) == std::string::npos) continue;
      found = true;
      if (!frame["file"].is_null()) {
        EXPECT_NE(frame.str("file").find("dump_child.cpp"), std::string::npos) << frame.str("file");
        EXPECT_GT(frame.uint("line"), 0u) << parked.fiber;
      }
    }
    EXPECT_TRUE(found) << parked.function << " in the stack of " << parked.fiber;
  }

  // Two queues, two objects: the taker and pong wait on different ones.
  EXPECT_NE(find_fiber(dump, "queue-taker")->operator[]("wait").str("object"),
            find_fiber(dump, "pong")->operator[]("wait").str("object"));
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

TEST(Dump, RefusesAnotherUsersProcess) {
  // As root, a weft child run as nobody; otherwise init, which is root's.
  std::unique_ptr<Child> child;
  pid_t pid = 1;
  if (::geteuid() == 0) {
    child = std::make_unique<Child>(std::vector<std::string>{WEFT_DUMP_CHILD}, false, 65534);
    ASSERT_EQ(child->read_line(), "ready");
    pid = child->pid();
  }
  const CliResult result = run_cli({std::to_string(pid)});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.out, "");
  EXPECT_NE(result.err.find("belongs to another user"), std::string::npos) << result.err;
  if (child) {
    EXPECT_EQ(child->finish(), 0);
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
        ASSERT_EQ(answer.json["schedulers"].as_array().size(), 2u);  // `quiet` is not shown
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
  const auto& schedulers = answer.json["schedulers"].as_array();
  ASSERT_EQ(schedulers.size(), 1u);
  const auto& fibers = schedulers[0]["fibers"].as_array();
  ASSERT_EQ(fibers.size(), 1u);
  EXPECT_EQ(fibers[0].str("name"), "stuck");
  EXPECT_EQ(fibers[0].str("state"), "running");
  EXPECT_EQ(fibers[0].integer("park_state"), 0);
  EXPECT_EQ(fibers[0].integer("worker"), 0);
  EXPECT_EQ(schedulers[0]["workers"].as_array()[0].str("state"), "running");
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

// weft::Pool in the dump: text, JSON, --list and --top show each pool's
// name, mode, size, counters and latencies (tests/pool_dump_child.cpp).
class DumpOfPools : public ::testing::Test {
 protected:
  void SetUp() override {
    child_ = std::make_unique<Child>(std::vector<std::string>{WEFT_POOL_DUMP_CHILD});
    ASSERT_EQ(child_->read_line(), "ready");
  }
  void TearDown() override {
    if (child_) {
      EXPECT_EQ(child_->finish(), 0);
    }
  }
  std::string pid() const { return std::to_string(child_->pid()); }
  std::unique_ptr<Child> child_;
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
  const JsonValue dump = tools::parse_json(json.out);
  const auto& pools = dump["pools"].as_array();
  ASSERT_EQ(pools.size(), 2u);
  const JsonValue& rpc = pools[0];
  EXPECT_EQ(rpc.str("name"), "rpc-handler");
  EXPECT_EQ(rpc.str("mode"), "fibers");
  EXPECT_EQ(rpc.str("scheduler"), "weft-default");
  EXPECT_EQ(rpc.uint("size"), 4u);
  EXPECT_EQ(rpc.uint("queued"), 0u);
  EXPECT_EQ(rpc.uint("running"), 1u);
  EXPECT_EQ(rpc.uint("completed"), 100u);
  EXPECT_EQ(rpc["wait"].uint("count"), 101u);  // the running task has started
  EXPECT_EQ(rpc["run"].uint("count"), 100u);
  // Each of the 100 slept 100 us.
  EXPECT_GE(rpc["run"]["p50_us"].as_double(), 100.0);
  EXPECT_GE(rpc["run"]["max_us"].as_double(), rpc["run"]["p99_us"].as_double());
  EXPECT_EQ(pools[1].str("name"), "db-writer");
  EXPECT_EQ(pools[1].str("mode"), "threads");
  EXPECT_EQ(pools[1].str("scheduler"), "");
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
