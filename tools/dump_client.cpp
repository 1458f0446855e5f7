#include "dump_client.h"

#include <dirent.h>
#include <fmt/format.h>
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
#include <set>
#include <sstream>
#include <string_view>
#include <thread>

#include "introspect/dump_protocol.h"

namespace weft::tools {
namespace {

using Clock = std::chrono::steady_clock;
using detail::remaining_ms;
using detail::wait_for;

std::string process_name(pid_t pid) {
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(comm, name);
  return printable(name);
}

std::string describe(pid_t pid) {
  const std::string name = process_name(pid);
  return "process " + std::to_string(pid) + (name.empty() ? "" : " (" + name + ")");
}

// The value of a field of /proc/<pid>/status ("Tgid", "State"), or "".
std::string status_field(pid_t pid, std::string_view field) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.size() > field.size() && line.compare(0, field.size(), field) == 0 && line[field.size()] == ':') {
      const std::size_t value = line.find_first_not_of(" \t", field.size() + 1);
      return value == std::string::npos ? "" : line.substr(value);
    }
  }
  return "";
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
  // A thread's id (top -H, ps -L show them) answers kill(2) and has a
  // /proc entry, but the dump socket is its process's.
  const std::string process = status_field(pid, "Tgid");
  if (!process.empty() && process != std::to_string(pid)) {
    const pid_t tgid = static_cast<pid_t>(std::stol(process));
    throw DumpUnavailable(std::to_string(pid) + " is a thread (" + process_name(pid) + ") of " + describe(tgid) +
                          "; dump that: weft-dump " + process);
  }
  if (status_field(pid, "State").rfind('Z', 0) == 0)
    throw DumpUnavailable(describe(pid) + " has exited: a zombie its parent has not reaped yet");
  // Root may signal anyone, but a process's server answers only its own
  // user.
  struct stat st;
  if (::stat(("/proc/" + std::to_string(pid)).c_str(), &st) == 0 && st.st_uid != ::geteuid())
    throw DumpUnavailable(describe(pid) + " belongs to another user (uid " + std::to_string(st.st_uid) +
                          "); run weft-dump as that user (e.g. sudo -u <user> weft-dump)");
}

// The inodes of the sockets `pid` holds open ("socket:[12345]" links);
// `why` says why they could not be read.
std::set<unsigned long> socket_inodes(pid_t pid, std::string* why) {
  std::set<unsigned long> inodes;
  const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* dir = ::opendir(fd_dir.c_str());
  if (dir == nullptr) {
    if (why != nullptr && errno == EACCES)
      *why = ": cannot read " + fd_dir +
             " (a process that changed its user without exec is not dumpable; it can call "
             "prctl(PR_SET_DUMPABLE, 1))";
    return inodes;
  }
  while (const dirent* entry = ::readdir(dir)) {
    char target[64];
    const ssize_t n = ::readlinkat(::dirfd(dir), entry->d_name, target, sizeof(target) - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    unsigned long inode = 0;
    if (std::sscanf(target, "socket:[%lu]", &inode) == 1) inodes.insert(inode);
  }
  ::closedir(dir);
  return inodes;
}

// The listening Unix sockets of a network namespace (/proc/<pid>/net/unix
// lines: Num RefCount Protocol Flags Type St Inode Path), by inode.
struct UnixSocket {
  unsigned long inode;
  std::string path;
};
std::vector<UnixSocket> listening_unix_sockets(const std::string& table) {
  constexpr unsigned long kAcceptConnections = 0x10000;  // __SO_ACCEPTCON in Flags
  std::vector<UnixSocket> sockets;
  std::ifstream in(table);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string num, refs, protocol, flags, type, state, path;
    unsigned long inode = 0;
    if (!(fields >> num >> refs >> protocol >> flags >> type >> state >> inode)) continue;
    // The path is the rest of the line, spaces and all (one space before it).
    std::getline(fields, path);
    if (path.empty() || path[0] != ' ') continue;
    path.erase(0, 1);
    if ((std::stoul(flags, nullptr, 16) & kAcceptConnections) == 0) continue;
    sockets.push_back({inode, path});
  }
  return sockets;
}

