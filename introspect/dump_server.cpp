#include "dump_server.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <latch>
#include <mutex>
#include <new>
#include <string>
#include <system_error>
#include <thread>
#include <unordered_set>
#include <vector>

#include "../pool/pool_registry.h"
#include "../runtime/environment_switch.h"
#include "../runtime/log.h"
#include "../sched/scheduler_core.h"
#include "deadlocks.h"
#include "dump_clients.h"
#include "dump_format.h"
#include "dump_protocol.h"
#include "dump_requests.h"
#include "dump_socket.h"
#include "snapshot.h"
#include "snapshot_queue.h"
#include "symbolizer.h"
#include "threads.h"
#include "trace_recorder.h"

namespace weft::detail {
namespace {

using Clock = std::chrono::steady_clock;

// How long the server leaves the listening socket alone when the process
// is out of file descriptors and it has no spare one to answer with: the
// socket stays readable, and polling it at once again would spin.
constexpr int kOutOfFilesPauseMs = 100;

// How long after a dump a candidate deadlock's waits are read again
// (introspect/deadlocks.h): a lock's hand-over between naming the next
// holder and waking it is far shorter, even with the waker's thread
// descheduled for a few of this machine's time slices.
constexpr std::chrono::milliseconds kDeadlockRecheck{50};
// And how long after that a candidate with a member waiting for itself is
// read once more (introspect/deadlocks.h, waits_for_itself): a waker
// descheduled mid-hand-over on a loaded machine can outlast the first.
constexpr std::chrono::milliseconds kSelfWaitRecheck{500};

std::string process_name() {
  std::ifstream comm("/proc/self/comm");
  std::string name;
  std::getline(comm, name);
  return name;
}

// A descriptor kept in reserve for the moment the process runs out: closed,
// it lets the server accept one connection to say so (libev's and
// libuv's answer to a listening socket that EMFILE leaves readable).
class ReserveFd {
 public:
  ~ReserveFd() { release(); }
  void take() noexcept {
    if (fd_ < 0) fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  bool release() noexcept {
    if (fd_ < 0) return false;
    ::close(fd_);
    fd_ = -1;
    return true;
  }

 private:
  int fd_ = -1;
};

// The one instance, never destroyed (the_server()): a scheduler that is a
// static object may detach during static destruction, after any ordinary
// global would be gone; and a thread still running at exit must not meet a
// destroyed std::thread (that calls std::terminate).
class DumpServer {
 public:
  static DumpServer& the_server() {
    static DumpServer* const server = new DumpServer;
    return *server;
  }

  // --- who keeps the server up ------------------------------------------

  void attach(SchedulerCore& core) {
    std::lock_guard lifecycle(lifecycle_lock_);
    if (!start_if_needed("scheduler \"" + core.config().name + "\"")) return;
    std::lock_guard guard(schedulers_lock_);
    schedulers_.push_back(&core);
  }

  // Returns once no dump reads `core` any more.
  void detach(SchedulerCore& core) {
    std::lock_guard lifecycle(lifecycle_lock_);
    {
      std::lock_guard guard(schedulers_lock_);
      const auto gone = std::remove(schedulers_.begin(), schedulers_.end(), &core);
      if (gone == schedulers_.end()) return;  // never attached (dumps off for it)
      schedulers_.erase(gone, schedulers_.end());
    }
    stop_if_unused();
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
    stop_if_unused();
  }

  // --- fork() -----------------------------------------------------------
  // The child gets a copy of this object but none of its threads. The
  // locks are held across the fork, so that the child's copies are in a
  // known state; the child then forgets the parent's server: its thread
  // handles name threads it does not have, and the socket and its file
  // stay the parent's. A scheduler the child makes starts a server of its
  // own.

