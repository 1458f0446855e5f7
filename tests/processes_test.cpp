// Child processes from fibers (hooks/hooks_processes.cpp, hooks_popen.cpp):
// waitpid, wait4 and waitid park on a pidfd, system() and popen()/pclose()
// park while the command runs; each gives what the same call gives on a
// plain thread (status, errno, signal dispositions and mask), and the
// worker runs other fibers meanwhile (one worker, no spares: if the call
// blocked it, the other fiber could not run at all).
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio_ext.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <weft/weft.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "hooks/real_calls.h"
#include "test_support.h"

extern char** environ;

namespace weft {
namespace {

pid_t spawn_shell(const char* command) {
  char sh[] = "sh";
  char dash_c[] = "-c";
  char* argv[] = {sh, dash_c, const_cast<char*>(command), nullptr};
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, "/bin/sh", nullptr, nullptr, argv, environ), 0);
  return pid;
}

// Runs `body` in a fiber of a one-worker scheduler with no spare workers,
// beside a fiber that counts 1 ms sleeps until the body is done. Returns
// how many it counted while the body ran.
int ticks_beside(const std::function<void()>& body) {
  Config config = test::config_with(1);
  config.max_threads = config.workers;  // no spare threads
  Scheduler sched{config};
  std::atomic<bool> done{false};
  std::atomic<int> ticks{0};
  Fiber ticker = sched.spawn([&] {
    while (!done.load()) {
      this_fiber::sleep_for(std::chrono::milliseconds(1));
      ++ticks;
    }
  });
  int during = 0;
  sched
      .spawn([&] {
        this_fiber::sleep_for(std::chrono::milliseconds(2));  // the ticker is running
        const int before = ticks.load();
        body();
        during = ticks.load() - before;  // before the ticker can run again
        done = true;
      })
      .join();
  ticker.join();
  return during;
}

// Runs `body` on a plain thread and in a fiber (of `workers`); returns
// both results.
template <class Body>
std::pair<std::string, std::string> on_thread_and_fiber(Body body, unsigned workers = 2) {
  std::string on_thread;
  std::thread([&] { on_thread = body(); }).join();
  std::string on_fiber;
  Scheduler sched{test::config_with(workers)};
  sched.spawn([&] { on_fiber = body(); }).join();
  return {on_thread, on_fiber};
}

std::string describe(pid_t result, int status, int error) {
  std::ostringstream out;
  out << (result > 0 ? "pid" : std::to_string(result)) << " status " << status << " errno " << error;
  return out.str();
}

TEST(Waitpid, ParksWhileTheChildRuns) {
  int status = -1;
  pid_t result = 0;
  const int ticks = ticks_beside([&] {
    const pid_t pid = spawn_shell("sleep 0.3; exit 7");
    result = ::waitpid(pid, &status, 0);
    EXPECT_EQ(result, pid);
  });
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7);
  EXPECT_GT(ticks, 0) << "the other fiber never ran while waitpid waited";
}

TEST(Waitpid, GivesWhatAPlainThreadGets) {
  const auto [thread, fiber] = on_thread_and_fiber([] {
    std::string out;
    int status = 0;
    errno = 1234;
    pid_t pid = spawn_shell("exit 3");
    pid_t r = ::waitpid(pid, &status, 0);
    out += describe(r, status, errno) + "; ";  // errno untouched on success
    pid = spawn_shell("kill -KILL $$");
    r = ::waitpid(pid, &status, 0);
    out += describe(r, status, 0) + "; ";
    r = ::waitpid(1, &status, 0);  // not our child
    out += describe(r, 0, errno) + "; ";
    pid = spawn_shell("sleep 0.1");
    r = ::waitpid(pid, &status, WNOHANG);
    out += describe(r, 0, 0) + "; ";
    r = ::waitpid(pid, &status, 0);
    out += describe(r, status, 0) + "; ";
    r = ::waitpid(pid, &status, 0);  // reaped already
    out += describe(r, 0, errno) + "; ";
    rusage usage{};
    pid = spawn_shell("exit 4");
    r = ::wait4(pid, &status, 0, &usage);
    out += describe(r, status, 0) + (usage.ru_utime.tv_sec >= 0 ? " rusage" : " no rusage");
    return out;
  });
  EXPECT_EQ(fiber, thread);
  EXPECT_NE(thread.find("status 768 errno 1234"), std::string::npos) << thread;
  EXPECT_NE(thread.find("-1 status 0 errno " + std::to_string(ECHILD)), std::string::npos) << thread;
}

