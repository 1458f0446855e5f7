// The libc hooks as checkpoints (hooks/hook_support.h, hook_checkpoint): a
// hooked call that does not park still lets a fiber that sysmon asked to
// yield do so, so a loop on calls that never block (a socket that always
// has data, a write with room, a poll of a ready fd, a regular file's read or
// write) shares its workers. Each case loops on one call family in several fibers beside
// a 1 ms ticker on the same workers, and checks that the ticker stays on
// time, that every loop keeps getting the right results, and that errno is
// still the fiber's own after the call (the yield happens inside the call,
// after the real one, on the thread the call was made on).
//
// Built with _FORTIFY_SOURCE=2, as hooks_test is: the reads and recvs with a
// known buffer size go through __read_chk and __recv_chk.
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include "libc.h"
#include "test_support.h"
#include "ticker.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what + ": " + std::strerror(errno)); }

// Closes what it holds; the set-up below throws (failing the test) when a
// descriptor cannot be made.
struct Fds {
  std::vector<int> fds;
  Fds() = default;
  Fds(const Fds&) = delete;
  Fds& operator=(const Fds&) = delete;
  ~Fds() {
    for (int fd : fds) ::close(fd);
  }
  int add(int fd, const char* what) {
    if (fd < 0) fail(what);
    fds.push_back(fd);
    return fd;
  }
};

// A connected AF_UNIX stream pair, blocking (as a user leaves it) unless
// `flags` says otherwise.
std::pair<int, int> socket_pair(Fds& owner, int flags = 0) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | flags, 0, fds) != 0) fail("socketpair");
  owner.add(fds[0], "socketpair");
  owner.add(fds[1], "socketpair");
  return {fds[0], fds[1]};
}

// The set-up and upkeep of a loop (filling what a read takes, draining what
// a write leaves) go to libc's functions behind the hooks (libc.h):
// only the call under test may be a checkpoint.

// Refills `fd` with a block of 'x' whenever the reader has taken it all:
// one write per kBlock one-byte reads.
constexpr std::size_t kBlock = 32 * 1024;
void refill(int fd) {
  static const std::string block(kBlock, 'x');
  static const auto real_write = test::libc_function<decltype(::write)>("write");
  if (real_write(fd, block.data(), block.size()) != static_cast<ssize_t>(block.size())) fail("refill");
}

// Takes what the writer has sent, so that its next writes have room: a
// one-byte write on an AF_UNIX socket takes far more of the peer's buffer
// than its byte, so this runs every kDrainEvery writes.
constexpr int kDrainEvery = 32;
void drain(int fd) {
  char sink[4096];
  static const auto real_recv = test::libc_function<decltype(::recv)>("recv");
  while (real_recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0) {
  }
}

// One family of hooked calls: per loop fiber, its set-up, then one step
// that makes the call(s) and says whether the result and errno were right.
// `mark` is errno's value before the step, the fiber's own, which a call
// that succeeds must leave as it was.
using Step = std::function<bool(int mark)>;
struct HookedLoop {
  std::string name;
  std::function<Step()> make;
  friend void PrintTo(const HookedLoop& loop, std::ostream* out) { *out << loop.name; }
};

// The reading end of a socket pair with one byte waiting in it, for calls
// that find it readable and leave the byte there.
int readable_socket(Fds& owner) {
  const auto ends = socket_pair(owner);
  if (write(ends.second, "x", 1) != 1) fail("write");
  return ends.first;
}

// One-byte reads of `reader`, which `writer` refills when they have taken
// everything; `fds` owns both.
Step refilled_reads(const std::shared_ptr<Fds>& fds, int reader, int writer) {
  auto left = std::make_shared<std::size_t>(0);
  return [fds, reader, writer, left](int mark) {
    if (*left == 0) {
      refill(writer);
      *left = kBlock;
    }
    --*left;
    char byte = 0;
    errno = mark;
    return read(reader, &byte, 1) == 1 && byte == 'x' && errno == mark;
  };
}