  void before_fork() {
    lifecycle_lock_.lock();  // first: start() holds it while its thread takes sweep_lock_
    sweep_lock_.lock();
    schedulers_lock_.lock();
    clients_.lock();
    snapshots_.lock();
  }
  void after_fork_in_parent() {
    snapshots_.unlock();
    clients_.unlock();
    schedulers_lock_.unlock();
    sweep_lock_.unlock();
    lifecycle_lock_.unlock();
  }
  void after_fork_in_child() {
    socket_.forget();
    reserve_.release();  // the child's copy
    if (running_) {
      new (&thread_) std::thread();  // the parent's handle, dropped without a call on it
      if (stop_fd_ >= 0) ::close(stop_fd_);
      stop_fd_ = -1;
      running_ = false;
    }
    clients_.forget_in_child();
    snapshots_.forget_in_child();
    snapshots_.unlock();
    schedulers_.clear();  // the parent's schedulers: not this process's to show (docs/usage.md)
    pools_ = 0;           // the parent's pools' threads did not come along
    clients_.unlock();
    schedulers_lock_.unlock();
    sweep_lock_.unlock();
    lifecycle_lock_.unlock();
  }

  // exit(): the clients' threads are cut off and joined, so that none is
  // left finished and never joined (ThreadSanitizer reports such a thread
  // as leaked). The server's own thread runs on; new clients are served.
  void at_exit() { clients_.cut_off(); }

 private:
  DumpServer()
      : sources_{[this](SnapshotRequest& wanted) { return snapshots_.request(wanted); },
                 [this] { return fiber_names(); }},
        clients_([this](int fd, Clock::time_point accepted) { answer_dump_client(fd, accepted, sources_); }) {}

  // --- starting and stopping (lifecycle_lock_ held) ---------------------

  // True once the server runs for this process.
  bool start_if_needed(const std::string& who) {
    if (running_) return true;
    const std::string error = start();
    if (error.empty()) return true;
    log_message(LogLevel::warning, "weft: weft-dump is off for %s: %s", who.c_str(), error.c_str());
    return false;
  }

  void stop_if_unused() {
    bool unused;
    {
      std::lock_guard guard(schedulers_lock_);
      unused = schedulers_.empty() && pools_ == 0;
    }
    if (unused && running_) stop();
  }

  // Binds the socket and starts the thread; "" or why it could not.
  std::string start() {
    static const bool atfork =
        ::pthread_atfork([] { the_server().before_fork(); }, [] { the_server().after_fork_in_parent(); },
                         [] { the_server().after_fork_in_child(); }) == 0;
    if (!atfork) return "pthread_atfork failed";
    static const bool at_exit = std::atexit([] { the_server().at_exit(); }) == 0;
    if (!at_exit) return "atexit failed";
    if (std::string why = socket_.open(); !why.empty()) return why;
    reserve_.take();  // now, while the process has descriptors to spare
    stop_fd_ = ::eventfd(0, EFD_CLOEXEC);
    if (stop_fd_ < 0 || !snapshots_.open()) return abandon(std::string("eventfd: ") + std::strerror(errno));
    // Signals sent to the process are for the application's threads, not
    // this one (nor its clients' threads): start it with all of them
    // blocked (threads inherit masks).
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    // Returns once the thread holds the sweep's lock (run()): a fork()
    // from here on waits for the sweep, and finds the thread past its
    // start-up (SchedulerCore's constructor says why that matters).
    std::latch started(1);
    try {
      thread_ = std::thread([this, &started] { run(started); });
    } catch (const std::system_error& e) {
      pthread_sigmask(SIG_SETMASK, &previous, nullptr);
      return abandon(std::string("cannot start its thread: ") + e.what());
    }
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    started.wait();
    running_ = true;
    return {};
  }

  // Undoes a start() that got as far as the socket; returns `error`.
  std::string abandon(std::string error) {
    socket_.close();
    reserve_.release();
    snapshots_.close_fd();
    if (stop_fd_ >= 0) ::close(stop_fd_);
    stop_fd_ = -1;
    return error;
  }