// A tracer's waitpid reports its tracee's stops without WUNTRACED
// (ptrace(2)); a stop makes no pidfd readable. The child stops with
// SIGTRAP at its exec, after a delay that has the fiber's first WNOHANG
// ask find it running. Before, the fiber stayed parked until the child
// exited (here: until the watchdog killed it after 20 s) and got that
// exit instead of the stop.
constexpr int kNoPtrace = 125;  // the child's exit status where it cannot be traced

TEST(Waitpid, ReportsATraceesStop) {
  const auto [thread, fiber] = on_thread_and_fiber([] {
    const pid_t pid = ::fork();
    if (pid == 0) {  // async-signal-safe calls only, in a child of a threaded process
      if (::syscall(SYS_ptrace, PTRACE_TRACEME, 0, 0, 0) != 0) ::_exit(kNoPtrace);  // refused here (seccomp)
      timespec delay{0, 200'000'000};
      ::syscall(SYS_nanosleep, &delay, nullptr);
      char* argv[] = {const_cast<char*>("true"), nullptr};
      ::execve("/bin/true", argv, environ);
      ::_exit(127);
    }
    std::atomic<bool> done{false};
    std::thread watchdog([&] {  // bounds a wait that misses the stop
      for (int i = 0; i < 200 && !done.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (!done.load()) ::kill(pid, SIGKILL);
    });
    int status = 0;
    pid_t r = ::waitpid(pid, &status, 0);
    std::string out = describe(r, status, 0) + "; ";
    done = true;
    watchdog.join();
    ::kill(pid, SIGKILL);
    status = 0;
    r = ::waitpid(pid, &status, 0);
    return out + describe(r, status, 0);
  });
  if (thread.starts_with("pid status " + std::to_string(W_EXITCODE(kNoPtrace, 0)) + " "))
    GTEST_SKIP() << "ptrace(PTRACE_TRACEME) is refused here";
  EXPECT_EQ(fiber, thread);
  EXPECT_EQ(thread, "pid status " + std::to_string(W_STOPCODE(SIGTRAP)) + " errno 0; pid status " +
                        std::to_string(SIGKILL) + " errno 0");
}

// A child traced by another process after the fiber's wait began: its
// exit makes its pidfd readable, but the parent's WNOHANG ask finds
// nothing until the tracer has reaped the exit itself. Before, the hook
// asked again and again for all that time, its worker's CPU at 100 %; it
// now makes the blocking call.
double cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

void sleep_in_child(long ms) {  // async-signal-safe, in a child of a threaded process
  timespec delay{ms / 1000, (ms % 1000) * 1'000'000};
  ::syscall(SYS_nanosleep, &delay, nullptr);
}

TEST(Waitpid, AnExitHeldForATracerIsWaitedForWithoutSpinning) {
  Scheduler sched{test::config_with(1)};
  std::string outcome;
  double cpu = 0;
  sched
      .spawn([&] {
        const pid_t child = ::fork();
        if (child == 0) {
          sleep_in_child(300);
          ::_exit(3);
        }
        const pid_t tracer = ::fork();
        if (tracer == 0) {
          sleep_in_child(50);  // the parent's wait has begun, untraced
          if (::syscall(SYS_ptrace, PTRACE_SEIZE, child, 0, 0) != 0) ::_exit(kNoPtrace);
          sleep_in_child(1000);
          int status = 0;
          ::_exit(::syscall(SYS_wait4, child, &status, __WALL, nullptr) == child ? 0 : 1);
        }
        const double before = cpu_seconds();
        int status = 0;
        const pid_t r = ::waitpid(child, &status, 0);
        cpu = cpu_seconds() - before;
        int tracer_status = 0;
        ::waitpid(tracer, &tracer_status, 0);
        EXPECT_EQ(r, child);
        outcome = describe(r, status, 0) + "; tracer " + describe(0, tracer_status, 0);
      })
      .join();
  if (outcome.ends_with("tracer 0 status " + std::to_string(W_EXITCODE(kNoPtrace, 0)) + " errno 0"))
    GTEST_SKIP() << "ptrace(PTRACE_SEIZE) is refused here";
  EXPECT_EQ(outcome, "pid status " + std::to_string(W_EXITCODE(3, 0)) + " errno 0; tracer 0 status 0 errno 0");
  // The exit was held for about 0.7 s; asked without end, that is as much
  // CPU as the machine gave the worker.
  EXPECT_LT(cpu, 0.2) << "seconds of CPU while the exit was held for the tracer";
}

TEST(Waitid, GivesWhatAPlainThreadGets) {
  const auto [thread, fiber] = on_thread_and_fiber([] {
    std::ostringstream out;
    siginfo_t info{};
    pid_t pid = spawn_shell("sleep 0.1; exit 5");
    // WNOWAIT leaves it waitable; the next wait reaps it.
    int r = ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT);
    out << r << " code " << info.si_code << " status " << info.si_status << " same " << (info.si_pid == pid) << "; ";
    r = ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED);
    out << r << " code " << info.si_code << " status " << info.si_status << "; ";
    pid = spawn_shell("sleep 0.1; exit 6");
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    r = ::waitid(P_PIDFD, static_cast<id_t>(pidfd), &info, WEXITED);
    out << r << " code " << info.si_code << " status " << info.si_status << "; ";
    ::close(pidfd);
    errno = 0;
    r = ::waitid(P_PID, 1, &info, WEXITED);
    out << r << " errno " << errno;
    return out.str();
  });
  EXPECT_EQ(fiber, thread);
  EXPECT_EQ(thread, "0 code " + std::to_string(CLD_EXITED) + " status 5 same 1; 0 code " + std::to_string(CLD_EXITED) +
                        " status 5; 0 code " + std::to_string(CLD_EXITED) + " status 6; -1 errno " +
                        std::to_string(ECHILD));
}

