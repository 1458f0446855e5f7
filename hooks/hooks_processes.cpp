// Waiting for child processes in a fiber: waitpid, wait4 and waitid park
// on a pidfd (pidfd_open(2), Linux 5.3) that the netpoller watches, and
// system() parks the same way while its shell runs (popen and pclose:
// hooks_popen.cpp).
//
// A wait for one child (pid > 0, P_PID, P_PIDFD) that would block:
//   1. open a pidfd for the pid (before asking, so that the number cannot
//      name another process by the time it is watched: a child's pid is
//      not reused until it is reaped);
//   2. ask with WNOHANG: an error (ECHILD: not our child), or a child that
//      has already changed state, is the answer, as the blocking call
//      would have given it at once;
//   3. park until the pidfd is readable (the process has exited), and ask
//      again with WNOHANG. If another thread reaped the child meanwhile,
//      that answer is ECHILD, as for a blocking call that lost the race.
//      The park times out now and then (1 ms, doubling to 1 s) for
//      another ask: a ptrace(2) stop, which the tracer's wait reports
//      without WUNTRACED, makes no pidfd readable.
// So results, status and errno are libc's. What a pidfd cannot serve is
// libc's call, unchanged: WNOHANG (it never blocks), pid -1, 0 and -pgid
// (any child of a set), WUNTRACED/WSTOPPED/WCONTINUED (a pidfd reports
// exit only), a null infop for waitid (the WNOHANG answer could not be
// read), a caller's pidfd opened non-blocking (its waitid never blocks),
// a child with a tracer (its every stop ends the wait), and kernels
// without pidfd_open (ENOSYS) or where it is refused.
//
// Difference from a blocked thread: a parked fiber is not in a system
// call, so a signal handler does not interrupt its wait with EINTR; it
// returns when the child has changed state, as with SA_RESTART.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "announced.h"
#include "child_processes.h"
#include "fd_table.h"
#include "hook_support.h"
#include "real_calls.h"

extern char** environ;

namespace weft::detail {

int open_pidfd(pid_t pid) noexcept {
#ifdef SYS_pidfd_open
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd >= 0) fd_forgotten(fd);  // a stale record of the number, closed where no hook saw it
  return fd;
#else
  errno = ENOSYS;
  return -1;
#endif
}

void close_pidfd(int fd) noexcept {
  fd_closing(fd);  // the netpoller registered it: drop that first
  fd_forgotten(fd);
  real::close()(fd);
}

