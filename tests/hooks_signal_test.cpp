// Hooked calls made by a signal handler (hooks/signal_handlers.h): they are
// libc's calls, whatever the handler interrupted. They never park, never
// yield at their checkpoint (docs/sysmon.md: weft never switches fibers in
// a signal handler), take no lock the interrupted code may hold, and keep
// errno as libc does. The handler is known to run as long as it runs,
// however it ends (a return, a longjmp out, an exception), and what
// sigaction and the legacy calls report back is what libc reports.
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "hooks/signal_handlers.h"
#include "hooks_test_support.h"
#include "io/fd_records.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// One worker, no spares, and a short time slice, so that sysmon asks a
// fiber that never yields to do so within milliseconds.
Scheduler one_worker_preempting() {
  Config config = test::config_with(1);
  config.max_threads = config.workers;
  config.time_slice = 1ms;
  return Scheduler(config);
}

// Installs `handler` for `signal` with sigaction (weft's hook) and puts the
// old action back when it goes.
class Handler {
 public:
  Handler(int signal, void (*handler)(int), int flags = SA_RESTART) : signal_(signal) {
    struct sigaction action {};
    action.sa_handler = handler;
    action.sa_flags = flags;
    sigemptyset(&action.sa_mask);
    EXPECT_EQ(sigaction(signal, &action, &old_), 0);
  }
  ~Handler() { sigaction(signal_, &old_, nullptr); }
  Handler(const Handler&) = delete;
  Handler& operator=(const Handler&) = delete;

 private:
  int signal_;
  struct sigaction old_ {};
};

// --- the self-pipe --------------------------------------------------------

int self_pipe_write = -1;
std::atomic<int> handled{0};
std::atomic<int> errno_changed{0};

// The self-pipe trick: one byte per signal. A write that succeeds leaves
// errno as it was, as libc's does.
void write_to_self_pipe(int) {
  const int saved = errno;
  errno = EDOM;
  const ssize_t n = write(self_pipe_write, "s", 1);
  if (n == 1 && errno != EDOM) errno_changed.fetch_add(1);
  errno = saved;
  handled.fetch_add(1);
}

// A fiber that never reaches a checkpoint keeps its worker while signals
// whose handler writes to a self-pipe keep arriving: the write's checkpoint
// must not yield inside the handler. Another fiber on the same (only)
// worker counts how often it ran meanwhile. Before, the handler's write
// yielded once sysmon had asked the fiber to, and the other fiber ran
// (issue 27, item 3: 419 switches in 5 s; with a spin lock held across
// such a loop, a hang).
// A signalfd reports the pending signals of the thread that reads it,
// beside the process's. A fiber's read of one parked on the netpoller,
// whose epoll_wait another worker's thread may make (here, with another
// fiber parked on a pipe): a signal sent to the reader's thread alone was
// never seen, and the read waited for the process-directed one sent to
// end it. Now the read is the plain call on the fiber's thread, announced.
TEST(HooksSignal, ASignalfdReadSeesASignalSentToItsThread) {
  sigset_t usr2;
  sigemptyset(&usr2);
  sigaddset(&usr2, SIGUSR2);
  sigset_t before;
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &usr2, &before), 0);  // workers inherit it
  {
    Scheduler sched{test::config_with(2)};
    int pipe_fds[2];
    ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
    Fiber other = sched.spawn([&] {
      char byte;
      EXPECT_EQ(read(pipe_fds[0], &byte, 1), 1);
    });
    std::this_thread::sleep_for(20ms);  // parked on the pipe
    signalfd_siginfo got{};
    bool rescued = false;
    sched
        .spawn([&] {
          const int fd = signalfd(-1, &usr2, SFD_CLOEXEC);
          ASSERT_GE(fd, 0);
          std::atomic<bool> read_returned{false};
          const pthread_t reader = pthread_self();
          std::thread sender([&] {
            std::this_thread::sleep_for(100ms);
            EXPECT_EQ(pthread_kill(reader, SIGUSR2), 0);
            // The rescue, should the read miss it.
            for (int i = 0; i < 20'000 && !read_returned.load(); ++i) std::this_thread::sleep_for(1ms);
            if (!read_returned.load()) {
              rescued = true;
              EXPECT_EQ(sigqueue(getpid(), SIGUSR2, sigval{99}), 0);
            }
          });
          EXPECT_EQ(read(fd, &got, sizeof got), ssize_t(sizeof got));
          read_returned = true;
          sender.join();
          close(fd);
        })
        .join();
    EXPECT_EQ(got.ssi_signo, unsigned(SIGUSR2));
    EXPECT_EQ(got.ssi_code, SI_TKILL);
    EXPECT_FALSE(rescued) << "the read missed the signal sent to its thread for 20 s";
    EXPECT_EQ(write(pipe_fds[1], "x", 1), 1);
    other.join();
    close(pipe_fds[0]);
    close(pipe_fds[1]);
  }
  // Whatever a miss left pending: the rescue (the process's) and the
  // signal sent to a worker that has exited since (gone with it).
  const timespec now{0, 0};
  while (sigtimedwait(&usr2, nullptr, &now) > 0) {
  }
  ASSERT_EQ(pthread_sigmask(SIG_SETMASK, &before, nullptr), 0);
}