// One-byte writes by `write_one(fd)` to a socket whose peer is drained
// every kDrainEvery writes, so that each write has room.
template <class WriteOne>
Step drained_writes(WriteOne write_one) {
  auto fds = std::make_shared<Fds>();
  const auto ends = socket_pair(*fds);
  const int reader = ends.first;
  const int writer = ends.second;
  auto written = std::make_shared<int>(0);
  return [fds, reader, writer, written, write_one](int mark) {
    if (++*written % kDrainEvery == 0) drain(reader);
    errno = mark;
    return write_one(writer) == 1 && errno == mark;
  };
}

// A regular file of its own, `size` bytes of 'x', unlinked at once (the
// fd keeps it): the calls below reach the kernel's page cache and never
// wait for the disk, so they never park.
int regular_file(Fds& owner, std::size_t size) {
  char path[] = "/tmp/weft-checkpoint-XXXXXX";
  const int fd = owner.add(::mkstemp(path), "mkstemp");
  ::unlink(path);
  static const auto real_pwrite = test::libc_function<decltype(::pwrite)>("pwrite");
  const std::string content(size, 'x');
  if (real_pwrite(fd, content.data(), content.size(), 0) != static_cast<ssize_t>(content.size())) fail("pwrite");
  return fd;
}

// One-byte reads or writes of a regular file at its position, which goes
// back to the start (libc's lseek, not a hook) every kBlock bytes.
template <class Call>
Step at_the_file_position(Call call) {
  auto fds = std::make_shared<Fds>();
  const int fd = regular_file(*fds, kBlock);
  auto done = std::make_shared<std::size_t>(0);
  return [fds, fd, done, call](int mark) {
    if (++*done % kBlock == 0 && ::lseek(fd, 0, SEEK_SET) != 0) return false;
    errno = mark;
    return call(fd) == 1 && errno == mark;
  };
}

// One-byte positioned reads or writes at the start of a regular file.
template <class Call>
Step at_the_start(Call call) {
  auto fds = std::make_shared<Fds>();
  const int fd = regular_file(*fds, 1);
  return [fds, fd, call](int mark) {
    errno = mark;
    return call(fd) == 1 && errno == mark;
  };
}