namespace {

// Whether `pid` has a tracer (/proc/<pid>/status's TracerPid): ptrace(2)
// reports a tracee's stops to its tracer's wait without WUNTRACED, and a
// stop makes no pidfd readable, so a wait for a tracee is libc's call.
bool traced(pid_t pid) noexcept {
  char path[48];
  std::snprintf(path, sizeof path, "/proc/%d/status", int(pid));
  const int fd = real::open()(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char text[1024];
  const ssize_t n = real::read()(fd, text, sizeof text - 1);
  real::close()(fd);
  if (n <= 0) return false;
  text[n] = '\0';
  const char* field = std::strstr(text, "TracerPid:");
  return field != nullptr && std::strtol(field + std::strlen("TracerPid:"), nullptr, 10) != 0;
}

// Steps 1-3 above, for a wait whose WNOHANG form is `ask(pidfd)`, which
// returns true when it has an answer (an error, or a child that changed
// state). `watched`: a pidfd of the caller's own (P_PIDFD), or -1 to open
// one for `pid`. A caller's pidfd is watched and asked through a
// duplicate, the `pidfd` given to `ask`: the kernel's wait holds the
// pidfd's file, so that another thread's close of the caller's fd does
// not end it, and neither may it end the fiber's. Returns -1 when the
// caller is to make the blocking call: having asked nothing, when no pidfd
// could be had (for a caller's pidfd closed already, its EBADF) or `pid`
// has a tracer; or when the child's exit is held for a tracer (below).
// Else 0, or the errno of a wait that failed.
template <class Ask>
int wait_on_pidfd(pid_t pid, int watched, Ask&& ask) {
  const ParkScope park;
  if (watched < 0 && traced(pid)) return -1;
  const int pidfd = watched >= 0 ? real::fcntl()(watched, F_DUPFD_CLOEXEC, 0) : open_pidfd(pid);
  if (pidfd < 0) return -1;
  if (watched >= 0) fd_forgotten(pidfd);  // a stale record of the number, closed where no hook saw it
  int failed = 0;
  // A stop of a tracee that was not yet traced when asked makes no pidfd
  // readable: ask again after each timeout, at least once a second. A
  // pidfd made readable with no answer to the ask after it is the exit of
  // a child traced since the wait began: its zombie is the tracer's to
  // report first, and the pidfd stays readable. The blocking call waits
  // for that (asking on would spin).
  std::chrono::milliseconds recheck(1);
  bool readable = false;
  while (failed == 0 && !ask(pidfd)) {
    if (readable) {
      failed = -1;
      break;
    }
    failed = wait_for_fd(pidfd, FdDirection::read, deadline_after(recheck));
    readable = failed == 0;
    if (failed == EAGAIN) failed = 0;  // the timeout
    recheck = std::min(recheck * 2, std::chrono::milliseconds(1000));
  }
  close_pidfd(pidfd);
  return failed;
}

bool waits_for_exit_only(int options) { return (options & (WNOHANG | WUNTRACED | WCONTINUED)) == 0; }

// A pidfd opened with PIDFD_NONBLOCK (O_NONBLOCK) makes waitid itself
// non-blocking: EAGAIN while the child runs (waitid(2), Linux 5.10), which
// an ask with WNOHANG cannot tell from "not yet". Not a pidfd at all (the
// flags cannot be read): libc's call, for its error.
bool blocking_pidfd(id_t id) {
  const int flags = real::fcntl()(static_cast<int>(id), F_GETFL);
  return flags >= 0 && (flags & O_NONBLOCK) == 0;
}

// A whole wait for one child, in a fiber: `ask(result, pidfd)` is its
// WNOHANG form (true when it has an answer, which it stores in `result`;
// `pidfd` as wait_on_pidfd gives it),
// `blocking()` the call itself, for when no pidfd can be had. errno is the
// caller's unless the wait fails.
template <class Ask, class Blocking>
auto wait_for_one(pid_t pid, int watched, Ask&& ask, Blocking&& blocking) -> decltype(blocking()) {
  const ErrnoHome home;
  const int saved = errno_value();
  decltype(blocking()) result = -1;
  const int waited = wait_on_pidfd(pid, watched, [&](int pidfd) {
    set_errno(saved);
    return ask(result, pidfd);
  });
  if (waited < 0) {
    set_errno(saved);
    return blocking();
  }
  if (waited > 0) {
    set_errno(waited);
    return -1;
  }
  return result;
}

}  // namespace

pid_t wait_for_child(pid_t pid, int* status, int options, rusage* usage) {
  if (!parking_enabled() || pid <= 0 || !waits_for_exit_only(options))
    return announced([&] { return real::wait4()(pid, status, options, usage); }, Sleeps::until_woken);
  return wait_for_one(
      pid, -1,
      [&](pid_t& result, int) {
        result = real::wait4()(pid, status, options | WNOHANG, usage);
        return result != 0;
      },
      [&] { return announced([&] { return real::wait4()(pid, status, options, usage); }, Sleeps::until_woken); });
}

}  // namespace weft::detail

using namespace weft::detail;

namespace {

// system()'s SIGINT and SIGQUIT, ignored while any system() runs (glibc's
// do_system: the first call saves the dispositions, the last restores).
std::mutex system_lock;
int systems_running = 0;
struct sigaction saved_intr;
struct sigaction saved_quit;

// The calling thread's system() calls in progress, and its signal mask
// from before the first of them. glibc blocks SIGCHLD in the caller and
// puts the caller's mask back after, which assumes one caller per thread;
// fibers that share a thread end their calls in any order, and the last to
// restore would leave the mask of another's call. So SIGCHLD stays blocked
// on the thread while any of its calls runs, and the last unblocks it if
// the mask from before the first did not block it; each child gets that
// mask. Only SIGCHLD: what another fiber of the thread blocked or
// unblocked meanwhile stays (putting the whole mask back undid it), where
// a thread's own mask cannot change while it waits in system().
thread_local int systems_on_thread = 0;
thread_local sigset_t mask_before_systems;

const sigset_t& child_signal() {
  static const sigset_t set = [] {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGCHLD);
    return s;
  }();
  return set;
}