// A pidfd closed by another thread while waitid waits on it: the kernel's
// wait holds the pidfd's file and ends when the child exits, a fiber's
// likewise. Before, the fiber's wait on the netpoller ended at the close
// with EBADF, and left the child unreaped. The close comes once the wait
// began (the caller's thread asleep), not at a fixed time that a caller
// held off its CPU could miss.
TEST(Waitid, APidfdClosedWhileWaitedOnDoesNotEndTheWait) {
  const auto [thread, fiber] = on_thread_and_fiber(
      [] {
        const pid_t pid = spawn_shell("sleep 0.3; exit 7");
        const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
        const int caller = ::gettid();  // a fiber's: its one worker's
        std::thread closer([pidfd, caller] {
          test::await_asleep(caller);
          ::close(pidfd);
        });
        siginfo_t info{};
        errno = 0;
        const int r = ::waitid(P_PIDFD, static_cast<id_t>(pidfd), &info, WEXITED);
        std::ostringstream out;
        out << r << " errno " << errno << " status " << info.si_status;
        closer.join();
        if (r != 0) ::waitpid(pid, nullptr, 0);  // the test's own clean-up
        return out.str();
      },
      /*workers=*/1);  // the fiber stays on the thread the closer watches
  EXPECT_EQ(fiber, thread);
  EXPECT_EQ(thread, "0 errno 0 status 7");
}

// A siginfo the kernel cannot write: waitid fails with EFAULT once the
// child has exited, having reaped it, as on a thread. Before, a fiber's
// failed at once (its WNOHANG ask could not write "nothing yet") and left
// the child to be reaped by the next wait.
TEST(Waitid, AnUnwritableSiginfoFailsOnceTheChildHasExited) {
  void* page = ::mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(page, MAP_FAILED);
  auto* read_only = static_cast<siginfo_t*>(page);
  const auto [thread, fiber] = on_thread_and_fiber([&] {
    std::ostringstream out;
    const pid_t pid = spawn_shell("sleep 0.1; exit 7");
    errno = 0;
    const int r = ::waitid(P_PID, static_cast<id_t>(pid), read_only, WEXITED);
    out << r << " errno " << errno << "; ";
    errno = 0;
    int status = 0;
    const pid_t again = ::waitpid(pid, &status, WNOHANG);  // the child is reaped already, or exits soon
    out << "then " << (again == pid ? "reaped by waitpid" : std::to_string(again) + " errno " + std::to_string(errno));
    if (again == 0) ::waitpid(pid, &status, 0);
    return out.str();
  });
  ::munmap(page, 4096);
  EXPECT_EQ(fiber, thread);
  EXPECT_EQ(thread, "-1 errno " + std::to_string(EFAULT) + "; then -1 errno " + std::to_string(ECHILD));
}

// A pidfd opened with PIDFD_NONBLOCK (O_NONBLOCK) makes waitid itself
// non-blocking: -1 with EAGAIN while the child runs (waitid(2), Linux
// 5.10). Before, a fiber parked until the child exited and got its status.
TEST(Waitid, NonBlockingPidfdFailsWhileTheChildRuns) {
  const auto [thread, fiber] = on_thread_and_fiber([] {
    std::ostringstream out;
    const pid_t pid = spawn_shell("exec sleep 30");  // killed below; 30 s bounds a wait that should not be
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, O_NONBLOCK));
    siginfo_t info{};
    errno = 0;
    const int r = ::waitid(P_PIDFD, static_cast<id_t>(pidfd), &info, WEXITED);
    out << r << " errno " << errno << "; ";
    ::kill(pid, SIGKILL);
    int status = 0;
    const pid_t reaped = ::waitpid(pid, &status, 0);
    out << describe(reaped, status, 0);
    ::close(pidfd);
    return out.str();
  });
  EXPECT_EQ(fiber, thread);
  EXPECT_EQ(thread, "-1 errno " + std::to_string(EAGAIN) + "; pid status " + std::to_string(SIGKILL) + " errno 0");
}

