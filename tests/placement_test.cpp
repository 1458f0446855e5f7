// Where fibers start (sched/worker.cpp, "Where a fiber starts"). A fiber
// that lives in hooked calls, as an echo server's connection does, stays on
// the worker it first ran on: each park in a hooked read pins it there
// (hooks/hook_support.h). So its first run decides, for good, which thread
// serves the connection. Beside CPU-burning threads, the worker that
// happened to be on a CPU when the connections arrived used to start all
// of them, while its peer, asleep in epoll_wait, woke too late to steal
// any: one thread served every connection and the other ran nothing (issue
// 28, "No stall under load"; docs/benchmarks.md, "Echo beside CPU
// burners"). The test runs that echo, plain blocking code in fibers on 2
// workers, with 6 burners beside it, and checks that every echo comes back
// and that each worker serves at least a third of the connections. It
// asserts no timing: the burners only make the race that placement must not
// depend on likely.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "socket_pair.h"
#include "test_support.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kConnections = 200;
constexpr int kBurners = 6;
constexpr int kRounds = 10;
constexpr std::size_t kMessageBytes = 64;
// Every bound is generous: a stall, not a slow machine, should fail.
constexpr auto kEchoTimeout = 20s;
constexpr auto kBurnAtMost = 120s;

// The connection's side of the echo: plain blocking code, which the hooks
// park (as benchmarks/echo_server.cpp --mode hooked).
void serve(int fd) {
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = ::write(fd, buffer + done, static_cast<std::size_t>(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        ::close(fd);
        return;
      }
      done += w;
    }
  }
  ::close(fd);
}

// Threads that spin until stopped (or kBurnAtMost), each wanting a whole CPU.
class Burners {
 public:
  explicit Burners(int count) {
    const auto until = Clock::now() + kBurnAtMost;
    for (int i = 0; i < count; ++i)
      threads_.emplace_back([this, until] {
        std::uint64_t spins = 0;
        while (!stop_.load(std::memory_order_relaxed))
          if (++spins % 4096 == 0 && Clock::now() >= until) break;
      });
  }
  Burners(const Burners&) = delete;
  Burners& operator=(const Burners&) = delete;
  ~Burners() {
    stop_.store(true, std::memory_order_relaxed);
    for (auto& thread : threads_) thread.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

// Sends one message on every connection, then reads every echo back.
// False (with the reason in `failure`) if an echo is missing or wrong.
bool echo_round(const std::vector<int>& clients, int round, std::string& failure) {
  char message[kMessageBytes];
  for (std::size_t i = 0; i < clients.size(); ++i) {
    std::memset(message, 'a' + (round + static_cast<int>(i)) % 26, sizeof message);
    if (::write(clients[i], message, sizeof message) != static_cast<ssize_t>(sizeof message)) {
      failure = "write to connection " + std::to_string(i) + ": " + std::strerror(errno);
      return false;
    }
  }
  for (std::size_t i = 0; i < clients.size(); ++i) {
    char echo[kMessageBytes];
    std::size_t got = 0;
    while (got < sizeof echo) {
      const ssize_t n = ::read(clients[i], echo + got, sizeof echo - got);
      if (n <= 0) {
        failure = "echo on connection " + std::to_string(i) + " in round " + std::to_string(round) + ": " +
                  (n == 0 ? "closed" : std::strerror(errno)) + " (timeout: 20 s)";
        return false;
      }
      got += static_cast<std::size_t>(n);
    }
    std::memset(message, 'a' + (round + static_cast<int>(i)) % 26, sizeof message);
    if (std::memcmp(echo, message, sizeof echo) != 0) {
      failure = "connection " + std::to_string(i) + " echoed other bytes";
      return false;
    }
  }
  return true;
}

// The client ends, closed however the test ends: each connection's fiber
// then reads the end of file and returns.
struct Clients {
  std::vector<int> fds;
  Clients() = default;
  Clients(const Clients&) = delete;
  Clients& operator=(const Clients&) = delete;
  ~Clients() { close_all(); }
  void close_all() {
    for (const int fd : fds) ::close(fd);
    fds.clear();
  }
};

// One run of the echo: where the connections' fibers are once it is over,
// and how many fibers sysmon handed off a worker meanwhile.
struct Spread {
  std::map<int, int> per_worker;
  int seen = 0;
  std::uint64_t handoffs = 0;
  std::uint64_t preempts = 0;
  std::uint64_t steals = 0;
  std::string failure;
  std::string text() const {
    std::string out;
    for (const auto& [worker, count] : per_worker)
      out += " worker " + std::to_string(worker) + ": " + std::to_string(count);
    return out + " (hand-offs: " + std::to_string(handoffs) + ", preempts: " + std::to_string(preempts) +
           ", steals: " + std::to_string(steals) + ")";
  }
};

Spread run_echo() {
  Config config = test::config_with(2);
  config.name = "placement";
  // No spares: they run fibers only while a worker is blocked in the kernel,
  // and the spread asked about is the workers'. (Under ThreadSanitizer,
  // which slows the workers' calls, sysmon starts spares and fibers land
  // there too.)
  config.max_threads = 2;
  Scheduler sched{config};
  test::LoopbackListener listener(kConnections + 16);
  Spread spread;
  if (listener.fd < 0) {
    spread.failure = "no listener";
    return spread;
  }
  Clients clients;
  {
    const Burners burners(kBurners);
    // Every connection queued before the server accepts (a load generator
    // connecting at once, a server restarting): the acceptor then spawns
    // all of the connections' fibers in one burst, which one worker used
    // to start alone.
    const timeval timeout{std::chrono::duration_cast<std::chrono::seconds>(kEchoTimeout).count(), 0};
    for (int i = 0; i < kConnections; ++i) {
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) {
        spread.failure = std::string("socket: ") + std::strerror(errno);
        return spread;
      }
      clients.fds.push_back(fd);
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      if (::connect(fd, listener.address(), sizeof(sockaddr_in)) != 0) {
        spread.failure = std::string("connect: ") + std::strerror(errno);
        return spread;
      }
    }
    Fiber acceptor = sched.spawn({.name = "acceptor"}, [&] {
      for (int i = 0; i < kConnections; ++i) {
        const int fd = ::accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) return;  // the test fails on the missing echoes
        sched.spawn({.name = "connection"}, [fd] { serve(fd); }).detach();
      }
    });
    acceptor.join();
    for (int round = 0; round < kRounds && spread.failure.empty(); ++round)
      echo_round(clients.fds, round, spread.failure);
  }
  // Every connection's fiber is parked in its read now, on the worker it
  // runs on.
  const SchedulerSnapshot snapshot = sched.snapshot();
  for (const FiberSnapshot& fiber : snapshot.fibers) {
    if (fiber.name != "connection") continue;
    ++spread.per_worker[fiber.worker];
    ++spread.seen;
  }
  for (const WorkerSnapshot& worker : snapshot.workers) {
    spread.handoffs += worker.handoffs;
    spread.preempts += worker.preempts;
    spread.steals += worker.steals;
  }
  clients.close_all();
  return spread;
}