TEST(HooksSignal, AHandlersWriteNeverSwitchesFibers) {
#ifdef WEFT_UNDER_TSAN
  GTEST_SKIP() << "ThreadSanitizer defers a signal from another thread to its next interceptor and calls the "
                  "handler itself there, outside weft's trampoline: weft cannot see that handler";
#endif
  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  ASSERT_EQ(fcntl(pipe_fds[1], F_SETFL, O_NONBLOCK), 0);  // as the self-pipe trick has it
  self_pipe_write = pipe_fds[1];
  handled = 0;
  errno_changed = 0;
  const Handler handler(SIGUSR1, &write_to_self_pipe);
  std::thread drainer([&] {
    char sink[256];
    while (read(pipe_fds[0], sink, sizeof(sink)) > 0) {
    }
  });

  Scheduler sched = one_worker_preempting();
  std::atomic<pthread_t> worker{};
  std::atomic<bool> spinning{false};
  std::atomic<bool> done{false};
  std::atomic<int> other_ran{0};
  int ran_during_loop = -1;
  Fiber spinner = sched.spawn([&] {
    worker.store(pthread_self());
    spinning.store(true);
    // Until 200 signals were handled here (3 s at most): no checkpoint.
    const auto until = Clock::now() + 3s;
    while (handled.load(std::memory_order_relaxed) < 200 && Clock::now() < until) {
    }
    ran_during_loop = other_ran.load();
    done.store(true);
  });
  ASSERT_TRUE(test::wait_until([&] { return spinning.load(); }));
  Fiber other = sched.spawn([&] { other_ran.fetch_add(1); });  // queued behind the spinner
  while (!done.load()) {
    pthread_kill(worker.load(), SIGUSR1);
    std::this_thread::sleep_for(1ms);
  }
  spinner.join();
  other.join();
  close(pipe_fds[1]);
  drainer.join();
  close(pipe_fds[0]);
  EXPECT_GT(handled.load(), 0);
  EXPECT_EQ(ran_during_loop, 0) << "the other fiber ran while the spinner was in a signal handler";
  EXPECT_EQ(errno_changed.load(), 0) << "a write that succeeded in a handler changed errno";
}

// --- a blocking call in a handler -----------------------------------------

int handler_socket = -1;
std::atomic<ssize_t> handler_read{-2};

void read_in_handler(int) {
  char c;
  handler_read = read(handler_socket, &c, 1);
}