TEST(System, ParksWhileTheCommandRuns) {
  int status = -1;
  const int ticks = ticks_beside([&] { status = std::system("sleep 0.3; exit 2"); });
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_GT(ticks, 0) << "the other fiber never ran while system() waited";
}

void on_sigint(int) {}

// What the command saw: the caller's process ignoring SIGINT and SIGQUIT,
// the calling thread blocking SIGCHLD; and the shell itself with SIGINT at
// its default. And the status, and the caller's handler put back after.
using SystemFn = int (*)(const char*);
std::string system_semantics(SystemFn run) {
  struct sigaction handler {};
  handler.sa_handler = on_sigint;
  sigaction(SIGINT, &handler, nullptr);
  char path[] = "/tmp/weft-system-XXXXXX";
  const int fd = ::mkstemp(path);
  ::close(fd);
  const std::string command = "grep -E '^Sig(Ign|Blk)' /proc/" + std::to_string(::getpid()) + "/task/" +
                              std::to_string(::gettid()) + "/status > " + path +
                              "; grep -E '^SigIgn' /proc/self/status >> " + path + "; exit 9";
  const int status = run(command.c_str());
  std::ifstream in(path);
  std::stringstream seen;
  seen << in.rdbuf();
  ::unlink(path);
  struct sigaction after {};
  sigaction(SIGINT, nullptr, &after);
  signal(SIGINT, SIG_DFL);
  // The calling thread's mask as a whole differs (a worker blocks most
  // signals, a plain thread none): what matters is SIGCHLD in it.
  std::string lines = seen.str();
  const auto blocked = lines.find("SigBlk:");
  if (blocked != std::string::npos) {
    const auto end = lines.find('\n', blocked);
    const unsigned long mask = std::stoul(lines.substr(blocked + 7, end - blocked - 7), nullptr, 16);
    lines.replace(blocked, end - blocked, "SIGCHLD blocked " + std::to_string((mask >> (SIGCHLD - 1)) & 1));
  }
  return "status " + std::to_string(status) + "\n" + lines +
         (after.sa_handler == on_sigint ? "handler restored" : "handler lost") + " null " +
         std::to_string(run(nullptr) != 0);
}

// The mask in hex, as /proc shows it, has SIGINT (bit 1) and SIGQUIT
// (bit 2) in SigIgn, and SIGCHLD (bit 16) in SigBlk.
bool has_bits(const std::string& text, const char* field, unsigned long bits) {
  const auto at = text.find(field);
  if (at == std::string::npos) return false;
  const unsigned long mask = std::stoul(text.substr(at + std::strlen(field)), nullptr, 16);
  return (mask & bits) == bits;
}

// Whether the thread `tid` of this process blocks `signal`
// (/proc/self/task/<tid>/status, SigBlk).
bool thread_blocks(int tid, int signal) {
  const std::string blocked = test::thread_status_field(tid, "SigBlk");
  if (blocked.empty()) {
    ADD_FAILURE() << "no SigBlk for thread " << tid;
    return false;
  }
  return (std::stoull(blocked, nullptr, 16) >> (signal - 1) & 1) != 0;
}

// system() blocks SIGCHLD in the calling thread while the command runs and
// puts the mask back on that thread, also when its fiber waited for another
// system() call (its lock) meanwhile: the fiber stays on the thread. Before,
// a fiber that resumed on another worker put the mask back there, and left
// SIGCHLD blocked for good on the first.
TEST(System, PutsTheMaskBackOnTheThreadItBlockedItOn) {
  Scheduler sched{test::config_with(2)};
  for (int round = 0; round < 40; ++round) {
    std::vector<Fiber> callers;
    for (int i = 0; i < 4; ++i) callers.push_back(sched.spawn([] { EXPECT_EQ(std::system("exit 0"), 0); }));
    for (Fiber& caller : callers) caller.join();
  }
  for (const WorkerSnapshot& worker : sched.snapshot().workers)
    EXPECT_FALSE(thread_blocks(worker.os_thread_id, SIGCHLD)) << "worker " << worker.index;
}