TEST(Placement, EchoConnectionsSpreadOverWorkersBesideCpuBurners) {
  // Where the connections start is the question. Sysmon may judge a worker
  // blocked in the kernel (a loaded machine, a slow system call) and hand
  // its fibers off; a peer in such a call is passed over by placement
  // meanwhile (sched/worker.cpp, "Where a fiber starts"), so a run with
  // hand-offs does not show placement alone: it is run again, a few times
  // at most.
  constexpr int kAttempts = 4;
  Spread spread;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    spread = run_echo();
    ASSERT_EQ(spread.failure, "");
    EXPECT_EQ(spread.seen, kConnections);
    std::printf("connections per worker:%s\n", spread.text().c_str());
    if (spread.handoffs == 0) break;
  }
  if (spread.handoffs != 0) GTEST_SKIP() << "sysmon handed fibers off in every run: " << spread.text();
  for (int worker = 0; worker < 2; ++worker)
    EXPECT_GE(spread.per_worker[worker], kConnections / 3) << "connections per worker:" << spread.text();
}

// Where a fiber of `snapshot` named `name` runs or last ran, or -1.
int worker_of(const SchedulerSnapshot& snapshot, const std::string& name) {
  for (const FiberSnapshot& fiber : snapshot.fibers)
    if (fiber.name == name) return fiber.worker;
  return -1;
}

