#include "dump_server.h"

#include <fcntl.h>
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
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <list>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "../pool/pool_registry.h"
#include "../runtime/log.h"
#include "../sched/scheduler_core.h"
#include "dump_format.h"
#include "dump_protocol.h"
#include "symbolizer.h"

namespace weft::detail {
namespace {

using Clock = std::chrono::steady_clock;

// Per client, from its accept: the time to send its request line, and the
// time to take the whole answer. Deadlines, not per-call timeouts, so that
// a byte every few seconds cannot hold a client's thread for longer.
constexpr auto kRequestDeadline = std::chrono::seconds(2);
constexpr auto kAnswerDeadline = std::chrono::seconds(60);
// Clients served at once; a client beyond them is told the server is busy
// (and why) at once, so that idle connections cannot queue others behind
// them until the CLI's timeout.
constexpr int kMaxClients = 16;

// What the atexit handler removes: a plain array, the pid that made it and
// a flag, readable at exit without taking a lock that a dying thread may
// hold. The pid keeps a forked child's exit() from removing its parent's
// socket (the child's own atfork handler clears the flag too).
char exit_socket_path[sizeof(sockaddr_un::sun_path)];
char exit_socket_directory[sizeof(sockaddr_un::sun_path)];  // "" unless the server made it for itself
std::atomic<pid_t> exit_socket_owner{0};
std::atomic<bool> exit_socket_bound{false};

void remove_socket_at_exit() {
  if (exit_socket_owner.load() != ::getpid()) return;
  if (!exit_socket_bound.exchange(false)) return;
  ::unlink(exit_socket_path);
  if (exit_socket_directory[0] != '\0') ::rmdir(exit_socket_directory);
}

bool send_all(int fd, std::string_view data, Clock::time_point deadline) {
  std::size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      if (!wait_for(fd, POLLOUT, deadline)) return false;
      continue;
    }
    if (n <= 0) return false;
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

// The request line, "" if none came whole by `deadline`.
std::string read_request(int fd, Clock::time_point deadline) {
  std::string request;
  char buffer[64];
  while (request.size() < kMaxDumpRequestBytes && request.find('\n') == std::string::npos) {
    if (!wait_for(fd, POLLIN, deadline)) return {};
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
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

// Makes `directory` (0700) if it is missing and checks that it is this
// user's alone; "" or why not.
std::string prepare_directory(const std::string& directory) {
  if (::mkdir(directory.c_str(), 0700) != 0 && errno != EEXIST)
    return "cannot create " + directory + ": " + std::strerror(errno);
  return check_private_directory(directory, ::geteuid());
}

class DumpServer {
 public:
  // The one instance, never destroyed: a scheduler that is a static object
  // may detach during static destruction, after any ordinary global would
  // be gone; and a thread still running at exit must not meet a destroyed
  // std::thread (that calls std::terminate).
  static DumpServer& the_server() {
    static DumpServer* const server = new DumpServer;
    return *server;
  }

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
    if (last && running_) stop();
  }

  // Returns once no dump reads `core` any more.
  void detach(SchedulerCore& core) {
    std::lock_guard lifecycle(lifecycle_lock_);
    bool last;
    {
      std::lock_guard guard(schedulers_lock_);
      const auto gone = std::remove(schedulers_.begin(), schedulers_.end(), &core);
      if (gone == schedulers_.end()) return;  // never attached (dumps off for it)
      schedulers_.erase(gone, schedulers_.end());
      last = schedulers_.empty() && pools_ == 0;
    }
    if (last && running_) stop();
  }

 private:
  // With lifecycle_lock_ held: true once the server runs for this process.
  bool start_if_needed(const std::string& who) {
    if (running_) return true;
    const std::string error = start();
    if (error.empty()) return true;
    log_message(LogLevel::warning, "weft: weft-dump is off for %s: %s", who.c_str(), error.c_str());
    return false;
  }

 public:
  // fork(): the child gets a copy of this object but none of its threads.
  // The locks are held across the fork, so that the child's copies are in
  // a known state; the child then forgets the parent's server: its thread
  // handle names a thread it does not have (joining or detaching it is
  // undefined), and the socket and its file stay the parent's. A scheduler
  // the child makes starts a server of its own.
  void before_fork() {
    lifecycle_lock_.lock();
    schedulers_lock_.lock();
    clients_lock_.lock();
    snapshot_lock_.lock();
  }
  void after_fork_in_parent() {
    snapshot_lock_.unlock();
    clients_lock_.unlock();
    schedulers_lock_.unlock();
    lifecycle_lock_.unlock();
  }
  void after_fork_in_child() {
    exit_socket_bound.store(false);
    if (running_) {
      // The parent's handles, dropped without a call on them.
      new (&thread_) std::thread();
      for (Client& client : clients_) {
        new (&client.thread) std::thread();
        if (client.fd >= 0) ::close(client.fd);
      }
      close_fds();
      running_ = false;
    }
    clients_.clear();
    active_clients_ = 0;
    snapshot_queue_.clear();                          // the parent's clients' requests
    new (&snapshot_done_) std::condition_variable();  // and their waits
    snapshot_lock_.unlock();
    schedulers_.clear();  // the parent's schedulers: not this process's to show (docs/usage.md)
    pools_ = 0;           // the parent's pools' threads did not come along
    clients_lock_.unlock();
    schedulers_lock_.unlock();
    lifecycle_lock_.unlock();
  }

 private:
  // A connection being served on a thread of its own. The thread is
  // joined by run() once it is done (reap), or by stop().
  struct Client {
    std::thread thread;
    int fd;     // -1 once closed
    bool done;  // its thread has left serve()
  };

  // Binds the socket and starts the thread; "" or why it could not.
  std::string start() {
    if (!atfork_registered_) {
      atfork_registered_ =
          ::pthread_atfork([] { the_server().before_fork(); }, [] { the_server().after_fork_in_parent(); },
                           [] { the_server().after_fork_in_child(); }) == 0;
      if (!atfork_registered_) return "pthread_atfork failed";
    }
    std::string directory = preferred_dump_socket_directory();
    own_directory_.clear();
    if (const std::string why = prepare_directory(directory); !why.empty()) {
      // Someone else's directory, or one open to others: a socket in it
      // could be replaced. A fresh one of our own instead; the CLI finds
      // it through /proc (introspect/dump_protocol.h).
      std::string name = fallback_dump_socket_template();
      if (::mkdtemp(name.data()) == nullptr)
        return "not using " + directory + " (" + why + "), and cannot create " + name + ": " + std::strerror(errno);
      log_message(LogLevel::warning, "weft: weft-dump: not using %s (%s); serving from %s", directory.c_str(),
                  why.c_str(), name.c_str());
      directory = own_directory_ = name;
    }
    socket_path_ = dump_socket_path(directory, ::getpid());
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (socket_path_.size() >= sizeof(address.sun_path)) return abandon("socket path too long: " + socket_path_);
    std::memcpy(address.sun_path, socket_path_.c_str(), socket_path_.size() + 1);

    listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0) return abandon(std::string("socket: ") + std::strerror(errno));
    // A socket left by an earlier process that had our pid and died
    // without cleaning up: the pid is ours now, and so is the name.
    ::unlink(socket_path_.c_str());
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
        ::chmod(socket_path_.c_str(), 0600) != 0 || ::listen(listen_fd_, 64) != 0) {
      const std::string error = "cannot listen on " + socket_path_ + ": " + std::strerror(errno);
      ::unlink(socket_path_.c_str());
      return abandon(error);
    }
    stop_fd_ = ::eventfd(0, EFD_CLOEXEC);
    snapshot_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    stopping_ = false;
    if (stop_fd_ < 0 || snapshot_fd_ < 0) {
      ::unlink(socket_path_.c_str());
      return abandon(std::string("eventfd: ") + std::strerror(errno));
    }

    std::memcpy(exit_socket_path, socket_path_.c_str(), socket_path_.size() + 1);
    std::memcpy(exit_socket_directory, own_directory_.c_str(), own_directory_.size() + 1);
    exit_socket_owner.store(::getpid());
    exit_socket_bound.store(true);
    if (!atexit_registered_) atexit_registered_ = std::atexit(&remove_socket_at_exit) == 0;

    // Signals sent to the process are for the application's threads, not
    // this one (nor its clients' threads): start it with all of them
    // blocked (threads inherit masks).
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    try {
      thread_ = std::thread([this] { run(); });
    } catch (const std::system_error& e) {
      pthread_sigmask(SIG_SETMASK, &previous, nullptr);
      remove_socket_at_exit();
      return abandon(std::string("cannot start its thread: ") + e.what());
    }
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    running_ = true;
    return {};
  }