// Runs `during` in a fiber of a one-worker scheduler while another fiber
// of that worker is in system(command) (the shell runs), with SIGUSR2
// blocked by `during`'s fiber; then, that call ended, `after` in the same
// fiber, before it unblocks SIGUSR2.
void beside_a_system_call(const char* command, const std::function<void()>& during,
                          const std::function<void()>& after) {
  Scheduler sched{test::config_with(1)};
  std::atomic<bool> running{false};
  Fiber caller = sched.spawn([&] {
    running = true;
    EXPECT_EQ(std::system(command), 0);
  });
  sched
      .spawn([&] {
        while (!running.load()) this_fiber::sleep_for(std::chrono::milliseconds(1));
        this_fiber::sleep_for(std::chrono::milliseconds(50));  // the shell runs
        sigset_t usr2;
        sigemptyset(&usr2);
        sigaddset(&usr2, SIGUSR2);
        pthread_sigmask(SIG_BLOCK, &usr2, nullptr);
        during();
        caller.join();
        after();
        pthread_sigmask(SIG_UNBLOCK, &usr2, nullptr);
      })
      .join();
}

// A fiber of the same thread that blocks a signal while another's system()
// runs keeps it blocked after that call ends: system() unblocks SIGCHLD
// alone. Before, it put back the whole mask from before the call, and the
// other fiber's SIGUSR2 was unblocked under it.
TEST(System, LeavesWhatAnotherFiberOfItsThreadBlockedMeanwhile) {
  int tid = 0;
  beside_a_system_call(
      "sleep 0.2", [&] { tid = gettid(); },
      [&] {
        EXPECT_TRUE(thread_blocks(tid, SIGUSR2)) << "system() unblocked another fiber's SIGUSR2";
        EXPECT_FALSE(thread_blocks(tid, SIGCHLD));
      });
}

// system() blocks SIGCHLD on its thread while the shell runs; a child
// another fiber of that thread makes meanwhile (posix_spawn, fork) starts
// without that block, as one made by another thread does, and keeps
// what that fiber blocked itself. Before, such children started with
// SIGCHLD blocked and kept it across exec.
bool child_blocks(const char* how, int signal) {
  if (std::strcmp(how, "fork") == 0) {
    const pid_t pid = ::fork();
    if (pid == 0) {  // async-signal-safe calls only
      sigset_t mask;
      ::sigprocmask(SIG_SETMASK, nullptr, &mask);
      ::_exit(sigismember(&mask, signal) == 1 ? 1 : 0);
    }
    int status = 0;
    EXPECT_EQ(::waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) && WEXITSTATUS(status) == 1;
  }
  // posix_spawn of `sh -c 'exit N'`, N from the shell's own SigBlk bit.
  const std::string command = "mask=$(sed -n 's/^SigBlk:[[:space:]]*//p' /proc/self/status); exit $(( (0x$mask >> " +
                              std::to_string(signal - 1) + ") & 1 ))";
  int status = -1;
  const pid_t pid = spawn_shell(command.c_str());
  EXPECT_EQ(::waitpid(pid, &status, 0), pid);
  return WIFEXITED(status) && WEXITSTATUS(status) == 1;
}

TEST(System, ChildrenOfAnotherFiberOfItsThreadDoNotInheritItsBlock) {
  std::string out;
  beside_a_system_call(
      "sleep 0.3",
      [&] {
        for (const char* how : {"posix_spawn", "fork"})
          out += std::string(how) + ": SIGCHLD " + (child_blocks(how, SIGCHLD) ? "blocked" : "not blocked") +
                 ", SIGUSR2 " + (child_blocks(how, SIGUSR2) ? "blocked" : "not blocked") + "; ";
      },
      [] {});
  EXPECT_EQ(out, "posix_spawn: SIGCHLD not blocked, SIGUSR2 blocked; fork: SIGCHLD not blocked, SIGUSR2 blocked; ");
}

TEST(System, KeepsItsSignalSemanticsAndStatus) {
  const auto [thread, fiber] = on_thread_and_fiber([] { return system_semantics(&std::system); });
  EXPECT_EQ(fiber, thread);
  std::string libc;
  std::thread([&] { libc = system_semantics(detail::real::system()); }).join();
  EXPECT_EQ(thread, libc);
  EXPECT_NE(thread.find("status 2304\n"), std::string::npos) << thread;  // exit 9
  EXPECT_TRUE(has_bits(thread, "SigIgn:", 0x6)) << thread;
  EXPECT_NE(thread.find("SIGCHLD blocked 1\n"), std::string::npos) << thread;
  EXPECT_NE(thread.find("handler restored null 1"), std::string::npos) << thread;
}

