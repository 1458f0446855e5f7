#include "dump_client.h"

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string_view>

#include "introspect/dump_socket.h"

namespace weft::tools {
namespace {

using Clock = std::chrono::steady_clock;

std::string process_name(pid_t pid) {
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(comm, name);
  return name;
}

std::string describe(pid_t pid) {
  const std::string name = process_name(pid);
  return "process " + std::to_string(pid) + (name.empty() ? "" : " (" + name + ")");
}

// The first error that explains why `pid` cannot be dumped by this user,
// before looking for a socket.
void check_process(pid_t pid) {
  if (::kill(pid, 0) != 0) {
    if (errno == ESRCH) throw DumpUnavailable("no process with pid " + std::to_string(pid));
    if (errno == EPERM)
      throw DumpUnavailable(describe(pid) +
                            " belongs to another user; run weft-dump as that user (e.g. sudo -u <user> weft-dump)");
  }
  // Root may signal anyone, but a process's socket sits in its own user's
  // private directory, and its server answers only that user.
  struct stat st;
  if (::stat(("/proc/" + std::to_string(pid)).c_str(), &st) == 0 && st.st_uid != ::geteuid())
    throw DumpUnavailable(describe(pid) + " belongs to another user (uid " + std::to_string(st.st_uid) +
                          "); run weft-dump as that user (e.g. sudo -u <user> weft-dump)");
}

std::string find_socket(pid_t pid) {
  for (const std::string& directory : detail::dump_socket_directories()) {
    const std::string path = detail::dump_socket_path(directory, pid);
    struct stat st;
    if (::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) return path;
  }
  return {};
}

std::string not_weft(pid_t pid, const std::string& detail) {
  return describe(pid) + " is not a weft process, or has dumps turned off (Config::dump, WEFT_DUMP=0)" + detail;
}

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

// Waits for `events` on `fd` until `deadline`; false on timeout.
bool wait_for(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, remaining_ms(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return false;
  }
}

class Socket {
 public:
  Socket() : fd_(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) {
    if (fd_ < 0) throw DumpUnavailable(std::string("socket: ") + std::strerror(errno));
  }
  ~Socket() { ::close(fd_); }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

constexpr std::size_t kChunk = 256 * 1024;

// Receives the answer into `sink`: recv() into sink.reserve_tail(kChunk),
// then sink.commit(bytes), straight into its storage.
template <class Sink>
void exchange(pid_t pid, const std::string& path, const std::string& request, Clock::time_point deadline,
              std::chrono::milliseconds timeout, Sink&& sink) {
  const std::string timed_out = describe(pid) + " did not answer within " +
                                std::to_string(timeout.count() / 1000.0).substr(0, 4) +
                                " s (is it stopped, or out of memory?)";
  Socket socket;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) throw DumpUnavailable("socket path too long: " + path);
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  if (::connect(socket.fd(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    if (errno == EAGAIN || errno == EINPROGRESS) {
      // The listen backlog is full: the server is busy or stuck.
      if (!wait_for(socket.fd(), POLLOUT, deadline)) throw DumpUnavailable(timed_out);
      int error = 0;
      socklen_t size = sizeof(error);
      ::getsockopt(socket.fd(), SOL_SOCKET, SO_ERROR, &error, &size);
      if (error != 0) throw DumpUnavailable(not_weft(pid, " (connect: " + std::string(std::strerror(error)) + ")"));
    } else if (errno == ECONNREFUSED) {
      throw DumpUnavailable(not_weft(pid, ": its socket " + path + " is not being served"));
    } else {
      throw DumpUnavailable("cannot connect to " + path + ": " + std::strerror(errno));
    }
  }
  const std::string line = request + "\n";
  std::size_t sent = 0;
  while (sent < line.size()) {
    if (!wait_for(socket.fd(), POLLOUT, deadline)) throw DumpUnavailable(timed_out);
    const ssize_t n = ::send(socket.fd(), line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) throw DumpUnavailable(describe(pid) + " closed the connection: " + std::strerror(errno));
    sent += static_cast<std::size_t>(n);
  }
  for (;;) {
    if (!wait_for(socket.fd(), POLLIN, deadline)) throw DumpUnavailable(timed_out);
    char* tail = sink.reserve_tail(kChunk);
    const ssize_t n = ::recv(socket.fd(), tail, kChunk, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) throw DumpUnavailable(describe(pid) + " broke the connection: " + std::strerror(errno));
    if (n == 0) break;
    sink.commit(static_cast<std::size_t>(n));
  }
}

// The answer as a whole: a 100,000-fiber dump is ~30 MB.
ByteBuffer receive(pid_t pid, const std::string& request, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  check_process(pid);
  const std::string path = find_socket(pid);
  if (path.empty()) throw DumpUnavailable(not_weft(pid, ""));
  ByteBuffer answer;
  exchange(pid, path, request, deadline, timeout, answer);
  return answer;
}

// The server writes `{"weft_dump":1,"process":` first in a dump, and
// `{"weft_dump":1,"error":` in a refusal: this much tells them apart.
constexpr std::size_t kDecisivePrefix = 32;

bool looks_like_dump(std::string_view answer) {
  constexpr std::string_view start = "{\"weft_dump\":";
  if (answer.substr(0, start.size()) != start) return false;
  std::size_t i = start.size();
  while (i < answer.size() && answer[i] >= '0' && answer[i] <= '9') ++i;
  return i > start.size() && answer.substr(i, 11) == ",\"process\":";
}

// Throws DumpUnavailable with the reason when `answer` is not a dump.
void check_answer(pid_t pid, std::string_view answer) {
  if (answer.empty()) throw DumpUnavailable(describe(pid) + " closed the connection without answering");
  if (looks_like_dump(answer)) return;
  JsonValue json;
  try {
    json = parse_json(answer);
  } catch (const JsonError& e) {
    throw DumpUnavailable(describe(pid) + " answered something that is not a weft dump: " + e.what());
  }
  if (json.type() != JsonValue::Type::object || !json.has("weft_dump"))
    throw DumpUnavailable(describe(pid) + " answered something that is not a weft dump");
  if (json.has("error")) throw DumpUnavailable(describe(pid) + " refused the dump: " + json.str("error"));
}

}  // namespace

DumpAnswer request_dump(pid_t pid, const std::string& request, std::chrono::milliseconds timeout) {
  const ByteBuffer received = receive(pid, request, timeout);
  std::string answer(received.view());
  check_answer(pid, answer);
  JsonValue json;
  try {
    json = parse_json(answer);
  } catch (const JsonError& e) {
    throw DumpUnavailable(describe(pid) + " answered something that is not a weft dump: " + e.what());
  }
  return {std::move(answer), std::move(json)};
}

ByteBuffer request_dump_text(pid_t pid, const std::string& request, std::chrono::milliseconds timeout) {
  ByteBuffer answer = receive(pid, request, timeout);
  check_answer(pid, answer.view());
  return answer;
}

void stream_dump(pid_t pid, std::chrono::milliseconds timeout, std::FILE* out) {
  const auto deadline = Clock::now() + timeout;
  check_process(pid);
  const std::string path = find_socket(pid);
  if (path.empty()) throw DumpUnavailable(not_weft(pid, ""));
  // Held back until the prefix shows a dump (then everything flows
  // through), or to the end (a refusal: a few bytes, explained as usual).
  struct Sink {
    std::FILE* out;
    ByteBuffer head;
    bool streaming = false;
    char* reserve_tail(std::size_t bytes) { return head.reserve_tail(bytes); }
    void commit(std::size_t bytes) {
      head.commit(bytes);
      if (!streaming && (head.size() < kDecisivePrefix || !looks_like_dump(head.view()))) return;
      streaming = true;
      std::fwrite(head.data(), 1, head.size(), out);
      head.clear();  // keeps its storage for the next chunk
    }
  } sink{out, {}};
  exchange(pid, path, "dump", deadline, timeout, sink);
  if (sink.streaming) return;
  check_answer(pid, sink.head.view());
  std::fwrite(sink.head.data(), 1, sink.head.size(), out);  // a whole dump shorter than the prefix
}

std::vector<pid_t> find_dump_processes() {
  std::vector<pid_t> pids;
  for (const std::string& directory : detail::dump_socket_directories()) {
    DIR* dir = ::opendir(directory.c_str());
    if (dir == nullptr) continue;
    while (const dirent* entry = ::readdir(dir)) {
      const std::string name = entry->d_name;
      const std::size_t dot = name.find(".sock");
      if (dot == 0 || dot == std::string::npos || dot + 5 != name.size()) continue;
      if (!std::all_of(name.begin(), name.begin() + static_cast<long>(dot),
                       [](char c) { return c >= '0' && c <= '9'; }))
        continue;
      const pid_t pid = static_cast<pid_t>(std::stol(name.substr(0, dot)));
      if (::kill(pid, 0) != 0 && errno == ESRCH) {
        ::unlink((directory + "/" + name).c_str());  // its process died without cleaning up
        continue;
      }
      pids.push_back(pid);
    }
    ::closedir(dir);
  }
  std::sort(pids.begin(), pids.end());
  pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
  return pids;
}

}  // namespace weft::tools