  void stop() {
    const std::uint64_t one = 1;
    while (::write(stop_fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
    }
    thread_.join();     // no more clients, reaping or snapshots from here on
    snapshots_.stop();  // clients waiting for a snapshot give up
    // Clients still being served are cut off, and joined: they may be
    // reading a scheduler that is going away, and no thread of the server
    // outlives it (a fork right after sees none). A client cut off in the
    // middle of its answer gets a document cut short, which weft-dump
    // reports as a process that exited or shut down during the dump.
    clients_.cut_off();
    abandon({});
    running_ = false;
  }

  // --- the server's thread ----------------------------------------------

  void run(std::latch& started) {
    pthread_setname_np(pthread_self(), "weft-dump");
    {
      // A fork waits for the sweep (before_fork): the child would otherwise
      // get opendir's buffer with no thread to free it (a leak to
      // LeakSanitizer), or, under ASan, its allocator's lock held by a
      // thread it does not have (the child hangs in its first malloc).
      std::lock_guard sweeping(sweep_lock_);
      started.count_down();
      remove_stale_fallback_directories();
    }
    bool pause_listening = false;
    for (;;) {
      pollfd fds[3] = {{stop_fd_, POLLIN, 0}, {snapshots_.fd(), POLLIN, 0}, {socket_.fd(), POLLIN, 0}};
      const nfds_t watched = pause_listening ? 2 : 3;
      const int ready = ::poll(fds, watched, pause_listening ? kOutOfFilesPauseMs : -1);
      if (ready < 0) {
        if (errno == EINTR) continue;
        log_message(LogLevel::error, "weft: weft-dump server stopped: poll: %s", std::strerror(errno));
        return;
      }
      pause_listening = false;
      if (fds[0].revents != 0) return;
      if (fds[1].revents != 0) snapshots_.serve([this](DumpDetail detail) { return snapshot(detail); });
      if (watched == 3 && fds[2].revents != 0) pause_listening = !accept_one();
      reserve_.take();  // again, once a descriptor is free
    }
  }

  // Accepts a connection and hands it to a thread of its own, or answers
  // it at once that the server is busy, or that the process is out of
  // file descriptors. False when it could not even do that: the listening
  // socket is then left alone for a moment.
  bool accept_one() {
    clients_.reap();
    int client = ::accept4(socket_.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    const auto accepted = Clock::now();
    if (client < 0 && (errno == EMFILE || errno == ENFILE)) {
      const int why = errno;
      if (!reserve_.release()) return false;
      client = ::accept4(socket_.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (client < 0) return false;
      // Short enough for the socket's buffer: sent without waiting.
      send_answer(client,
                  error_json(std::string("the process is out of file descriptors (") +
                             (why == EMFILE ? "EMFILE: its RLIMIT_NOFILE" : "ENFILE: the system's") +
                             " limit is reached), so it cannot take a dump now"),
                  accepted);
      ::close(client);
      return true;
    }
    if (client < 0) return true;  // the peer gave up already, or a transient error
    if (!clients_.admit(client, accepted)) {
      send_answer(client,
                  error_json("the dump server is busy: " + std::to_string(kMaxDumpClients) +
                             " clients are being served; try again"),
                  accepted);
      ::close(client);
    }
    return true;
  }

  // --- what clients' answers read ---------------------------------------

  FiberNames fiber_names() {
    FiberNames names;
    std::lock_guard guard(schedulers_lock_);
    for (SchedulerCore* core : schedulers_)
      core->registry().for_each([&](const FiberControl& fiber) { names.emplace(fiber.id, fiber.name()); });
    return names;
  }

  // On the server's thread (SnapshotQueue::serve).

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
      for (SchedulerCore* core : schedulers_)
        process.schedulers.push_back(snapshot_scheduler(*core, detail == DumpDetail::full));
    }
    process.pools = snapshot_pools();
    if (detail == DumpDetail::full) process.threads = snapshot_threads();
    if (detail == DumpDetail::full) process.deadlocks = confirm(find_deadlocks(process));
    symbolize_stacks(process);  // the addresses stay valid: code is not unloaded under a live scheduler
    return process;
  }

  // The cycles whose members still wait as `process` saw them after
  // kDeadlockRecheck, and for a cycle with a member waiting for itself,
  // after kSelfWaitRecheck too (introspect/deadlocks.h: a lock's hand-over
  // looks like a cycle for a moment).
  std::vector<DeadlockSnapshot> confirm(std::vector<DeadlockCandidate> candidates) {
    if (candidates.empty() || stopping_within(kDeadlockRecheck)) return {};
    const FiberWaits soon = waits_now(candidates);
    std::erase_if(candidates, [&](const DeadlockCandidate& c) { return !waits_as_seen(c, soon); });
    if (std::any_of(candidates.begin(), candidates.end(), waits_for_itself)) {
      if (stopping_within(kSelfWaitRecheck)) return {};
      const FiberWaits later = waits_now(candidates);
      std::erase_if(candidates,
                    [&](const DeadlockCandidate& c) { return waits_for_itself(c) && !waits_as_seen(c, later); });
    }
    std::vector<DeadlockSnapshot> cycles;
    for (DeadlockCandidate& candidate : candidates) cycles.push_back(std::move(candidate.cycle));
    return cycles;
  }

  // Waits `pause`, or less if the server is told to stop meanwhile: a
  // scheduler's destructor (and a fork behind it) waits for this thread.
  bool stopping_within(std::chrono::milliseconds pause) const {
    pollfd stopping{stop_fd_, POLLIN, 0};
    const auto until = Clock::now() + pause;
    for (auto left = pause; left.count() > 0;
         left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now())) {
      if (::poll(&stopping, 1, static_cast<int>(left.count())) > 0) return true;
    }
    return false;
  }