// What a plain thread's `call_system` leaves when the thread is cancelled
// while the shell runs: whether the thread ended cancelled, the caller's
// SIGINT handler is back, and the shell is gone (killed and reaped).
std::string cancelled_while_the_shell_runs(int (*call_system)(const char*)) {
  struct sigaction mine {};
  mine.sa_handler = [](int) {};
  sigemptyset(&mine.sa_mask);
  struct sigaction before {};
  sigaction(SIGINT, &mine, &before);
  char path[] = "/tmp/weft-system-cancel-XXXXXX";
  close(mkstemp(path));
  struct Call {
    int (*call_system)(const char*);
    std::string command;
  } call{call_system, std::string("echo $$ > ") + path + "; exec sleep 30"};
  pthread_t caller;
  EXPECT_EQ(pthread_create(
                &caller, nullptr,
                [](void* argument) -> void* {
                  const auto* c = static_cast<Call*>(argument);
                  c->call_system(c->command.c_str());
                  return nullptr;
                },
                &call),
            0);
  pid_t shell = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (shell <= 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::ifstream(path) >> shell;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the caller waits in waitpid
  pthread_cancel(caller);
  void* result = nullptr;
  pthread_join(caller, &result);
  struct sigaction after {};
  sigaction(SIGINT, &before, &after);
  unlink(path);
  const bool gone = shell > 0 && kill(shell, 0) != 0 && errno == ESRCH;
  if (!gone && shell > 0) {  // the test's own clean-up
    kill(shell, SIGKILL);
    waitpid(shell, nullptr, 0);
  }
  return std::string("cancelled ") + std::to_string(result == PTHREAD_CANCELED) + "; SIGINT handler kept " +
         std::to_string(after.sa_handler == mine.sa_handler) + "; shell gone " + std::to_string(gone);
}

// A plain thread cancelled in system() kills and reaps the shell and puts
// SIGINT and SIGQUIT back, as glibc's does. Before, the hook left both
// ignored for good and the shell running.
TEST(System, ACancelledCallKillsTheShellAndPutsTheSignalsBack) {
  const std::string libc = cancelled_while_the_shell_runs(detail::real::system());
  EXPECT_EQ(cancelled_while_the_shell_runs(&std::system), libc);
  EXPECT_EQ(libc, "cancelled 1; SIGINT handler kept 1; shell gone 1");
}

TEST(Popen, ReadsParkWhileTheCommandIsSilent) {
  std::string text;
  int status = -1;
  const int ticks = ticks_beside([&] {
    FILE* pipe = popen("echo hello; sleep 0.3; echo world; exit 5", "r");
    ASSERT_NE(pipe, nullptr);
    char line[64];
    while (std::fgets(line, sizeof line, pipe) != nullptr) text += line;
    status = pclose(pipe);
  });
  EXPECT_EQ(text, "hello\nworld\n");
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 5);
  EXPECT_GT(ticks, 0) << "the other fiber never ran while the stream was read";
}

using PopenFn = FILE* (*)(const char*, const char*);
using PcloseFn = int (*)(FILE*);
std::string popen_semantics(PopenFn popen, PcloseFn pclose) {
  std::ostringstream out;
  char path[] = "/tmp/weft-popen-XXXXXX";
  ::close(::mkstemp(path));
  FILE* writer = popen(("cat > " + std::string(path)).c_str(), "w");
  if (writer == nullptr) return "popen w failed";
  struct stat st {};
  out << "fileno fifo " << (::fstat(fileno(writer), &st) == 0 && S_ISFIFO(st.st_mode)) << "; ";
  out << "cloexec " << (::fcntl(fileno(writer), F_GETFD) & FD_CLOEXEC) << "; ";
  std::fputs("line one\n", writer);
  std::fprintf(writer, "line %d\n", 2);
  // A second stream's child must not hold the first's pipe (POSIX): it
  // lists its own fds, none of which is the writer's pipe.
  const std::string inode = "pipe:[" + std::to_string(st.st_ino) + "]";
  FILE* lister = popen("for f in /proc/self/fd/*; do readlink $f; done; exit 0", "re");
  if (lister == nullptr) return "popen re failed";
  out << "e cloexec " << (::fcntl(fileno(lister), F_GETFD) & FD_CLOEXEC) << "; ";
  std::string listing;
  char line[128];
  while (std::fgets(line, sizeof line, lister) != nullptr) listing += line;
  out << "second child holds the first pipe " << (listing.find(inode) != std::string::npos) << "; ";
  out << "lister status " << pclose(lister) << "; ";
  out << "writer status " << pclose(writer) << "; ";
  std::ifstream in(path);
  std::stringstream written;
  written << in.rdbuf();
  ::unlink(path);
  out << "wrote " << (written.str() == "line one\nline 2\n") << "; ";
  errno = 0;
  out << "mode x " << (popen("true", "x") == nullptr) << " errno " << errno << "; ";
  errno = 0;
  out << "mode rw " << (popen("true", "rw") == nullptr) << " errno " << errno << "; ";
  FILE* failing = popen("exit 3", "r");
  out << "exit status " << pclose(failing);
  return out.str();
}