// A blocking read in a handler that interrupted a fiber blocks the thread,
// as libc's does: it must not park the fiber inside the handler, which would
// run another fiber on the worker. Before, it parked.
TEST(HooksSignal, ABlockingCallInAHandlerBlocksTheThread) {
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  handler_socket = pair[0];
  handler_read = -2;
  const Handler handler(SIGUSR2, &read_in_handler);
  Scheduler sched = test::one_worker();
  std::atomic<bool> raising{false};
  std::atomic<int> other_ran{0};
  int ran_in_handler = -1;
  Fiber reader = sched.spawn([&] {
    raising.store(true);
    raise(SIGUSR2);  // its handler reads what the thread below writes in 50 ms
    ran_in_handler = other_ran.load();
  });
  ASSERT_TRUE(test::wait_until([&] { return raising.load(); }));
  Fiber other = sched.spawn([&] { other_ran.fetch_add(1); });
  std::this_thread::sleep_for(50ms);
  ASSERT_EQ(write(pair[1], "x", 1), 1);
  reader.join();
  other.join();
  EXPECT_EQ(handler_read.load(), 1);
  EXPECT_EQ(ran_in_handler, 0) << "the handler's read parked its fiber and another ran";
  close(pair[0]);
  close(pair[1]);
}

// --- locks -----------------------------------------------------------------

int handler_fd = -1;
int handler_target = -1;
std::atomic<int> handler_result{-2};

void close_in_handler(int) { handler_result = close(handler_fd); }
void dup2_in_handler(int) { handler_result = dup2(handler_fd, handler_target); }
void set_flags_in_handler(int) { handler_result = fcntl(handler_fd, F_SETFL, O_NONBLOCK); }

// The code a handler interrupts may hold the lock of the very fd record the
// handler's call touches (a hooked call of its own on that fd, on the same
// thread): the handler must not wait for it. The test holds the record's
// locks itself and raises the signal; a watchdog lets go after 5 s, so that
// a handler that waits is reported instead of hanging. Before, close, dup2
// and fcntl(F_SETFL) in a handler waited for the lock.
TEST(HooksSignal, AHandlerTakesNoLockTheInterruptedCodeMayHold) {
  struct Case {
    const char* call;
    void (*handler)(int);
  };
  for (const Case& c : {Case{"close", &close_in_handler}, Case{"dup2", &dup2_in_handler},
                        Case{"fcntl(F_SETFL)", &set_flags_in_handler}}) {
    int pair[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
    handler_fd = pair[0];
    handler_target = pair[1];  // dup2 replaces the peer: both ends are then pair[0]'s socket
    handler_result = -2;
    detail::FdRecord* held = detail::fd_records().get(c.handler == &dup2_in_handler ? pair[1] : pair[0]);
    ASSERT_NE(held, nullptr);
    const Handler handler(SIGUSR1, c.handler);
    held->lock.lock();
    held->flip_lock.lock();
    // Released once, by whichever comes first: the handler's return, or
    // the watchdog. Before the watchdog is joined: its thread's exit may
    // make an fd (UBSan's vptr check probes memory with a pipe), which
    // takes the number the handler's close freed, and its record's lock.
    std::atomic<bool> released{false};
    const auto release = [&] {
      if (released.exchange(true)) return false;
      held->flip_lock.unlock();
      held->lock.unlock();
      return true;
    };
    std::atomic<bool> returned{false};
    std::atomic<bool> let_go{false};
    std::thread watchdog([&] {
      if (test::wait_until([&] { return returned.load(); }, 5s)) return;
      let_go.store(release());
    });
    raise(SIGUSR1);
    returned.store(true);
    release();
    watchdog.join();
    EXPECT_FALSE(let_go.load()) << c.call << " in a handler waited for a lock the interrupted code held";
    EXPECT_EQ(handler_result.load(), c.handler == &dup2_in_handler ? pair[1] : 0) << c.call;
    if (c.handler != &close_in_handler) close(pair[0]);
    close(pair[1]);
  }
}

// An fd replaced in a handler (dup2 over it: a log file reopened on
// SIGHUP) is waited on afresh: the handler could not take the record's
// lock to renew it, so its next use does. The fiber's socket was
// registered with the poller before the handler replaced it; its read of
// the new socket must wake when data comes (SO_RCVTIMEO bounds a failure).
TEST(HooksSignal, AnFdReplacedInAHandlerIsWaitedOnAfresh) {
  int first[2];
  int second[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, first), 0);
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, second), 0);
  const timeval timeout{10, 0};
  ASSERT_EQ(setsockopt(second[0], SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout)), 0);
  handler_fd = second[0];
  handler_target = first[0];
  handler_result = -2;
  const Handler handler(SIGUSR1, &dup2_in_handler);
  Scheduler sched = test::one_worker();
  std::atomic<int> phase{0};
  ssize_t got = -2;
  int error = 0;
  Fiber reader = sched.spawn([&] {
    char c;
    if (read(first[0], &c, 1) != 1) return;  // parks first: first[0] is registered
    raise(SIGUSR1);                          // first[0] is now second[0]'s socket
    phase.store(1);
    got = read(first[0], &c, 1);
    error = errno;
  });
  ASSERT_TRUE(test::io_waiters_reach(sched, 1));
  ASSERT_EQ(write(first[1], "a", 1), 1);
  ASSERT_TRUE(test::wait_until([&] { return phase.load() == 1; }));
  ASSERT_TRUE(test::io_waiters_reach(sched, 1));
  ASSERT_EQ(write(second[1], "b", 1), 1);
  reader.join();
  EXPECT_EQ(handler_result.load(), first[0]);
  EXPECT_EQ(got, 1) << "the read of the replaced fd ended with " << std::strerror(error);
  for (int fd : {first[0], first[1], second[0], second[1]}) close(fd);
}