// A child forked by another fiber of a thread whose fibers are in
// system(): those calls are the parent's, and so is their SIGCHLD block
// (child_mask_without_systems_block).
void leave_systems_in_child() noexcept {
  if (systems_on_thread == 0) return;
  if (sigismember(&mask_before_systems, SIGCHLD) == 0) pthread_sigmask(SIG_UNBLOCK, &child_signal(), nullptr);
  systems_on_thread = 0;
}
// Registered at the first system(), after every constructor's: child
// handlers run in the order they were registered, and the signal hooks'
// (hooks_signals.cpp) puts back the mask the fork was made with.
void register_fork_handler_once() {
  static const bool registered = pthread_atfork(nullptr, nullptr, &leave_systems_in_child) == 0;
  (void)registered;
}

// A system() cancelled while it waits for the shell (pthread_cancel of a
// plain thread: waitpid is a cancellation point) kills the shell and reaps
// it, as glibc's cancellation handler does: no shell outlives the call.
// The unwinding runs this destructor, and those below that put the signal
// mask and SIGINT/SIGQUIT back.
class ShellReapedOnCancel {
 public:
  explicit ShellReapedOnCancel(pid_t shell) : shell_(shell) {}
  ShellReapedOnCancel(const ShellReapedOnCancel&) = delete;
  ShellReapedOnCancel& operator=(const ShellReapedOnCancel&) = delete;
  ~ShellReapedOnCancel() {
    if (shell_ <= 0) return;
    kill(shell_, SIGKILL);
    real::waitpid()(shell_, nullptr, 0);
  }
  void waited() { shell_ = -1; }

 private:
  pid_t shell_;
};

// SIGCHLD blocked on the calling thread while any of its system() calls
// runs (systems_on_thread, mask_before_systems, above).
class ChildSignalBlocked {
 public:
  ChildSignalBlocked() {
    register_fork_handler_once();
    if (systems_on_thread++ > 0) return;
    pthread_sigmask(SIG_BLOCK, &child_signal(), &mask_before_systems);
  }
  ChildSignalBlocked(const ChildSignalBlocked&) = delete;
  ChildSignalBlocked& operator=(const ChildSignalBlocked&) = delete;
  ~ChildSignalBlocked() {
    if (--systems_on_thread == 0 && sigismember(&mask_before_systems, SIGCHLD) == 0)
      pthread_sigmask(SIG_UNBLOCK, &child_signal(), nullptr);
  }
};

// The shell's run, between system()'s setting of SIGINT and SIGQUIT and
// their restoring: `sh -c command`, waited for; its status, and
// posix_spawn's error in `spawn_error`.
int run_with_child_signal_blocked(const char* command, int& spawn_error) {
  // The fiber stays on this thread until the mask is put back: pinned (a
  // pin sysmon never releases), and out of system_lock meanwhile, whose
  // waiters a pinned fiber would block the thread for.
  const ThreadPin pin;
  const ChildSignalBlocked blocked;
  const sigset_t& old_mask = mask_before_systems;

  sigset_t reset;
  sigemptyset(&reset);
  if (saved_intr.sa_handler != SIG_IGN) sigaddset(&reset, SIGINT);
  if (saved_quit.sa_handler != SIG_IGN) sigaddset(&reset, SIGQUIT);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setsigmask(&attributes, &old_mask);
  posix_spawnattr_setsigdefault(&attributes, &reset);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  char sh[] = "sh";
  char dash_c[] = "-c";
  char* argv[] = {sh, dash_c, const_cast<char*>(command), nullptr};
  pid_t pid = -1;
  spawn_error = posix_spawn(&pid, "/bin/sh", nullptr, &attributes, argv, environ);
  posix_spawnattr_destroy(&attributes);
  if (spawn_error != 0) return W_EXITCODE(127, 0);  // POSIX: as if the shell had run _exit(127)

  ShellReapedOnCancel reaper(pid);
  int status = 0;
  pid_t waited;
  do {
    waited = wait_for_child(pid, &status, 0, nullptr);
  } while (waited < 0 && errno_value() == EINTR);
  reaper.waited();
  return waited == pid ? status : -1;
}