std::vector<HookedLoop> hooked_loops() {
  return {
      {"ReadOnAReadableSocket",
       [] {
         auto fds = std::make_shared<Fds>();
         const auto ends = socket_pair(*fds);
         const int reader = ends.first;
         const int writer = ends.second;
         return refilled_reads(fds, reader, writer);
       }},
      {"RecvPeekOnAReadableSocket",
       [] {
         auto fds = std::make_shared<Fds>();
         const int reader = readable_socket(*fds);
         return Step([fds, reader](int mark) {
           char byte = 0;
           errno = mark;
           return recv(reader, &byte, 1, MSG_PEEK) == 1 && byte == 'x' && errno == mark;
         });
       }},
      {"ReadOnAReadablePipe",
       [] {
         auto fds = std::make_shared<Fds>();
         int p[2];
         if (pipe(p) != 0) fail("pipe");
         fds->add(p[0], "pipe");
         fds->add(p[1], "pipe");
         return refilled_reads(fds, p[0], p[1]);
       }},
      {"WriteWithRoomOnASocket", [] { return drained_writes([](int fd) { return write(fd, "x", 1); }); }},
      {"SendWithRoomOnASocket", [] { return drained_writes([](int fd) { return send(fd, "x", 1, 0); }); }},
      {"PollOnAReadyFd",
       [] {
         auto fds = std::make_shared<Fds>();
         const int reader = readable_socket(*fds);
         return Step([fds, reader](int mark) {
           // No timeout: the hook's own path, which finds the fd ready.
           pollfd p{reader, POLLIN, 0};
           errno = mark;
           return poll(&p, 1, -1) == 1 && (p.revents & POLLIN) != 0 && errno == mark;
         });
       }},
      {"SelectOnAReadyFd",
       [] {
         auto fds = std::make_shared<Fds>();
         const int reader = readable_socket(*fds);
         return Step([fds, reader](int mark) {
           fd_set readable;
           FD_ZERO(&readable);
           FD_SET(reader, &readable);
           timeval zero{0, 0};  // a poll: straight to libc
           errno = mark;
           return select(reader + 1, &readable, nullptr, nullptr, &zero) == 1 && FD_ISSET(reader, &readable) &&
                  errno == mark;
         });
       }},
      {"EpollWaitOnAReadyFd",
       [] {
         auto fds = std::make_shared<Fds>();
         const int reader = readable_socket(*fds);
         const int epfd = fds->add(epoll_create1(EPOLL_CLOEXEC), "epoll_create1");
         epoll_event event{};
         event.events = EPOLLIN;
         event.data.fd = reader;
         if (epoll_ctl(epfd, EPOLL_CTL_ADD, reader, &event) != 0) fail("epoll_ctl");
         return Step([fds, epfd, reader](int mark) {
           epoll_event out{};
           errno = mark;
           return epoll_wait(epfd, &out, 1, -1) == 1 && out.data.fd == reader && errno == mark;
         });
       }},
      {"ReadOnANonBlockingSocketKeepsEAGAIN",
       [] {
         // The user's O_NONBLOCK: the hook passes the call through, and the
         // EAGAIN it sets must survive the yield after it.
         auto fds = std::make_shared<Fds>();
         const int reader = socket_pair(*fds, SOCK_NONBLOCK).first;
         return Step([fds, reader](int mark) {
           char byte = 0;
           errno = mark;
           return read(reader, &byte, 1) == -1 && errno == EAGAIN;
         });
       }},
      // A loop of file calls (a logger, a copy) shares its worker too.
      {"ReadOfARegularFile",
       [] {
         return at_the_file_position([](int fd) {
           char byte = 0;
           return read(fd, &byte, 1) == 1 && byte == 'x' ? 1 : -1;
         });
       }},
      {"WriteOfARegularFile", [] { return at_the_file_position([](int fd) { return write(fd, "x", 1); }); }},
      {"PreadOfARegularFile",
       [] {
         return at_the_start([](int fd) {
           char byte = 0;
           return pread(fd, &byte, 1, 0) == 1 && byte == 'x' ? 1 : -1;
         });
       }},
      {"PwriteOfARegularFile", [] { return at_the_start([](int fd) { return pwrite(fd, "x", 1, 0); }); }},
      {"ZeroNanosleep",
       [] {
         return Step([](int mark) {
           const timespec zero{0, 0};
           errno = mark;
           return nanosleep(&zero, nullptr) == 0 && errno == mark;
         });
       }},
      {"GetaddrinfoOfALiteral",
       [] {
         return Step([](int mark) {
           addrinfo hints{};
           hints.ai_family = AF_INET;
           hints.ai_socktype = SOCK_STREAM;
           hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
           addrinfo* result = nullptr;
           errno = mark;
           h_errno = mark;  // which the other loops' yields must not change either
           const int rc = getaddrinfo("127.0.0.1", "80", &hints, &result);
           const bool ok = rc == 0 && result != nullptr && errno == mark && h_errno == mark;
           if (result != nullptr) freeaddrinfo(result);
           return ok;
         });
       }},
  };
}

Config checkpoint_config(unsigned workers, std::chrono::microseconds slice) {
  Config config = test::config_with(workers);
  config.time_slice = slice;
  // No spare to take the queued ticker over: only the checkpoint may.
  config.max_threads = config.workers;  // no spares
  return config;
}

class HookedCallIsACheckpoint : public ::testing::TestWithParam<std::tuple<HookedLoop, unsigned>> {};