// --- leaving a handler -------------------------------------------------------

sigjmp_buf jump_back;
std::atomic<bool> was_in_handler{false};

void jump_out(int) {
  was_in_handler = detail::in_signal_handler();
  siglongjmp(jump_back, 1);
}

void throw_out(int) {
  was_in_handler = detail::in_signal_handler();
  throw 7;
}

// A fiber whose handler left by longjmp, or by an exception, is no longer
// in a handler: its next blocking read parks (io_waiters_reach sees it; a
// read that blocked the only worker would not be seen, and the write below
// ends it either way).
void expect_handler_left(void (*leave)(int), bool by_exception) {
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  was_in_handler = false;
  const Handler handler(SIGUSR2, leave);
  Scheduler sched = test::one_worker();
  bool in_handler_after = true;
  ssize_t got = -2;
  Fiber reader = sched.spawn([&] {
    if (by_exception) {
      // raise() is declared noexcept (__THROW): called as it is, the
      // compiler would drop the catch.
      int (*volatile raise_that_throws)(int) = &raise;
      try {
        raise_that_throws(SIGUSR2);
      } catch (int) {
      }
    } else if (sigsetjmp(jump_back, 1) == 0) {
      raise(SIGUSR2);
    }
    in_handler_after = detail::in_signal_handler();
    char c;
    got = read(pair[0], &c, 1);
  });
  const bool parked = test::io_waiters_reach(sched, 1);
  ASSERT_EQ(write(pair[1], "x", 1), 1);
  reader.join();
  EXPECT_TRUE(was_in_handler.load());
  EXPECT_FALSE(in_handler_after);
  EXPECT_TRUE(parked) << "the read after the handler did not park";
  EXPECT_EQ(got, 1);
  close(pair[0]);
  close(pair[1]);
}

TEST(HooksSignal, AHandlerLeftByLongjmpIsLeft) { expect_handler_left(&jump_out, false); }