TEST(Popen, KeepsItsFileSemanticsAndStatus) {
  const auto [thread, fiber] = on_thread_and_fiber([] { return popen_semantics(&::popen, &::pclose); });
  EXPECT_EQ(fiber, thread);
  std::string libc;
  std::thread([&] { libc = popen_semantics(detail::real::popen(), detail::real::pclose()); }).join();
  EXPECT_EQ(thread, libc);
  EXPECT_EQ(thread,
            "fileno fifo 1; cloexec 0; e cloexec 1; second child holds the first pipe 0; lister status 0; "
            "writer status 0; wrote 1; mode x 1 errno " +
                std::to_string(EINVAL) + "; mode rw 1 errno " + std::to_string(EINVAL) + "; exit status 768");
}

// A popen stream is a pipe's: ftell and fseek fail with ESPIPE from
// lseek, and fflush of a read stream with unread input ignores that
// ESPIPE and succeeds, as glibc's stream does. Before, the fopencookie
// stream had no seek: ftell gave EIO, fseek no errno, and that fflush EOF.
std::string popen_seeks(PopenFn popen, PcloseFn pclose) {
  std::ostringstream out;
  FILE* reader = popen("printf 'a\\nb\\n'", "r");
  if (reader == nullptr) return "popen r failed";
  char line[64];
  out << "line " << (std::fgets(line, sizeof line, reader) != nullptr) << "; ";  // "b\n" stays buffered
  errno = 0;
  out << "ftell " << std::ftell(reader) << " errno " << errno << "; ";
  errno = 0;
  out << "fflush " << std::fflush(reader) << " errno " << errno << "; ";
  errno = 0;
  out << "fseek " << std::fseek(reader, 0, SEEK_CUR) << " errno " << errno << "; ";
  out << "rest " << (std::fgets(line, sizeof line, reader) != nullptr ? line : "none");
  out << "status " << pclose(reader) << "; ";
  FILE* writer = popen("cat > /dev/null", "w");
  if (writer == nullptr) return "popen w failed";
  std::fputs("x", writer);
  errno = 0;
  out << "w ftell " << std::ftell(writer) << " errno " << errno << "; ";
  errno = 0;
  out << "w fseek " << std::fseek(writer, 0, SEEK_SET) << " errno " << errno << "; ";
  out << "w status " << pclose(writer);
  return out.str();
}

TEST(Popen, SeeksFailAsOnAPipe) {
  const auto [thread, fiber] = on_thread_and_fiber([] { return popen_seeks(&::popen, &::pclose); });
  EXPECT_EQ(fiber, thread);
  std::string libc;
  std::thread([&] { libc = popen_seeks(detail::real::popen(), detail::real::pclose()); }).join();
  EXPECT_EQ(thread, libc);
  const std::string espipe = std::to_string(ESPIPE);
  EXPECT_EQ(libc, "line 1; ftell -1 errno " + espipe + "; fflush 0 errno " + espipe + "; fseek -1 errno " + espipe +
                      "; rest b\nstatus 0; w ftell -1 errno " + espipe + "; w fseek -1 errno " + espipe +
                      "; w status 0");
}

// A popen stream's buffer is the pipe's block size (4096), as glibc's
// stream allocates it from fstat's st_blksize, not BUFSIZ: of 5000 bytes
// written, 4096 go to the command at once and 904 wait in the buffer.
// Before, the fopencookie stream's 8192-byte buffer held all 5000.
std::string popen_buffers(PopenFn popen, PcloseFn pclose) {
  std::ostringstream out;
  FILE* writer = popen("cat > /dev/null", "w");
  if (writer == nullptr) return "popen w failed";
  const std::string text(5000, 'x');
  std::fputs(text.c_str(), writer);
  out << "w buffer " << __fbufsize(writer) << " pending " << __fpending(writer) << " line " << __flbf(writer) << "; ";
  out << "w status " << pclose(writer) << "; ";
  FILE* reader = popen("echo a", "r");
  if (reader == nullptr) return "popen r failed";
  out << "r " << char(std::fgetc(reader)) << " buffer " << __fbufsize(reader) << " line " << __flbf(reader) << "; ";
  out << "r status " << pclose(reader);
  return out.str();
}

