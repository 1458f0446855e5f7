// echo_server: TCP echo on 127.0.0.1 in several styles, for echo_load and
// scripts/bench-echo (docs/benchmarks.md, "Echo server").
//
//   echo_server --mode epoll --port 0            # prints "listening on 127.0.0.1:PORT"
//   echo_server --mode thread --port 7000
//   echo_server --mode weft --port 0 --workers 2
//
// Modes:
//   thread  one std::thread per connection, blocking recv/send
//   epoll   one edge-triggered epoll loop per worker thread (--workers N,
//           default one per core), each with its own SO_REUSEPORT listener:
//           the hand-written limit the others are measured against
//   weft    one fiber per connection on a weft::Scheduler (--workers N):
//           blocking loops over non-blocking sockets that park the fiber in
//           weft::io::wait_readable / wait_writable
//   hooked  one fiber per connection doing plain blocking recv/send on a
//           blocking socket, as thread does: libweft's libc hooks park the
//           fiber (docs/io.md)
//
// Every mode makes the socket calls (recv, send with MSG_NOSIGNAL), as
// tokio's TcpStream does: read and write go through the VFS (fdget_pos,
// vfs_read), which costs a socket more (docs/benchmarks.md).
//
// Runs until SIGINT or SIGTERM, then shuts every connection down and exits
// 0.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <weft/io.h>
#include <weft/weft.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cli.h"
#include "connections.h"
#include "echo_net.h"

namespace {

using weft::bench::Connections;
using weft::bench::die_errno;

constexpr const char* kProgram = "echo_server";
// Big enough that 1,000 clients connecting at once all wait in the accept
// queue instead of having SYNs dropped (and retried a second later); the
// kernel caps it at net.core.somaxconn (4096 by default since Linux 5.4).
constexpr int kBacklog = 4096;
// Per connection, on its thread's or fiber's stack. Echoed messages are
// small; a small buffer keeps a fiber's stack to a few touched pages.
constexpr std::size_t kConnBufferBytes = 4096;
// Per epoll worker: one buffer serves all its connections.
constexpr std::size_t kWorkerBufferBytes = 64 * 1024;

// ---------------------------------------------------------------------------
// Listening

int listen_on(std::uint16_t port, bool reuse_port, bool nonblocking) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0), 0);
  if (fd < 0) die_errno(kProgram, "socket");
  const int one = 1;
  // Lets a benchmark run restart on the port of the last one at once.
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (reuse_port && ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0)
    die_errno(kProgram, "SO_REUSEPORT");
  const sockaddr_in addr = weft::bench::loopback(port);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) die_errno(kProgram, "bind");
  if (::listen(fd, kBacklog) != 0) die_errno(kProgram, "listen");
  return fd;
}

std::uint16_t bound_port(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) die_errno(kProgram, "getsockname");
  return ntohs(addr.sin_port);
}

void announce(std::uint16_t port) {
  // scripts/bench-echo and the smoke test read the port from this line.
  std::printf("listening on 127.0.0.1:%u\n", static_cast<unsigned>(port));
  std::fflush(stdout);
}

// Waits for SIGINT or SIGTERM, which main() blocked in every thread.
void wait_for_stop_signal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int signal_number = 0;
  while (sigwait(&set, &signal_number) != 0) {
  }
}

// ---------------------------------------------------------------------------
// Connections of the thread, weft and hooked modes

void configure_accepted(int fd) { weft::bench::set_nodelay(fd); }

bool write_all_blocking(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

// The thread and hooked modes' connection: plain blocking code. Returns when
// the peer closes, on an error, or when stop shuts the socket down.
void serve_blocking(int fd) {
  char buffer[kConnBufferBytes];
  for (;;) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n > 0) {
      if (!write_all_blocking(fd, buffer, static_cast<std::size_t>(n))) return;
    } else if (n == 0 || errno != EINTR) {
      return;
    }
  }
}