TEST(HooksSignal, AHandlerLeftByAnExceptionIsLeft) {
#ifdef WEFT_UNDER_TSAN
  GTEST_SKIP() << "ThreadSanitizer's signal handler wrapper has no unwind tables to throw through";
#endif
  expect_handler_left(&throw_out, true);
}

// --- what is reported back --------------------------------------------------

void handler_a(int) {}
void handler_b(int) {}
void siginfo_handler(int, siginfo_t*, void*) {}

using SigactionFn = int(int, const struct sigaction*, struct sigaction*);
using SignalFn = sighandler_t(int, sighandler_t);

// libc's own function `name`, behind weft's hook.
template <class Fn>
Fn* libc(const char* name) {
  void* handle = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  EXPECT_NE(handle, nullptr);
  void* fn = handle != nullptr ? dlsym(handle, name) : nullptr;
  EXPECT_NE(fn, nullptr) << name;
  return reinterpret_cast<Fn*>(fn);
}

// What a query reports, minus SA_RESTORER (libc's own flag, for its
// return trampoline).
struct Reported {
  void* handler = nullptr;
  int flags = 0;
  bool masks[4] = {};  // SIGUSR1, SIGUSR2, SIGINT, SIGTERM in sa_mask
  bool operator==(const Reported&) const = default;
};

Reported report(SigactionFn* query, int signal) {
  struct sigaction action {};
  EXPECT_EQ(query(signal, nullptr, &action), 0);
  Reported r;
  r.handler = reinterpret_cast<void*>(action.sa_handler);
  r.flags = action.sa_flags & ~0x04000000;  // SA_RESTORER
  const int signals[4] = {SIGUSR1, SIGUSR2, SIGINT, SIGTERM};
  for (int i = 0; i < 4; ++i) r.masks[i] = sigismember(&action.sa_mask, signals[i]) == 1;
  return r;
}

// One sequence of installs, made once through libc alone and once through
// weft's hooks: each step's return value and the action reported after it
// must be the same. Returns them in order.
struct Trace {
  std::vector<void*> returned;
  std::vector<Reported> reported;
  bool operator==(const Trace&) const = default;
};

Trace run_sequence(SigactionFn* set_action, SignalFn* set_signal, SignalFn* set_sysv, SignalFn* set_sigset) {
  Trace trace;
  const int s = SIGUSR1;
  auto note = [&](void* returned) {
    trace.returned.push_back(returned);
    trace.reported.push_back(report(set_action, s));
  };
  struct sigaction action {};
  struct sigaction old {};
  sigemptyset(&action.sa_mask);
  sigaddset(&action.sa_mask, SIGINT);
  action.sa_handler = &handler_a;
  action.sa_flags = SA_RESTART | SA_NODEFER;
  EXPECT_EQ(set_action(s, &action, &old), 0);
  note(reinterpret_cast<void*>(old.sa_handler));
  action.sa_sigaction = &siginfo_handler;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
  EXPECT_EQ(set_action(s, &action, &old), 0);
  note(reinterpret_cast<void*>(old.sa_handler));
  note(reinterpret_cast<void*>(set_signal(s, &handler_b)));
  note(reinterpret_cast<void*>(set_sysv(s, &handler_a)));
  note(reinterpret_cast<void*>(set_sigset(s, &handler_b)));
  note(reinterpret_cast<void*>(set_sigset(s, SIG_HOLD)));
  note(reinterpret_cast<void*>(set_sigset(s, SIG_IGN)));
  note(reinterpret_cast<void*>(set_signal(s, &handler_a)));
  action.sa_handler = SIG_DFL;
  action.sa_flags = 0;
  EXPECT_EQ(set_action(s, &action, &old), 0);
  note(reinterpret_cast<void*>(old.sa_handler));
  // An invalid signal fails as libc's does.
  errno = 0;
  note(reinterpret_cast<void*>(set_signal(0, &handler_a)));
  trace.returned.push_back(reinterpret_cast<void*>(std::intptr_t(errno)));
  sigset_t unblock;
  sigemptyset(&unblock);
  sigaddset(&unblock, s);
  pthread_sigmask(SIG_UNBLOCK, &unblock, nullptr);  // sigset(SIG_HOLD) blocked it
  return trace;
}