TEST(Popen, BuffersAsMuchAsThePipesBlock) {
  const auto [thread, fiber] = on_thread_and_fiber([] { return popen_buffers(&::popen, &::pclose); });
  EXPECT_EQ(fiber, thread);
  std::string libc;
  std::thread([&] { libc = popen_buffers(detail::real::popen(), detail::real::pclose()); }).join();
  EXPECT_EQ(thread, libc);
  EXPECT_EQ(libc, "w buffer 4096 pending 904 line 0; w status 0; r a buffer 4096 line 0; r status 0");
}

// A command longer than one argument may be (MAX_ARG_STRLEN, 128 KiB):
// posix_spawn of the shell fails with E2BIG. glibc's popen reports any
// failed spawn as ENOMEM; its system() gives the status of a shell that
// ran _exit(127), with the spawn's errno. Before, weft's popen left E2BIG.
std::string unstartable_shell(PopenFn popen, SystemFn system) {
  std::ostringstream out;
  const std::string command = "exit 0; " + std::string(200'000, '#');
  errno = 0;
  out << "popen null " << (popen(command.c_str(), "r") == nullptr) << " errno " << errno << "; ";
  errno = 0;
  const int status = system(command.c_str());
  out << "system " << status << " errno " << errno;
  return out.str();
}

TEST(Popen, FailsAsGlibcsWhenTheShellCannotStart) {
  const auto [thread, fiber] = on_thread_and_fiber([] { return unstartable_shell(&::popen, &std::system); });
  EXPECT_EQ(fiber, thread);
  std::string libc;
  std::thread([&] { libc = unstartable_shell(detail::real::popen(), detail::real::system()); }).join();
  EXPECT_EQ(thread, libc);
  EXPECT_EQ(libc, "popen null 1 errno " + std::to_string(ENOMEM) + "; system " + std::to_string(W_EXITCODE(127, 0)) +
                      " errno " + std::to_string(E2BIG));
}

// A handler installed without SA_RESTART interrupts a plain thread's
// write to a full pipe: glibc's popen stream takes that EINTR for an
// error (fflush gives EOF and sets the error flag), as for any FILE.
// Before, weft's stream wrote again and waited for room. The child drains
// its stdin only once told to on `go`, which it inherits.
void on_sigusr1(int) {}

std::string interrupted_write(PopenFn popen, PcloseFn pclose) {
  struct sigaction handler {};
  handler.sa_handler = on_sigusr1;  // no SA_RESTART
  sigaction(SIGUSR1, &handler, nullptr);
  int go[2];
  if (::pipe(go) != 0) return "pipe failed";
  const std::string command = "read x <&" + std::to_string(go[0]) + "; exec cat > /dev/null";
  FILE* writer = popen(command.c_str(), "w");
  if (writer == nullptr) return "popen failed";
  std::ostringstream out;
  const int capacity = ::fcntl(fileno(writer), F_GETPIPE_SZ);
  const std::string full(size_t(capacity > 0 ? capacity : 0), 'x');  // the next byte waits for room
  std::fwrite(full.data(), 1, full.size(), writer);
  out << "full " << std::fflush(writer) << "; ";
  const pid_t tid = ::gettid();
  const pthread_t self = ::pthread_self();
  std::atomic<bool> flushed{false};
  std::thread interrupter([&] {
    // Signal once the writer is in write(2) (/proc's syscall number), and
    // let the child drain if the write outlives the signal (20 s bound).
    const std::string path = "/proc/self/task/" + std::to_string(tid) + "/syscall";
    for (int i = 0; i < 20'000 && !flushed.load(); ++i) {
      std::ifstream in(path);
      long number = -1;
      in >> number;
      if (number == SYS_write) {
        ::pthread_kill(self, SIGUSR1);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    for (int i = 0; i < 200 && !flushed.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    (void)!::write(go[1], "\n", 1);
  });
  std::fputc('y', writer);
  errno = 0;
  const int result = std::fflush(writer);
  out << "fflush " << result << " errno " << errno << " error " << std::ferror(writer) << "; ";
  flushed = true;
  interrupter.join();
  out << "status " << pclose(writer);
  ::close(go[0]);
  ::close(go[1]);
  signal(SIGUSR1, SIG_DFL);
  return out.str();
}

TEST(Popen, AWriteInterruptedByAHandlerFailsOnAPlainThread) {
  std::string weft;
  std::thread([&] { weft = interrupted_write(&::popen, &::pclose); }).join();
  std::string libc;
  std::thread([&] { libc = interrupted_write(detail::real::popen(), detail::real::pclose()); }).join();
  EXPECT_EQ(weft, libc);
  EXPECT_EQ(libc, "full 0; fflush -1 errno " + std::to_string(EINTR) + " error 1; status 0");
}

}  // namespace
}  // namespace weft