// 16 loop fibers repeat the call, which never parks; a ticker
// sleeps 1 ms at a time on the same workers. Before the hooks were
// checkpoints, the loops kept their workers: the ticker was late by the
// whole run and the loops were never preempted.
TEST_P(HookedCallIsACheckpoint, ATickerOnTheSameWorkersStaysOnTime) {
  // Not a structured binding: Clang 14 cannot capture one.
  const HookedLoop& loop = std::get<0>(GetParam());
  const unsigned workers = std::get<1>(GetParam());
  constexpr auto kSlice = 5ms;
  constexpr auto kRun = 1000ms;
  const int loops = 16;  // as checkpoint_test's consumers
  Scheduler sched(checkpoint_config(workers, kSlice));
  std::atomic<bool> stop{false};
  test::Ticker ticker(sched);

  std::vector<std::atomic<std::uint64_t>> served(static_cast<std::size_t>(loops));
  std::atomic<std::uint64_t> wrong{0};
  std::atomic<int> setup_failures{0};
  const test::RunDelays delays;  // from the loops' start
  std::vector<Fiber> fibers;
  for (int i = 0; i < loops; ++i) {
    fibers.push_back(sched.spawn({.name = "loop"}, [&, i] {
      Step step;
      try {
        step = loop.make();
      } catch (const std::exception& error) {
        std::fprintf(stderr, "set-up of %s failed: %s\n", loop.name.c_str(), error.what());
        setup_failures.fetch_add(1);
        return;
      }
      const int mark = 10'000 + i;  // errno values no call sets, one per fiber
      // Bounded in count as well as by `stop`.
      for (std::uint64_t n = 0; n < 100'000'000 && !stop.load(std::memory_order_relaxed); ++n) {
        if (!step(mark)) wrong.fetch_add(1, std::memory_order_relaxed);
        served[static_cast<std::size_t>(i)].fetch_add(1, std::memory_order_relaxed);
      }
    }));
  }
  const double control_ms = test::plain_thread_worst_late_ms(kRun);
  const double os_wait_ms = delays.two_worst_ms();
  stop.store(true);
  std::uint64_t preempts = 0;
  for (Fiber& f : fibers) {
    f.join();
    preempts += f.counts().preempt;
  }
  ticker.stop();

  ASSERT_EQ(setup_failures.load(), 0);
  // Plus what the OS held this process's busy threads up for (RunDelays,
  // tests/ticker.h): on a loaded machine an always-runnable worker waits
  // far longer for a CPU than the sleeping control thread.
  // 2.5 slices, as issue 15 asks, with a margin for this shared machine
  // (more under ThreadSanitizer) and twice the plain thread's worst. The
  // margin is wider than checkpoint_test's: at a load average of 30 on 2
  // cores, a hog loop of this_fiber::checkpoint() in this test was once
  // 214 ms late. Without the checkpoints the lateness was the whole run
  // (1,000 ms), and the ticker ticked once or twice.
  const double bound_ms = 2.5 * std::chrono::duration<double, std::milli>(kSlice).count() +
                          250.0 * static_cast<double>(test::kSlowdown) + 2 * control_ms + os_wait_ms;
  EXPECT_LE(ticker.worst_late_ms(), bound_ms)
      << loop.name << ": the ticker's worst lateness in ms, over " << ticker.ticks()
      << " ticks (a plain thread's: " << control_ms
      << " ms; the two longest waits for a CPU of this process's threads: " << os_wait_ms << " ms)";
  RecordProperty("worst_late_us", static_cast<int>(ticker.worst_late_ms() * 1000));
  RecordProperty("ticks", ticker.ticks());
  EXPECT_GT(preempts, 0u) << loop.name << ": no loop fiber was ever preempted in its hooked calls";
  EXPECT_EQ(wrong.load(), 0u) << loop.name << ": calls with a wrong result or errno";
  int idle = 0;
  for (const auto& s : served) idle += s.load() == 0 ? 1 : 0;
  EXPECT_EQ(idle, 0) << idle << " of " << loops << " loop fibers never ran";
}