TEST(HooksSignal, WhatIsReportedBackIsWhatLibcReports) {
#ifdef WEFT_UNDER_TSAN
  GTEST_SKIP() << "ThreadSanitizer answers sigaction from its own table, and installs signal()'s handler with "
                  "its own flags";
#endif
  const Trace by_libc = run_sequence(libc<SigactionFn>("sigaction"), libc<SignalFn>("signal"),
                                     libc<SignalFn>("sysv_signal"), libc<SignalFn>("sigset"));
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  SignalFn* const weft_sigset = &sigset;  // deprecated, and still in use
#pragma GCC diagnostic pop
  const Trace by_weft = run_sequence(&sigaction, &signal, &sysv_signal, weft_sigset);
  ASSERT_EQ(by_libc.reported.size(), by_weft.reported.size());
  for (std::size_t i = 0; i < by_libc.reported.size(); ++i) {
    EXPECT_EQ(by_libc.returned[i], by_weft.returned[i]) << "step " << i;
    EXPECT_EQ(by_libc.reported[i].handler, by_weft.reported[i].handler) << "step " << i;
    EXPECT_EQ(by_libc.reported[i].flags, by_weft.reported[i].flags) << "step " << i;
    EXPECT_TRUE(by_libc.reported[i] == by_weft.reported[i]) << "step " << i << ": the mask";
  }
  EXPECT_EQ(by_libc.returned.back(), by_weft.returned.back()) << "errno of an invalid signal";
}

// A handler that reinstalls itself with signal() (the System V way; both
// calls are async-signal-safe), on a thread that forks again and again:
// the handler runs inside fork() too. Before, fork's pthread_atfork
// handler held the hooks' install lock with signals open, and the
// handler's signal() spun on it for good (a SIGCHLD reaper beside a
// forking loop hung the same way). In a child process, which the test
// kills if it has not finished its forks within 60 s (300 forks hung it in
// each of 5 runs before).
std::atomic<long> reinstalls{0};
void reinstall_self(int) {
  signal(SIGUSR1, reinstall_self);
  reinstalls.fetch_add(1, std::memory_order_relaxed);
}

[[noreturn]] void fork_while_signalled() {
  constexpr int kForks = 300;
  signal(SIGUSR1, reinstall_self);
  const pthread_t forker = pthread_self();
  std::atomic<bool> done{false};
  std::thread signaller([&] {
    while (!done.load()) {
      pthread_kill(forker, SIGUSR1);
      std::this_thread::sleep_for(200us);
    }
  });
  for (int i = 0; i < kForks; ++i) {
    const pid_t pid = fork();
    if (pid == 0) _exit(0);
    if (pid < 0) _exit(2);
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  done = true;
  signaller.join();
  _exit(reinstalls.load() > 0 ? 0 : 3);
}

TEST(HooksSignal, AHandlerThatInstallsAHandlerDuringForkDoesNotHang) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) fork_while_signalled();
  int status = 0;
  pid_t reaped = 0;
  for (const auto until = Clock::now() + 60s; reaped == 0 && Clock::now() < until;) {
    reaped = waitpid(child, &status, WNOHANG);
    if (reaped == 0) std::this_thread::sleep_for(10ms);
  }
  if (reaped == 0) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    FAIL() << "the forking child hung: a handler's signal() inside fork()";
  }
  ASSERT_EQ(reaped, child);
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: fork failed; 3: no signal was handled";
}