// The weft mode's connection, the whole of what it does per message: the
// same blocking loop as serve_blocking on a non-blocking socket, each EAGAIN
// parking the fiber until the socket is ready. After a short read it waits
// before reading again, as the epoll loop skips the read that would fail
// with EAGAIN (see on_ready): wait_readable is level-triggered (it polls
// the socket first), so bytes or an EOF that came meanwhile return at once.
void serve_parked(int fd) {
  char buffer[kConnBufferBytes];
  for (;;) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n == 0) return;
    if (n < 0) {
      if (errno == EAGAIN) {
        if (!weft::io::wait_readable(fd)) return;
      } else if (errno != EINTR) {
        return;
      }
      continue;
    }
    for (const char* data = buffer; data < buffer + n;) {
      const ssize_t w = ::send(fd, data, static_cast<std::size_t>(buffer + n - data), MSG_NOSIGNAL);
      if (w >= 0) {
        data += w;
      } else if (errno == EAGAIN) {
        if (!weft::io::wait_writable(fd)) return;
      } else if (errno != EINTR) {
        return;
      }
    }
    if (static_cast<std::size_t>(n) < sizeof buffer && !weft::io::wait_readable(fd)) return;
  }
}

// ---------------------------------------------------------------------------
// thread

int run_thread(std::uint16_t port) {
  const int listener = listen_on(port, false, false);
  announce(bound_port(listener));
  Connections connections;
  // Connection threads are detached (joining them as they end would need a
  // reaper); stop waits for this count to reach zero instead.
  std::mutex live_lock;
  std::condition_variable all_done;
  std::size_t live = 0;
  bool thread_failure_reported = false;

  std::thread acceptor([&] {
    for (;;) {
      const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE) {
          // Out of descriptors: back off rather than spin on the pending one.
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
          continue;
        }
        return;  // EINVAL after stop's shutdown of the listener
      }
      configure_accepted(fd);
      if (!connections.add(fd)) {
        ::close(fd);
        continue;
      }
      {
        std::lock_guard guard(live_lock);
        ++live;
      }
      try {
        std::thread([&, fd] {
          serve_blocking(fd);
          connections.close(fd);
          std::lock_guard guard(live_lock);
          if (--live == 0) all_done.notify_all();
        }).detach();
      } catch (const std::system_error& error) {
        connections.close(fd);
        std::lock_guard guard(live_lock);
        --live;
        if (!thread_failure_reported) {
          std::fprintf(stderr, "%s: cannot start a connection thread (%s); dropping connections\n", kProgram,
                       error.what());
          thread_failure_reported = true;
        }
      }
    }
  });

  wait_for_stop_signal();
  connections.stop();
  ::shutdown(listener, SHUT_RDWR);
  acceptor.join();
  std::unique_lock guard(live_lock);
  // Bounded: every connection was shut down, so each thread is leaving.
  if (!all_done.wait_for(guard, std::chrono::seconds(5), [&] { return live == 0; })) {
    std::fprintf(stderr, "%s: %zu connection threads did not end\n", kProgram, live);
    ::_exit(1);
  }
  ::close(listener);
  return 0;
}

// ---------------------------------------------------------------------------
// epoll

// Tags for the two descriptors in each worker's epoll set that are not
// connections.
char listener_tag;
char stop_tag;

class EpollWorker {
 public:
  EpollWorker(int listener, int stop_fd) : listener_(listener), buffer_(new char[kWorkerBufferBytes]) {
    epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (epoll_ < 0) die_errno(kProgram, "epoll_create1");
    add(listener_, EPOLLIN | EPOLLET, &listener_tag);
    // Level-triggered and never read: one write to the eventfd wakes every
    // worker, and keeps waking them until they have left.
    add(stop_fd, EPOLLIN, &stop_tag);
  }
  EpollWorker(const EpollWorker&) = delete;
  EpollWorker& operator=(const EpollWorker&) = delete;
  ~EpollWorker() {
    for (auto& [conn, owned] : connections_) ::close(conn->fd);
    ::close(epoll_);
    ::close(listener_);
  }

  void run() {
    epoll_event events[256];
    for (;;) {
      const int n = ::epoll_wait(epoll_, events, 256, -1);
      if (n < 0) {
        if (errno == EINTR) continue;
        die_errno(kProgram, "epoll_wait");
      }
      for (int i = 0; i < n; ++i) {
        void* const tag = events[i].data.ptr;
        if (tag == &stop_tag) return;
        if (tag == &listener_tag)
          accept_all();
        else
          on_ready(static_cast<Conn*>(tag), events[i].events);
      }
    }
  }

