#include "dump_server.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../pool/pool_registry.h"
#include "../sched/scheduler_core.h"
#include "dump_format.h"
#include "dump_socket.h"
#include "symbolizer.h"

namespace weft::detail {
namespace {

// How long the server waits on one client, so that a client that connects
// and never sends (or never reads) cannot take the dump away from others.
constexpr int kClientTimeoutSeconds = 5;
constexpr std::size_t kMaxRequestBytes = 256;

// What the atexit handler removes: a plain array and a flag, readable at
// exit without taking a lock that a dying thread may hold.
char exit_socket_path[sizeof(sockaddr_un::sun_path)];
std::atomic<bool> exit_socket_bound{false};

void remove_socket_at_exit() {
  if (exit_socket_bound.exchange(false)) ::unlink(exit_socket_path);
}

bool send_all(int fd, std::string_view data) {
  std::size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

std::string read_request(int fd) {
  std::string request;
  char buffer[64];
  while (request.size() < kMaxRequestBytes && request.find('\n') == std::string::npos) {
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    request.append(buffer, static_cast<std::size_t>(n));
  }
  request.erase(std::find(request.begin(), request.end(), '\n'), request.end());
  if (!request.empty() && request.back() == '\r') request.pop_back();
  return request;
}

std::string process_name() {
  std::ifstream comm("/proc/self/comm");
  std::string name;
  std::getline(comm, name);
  return name;
}

class DumpServer {
 public:
  void attach(SchedulerCore& core) {
    std::lock_guard lifecycle(lifecycle_lock_);
    if (!start_if_needed("scheduler \"" + core.config().name + "\"")) return;
    std::lock_guard guard(schedulers_lock_);
    schedulers_.push_back(&core);
  }

  // Pools (pool/pool_registry.h) keep the server up too, so that a process
  // with thread pools and no scheduler can still be dumped. Only counted:
  // the pools' own registry is what a dump reads. False if it could not
  // start.
  bool attach_pool(const std::string& name) {
    std::lock_guard lifecycle(lifecycle_lock_);
    if (!start_if_needed("pool \"" + name + "\"")) return false;
    ++pools_;
    return true;
  }
  void detach_pool() {
    std::lock_guard lifecycle(lifecycle_lock_);
    if (pools_ > 0) --pools_;
    bool last;
    {
      std::lock_guard guard(schedulers_lock_);
      last = schedulers_.empty() && pools_ == 0;
    }
    if (last && running_ && owner_pid_ == ::getpid()) stop();
  }

  // Returns once no dump reads `core` any more.
  void detach(SchedulerCore& core) {
    std::lock_guard lifecycle(lifecycle_lock_);
    bool last;
    {
      std::lock_guard guard(schedulers_lock_);
      schedulers_.erase(std::remove(schedulers_.begin(), schedulers_.end(), &core), schedulers_.end());
      last = schedulers_.empty() && pools_ == 0;
    }
    if (last && running_ && owner_pid_ == ::getpid()) stop();
  }

 private:
  // With lifecycle_lock_ held: true once the server runs for this process.
  bool start_if_needed(const std::string& who) {
    if (running_ && owner_pid_ != ::getpid()) forget_after_fork();
    if (running_) return true;
    const std::string error = start();
    if (error.empty()) return true;
    std::fprintf(stderr, "weft: weft-dump is off for %s: %s\n", who.c_str(), error.c_str());
    return false;
  }

  // Binds the socket and starts the thread; "" or why it could not.
  std::string start() {
    const std::string directory = dump_socket_directory();
    if (std::string error = prepare_dump_socket_directory(directory); !error.empty()) return error;
    socket_path_ = dump_socket_path(directory, ::getpid());
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (socket_path_.size() >= sizeof(address.sun_path)) return "socket path too long: " + socket_path_;
    std::memcpy(address.sun_path, socket_path_.c_str(), socket_path_.size() + 1);

    listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0) return std::string("socket: ") + std::strerror(errno);
    // A socket left by an earlier process that had our pid and died
    // without cleaning up: the pid is ours now, and so is the name.
    ::unlink(socket_path_.c_str());
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
        ::chmod(socket_path_.c_str(), 0600) != 0 || ::listen(listen_fd_, 16) != 0) {
      const std::string error = "cannot listen on " + socket_path_ + ": " + std::strerror(errno);
      close_fds();
      return error;
    }
    stop_fd_ = ::eventfd(0, EFD_CLOEXEC);
    if (stop_fd_ < 0) {
      const std::string error = std::string("eventfd: ") + std::strerror(errno);
      close_fds();
      return error;
    }

    std::memcpy(exit_socket_path, socket_path_.c_str(), socket_path_.size() + 1);
    exit_socket_bound.store(true);
    if (!atexit_registered_) atexit_registered_ = std::atexit(&remove_socket_at_exit) == 0;

    // Signals sent to the process are for the application's threads, not
    // this one: start it with all of them blocked (threads inherit masks).
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    try {
      thread_ = std::thread([this] { run(); });
    } catch (const std::system_error& e) {
      pthread_sigmask(SIG_SETMASK, &previous, nullptr);
      remove_socket_at_exit();
      close_fds();
      return std::string("cannot start its thread: ") + e.what();
    }
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    running_ = true;
    owner_pid_ = ::getpid();
    return {};
  }