// The kernel holds weft's trampoline, not the user's handler: the handler
// runs counted. And one that SA_RESETHAND reset is reported as SIG_DFL.
TEST(HooksSignal, TheKernelHoldsATrampolineAndAResetIsReported) {
  struct sigaction action {};
  action.sa_handler = &handler_a;
  action.sa_flags = SA_RESETHAND;
  sigemptyset(&action.sa_mask);
  struct sigaction old {};
  ASSERT_EQ(sigaction(SIGUSR1, &action, &old), 0);
  struct sigaction kernel {};
  ASSERT_EQ(libc<SigactionFn>("sigaction")(SIGUSR1, nullptr, &kernel), 0);
  EXPECT_NE(kernel.sa_handler, &handler_a);
  struct sigaction reported {};
  ASSERT_EQ(sigaction(SIGUSR1, nullptr, &reported), 0);
  EXPECT_EQ(reported.sa_handler, &handler_a);
  raise(SIGUSR1);
  ASSERT_EQ(sigaction(SIGUSR1, nullptr, &reported), 0);
  EXPECT_EQ(reported.sa_handler, SIG_DFL);
  sigaction(SIGUSR1, &old, nullptr);
}

// Whether the handler found its third argument near its own frame: the
// kernel's signal frame, just above it.
std::atomic<bool> context_near{false};
void read_context(int, siginfo_t*, void* context) {
  const auto frame = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
  const auto at = reinterpret_cast<std::uintptr_t>(context);
  context_near = at > frame && at - frame < 64 * 1024;
}

// Whether a handler of three parameters installed without SA_SIGINFO by
// `set_action` finds the interrupted context in its third argument.
bool plain_handler_finds_its_context(SigactionFn* set_action) {
  struct sigaction action {};
  action.sa_sigaction = &read_context;  // the union's other member: no SA_SIGINFO below
  action.sa_flags = 0;
  sigemptyset(&action.sa_mask);
  struct sigaction old {};
  EXPECT_EQ(set_action(SIGUSR2, &action, &old), 0);
  context_near = false;
  raise(SIGUSR2);
  set_action(SIGUSR2, &old, nullptr);
  return context_near.load();
}

// On x86-64 the kernel passes every handler the siginfo and ucontext
// addresses after the signal number, SA_SIGINFO or not, and BSD-style
// handlers declared with three parameters read the interrupted context
// there. A plain handler run by weft's trampoline gets them too.
TEST(HooksSignal, APlainHandlerGetsWhatTheKernelPassed) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "the kernel passes a plain handler's context only on x86-64";
#endif
  EXPECT_EQ(plain_handler_finds_its_context(&sigaction),
            plain_handler_finds_its_context(libc<SigactionFn>("sigaction")));
  EXPECT_TRUE(plain_handler_finds_its_context(&sigaction));
}

std::atomic<int> counted{-1};
void note_counted(int) { counted = detail::in_signal_handler() ? 1 : 0; }

// A handler installed behind weft's back (before libweft was loaded, by
// libc's internal __sigaction, by a raw rt_sigaction) runs uncounted until
// wrap_installed_signal_handlers, which weft runs at load, wraps it.
TEST(HooksSignal, HandlersInstalledBeforeWeftAreWrapped) {
#ifdef WEFT_UNDER_TSAN
  GTEST_SKIP() << "a handler ThreadSanitizer does not know of runs outside its signal machinery";
#endif
  struct sigaction action {};
  action.sa_handler = &note_counted;
  sigemptyset(&action.sa_mask);
  struct sigaction old {};
  ASSERT_EQ(libc<SigactionFn>("sigaction")(SIGUSR2, &action, &old), 0);
  detail::wrap_installed_signal_handlers();
  struct sigaction reported {};
  ASSERT_EQ(sigaction(SIGUSR2, nullptr, &reported), 0);
  EXPECT_EQ(reported.sa_handler, &note_counted);
  raise(SIGUSR2);
  EXPECT_EQ(counted.load(), 1);
  sigaction(SIGUSR2, &old, nullptr);
}

}  // namespace
}  // namespace weft