TEST(Placement, PinnedFibersWokenWhileTheirWorkerIsBusyCountOnce) {
  // A pinned fiber woken while its worker runs another waits in that
  // worker's inbox, pinned still. Placement weighed a worker by its pinned
  // fibers plus its whole inbox, so it counted such a fiber twice, and a
  // peer kept a burst of spawns that it should have shared: in the echo
  // above, whose first round woke the connections already parked while the
  // last ones still started, one worker ended with 139 of the 200 (with no
  // hand-off). Here that moment is made on purpose. Residents, spread by
  // placement, park pinned; a busy fiber wakes those of its own worker (X)
  // and keeps X, so they wait in X's inbox; meanwhile the other worker (Y)
  // starts a burst, placing what it should on X. Once the busy fiber ends,
  // the two workers should hold about as many fibers each, counting X's
  // residents as they were when Y weighed X: counted twice, Y kept the
  // whole burst.
  constexpr int kResidents = 200;
  Config config = test::config_with(2);
  config.name = "placement";
  config.max_threads = 2;     // the workers' spread is the question (run_echo)
  config.preemption = false;  // the busy fiber keeps its worker
  Scheduler sched{config};

  std::vector<std::unique_ptr<Semaphore>> wakes;
  for (int i = 0; i < kResidents; ++i) wakes.push_back(std::make_unique<Semaphore>());
  // Spawned by a fiber, so that placement spreads them (a plain thread's
  // spawns go to the global queue).
  sched
      .spawn([&] {
        for (int i = 0; i < kResidents; ++i)
          sched
              .spawn({.name = "resident-" + std::to_string(i)},
                     [&, i] {
                       const auto pin = this_fiber::pin();
                       wakes[i]->acquire();
                     })
              .detach();
      })
      .join();
  const auto count_parked = [&](const std::string& prefix) {
    int parked = 0;
    for (const FiberSnapshot& fiber : sched.snapshot().fibers)
      if (fiber.name.starts_with(prefix) && fiber.state == "parked") ++parked;
    return parked;
  };
  ASSERT_TRUE(test::wait_until([&] { return count_parked("resident-") == kResidents; }));
  std::vector<int> resident_worker(kResidents);
  int residents_on[2] = {0, 0};
  {
    const SchedulerSnapshot snapshot = sched.snapshot();
    for (int i = 0; i < kResidents; ++i) {
      resident_worker[i] = worker_of(snapshot, "resident-" + std::to_string(i));
      ASSERT_TRUE(resident_worker[i] == 0 || resident_worker[i] == 1) << "resident " << i;
      ++residents_on[resident_worker[i]];
    }
  }

  // Enough to even out whatever spread the residents took, and 100 more.
  const int burst = 100 + std::abs(residents_on[0] - residents_on[1]);

  std::atomic<int> busy_worker{-1};
  std::atomic<bool> stop_busy{false};
  Fiber busy = sched.spawn({.name = "busy"}, [&] {
    const auto pin = this_fiber::pin();
    const int me = worker_of(sched.snapshot(), "busy");
    for (int i = 0; i < kResidents; ++i)
      if (resident_worker[i] == me) wakes[i]->release();
    busy_worker.store(me);
    const auto until = Clock::now() + 60s;  // bounded, should the test fail first
    while (!stop_busy.load() && Clock::now() < until) {
    }
  });
  ASSERT_TRUE(test::wait_until([&] { return busy_worker.load() >= 0; }));
  const int x = busy_worker.load();
  const int y = 1 - x;

  // From a plain thread through the global queue, which only Y takes now;
  // the burst is then Y's own spawns, each weighed against X.
  std::atomic<int> started{0};
  Latch end{1};
  sched
      .spawn({.name = "burst"},
             [&] {
               for (int i = 0; i < burst; ++i)
                 sched
                     .spawn({.name = "fresh"},
                            [&] {
                              const auto pin = this_fiber::pin();
                              started.fetch_add(1);
                              end.wait();
                            })
                     .detach();
             })
      .detach();
  // Every fresh fiber started on Y, or placed in X's inbox (what X holds
  // beyond its pinned inbox: it runs only the busy fiber).
  const bool dealt = test::wait_until([&] {
    const SchedulerSnapshot snapshot = sched.snapshot();
    const WorkerSnapshot& on_x = snapshot.workers[static_cast<std::size_t>(x)];
    return started.load() + static_cast<int>(on_x.queue_length - on_x.inbox_length) == burst;
  });
  stop_busy.store(true);
  busy.join();
  ASSERT_TRUE(dealt) << "the burst was not started or placed within 20 s";
  ASSERT_TRUE(test::wait_until([&] { return count_parked("fresh") == burst; }));

  int fresh_on[2] = {0, 0};
  for (const FiberSnapshot& fiber : sched.snapshot().fibers)
    if (fiber.name == "fresh") ++fresh_on[fiber.worker];
  end.count_down();
  for (int i = 0; i < kResidents; ++i)
    if (resident_worker[i] == y) wakes[i]->release();

  // Placement evens the two out to within its slack (sched/worker.h,
  // kPlacementSlack, 8, and an eighth of the lighter): 26 fibers when the
  // residents are even. Counted twice, X's residents kept the whole burst
  // on Y: about 100 apart.
  const int load_x = residents_on[x] + fresh_on[x];
  const int load_y = residents_on[y] + fresh_on[y];
  EXPECT_LE(std::abs(load_x - load_y), 10 + (load_x + load_y) / 8)
      << "residents " << residents_on[x] << " on the busy worker, " << residents_on[y]
      << " on the other; of the burst, " << fresh_on[x] << " started on the busy worker, " << fresh_on[y]
      << " on the other";
}

}  // namespace
}  // namespace weft