  // Undoes a start() that failed after making its directory; returns `error`.
  std::string abandon(std::string error) {
    close_fds();
    if (!own_directory_.empty()) ::rmdir(own_directory_.c_str());
    own_directory_.clear();
    return error;
  }

  void stop() {
    const std::uint64_t one = 1;
    while (::write(stop_fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
    }
    thread_.join();  // no more clients, reaping or snapshots from here on
    {
      std::lock_guard guard(snapshot_lock_);
      stopping_ = true;  // clients waiting for a snapshot give up
    }
    snapshot_done_.notify_all();
    // Clients still being served are cut off, and joined: they may be
    // reading a scheduler that is going away, and no thread of the server
    // outlives it (a fork right after sees none).
    std::list<Client> clients;
    {
      std::lock_guard guard(clients_lock_);
      for (const Client& client : clients_)
        if (client.fd >= 0) ::shutdown(client.fd, SHUT_RDWR);
      clients.splice(clients.end(), clients_);
    }
    for (Client& client : clients) client.thread.join();
    remove_socket_at_exit();
    close_fds();
    own_directory_.clear();
    running_ = false;
  }

  void close_fds() {
    if (listen_fd_ >= 0) ::close(listen_fd_);
    if (stop_fd_ >= 0) ::close(stop_fd_);
    if (snapshot_fd_ >= 0) ::close(snapshot_fd_);
    listen_fd_ = stop_fd_ = snapshot_fd_ = -1;
  }

  void run() {
    pthread_setname_np(pthread_self(), "weft-dump");
    for (;;) {
      pollfd fds[3] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}, {snapshot_fd_, POLLIN, 0}};
      if (::poll(fds, 3, -1) < 0) {
        if (errno == EINTR) continue;
        log_message(LogLevel::error, "weft: weft-dump server stopped: poll: %s", std::strerror(errno));
        return;
      }
      if (fds[1].revents != 0) return;
      if (fds[2].revents != 0) take_snapshots();
      if (fds[0].revents == 0) continue;
      reap();
      const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (client < 0) continue;  // the peer gave up already, or a transient error
      const auto accepted = Clock::now();
      if (!admit(client, accepted)) {
        // Short enough for the socket's buffer: sent without waiting.
        send_all(client,
                 error_json("the dump server is busy: " + std::to_string(kMaxClients) +
                            " clients are being served; try again"),
                 accepted);
        ::close(client);
        continue;
      }
    }
  }