// SIGINT and SIGQUIT ignored while any system() runs: the first of
// concurrent calls saves the dispositions, the last puts them back, a
// cancelled one too.
class InterruptsIgnored {
 public:
  InterruptsIgnored() {
    const std::lock_guard guard(system_lock);
    if (systems_running++ > 0) return;
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGINT, &ignore, &saved_intr);
    sigaction(SIGQUIT, &ignore, &saved_quit);
  }
  InterruptsIgnored(const InterruptsIgnored&) = delete;
  InterruptsIgnored& operator=(const InterruptsIgnored&) = delete;
  ~InterruptsIgnored() {
    const std::lock_guard guard(system_lock);
    if (--systems_running > 0) return;
    sigaction(SIGINT, &saved_intr, nullptr);
    sigaction(SIGQUIT, &saved_quit, nullptr);
  }
};

int run_shell(const char* command) {
  int spawn_error = 0;
  int status;
  {
    const InterruptsIgnored interrupts;
    status = run_with_child_signal_blocked(command, spawn_error);
  }
  if (spawn_error != 0) set_errno(spawn_error);
  return status;
}

}  // namespace

bool weft::detail::child_mask_without_systems_block(sigset_t& mask) noexcept {
  if (systems_on_thread == 0 || sigismember(&mask_before_systems, SIGCHLD) != 0) return false;
  pthread_sigmask(SIG_SETMASK, nullptr, &mask);
  sigdelset(&mask, SIGCHLD);
  return true;
}

extern "C" {
// libc's names, interposed: exported, unlike the rest of libweft
// (include/weft/detail/visibility.h).
#pragma GCC visibility push(default)

pid_t waitpid(pid_t pid, int* status, int options) {
  if (!parking_enabled()) return real::waitpid()(pid, status, options);
  const CheckpointOnReturn at_return;
  return wait_for_child(pid, status, options, nullptr);
}

pid_t wait4(pid_t pid, int* status, int options, rusage* usage) {
  if (!parking_enabled()) return real::wait4()(pid, status, options, usage);
  const CheckpointOnReturn at_return;
  return wait_for_child(pid, status, options, usage);
}

// glibc's wait3 is wait4(-1) made inside libc, where no hook sees it: on a
// fiber it held the worker unannounced. The same call, through the hook.
pid_t wait3(int* status, int options, rusage* usage) noexcept {
  if (!parking_enabled()) return real::wait4()(-1, status, options, usage);
  const CheckpointOnReturn at_return;
  return wait_for_child(-1, status, options, usage);
}

int waitid(idtype_t type, id_t id, siginfo_t* info, int options) {
  const bool one_process = type == P_PID || type == P_PIDFD;
  if (!parking_enabled() || !one_process || info == nullptr || (options & WEXITED) == 0 ||
      (options & (WNOHANG | WSTOPPED | WCONTINUED)) != 0 || (type == P_PIDFD && !blocking_pidfd(id)))
    return announced([&] { return real::waitid()(type, id, info, options); }, Sleeps::until_woken);
  const CheckpointOnReturn at_return;
  const auto blocking = [&] {
    return announced([&] { return real::waitid()(type, id, info, options); }, Sleeps::until_woken);
  };
  bool unwritable = false;
  const int answer = wait_for_one(
      static_cast<pid_t>(id), type == P_PIDFD ? static_cast<int>(id) : -1,
      [&](int& result, int pidfd) {
        const id_t asked = type == P_PIDFD ? static_cast<id_t>(pidfd) : id;
        // With WNOHANG, "nothing yet" is 0 with si_pid 0 (waitid(2)),
        // which Linux writes itself: set here first, an info the kernel
        // cannot write (EFAULT) would have died of SIGSEGV.
        result = real::waitid()(type, asked, info, options | WNOHANG);
        unwritable = result < 0 && errno_value() == EFAULT;
        return result != 0 || info->si_pid != 0;
      },
      blocking);
  // An info the kernel cannot write fails the WNOHANG ask at once, child
  // running or not; the blocking call fails so only once the child has
  // exited, having reaped it. That call, then.
  return unwritable ? blocking() : answer;
}

// One implementation for every caller while the hooks are on, fibers and
// plain threads alike: the SIGINT/SIGQUIT dispositions saved by the first
// of several concurrent calls must be the ones the last puts back, and a
// second count (libc's, for the threads) would restore "ignored" over the
// user's handler. Plain threads wait in the blocking waitpid.
int system(const char* command) {
  if (!hooks_enabled()) return real::system()(command);
  const CheckpointOnReturn at_return;
  // A null command asks whether a shell is there (glibc runs "exit 0").
  if (command == nullptr) return run_shell("exit 0") == 0;
  return run_shell(command);
}

#pragma GCC visibility pop
}  // extern "C"