 private:
  struct Conn {
    int fd;
    // Bytes read but not yet written back: only when the socket's send
    // buffer filled, which small echoed messages never do.
    std::vector<char> pending;
  };

  void add(int fd, std::uint32_t events, void* tag) {
    epoll_event event{};
    event.events = events;
    event.data.ptr = tag;
    if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &event) != 0) die_errno(kProgram, "epoll_ctl");
  }

  void accept_all() {
    for (;;) {
      const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        // EAGAIN: drained (edge-triggered, so we must drain). EMFILE and the
        // like leave the connection queued until the next accept edge.
        return;
      }
      configure_accepted(fd);
      auto conn = std::make_unique<Conn>(Conn{fd, {}});
      // Registered once for both directions, edge-triggered: no epoll_ctl
      // per message. EPOLLOUT edges are ignored unless bytes are pending.
      add(fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, conn.get());
      Conn* const key = conn.get();
      connections_.emplace(key, std::move(conn));
    }
  }

  void drop(Conn* conn) {
    ::close(conn->fd);  // also removes it from the epoll set
    connections_.erase(conn);
  }

  // Writes pending bytes; false if the connection was dropped or the send
  // buffer is still full.
  bool flush(Conn* conn) {
    std::size_t done = 0;
    while (done < conn->pending.size()) {
      const ssize_t n = ::send(conn->fd, conn->pending.data() + done, conn->pending.size() - done, MSG_NOSIGNAL);
      if (n >= 0) {
        done += static_cast<std::size_t>(n);
      } else if (errno == EAGAIN) {
        conn->pending.erase(conn->pending.begin(), conn->pending.begin() + static_cast<std::ptrdiff_t>(done));
        return false;
      } else if (errno != EINTR) {
        drop(conn);
        return false;
      }
    }
    conn->pending.clear();
    return true;
  }

  void on_ready(Conn* conn, std::uint32_t events) {
    if ((events & EPOLLERR) != 0) return drop(conn);
    if (!conn->pending.empty() && !flush(conn)) return;
    for (;;) {
      const ssize_t n = ::recv(conn->fd, buffer_.get(), kWorkerBufferBytes, 0);
      if (n > 0) {
        const std::size_t size = static_cast<std::size_t>(n);
        std::size_t written = 0;
        while (written < size) {
          const ssize_t w = ::send(conn->fd, buffer_.get() + written, size - written, MSG_NOSIGNAL);
          if (w >= 0) {
            written += static_cast<std::size_t>(w);
          } else if (errno == EAGAIN) {
            // Stop reading until the EPOLLOUT edge: the client must take its
            // echo before it gets more.
            conn->pending.assign(buffer_.get() + written, buffer_.get() + size);
            return;
          } else if (errno != EINTR) {
            return drop(conn);
          }
        }
        // A short read emptied the receive queue (epoll(7): "if you call
        // read(2) by asking to read a certain amount of data and read(2)
        // returns a lower number of bytes, you can be sure of having
        // exhausted the read I/O space"), and whatever arrives from now on
        // raises a new edge: skip the read that would fail with EAGAIN, one
        // system call in three per message. A FIN already seen (EPOLLRDHUP)
        // raises no new edge, so then read on to the end of file.
        if (size < kWorkerBufferBytes && (events & EPOLLRDHUP) == 0) return;
      } else if (n == 0) {
        return drop(conn);
      } else if (errno == EAGAIN) {
        return;
      } else if (errno != EINTR) {
        return drop(conn);
      }
    }
  }

  int epoll_ = -1;
  const int listener_;
  std::unique_ptr<char[]> buffer_;
  std::unordered_map<Conn*, std::unique_ptr<Conn>> connections_;
};