// Not more workers than this machine's 2 cores (tests/checkpoint_test.cpp).
INSTANTIATE_TEST_SUITE_P(Calls, HookedCallIsACheckpoint,
                         ::testing::Combine(::testing::ValuesIn(hooked_loops()), ::testing::Values(1u, 2u)),
                         [](const ::testing::TestParamInfo<std::tuple<HookedLoop, unsigned>>& info) {
                           return std::get<0>(info.param).name + "_" + std::to_string(std::get<1>(info.param)) +
                                  "_workers";
                         });

// The hook's checkpoint pins the fiber to its worker while it waits to run
// again. If it holds a std::mutex then, and the fiber that runs in its
// place blocks the worker's thread on that mutex, only sysmon can save
// them: after 1 s in futex(2) it releases the hook's pin (as it does for
// a fiber parked in a hook), a spare runs the holder, and the hooked call
// returns there with errno copied to the thread it was made on. Without
// that release this deadlocked. A std::mutex, not a timed one: TSan does
// not see pthread_mutex_clocklock, and then reports the unlock as misuse;
// a deadlock ends the binary instead (spare_worker_test does the same).
TEST(HookedCallCheckpoint, AStdMutexHeldAcrossAPreemptionDoesNotDeadlock) {
  // With the lock hooks on, the waiter parks on the mutex instead of
  // blocking the thread: the test runs in a child without them when the
  // binary was started by hand (meson's test sets WEFT_HOOK_LOCKS=0).
  if (const char* locks = std::getenv("WEFT_HOOK_LOCKS"); locks == nullptr || std::string_view(locks) != "0") {
    test::expect_pass_in_child_with("WEFT_HOOK_LOCKS", "0",
                                    "HookedCallCheckpoint.AStdMutexHeldAcrossAPreemptionDoesNotDeadlock");
    return;
  }
  Config config = test::config_with(1);
  config.time_slice = 2ms;
  config.max_threads = config.workers + 1;  // one spare
  Scheduler sched(config);
  std::mutex m;
  std::atomic<bool> waiter_started{false};
  std::atomic<int> done{0};
  long holder_tid_before = 0;
  long holder_tid_after = 0;
  int holder_errno = 0;
  constexpr int kMark = 10'123;
  Fiber holder = sched.spawn({.name = "holder"}, [&] {
    std::lock_guard guard(m);
    holder_tid_before = ::syscall(SYS_gettid);
    const timespec zero{0, 0};
    // Until the waiter runs, which it can only do on this worker when the
    // holder yields in its hooked call: no spare is running yet.
    const auto give_up_at = Clock::now() + 5s;
    errno = kMark;
    while (!waiter_started.load() && Clock::now() < give_up_at) (void)nanosleep(&zero, nullptr);
    holder_errno = errno;
    holder_tid_after = ::syscall(SYS_gettid);
    ++done;
  });
  Fiber waiter = sched.spawn({.name = "waiter"}, [&] {
    waiter_started.store(true);
    const std::lock_guard guard(m);  // blocks the worker's thread in futex(2)
    ++done;
  });
  const auto until = Clock::now() + 30s;
  while (done.load() < 2 && Clock::now() < until) std::this_thread::sleep_for(1ms);
  if (done.load() < 2) {
    // Deadlocked: joining would hang the test binary instead of failing it.
    std::fprintf(stderr, "deadlock: %d of 2 fibers finished; the preempted holder never ran again\n", done.load());
    std::_Exit(1);
  }
  holder.join();
  waiter.join();
  EXPECT_TRUE(waiter_started.load()) << "the holder never yielded in nanosleep(0)";
  EXPECT_NE(holder_tid_before, holder_tid_after) << "the holder should have resumed on the spare";
  EXPECT_EQ(holder_errno, kMark);
  EXPECT_GT(holder.counts().preempt, 0u);
}

}  // namespace
}  // namespace weft