  void stop() {
    const std::uint64_t one = 1;
    while (::write(stop_fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
    }
    thread_.join();
    remove_socket_at_exit();
    close_fds();
    running_ = false;
  }

  // A forked child inherits our state but not the thread, and the parent
  // still owns the socket: start afresh, leaving the parent's alone.
  void forget_after_fork() {
    thread_.detach();  // names a thread of the parent; nothing to join here
    exit_socket_bound.store(false);
    close_fds();
    std::lock_guard guard(schedulers_lock_);
    schedulers_.clear();
    pools_ = 0;  // the parent's pools' threads did not come along
    running_ = false;
  }

  void close_fds() {
    if (listen_fd_ >= 0) ::close(listen_fd_);
    if (stop_fd_ >= 0) ::close(stop_fd_);
    listen_fd_ = stop_fd_ = -1;
  }

  void run() {
    pthread_setname_np(pthread_self(), "weft-dump");
    for (;;) {
      pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        std::fprintf(stderr, "weft: weft-dump server stopped: poll: %s\n", std::strerror(errno));
        return;
      }
      if (fds[1].revents != 0) return;
      if (fds[0].revents == 0) continue;
      const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;  // the peer gave up already, or a transient error
      serve(client);
      ::close(client);
    }
  }

  void serve(int client) {
    ucred peer{};
    socklen_t size = sizeof(peer);
    if (::getsockopt(client, SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0 || peer.uid != ::geteuid()) {
      send_all(client, error_json("permission denied: weft-dump serves only its own user (uid " +
                                  std::to_string(::geteuid()) + ")"));
      return;
    }
    const timeval timeout{kClientTimeoutSeconds, 0};
    ::setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    ::setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    const std::string request = read_request(client);
    if (request != "dump" && request != "summary") {
      send_all(client, error_json("unknown request \"" + request + "\" (expected \"dump\" or \"summary\")"));
      return;
    }
    const DumpDetail detail = request == "dump" ? DumpDetail::full : DumpDetail::summary;
    ProcessSnapshot process;
    try {
      process = snapshot(detail);
    } catch (const std::exception& e) {
      send_all(client, error_json(std::string("snapshot failed: ") + e.what()));
      return;
    }
    // Streamed: once a piece is sent there is no taking it back, so a
    // failure from here on (out of memory) just ends the answer early,
    // which the client reports as a malformed dump.
    try {
      write_json(process, detail, [&](std::string_view piece) { return send_all(client, piece); });
    } catch (const std::exception&) {
    }
  }

  ProcessSnapshot snapshot(DumpDetail detail) {
    ProcessSnapshot process;
    process.pid = ::getpid();
    process.name = process_name();
    process.unix_time_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    {
      std::lock_guard guard(schedulers_lock_);
      process.schedulers.reserve(schedulers_.size());
      for (SchedulerCore* core : schedulers_) process.schedulers.push_back(core->snapshot(detail == DumpDetail::full));
    }
    process.pools = snapshot_pools();
    symbolize_stacks(process);  // the addresses stay valid: code is not unloaded under a live scheduler
    return process;
  }

  std::mutex lifecycle_lock_;   // attach and detach, starting and stopping
  std::mutex schedulers_lock_;  // the list; held while a dump reads it
  std::vector<SchedulerCore*> schedulers_;
  unsigned pools_ = 0;  // under lifecycle_lock_ (read under both)
  bool running_ = false;
  pid_t owner_pid_ = 0;
  bool atexit_registered_ = false;
  std::thread thread_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;  // an eventfd: written once to stop the thread
  std::string socket_path_;
};

// The one instance, never destroyed: a scheduler that is a static object
// may detach during static destruction, after any ordinary global would be
// gone; and a thread still running at exit must not meet a destroyed
// std::thread (that calls std::terminate).
DumpServer& the_dump_server() {
  static DumpServer* const server = new DumpServer;
  return *server;
}

}  // namespace

bool dump_enabled_by_environment() noexcept {
  const char* value = std::getenv("WEFT_DUMP");
  if (value == nullptr) return true;
  for (const char* off : {"0", "false", "off", "no"}) {
    if (std::strcmp(value, off) == 0) return false;
  }
  return true;
}

bool attach_services(SchedulerCore& core) {
  if (!core.config().dump || !dump_enabled_by_environment()) return false;
  the_dump_server().attach(core);
  return true;
}

void detach_services(SchedulerCore& core) noexcept { the_dump_server().detach(core); }

bool attach_pool_services(const std::string& name) {
  if (!dump_enabled_by_environment()) return false;
  return the_dump_server().attach_pool(name);
}

void detach_pool_services() noexcept { the_dump_server().detach_pool(); }

}  // namespace weft::detail