int run_epoll(std::uint16_t port, unsigned workers) {
  // One listener per worker on the same port (SO_REUSEPORT): the kernel
  // spreads connections over the workers' accept queues, so the workers
  // share nothing, not even a listener's wait queue.
  std::vector<int> listeners;
  listeners.push_back(listen_on(port, true, true));
  const std::uint16_t bound = bound_port(listeners[0]);
  while (listeners.size() < workers) listeners.push_back(listen_on(bound, true, true));
  const int stop_fd = ::eventfd(0, EFD_CLOEXEC);
  if (stop_fd < 0) die_errno(kProgram, "eventfd");

  std::vector<std::unique_ptr<EpollWorker>> loops;
  for (const int listener : listeners) loops.push_back(std::make_unique<EpollWorker>(listener, stop_fd));
  std::vector<std::thread> threads;
  for (auto& loop : loops) threads.emplace_back([&loop] { loop->run(); });
  announce(bound);

  wait_for_stop_signal();
  const std::uint64_t one = 1;
  if (::write(stop_fd, &one, sizeof one) != sizeof one) die_errno(kProgram, "eventfd write");
  for (auto& thread : threads) thread.join();
  loops.clear();  // closes every connection and listener
  ::close(stop_fd);
  return 0;
}

// ---------------------------------------------------------------------------
// weft and hooked

// Both run one fiber per connection behind one listener fiber; they differ
// in whether the sockets are non-blocking (weft: the loop parks in weft::io)
// or blocking (hooked: libc's calls park the fiber).
int run_fibers(std::uint16_t port, unsigned workers, bool hooked) {
  weft::Config config;
  config.workers = workers;
  config.name = hooked ? "echo-hooked" : "echo-weft";
  config.dump = false;  // one thread less to share the cores with
  weft::Scheduler sched{config};

  const int listener = listen_on(port, false, !hooked);
  announce(bound_port(listener));
  Connections connections;

  weft::Fiber acceptor = sched.spawn({.name = "acceptor"}, [&] {
    for (;;) {
      const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | (hooked ? 0 : SOCK_NONBLOCK));
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EAGAIN && !hooked) {
          if (!weft::io::wait_readable(listener)) return;
          continue;
        }
        if (errno == EMFILE || errno == ENFILE) {
          weft::this_fiber::sleep_for(std::chrono::milliseconds(10));
          continue;
        }
        return;  // EINVAL after stop's shutdown of the listener
      }
      configure_accepted(fd);
      if (!connections.add(fd)) {
        ::close(fd);
        continue;
      }
      // Detached: the scheduler's shutdown waits for every fiber.
      sched
          .spawn([&connections, fd, hooked] {
            if (hooked)
              serve_blocking(fd);
            else
              serve_parked(fd);
            connections.close(fd);
          })
          .detach();
    }
  });

  wait_for_stop_signal();
  connections.stop();
  ::shutdown(listener, SHUT_RDWR);
  acceptor.join();
  sched.shutdown();
  ::close(listener);
  return 0;
}

// ---------------------------------------------------------------------------

}  // namespace

int main(int argc, char** argv) {
  std::string mode;
  std::uint16_t port = 0;
  const unsigned cores = std::thread::hardware_concurrency();
  unsigned workers = cores == 0 ? 1 : cores;

  CLI::App app{"echo_server: a TCP echo server on 127.0.0.1, serving until SIGINT or SIGTERM", "echo_server"};
  app.add_option("--mode", mode,
                 "thread: a thread per connection; epoll: an edge-triggered epoll loop per worker; weft: a fiber "
                 "per connection over weft::io; hooked: a fiber per connection, blocking calls through libweft's "
                 "libc hooks")
      ->check(CLI::IsMember({"weft", "thread", "epoll", "hooked"}))
      ->required();
  weft::bench::add_count(app, "--port", port, std::uint16_t{0}, std::uint16_t{65535},
                         "on 127.0.0.1; 0 picks a free one. Prints \"listening on 127.0.0.1:PORT\"")
      ->required();
  CLI::Option* workers_option = weft::bench::add_count(app, "--workers", workers, 1u, 1024u,
                                                       "epoll, weft, hooked: threads (default: one per core)");
  weft::bench::parse(app, argc, argv);
  if (workers_option->count() != 0 && mode == "thread")
    weft::bench::usage_error(app, "--workers does not apply to --mode thread");

  weft::bench::raise_fd_limit();
  // A client that leaves mid-write must cost its connection, not the server.
  ::signal(SIGPIPE, SIG_IGN);
  // Blocked before any thread starts, so that every thread inherits the mask
  // and only wait_for_stop_signal() takes them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  if (mode == "thread") return run_thread(port);
  if (mode == "epoll") return run_epoll(port, workers);
  return run_fibers(port, workers, mode == "hooked");
}