bool is_dump_socket_of(const std::string& path, pid_t pid) {
  std::string name(1, '/');  // not "/" + ...: GCC 12 draws a false -Wrestrict from that
  name += std::to_string(pid);
  name += detail::kDumpSocketSuffix;
  return path.size() > name.size() && path.compare(path.size() - name.size(), name.size(), name) == 0;
}

std::string not_weft(pid_t pid, const std::string& detail) {
  return describe(pid) + " is not a weft process, or has dumps turned off (Config::dump, WEFT_DUMP=0)" + detail;
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

std::string seconds_text(std::chrono::milliseconds timeout) {
  return fmt::format("{:.1f} s", static_cast<double>(timeout.count()) / 1000);
}

// Connects to `path` and checks, before a byte is believed, that the
// directory is private to this user and that the peer is `pid` itself of
// this user (SO_PEERCRED), not whoever planted a socket under its name.
void connect_checked(const Socket& socket, pid_t pid, const std::string& path, Clock::time_point deadline,
                     std::chrono::milliseconds timeout) {
  const std::string directory = path.substr(0, path.rfind('/'));
  if (const std::string why = detail::check_private_directory(directory, ::geteuid()); !why.empty())
    throw DumpUnavailable("refusing the dump socket of " + describe(pid) + ": " + why);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) throw DumpUnavailable("socket path too long: " + path);
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  // A full listen backlog makes a non-blocking Unix connect fail with
  // EAGAIN (there is no connect in progress to wait for): try again until
  // the deadline, then say the server is busy.
  for (;;) {
    if (::connect(socket.fd(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) break;
    if (errno == EINTR) continue;
    if (errno == EAGAIN) {
      if (remaining_ms(deadline) == 0)
        throw DumpUnavailable("the dump server of " + describe(pid) +
                              " is busy: its connection queue stayed full for " + seconds_text(timeout) +
                              "; try again");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    if (errno == ECONNREFUSED) throw DumpUnavailable(not_weft(pid, ": its socket " + path + " is not being served"));
    throw DumpUnavailable("cannot connect to " + path + ": " + std::strerror(errno));
  }
  ucred peer{};
  socklen_t size = sizeof(peer);
  if (::getsockopt(socket.fd(), SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0)
    throw DumpUnavailable("cannot check who serves " + path + ": " + std::strerror(errno));
  if (peer.uid != ::geteuid() || peer.pid != pid)
    throw DumpUnavailable("refusing the dump socket " + path + ": it is served by pid " + std::to_string(peer.pid) +
                          " (uid " + std::to_string(peer.uid) + "), not by " + describe(pid) + " (uid " +
                          std::to_string(::geteuid()) + ")");
}

// Receives the answer into `sink`: recv() into sink.reserve_tail(kChunk),
// then sink.commit(bytes), straight into its storage.
constexpr std::size_t kChunk = 256 * 1024;

template <class Sink>
void exchange(pid_t pid, const std::string& request, std::chrono::milliseconds timeout, Sink&& sink) {
  const auto deadline = Clock::now() + timeout;
  check_process(pid);
  std::string why;
  const std::string path = find_dump_socket(pid, &why);
  if (path.empty()) throw DumpUnavailable(not_weft(pid, why));
  const std::string timed_out =
      describe(pid) + " did not answer within " + seconds_text(timeout) + " (is it stopped, or out of memory?)";
  Socket socket;
  connect_checked(socket, pid, path, deadline, timeout);
  const std::string line = request + "\n";
  std::size_t sent = 0;
  while (sent < line.size()) {
    if (!wait_for(socket.fd(), POLLOUT, deadline)) throw DumpUnavailable(timed_out);
    const ssize_t n = ::send(socket.fd(), line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) break;  // it answered at once (busy): read why
    if (n < 0) throw DumpUnavailable(describe(pid) + " closed the connection: " + std::strerror(errno));
    sent += static_cast<std::size_t>(n);
  }
  for (;;) {
    if (!wait_for(socket.fd(), POLLIN, deadline)) throw DumpUnavailable(timed_out);
    char* tail = sink.reserve_tail(kChunk);
    const ssize_t n = ::recv(socket.fd(), tail, kChunk, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    // A server that refuses at once (busy), or stops as its process shuts
    // down, closes with our request unread, which resets the connection
    // once whatever it wrote has been read: the end. read_answer() tells a
    // refusal from a dump cut short, or from no answer at all.
    if (n < 0 && errno == ECONNRESET) break;
    if (n < 0) throw DumpUnavailable(describe(pid) + " broke the connection: " + std::strerror(errno));
    if (n == 0) break;
    sink.commit(static_cast<std::size_t>(n));
  }
}

// A string grown by recv() without zeroing what it will overwrite anyway
// costs little next to parsing: kept simple.
struct StringSink {
  std::string text;
  std::size_t used = 0;
  char* reserve_tail(std::size_t bytes) {
    if (text.size() < used + bytes) text.resize(std::max(text.size() * 2, used + bytes));
    return text.data() + used;
  }
  void commit(std::size_t bytes) { used += bytes; }
  std::string take() {
    text.resize(used);
    return std::move(text);
  }
};

// The server writes `{"weft_dump":N,"process":` first in a dump, and
// `{"weft_dump":N,"error":` in a refusal: this much tells them apart.
constexpr std::size_t kDecisivePrefix = 32;

bool looks_like_dump(std::string_view answer) {
  constexpr std::string_view start = "{\"weft_dump\":";
  if (answer.substr(0, start.size()) != start) return false;
  std::size_t i = start.size();
  while (i < answer.size() && answer[i] >= '0' && answer[i] <= '9') ++i;
  return i > start.size() && answer.substr(i, 11) == ",\"process\":";
}

// A document ends with "}\n": a dump that does not was cut short, by a
// server that stopped (its process shutting down or exiting) while it
// wrote, which is not a dump of another format.
bool complete(std::string_view answer) { return answer.size() >= 2 && answer.substr(answer.size() - 2) == "}\n"; }

DumpUnavailable exited_during_dump(pid_t pid, const std::string& detail) {
  return DumpUnavailable(describe(pid) + ": the process exited (or shut down) during the dump (" + detail + ")");
}

}  // namespace

ProcessSnapshot read_answer(pid_t pid, std::string_view answer) {
  if (answer.empty()) throw exited_during_dump(pid, "it closed the connection without answering");
  if (looks_like_dump(answer) && !complete(answer))
    throw exited_during_dump(pid, "its answer ends after " + std::to_string(answer.size()) + " bytes");
  try {
    return read_dump(answer);
  } catch (const DumpRefused& e) {
    throw DumpUnavailable(describe(pid) + " refused the dump: " + e.what());
  } catch (const DumpFormatError& e) {
    throw DumpUnavailable(describe(pid) +
                          " answered something that is not a dump this weft-dump can read: " + e.what());
  }
}

std::string find_dump_socket(pid_t pid, std::string* why) {
  const std::set<unsigned long> inodes = socket_inodes(pid, why);
  if (inodes.empty()) return {};
  for (const UnixSocket& socket : listening_unix_sockets("/proc/" + std::to_string(pid) + "/net/unix"))
    if (inodes.count(socket.inode) != 0 && is_dump_socket_of(socket.path, pid)) return socket.path;
  return {};
}

DumpAnswer request_dump(pid_t pid, const std::string& request, std::chrono::milliseconds timeout) {
  StringSink sink;
  exchange(pid, request, timeout, sink);
  DumpAnswer answer;
  answer.text = sink.take();
  answer.snapshot = read_answer(pid, answer.text);
  return answer;
}

namespace {

// The trace recorder writes `{"displayTimeUnit":...,"traceEvents":[`.
constexpr std::string_view kTraceStart = "{\"displayTimeUnit\":";

// Copies the answer to `request` to `out` as it arrives, once its first
// bytes show the document `wanted` says it is (a refusal is held back, to
// the end, and explained as usual).
void stream_answer(pid_t pid, const std::string& request, std::chrono::milliseconds timeout, std::FILE* out,
                   bool (*wanted)(std::string_view)) {
  struct Sink {
    std::FILE* out;
    bool (*wanted)(std::string_view);
    StringSink head;
    bool streaming = false;
    std::size_t written = 0;
    std::string tail;  // the last two bytes written, to see the document's end
    char* reserve_tail(std::size_t bytes) { return head.reserve_tail(bytes); }
    void commit(std::size_t bytes) {
      head.commit(bytes);
      const std::string_view seen(head.text.data(), head.used);
      if (!streaming && (seen.size() < kDecisivePrefix || !wanted(seen))) return;
      streaming = true;
      std::fwrite(seen.data(), 1, seen.size(), out);
      written += seen.size();
      tail += seen.substr(seen.size() - std::min<std::size_t>(2, seen.size()));
      tail.erase(0, tail.size() - std::min<std::size_t>(2, tail.size()));
      head.used = 0;  // keeps its storage for the next chunk
    }
  } sink{out, wanted, {}, false, 0, {}};
  exchange(pid, request, timeout, sink);
  if (sink.streaming) {
    // Already printed: all there is to do is to say that it is not whole.
    if (!complete(sink.tail))
      throw exited_during_dump(pid, "its answer ends after " + std::to_string(sink.written) + " bytes");
    return;
  }
  const std::string head = sink.head.take();
  if (!wanted(head)) read_answer(pid, head);      // throws: a refusal, or nothing
  std::fwrite(head.data(), 1, head.size(), out);  // a whole document shorter than the prefix
}

}  // namespace

void stream_dump(pid_t pid, std::chrono::milliseconds timeout, std::FILE* out) {
  stream_answer(pid, std::string(detail::kDumpRequestFull), timeout, out, &looks_like_dump);
}

void stream_trace(pid_t pid, std::chrono::milliseconds duration, std::chrono::milliseconds timeout, std::FILE* out) {
  stream_answer(pid, std::string(detail::kDumpRequestTrace) + " " + std::to_string(duration.count()),
                duration + timeout, out,
                [](std::string_view answer) { return answer.substr(0, kTraceStart.size()) == kTraceStart; });
}

std::vector<pid_t> find_dump_processes() {
  // Every listening socket named like a dump socket in our network
  // namespace, kept only if its pid is ours and really holds it: a file
  // left behind, or a pid reused by another program, does not count.
  std::vector<pid_t> pids;
  for (const UnixSocket& socket : listening_unix_sockets("/proc/net/unix")) {
    const std::size_t slash = socket.path.rfind('/');
    if (slash == std::string::npos) continue;
    const std::string name = socket.path.substr(slash + 1);
    const std::size_t dot = name.size() - std::min(name.size(), detail::kDumpSocketSuffix.size());
    if (dot == 0 || name.compare(dot, std::string::npos, detail::kDumpSocketSuffix) != 0 ||
        !std::all_of(name.begin(), name.begin() + static_cast<long>(dot),
                     [](char c) { return c >= '0' && c <= '9'; }) ||
        dot > 9)
      continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name.substr(0, dot)));
    struct stat st;
    if (::stat(("/proc/" + std::to_string(pid)).c_str(), &st) != 0 || st.st_uid != ::geteuid()) continue;
    if (find_dump_socket(pid) != socket.path) continue;
    pids.push_back(pid);
  }
  std::sort(pids.begin(), pids.end());
  pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
  return pids;
}

}  // namespace weft::tools
