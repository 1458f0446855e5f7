// weft::io and the netpoller (io/netpoller.h): readiness, timeouts racing
// readiness, closing, many waiters, many fds, shutdown and idle CPU.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <weft/io.h>
#include <weft/weft.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "fd_pair.h"
#include "io/fd_records.h"
#include "io/netpoller.h"
#include "socket_pair.h"
#include "sync_support.h"

namespace weft {
namespace {

using namespace std::chrono_literals;

using test::FdPair;
using test::make_pipe;
using test::make_socketpair;

void write_byte(int fd) { ASSERT_EQ(::write(fd, "x", 1), 1) << std::strerror(errno); }
// One byte, without blocking: -1 with errno EAGAIN when there is none.
ssize_t read_byte(int fd) {
  char c;
  return ::read(fd, &c, 1);
}

// Waits (bounded) until the scheduler's poller counts `n` fibers parked on
// fds; false if that never happened within 20 s.
bool wait_for_io_waiters(Scheduler& sched, std::uint64_t n) {
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < until) {
    if (sched.snapshot().poller.io_waiters >= n) return true;
    std::this_thread::sleep_for(1ms);
  }
  return false;
}

class IoTest : public test::SyncTest {};
class IoWorkersTest : public test::WorkersTest {};

TEST_P(IoTest, APipeBecomesReadableWhenWrittenTo) {
  FdPair pipe = make_pipe();
  std::atomic<bool> woke{false};
  run_callers({[&] {
                 EXPECT_TRUE(io::wait_readable(pipe.reader));
                 woke.store(true);
                 EXPECT_EQ(read_byte(pipe.reader), 1);
               },
               [&] {
                 this_fiber::sleep_for(5ms);
                 EXPECT_FALSE(woke.load());  // nothing to read yet: it must have waited
                 write_byte(pipe.writer);
               }});
  EXPECT_TRUE(woke.load());
}

TEST_P(IoTest, ASocketBecomesReadableAndIsWritable) {
  FdPair sockets = make_socketpair();
  run_callers({[&] {
                 EXPECT_TRUE(io::wait_writable(sockets.reader));  // an empty send buffer
                 for (int i = 0; i < 20; ++i) {
                   EXPECT_TRUE(io::wait_readable(sockets.reader));
                   EXPECT_EQ(read_byte(sockets.reader), 1);
                 }
               },
               [&] {
                 for (int i = 0; i < 20; ++i) {
                   EXPECT_TRUE(io::wait_writable(sockets.writer));
                   write_byte(sockets.writer);
                   this_fiber::sleep_for(100us);
                 }
               }});
}

TEST_P(IoTest, ReadinessIsLevelNotEdge) {
  // Having been woken once, an fd that still holds data is ready at once:
  // no new edge will come for what is already there.
  FdPair pipe = make_pipe();
  run_one([&] {
    std::thread late([&] {
      std::this_thread::sleep_for(2ms);
      ASSERT_EQ(::write(pipe.writer, "xyz", 3), 3);
    });
    EXPECT_TRUE(io::wait_readable(pipe.reader));
    late.join();
    for (int i = 0; i < 3; ++i) {
      EXPECT_TRUE(io::wait_readable(pipe.reader, 10s));
      EXPECT_EQ(read_byte(pipe.reader), 1);
    }
    EXPECT_FALSE(io::wait_readable(pipe.reader, 1ms));
  });
}

TEST_P(IoTest, TimesOutWhenNothingArrives) {
  FdPair pipe = make_pipe();
  run_one([&] {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_FALSE(io::wait_readable(pipe.reader, 20ms));
    EXPECT_GE(std::chrono::steady_clock::now() - start, 20ms);
    EXPECT_FALSE(io::wait_readable(pipe.reader, 0ms));  // polls once
    EXPECT_FALSE(io::wait_readable(pipe.reader, -5ms));
    EXPECT_TRUE(io::wait_writable(pipe.writer, 0ms));
  });
}

TEST_P(IoTest, BadFdsThrowNamingTheFd) {
  FdPair pipe = make_pipe();
  // A number far above what the scheduler opens (its epoll, eventfds and
  // rings take the lowest free numbers, a just-closed one among them).
  const int closed = ::fcntl(pipe.reader, F_DUPFD, 900);
  ASSERT_GE(closed, 900);
  ::close(closed);
  run_one([&] {
    try {
      io::wait_readable(-1);
      ADD_FAILURE() << "no throw for fd -1";
    } catch (const std::system_error& e) {
      EXPECT_EQ(e.code().value(), EBADF);
      EXPECT_NE(std::string(e.what()).find("fd -1"), std::string::npos) << e.what();
    }
    try {
      io::wait_writable(closed, 1s);
      ADD_FAILURE() << "no throw for a closed fd";
    } catch (const std::system_error& e) {
      EXPECT_EQ(e.code().value(), EBADF);
      EXPECT_NE(std::string(e.what()).find("fd " + std::to_string(closed)), std::string::npos) << e.what();
    }
  });
}

TEST_P(IoTest, TimeoutsRacingReadinessLoseAndDoubleNothing) {
  // Each round the writer writes one byte at about the time the reader's
  // short timeout expires. Whatever wins, the round ends with exactly one
  // byte read: a true from the timed wait means a byte is there (recv
  // succeeds), a false is followed by an untimed wait that must return (a
  // lost wake-up hangs it). A fiber woken twice would run twice.
  FdPair sockets = make_socketpair();
  const std::uint64_t rounds = test::scaled(100'000);
  const auto budget = std::chrono::steady_clock::now() + 4s;
  Semaphore round_open{0};  // one permit per round the reader is about to wait in
  std::atomic<bool> stop{false};
  std::uint64_t done = 0, ready_first = 0;
  run_callers({[&] {
                 for (std::uint64_t i = 1; i <= rounds && std::chrono::steady_clock::now() < budget; ++i) {
                   round_open.release();
                   const auto timeout = std::chrono::microseconds(i % 7 == 0 ? 0 : i % 50);
                   if (io::wait_readable(sockets.reader, timeout))
                     ++ready_first;
                   else
                     ASSERT_TRUE(io::wait_readable(sockets.reader));
                   ASSERT_EQ(read_byte(sockets.reader), 1) << "round " << i << ": woken with nothing to read";
                   ++done;
                 }
                 stop.store(true);
                 round_open.release();
               },
               [&] {
                 for (std::uint64_t written = 0;; ++written) {
                   round_open.acquire();
                   if (stop.load()) break;
                   // Vary where the write lands against the timeout.
                   for (std::uint64_t spin = 0; spin < written % 5; ++spin) this_fiber::yield();
                   write_byte(sockets.writer);
                 }
               }});
  EXPECT_GT(done, std::min<std::uint64_t>(rounds, 100));
  EXPECT_EQ(read_byte(sockets.reader), -1);  // nothing left over: one byte per round
  RecordProperty("rounds", static_cast<int>(done));
  RecordProperty("ready_before_timeout", static_cast<int>(ready_first));
}

TEST_P(IoTest, ManyWaitersOnOneFdAllWake) {
  FdPair pipe = make_pipe();
  constexpr int kWaiters = 50;
  std::atomic<int> woke{0};
  std::vector<std::function<void()>> bodies(kWaiters, [&] {
    EXPECT_TRUE(io::wait_readable(pipe.reader));
    woke.fetch_add(1);
  });
  bodies.push_back([&] {
    this_fiber::sleep_for(5ms);
    write_byte(pipe.writer);  // nobody reads it: the fd stays readable for all
  });
  run_callers(bodies);
  EXPECT_EQ(woke.load(), kWaiters);
}

TEST(Io, ABlockerThatReadiesManyFibersDoesNotWakeItself) {
  // One worker: when idle it is the blocker, in epoll_wait, and the only
  // listed sleeper. One event readies every fiber parked on the fd, and the
  // run queue's wake for each fiber beyond the first used to pick that one
  // sleeper, the blocker itself, and write the poller's eventfd to its own
  // next epoll_wait (io/netpoller.h). Now the idle loop wakes once, after
  // it has left the sleepers list, and nobody is left to wake.
  Scheduler sched{test::config_with(1)};
  FdPair shared = make_pipe();
  FdPair keeper = make_pipe();  // its fiber keeps the worker blocking in epoll_wait
  constexpr int kWaiters = 8;
  std::atomic<int> woke{0};
  std::vector<Fiber> fibers;
  for (int i = 0; i < kWaiters; ++i)
    fibers.push_back(sched.spawn([&] {
      if (io::wait_readable(shared.reader)) woke.fetch_add(1);
    }));
  fibers.push_back(sched.spawn([&] { EXPECT_TRUE(io::wait_readable(keeper.reader)); }));
  ASSERT_TRUE(wait_for_io_waiters(sched, kWaiters + 1));
  // Blocked once the spawns' wake-ups are over: they may write the eventfd.
  const auto blocking = [&] { return sched.snapshot().poller.blocker >= 0; };
  auto until = std::chrono::steady_clock::now() + 20s;
  while (!blocking() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(blocking());
  const std::uint64_t before = sched.snapshot().poller.wakeups;

  write_byte(shared.writer);  // nobody reads it: one event, every waiter ready
  until = std::chrono::steady_clock::now() + 20s;
  while ((woke.load() < kWaiters || !blocking()) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(1ms);
  EXPECT_EQ(woke.load(), kWaiters);
  EXPECT_TRUE(blocking());
  EXPECT_EQ(sched.snapshot().poller.wakeups, before);

  write_byte(keeper.writer);
  for (auto& f : fibers) f.join();
}

TEST_P(IoWorkersTest, APlainThreadAndFibersWaitOnTheSameFd) {
  FdPair pipe = make_pipe();
  std::atomic<int> woke{0};
  std::vector<Fiber> fibers;
  for (int i = 0; i < 8; ++i) {
    fibers.push_back(sched().spawn([&] {
      EXPECT_TRUE(io::wait_readable(pipe.reader));
      woke.fetch_add(1);
    }));
  }
  std::thread thread([&] {
    EXPECT_TRUE(io::wait_readable(pipe.reader));
    woke.fetch_add(1);
  });
  ASSERT_TRUE(wait_for_io_waiters(sched(), 8));
  write_byte(pipe.writer);
  for (auto& f : fibers) f.join();
  thread.join();
  EXPECT_EQ(woke.load(), 9);
}

TEST_P(IoWorkersTest, ClosingWakesWaitersWithClosed) {
  FdPair pipe = make_pipe();
  std::atomic<int> closed{0};
  const int fd = pipe.reader;
  Fiber internal = sched().spawn([&] {
    if (detail::wait_fd(fd, detail::FdDirection::read, detail::no_deadline) == detail::FdWaitResult::closed)
      closed.fetch_add(1);
  });
  Fiber with_timeout = sched().spawn([&] {
    if (detail::wait_fd(fd, detail::FdDirection::read, detail::Clock::now() + 60s) == detail::FdWaitResult::closed)
      closed.fetch_add(1);
  });
  Fiber public_api = sched().spawn([&] {
    try {
      io::wait_readable(fd);
      ADD_FAILURE() << "woke without the fd being closed";
    } catch (const std::system_error& e) {
      EXPECT_EQ(e.code().value(), EBADF);
      EXPECT_NE(std::string(e.what()).find("fd " + std::to_string(fd) + " was closed"), std::string::npos) << e.what();
      closed.fetch_add(1);
    }
  });
  ASSERT_TRUE(wait_for_io_waiters(sched(), 3));
  FdPair::close_fd(pipe.reader);
  internal.join();
  with_timeout.join();
  public_api.join();
  EXPECT_EQ(closed.load(), 3);
  EXPECT_EQ(sched().snapshot().poller.fds_registered, 0u);
}

TEST_P(IoWorkersTest, AReusedFdNumberGetsNoStaleWakeUp) {
  // The old file stays open through a dup and keeps its registration under
  // the old number in the kernel (as when an event is already on its way
  // to the poller while the fd is closed and its number reused). Its
  // events carry the old generation and must not wake a waiter on the new
  // file with that number.
  FdPair old_pipe = make_pipe();
  const int number = old_pipe.reader;
  sched().spawn([&] { EXPECT_FALSE(io::wait_readable(number, 1ms)); }).join();  // registers it
  const int keep = ::dup(number);
  ASSERT_GE(keep, 0);
  ::close(number);  // the kernel keeps (old file, number) in the epoll set: the file lives on in `keep`
  // The new pipe's reader takes the lowest free number: `number`, unless
  // a lower one is free (held open meanwhile, and then again) or another
  // thread (sysmon reading /proc) holds `number` for a moment (again).
  int fds[2];
  std::vector<int> lower;
  for (int attempt = 0;; ++attempt) {
    ASSERT_EQ(::pipe2(fds, O_CLOEXEC | O_NONBLOCK), 0);
    if (fds[0] == number) break;
    if (fds[0] < number) {
      lower.push_back(fds[0]);
      ::close(fds[1]);  // which may hold `number`
    } else {
      ::close(fds[0]);
      ::close(fds[1]);
      std::this_thread::sleep_for(1ms);
    }
    if (attempt == 200) {
      for (int fd : lower) ::close(fd);
      GTEST_SKIP() << "the new pipe did not get fd " << number;
    }
  }
  for (int fd : lower) ::close(fd);
  detail::fd_closing(number);  // weft learns of the close (late, here) and bumps the generation
  old_pipe.reader = -1;        // closed above; its number is the new pipe's
  std::atomic<bool> timed_out{false};
  Fiber waiter = sched().spawn({.name = "new-file"}, [&] { timed_out.store(!io::wait_readable(number, 2s)); });
  ASSERT_TRUE(wait_for_io_waiters(sched(), 1));
  write_byte(old_pipe.writer);         // an event for (old file, number, old generation)
  std::this_thread::sleep_for(100ms);  // for the poller to handle it
  // The waiter's count of parks: 1 while only its timeout can wake it; a
  // stale wake-up makes it poll, find nothing and park again.
  std::uint64_t parks = 0;
  for (const FiberSnapshot& f : sched().snapshot().fibers)
    if (f.name == "new-file") parks = f.counts.park;
  EXPECT_EQ(parks, 1u);
  waiter.join();
  EXPECT_TRUE(timed_out.load());
  ::close(keep);
  ::close(fds[1]);
  FdPair::close_fd(fds[0]);
}

TEST_P(IoWorkersTest, AnEdgeBetweenTheLevelCheckAndTheParkIsNotLost) {
  // The window of io/netpoller.h's "Waiting", held open: the test holds the
  // fd's record lock, so the waiter stops after its poll(2) found nothing,
  // and the poller, which has the edge of the byte written meanwhile, stops
  // at the same lock. Whoever takes it first, the waiter must not sleep
  // through that edge (with the poller first, only the event counter tells
  // it). A second fiber parked on another fd keeps the poller polling.
  FdPair keep_polling = make_pipe();
  Fiber other = sched().spawn([&] { EXPECT_TRUE(io::wait_readable(keep_polling.reader)); });
  ASSERT_TRUE(wait_for_io_waiters(sched(), 1));
  for (int round = 0; round < 10; ++round) {
    FdPair pipe = make_pipe();
    sched().spawn([&] { EXPECT_FALSE(io::wait_readable(pipe.reader, 1ms)); }).join();  // registers it
    detail::FdRecord& record = *detail::fd_records().get(pipe.reader);
    record.lock.lock();
    std::atomic<bool> woke{false};
    Fiber waiter = sched().spawn([&] {
      EXPECT_TRUE(io::wait_readable(pipe.reader));
      woke.store(true);
    });
    std::this_thread::sleep_for(20ms);  // it polls (nothing yet) and spins on the lock
    write_byte(pipe.writer);
    std::this_thread::sleep_for(20ms);  // the poller has the edge and spins on the lock too
    record.lock.unlock();
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (!woke.load() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
    EXPECT_TRUE(woke.load()) << "round " << round << ": the edge was lost";
    if (!woke.load()) write_byte(pipe.writer);  // a second edge, to end the test
    waiter.join();
  }
  write_byte(keep_polling.writer);
  other.join();
}

TEST_P(IoWorkersTest, FibersParkedOnIoDoNotSpinAnIdleScheduler) {
  FdPair pipe = make_pipe();
  Fiber f = sched().spawn([&] { EXPECT_TRUE(io::wait_readable(pipe.reader)); });
  ASSERT_TRUE(wait_for_io_waiters(sched(), 1));
  // One worker ends up blocked in epoll_wait (bounded wait).
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (sched().snapshot().poller.blocker < 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(1ms);
  EXPECT_GE(sched().snapshot().poller.blocker, 0);
  std::this_thread::sleep_for(50ms);  // let sysmon and the searchers settle
  const double cpu_before = test::process_cpu_ms();
  std::this_thread::sleep_for(500ms);
  const double cpu_ms = test::process_cpu_ms() - cpu_before;
  // A spinning worker would burn ~500 ms of it; a blocked one ~0.
  EXPECT_LT(cpu_ms, 100.0) << "the process used " << cpu_ms << " ms of CPU in 500 ms with every fiber parked";
  write_byte(pipe.writer);
  f.join();
}

TEST_P(IoWorkersTest, TheSnapshotSaysWhatAFiberWaitsFor) {
  const test::LoopbackTcpPair tcp;
  const int client = tcp.client;
  ASSERT_GE(tcp.server, 0);
  FdPair pipe = make_pipe();

  Fiber on_socket = sched().spawn({.name = "on-socket"}, [&] { EXPECT_TRUE(io::wait_readable(client)); });
  Fiber on_pipe = sched().spawn({.name = "on-pipe"}, [&] { EXPECT_TRUE(io::wait_readable(pipe.reader)); });
  ASSERT_TRUE(wait_for_io_waiters(sched(), 2));
  const SchedulerSnapshot snap = sched().snapshot();
  const std::string expected = tcp.client_description();
  int seen = 0;
  for (const FiberSnapshot& f : snap.fibers) {
    if (f.name == "on-socket") {
      EXPECT_EQ(f.wait_kind, "fd");
      EXPECT_EQ(f.wait_operation, "readable");
      EXPECT_EQ(f.wait_fd, client);
      EXPECT_EQ(f.wait_fd_info, expected);
      ++seen;
    } else if (f.name == "on-pipe") {
      EXPECT_EQ(f.wait_fd, pipe.reader);
      EXPECT_EQ(f.wait_fd_info, "pipe");
      ++seen;
    }
  }
  EXPECT_EQ(seen, 2);
  EXPECT_EQ(snap.poller.io_waiters, 2u);
  EXPECT_GE(snap.poller.fds_registered, 2u);
  ASSERT_EQ(::write(tcp.server, "x", 1), 1);
  write_byte(pipe.writer);
  on_socket.join();
  on_pipe.join();
  // The pair closes them on the way out.
  for (int fd : {client, tcp.server, tcp.listener.fd}) detail::fd_closing(fd);
}

TEST(Io, TwoSchedulersWaitOnOneFdAndBothSeeReadinessAndTheClose) {
  Scheduler first{test::config_with(2)};
  Scheduler second{test::config_with(1)};
  FdPair pipe = make_pipe();
  const int fd = pipe.reader;
  {
    std::atomic<int> ready{0};
    auto body = [&] {
      if (detail::wait_fd(fd, detail::FdDirection::read, detail::Clock::now() + 30s) == detail::FdWaitResult::ready)
        ready.fetch_add(1);
    };
    Fiber a = first.spawn(body);
    Fiber b = second.spawn(body);
    ASSERT_TRUE(wait_for_io_waiters(first, 1));
    ASSERT_TRUE(wait_for_io_waiters(second, 1));
    write_byte(pipe.writer);
    a.join();
    b.join();
    EXPECT_EQ(ready.load(), 2);
  }
  ASSERT_EQ(read_byte(fd), 1);
  {
    std::atomic<int> closed{0};
    auto body = [&] {
      // Each scheduler's poller has the fd: the first's owns the record,
      // the second's added it too.
      if (detail::wait_fd(fd, detail::FdDirection::read, detail::no_deadline) == detail::FdWaitResult::closed)
        closed.fetch_add(1);
    };
    Fiber a = first.spawn(body);
    Fiber b = second.spawn(body);
    ASSERT_TRUE(wait_for_io_waiters(first, 1));
    ASSERT_TRUE(wait_for_io_waiters(second, 1));
    FdPair::close_fd(pipe.reader);
    a.join();
    b.join();
    EXPECT_EQ(closed.load(), 2);
  }
  EXPECT_EQ(first.snapshot().poller.fds_registered + second.snapshot().poller.fds_registered, 0u);
}

TEST(Io, TenThousandParkedConnectionsOnOneWorker) {
  // Two fds a connection, and a few for the rest of the process.
  int connections = static_cast<int>(test::scaled(10'000));
  rlimit limit{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &limit), 0);
  constexpr rlim_t kOthers = 64;
  if (limit.rlim_cur < 2 * static_cast<rlim_t>(connections) + kOthers) {
    limit.rlim_cur = std::min(limit.rlim_max, 2 * static_cast<rlim_t>(connections) + kOthers);
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &limit), 0);
  }
  const int fit = static_cast<int>((limit.rlim_cur - kOthers) / 2);
  if (fit < connections) {
    // This machine's hard limit (20,000 fds here) holds a few short of 10,000
    // socketpairs: run with what fits, and say so.
    if (fit < connections / 2) GTEST_SKIP() << "RLIMIT_NOFILE's hard limit " << limit.rlim_max << " is too low";
    std::printf("note: RLIMIT_NOFILE's hard limit %llu fits %d connections, not %d\n",
                static_cast<unsigned long long>(limit.rlim_max), fit, connections);
    connections = fit;
  }
  RecordProperty("connections", connections);
  Config config = test::config_with(1);
  config.stack_size = 32 * 1024;
  Scheduler sched{config};
  std::vector<FdPair> pairs;
  pairs.reserve(static_cast<std::size_t>(connections));
  for (int i = 0; i < connections; ++i) pairs.push_back(make_socketpair());
  std::atomic<int> read_ok{0};
  std::vector<Fiber> fibers;
  fibers.reserve(pairs.size());
  for (auto& pair : pairs) {
    const int fd = pair.reader;
    fibers.push_back(sched.spawn([fd, &read_ok] {
      if (io::wait_readable(fd) && read_byte(fd) == 1) read_ok.fetch_add(1);
    }));
  }
  ASSERT_TRUE(wait_for_io_waiters(sched, static_cast<std::uint64_t>(connections)));
  EXPECT_GE(sched.snapshot().poller.fds_registered, static_cast<std::uint64_t>(connections));
  // Wake them in the reverse order of their parking.
  for (auto it = pairs.rbegin(); it != pairs.rend(); ++it) write_byte(it->writer);
  for (auto& f : fibers) f.join();
  EXPECT_EQ(read_ok.load(), connections);
}

TEST(IoDeathTest, ShutdownReportsFibersParkedOnIo) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        FdPair pipe = make_pipe();
        Config config = test::config_with(2);
        config.shutdown_grace = 100ms;
        config.shutdown_policy = ShutdownPolicy::abort;
        Scheduler s{config};
        const int fd = pipe.reader;
        s.spawn({.name = "reads-forever"}, [fd] { io::wait_readable(fd); }).detach();
        // Parked before the grace begins (a first run is slow under TSan).
        test::wait_until([&] { return s.snapshot().fiber_states.parked == 1; });
      },
      "\"reads-forever\" #[0-9]+ parked, waiting on fd [0-9]+ \\(readable\\)");
}

WEFT_SYNC_PARAMS(IoTest);
WEFT_WORKER_COUNTS(IoWorkersTest);

}  // namespace
}  // namespace weft