  // A thread for `client`, unless kMaxClients are being served.
  bool admit(int client, Clock::time_point accepted) {
    std::lock_guard guard(clients_lock_);
    if (active_clients_ >= kMaxClients) return false;
    const auto it = clients_.insert(clients_.end(), Client{{}, client, false});
    try {
      it->thread = std::thread([this, it, accepted] {
        serve(it->fd, accepted);
        leave(*it);
      });
    } catch (const std::system_error&) {
      clients_.erase(it);
      return false;
    }
    ++active_clients_;
    return true;
  }

  // The last thing a client's thread does.
  void leave(Client& client) {
    std::lock_guard guard(clients_lock_);
    ::close(client.fd);
    client.fd = -1;
    client.done = true;
    --active_clients_;
  }

  // Joins the threads of clients that are done.
  void reap() {
    std::list<Client> done;
    {
      std::lock_guard guard(clients_lock_);
      for (auto it = clients_.begin(); it != clients_.end();) {
        const auto next = std::next(it);
        if (it->done) done.splice(done.end(), clients_, it);
        it = next;
      }
    }
    for (Client& client : done) client.thread.join();
  }

  void serve(int client, Clock::time_point accepted) {
    const auto answer_deadline = accepted + kAnswerDeadline;
    ucred peer{};
    socklen_t size = sizeof(peer);
    if (::getsockopt(client, SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0 || peer.uid != ::geteuid()) {
      send_all(
          client,
          error_json("permission denied: weft-dump serves only its own user (uid " + std::to_string(::geteuid()) + ")"),
          answer_deadline);
      return;
    }
    const std::string request = read_request(client, accepted + kRequestDeadline);
    if (request != kDumpRequestFull && request != kDumpRequestSummary) {
      send_all(client, error_json("unknown request \"" + request + "\" (expected \"dump\" or \"summary\")"),
               answer_deadline);
      return;
    }
    const DumpDetail detail = request == kDumpRequestFull ? DumpDetail::full : DumpDetail::summary;
    SnapshotRequest wanted;
    wanted.detail = detail;
    if (!request_snapshot(wanted)) return;  // the server is stopping
    if (!wanted.error.empty()) {
      send_all(client, error_json("snapshot failed: " + wanted.error), answer_deadline);
      return;
    }
    const ProcessSnapshot& process = wanted.process;
    // Streamed: once a piece is sent there is no taking it back, so a
    // failure from here on (out of memory) just ends the answer early,
    // which the client reports as a malformed dump.
    try {
      write_json(process, detail, [&](std::string_view piece) { return send_all(client, piece, answer_deadline); });
    } catch (const std::exception&) {
    }
  }

  // Snapshots are taken on the server's own thread, one at a time, for
  // every client: Boost.Stacktrace keeps its symbol tables (libbacktrace's
  // state: every loaded object's debug information) per thread, so on a
  // thread per client each dump would read them afresh, and leak them.
  struct SnapshotRequest {
    DumpDetail detail = DumpDetail::full;
    ProcessSnapshot process;
    std::string error;  // why it could not be taken
    bool done = false;
  };

  // Hands `wanted` to the server's thread and waits for it; false if the
  // server stopped first.
  bool request_snapshot(SnapshotRequest& wanted) {
    std::unique_lock guard(snapshot_lock_);
    if (stopping_) return false;
    snapshot_queue_.push_back(&wanted);
    const std::uint64_t one = 1;
    while (::write(snapshot_fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
    }
    snapshot_done_.wait(guard, [&] { return wanted.done || stopping_; });
    if (!wanted.done)
      snapshot_queue_.erase(std::remove(snapshot_queue_.begin(), snapshot_queue_.end(), &wanted),
                            snapshot_queue_.end());
    return wanted.done;
  }

  // On the server's thread: every snapshot asked for so far.
  void take_snapshots() {
    std::uint64_t count;
    [[maybe_unused]] const ssize_t n = ::read(snapshot_fd_, &count, sizeof(count));
    for (;;) {
      SnapshotRequest* wanted;
      {
        std::lock_guard guard(snapshot_lock_);
        if (snapshot_queue_.empty()) return;
        wanted = snapshot_queue_.front();
        snapshot_queue_.erase(snapshot_queue_.begin());
      }
      try {
        wanted->process = snapshot(wanted->detail);
      } catch (const std::exception& e) {
        wanted->error = e.what();
      }
      {
        std::lock_guard guard(snapshot_lock_);
        wanted->done = true;
      }
      snapshot_done_.notify_all();
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
  bool atexit_registered_ = false;
  bool atfork_registered_ = false;
  std::thread thread_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;  // an eventfd: written once to stop the thread
  std::string socket_path_;
  std::string own_directory_;  // the directory start() made for itself, if it did

  std::mutex snapshot_lock_;  // the queue, each request's done, stopping_
  std::condition_variable snapshot_done_;
  std::vector<SnapshotRequest*> snapshot_queue_;  // clients' requests, for the server's thread
  int snapshot_fd_ = -1;                          // an eventfd: a request is queued
  bool stopping_ = false;

  std::mutex clients_lock_;  // clients_, and each one's fd and done
  std::list<Client> clients_;
  int active_clients_ = 0;  // of clients_, those not done
};

DumpServer& the_dump_server() { return DumpServer::the_server(); }

}  // namespace

bool dump_enabled_by_environment() noexcept {
  const char* value = std::getenv("WEFT_DUMP");
  if (value == nullptr) return true;
  for (const char* off : {"0", "false", "off", "no"}) {
    if (std::strcmp(value, off) == 0) return false;
  }
  return true;
}

void attach_to_dump_server(SchedulerCore& core) { the_dump_server().attach(core); }

void detach_from_dump_server(SchedulerCore& core) noexcept { the_dump_server().detach(core); }

bool attach_pool_services(const std::string& name) {
  if (!dump_enabled_by_environment()) return false;
  return the_dump_server().attach_pool(name);
}

void detach_pool_services() noexcept { the_dump_server().detach_pool(); }

}  // namespace weft::detail