  // The waits of the candidates' members, read now.
  FiberWaits waits_now(const std::vector<DeadlockCandidate>& candidates) {
    std::unordered_set<std::uint64_t> members;
    for (const DeadlockCandidate& candidate : candidates)
      members.insert(candidate.cycle.fibers.begin(), candidate.cycle.fibers.end());
    FiberWaits now;
    std::lock_guard guard(schedulers_lock_);
    for (SchedulerCore* core : schedulers_) read_waits(*core, members, now);
    return now;
  }

  std::mutex sweep_lock_;       // held by the server's thread while it sweeps stale directories
  std::mutex lifecycle_lock_;   // attach and detach, starting and stopping
  std::mutex schedulers_lock_;  // the list; held while a dump reads it
  std::vector<SchedulerCore*> schedulers_;
  unsigned pools_ = 0;  // under lifecycle_lock_ (read under both)
  bool running_ = false;
  std::thread thread_;
  int stop_fd_ = -1;  // an eventfd: written once to stop the thread
  DumpSocket socket_;
  ReserveFd reserve_;  // taken by start(), released by abandon(); the server's thread spends and retakes it
  SnapshotQueue snapshots_;
  DumpSources sources_;
  DumpClients clients_;  // last: its threads use the members above
};

DumpServer& the_dump_server() { return DumpServer::the_server(); }

}  // namespace

bool dump_enabled_by_environment() noexcept { return !environment_says_off("WEFT_DUMP"); }

void attach_to_dump_server(SchedulerCore& core) { the_dump_server().attach(core); }

void detach_from_dump_server(SchedulerCore& core) noexcept { the_dump_server().detach(core); }

bool attach_pool_services(const std::string& name) {
  if (!dump_enabled_by_environment()) return false;
  return the_dump_server().attach_pool(name);
}

void detach_pool_services() noexcept { the_dump_server().detach_pool(); }

}  // namespace weft::detail
