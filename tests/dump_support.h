// What the weft-dump tests share: running the real CLI and reading what
// it prints, child processes with pipes to and from the test, and a fake
// dump server.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <weft/weft.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "dump_client.h"
#include "test_support.h"

namespace weft::dump_test {

using namespace std::chrono_literals;
using Json = nlohmann::json;

// Sanitized children start slowly; a deadline only bounds a broken run.
inline constexpr auto kChildReadyTimeout = 120s;
inline constexpr int kRetries = 50;

// The socket `pid` listens on, as weft-dump finds it, and its file.
inline bool socket_exists(pid_t pid) {
  const std::string path = tools::find_dump_socket(pid);
  struct stat st;
  return !path.empty() && ::lstat(path.c_str(), &st) == 0;
}

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Environment changes for a child: a value, or none to unset it.
using EnvChanges = std::vector<std::pair<std::string, std::optional<std::string>>>;

inline void apply_env(const EnvChanges& env) {
  for (const auto& [name, value] : env) {
    if (value)
      ::setenv(name.c_str(), value->c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
}

// Waits for `pid` to exit, killing it if that takes longer than
// kChildReadyTimeout; its exit code, or 128 + the signal that ended it.
inline int wait_bounded(pid_t pid) {
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
inline CliResult run_cli(const std::vector<std::string>& args, const EnvChanges& env = {}) {
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
inline bool search_lines(std::string_view text, std::string_view start, Match&& match) {
  for (std::size_t at = text.find(start); at != std::string_view::npos; at = text.find(start, at + 1)) {
    Scan scan{text, at};
    if (match(scan).ok) return true;
  }
  return false;
}

inline const Json* find_fiber(const Json& dump, const std::string& name) {
  for (const auto& s : dump["schedulers"]) {
    for (const auto& f : s["fibers"])
      if (f["name"].get<std::string>() == name) return &f;
  }
  return nullptr;
}

// The lines of the fiber block of `name`: from its "- Fiber" line to the
// next blank line.
inline std::string fiber_block(const std::string& text, const std::string& name) {
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
inline constexpr ParkedIn kParkedIn[] = {{"queue-taker", "::take_from_queue(weft::BlockingQueue<int>&)"},
                                         {"mutex-waiter", "::lock_mutex(weft::Mutex&)"},
                                         {"sleeper", "::sleep_a_slice()"}};

// The sleeper runs for an instant every 100 ms; everything else stays put.
// A dump that read the sleeper parked may still have dropped its stack (it
// woke before the stack was walked): these retry such dumps too.
inline bool all_parked(const Json& dump) {
  for (const char* name : {"queue-taker", "pong", "mutex-waiter", "sleeper"}) {
    const Json* f = find_fiber(dump, name);
    if (f == nullptr || (*f)["state"].get<std::string>() != "parked" || (*f)["wait"].is_null()) return false;
  }
  for (const ParkedIn& parked : kParkedIn)
    if ((*find_fiber(dump, parked.fiber))["stack"].size() < 2) return false;
  return true;
}

inline bool text_shows_all_parked(const std::string& text) {
  if (text.find("waiting on weft::this_fiber (sleep)") == std::string::npos ||
      text.find("(lock) for") == std::string::npos)
    return false;
  for (const ParkedIn& parked : kParkedIn) {
    const std::string block = fiber_block(text, parked.fiber);
    std::size_t frames = 0;
    for (std::size_t at = block.find("\n      at "); at != std::string::npos; at = block.find("\n      at ", at + 1))
      ++frames;
    if (frames < 2) return false;
  }
  return true;
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

// A connection to this process's server; `request` sent, nothing read.
inline int connect_to_self(const std::string& request = "") {
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

}  // namespace weft::dump_test
