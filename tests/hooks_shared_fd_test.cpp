// Sockets whose open file description another process holds too (a
// pre-fork server's listener, a socket passed to a spawned child): weft's
// connect and accept must not set O_NONBLOCK on them even for one call,
// since the other process sees the flag (hooks/description_sharing.h). The
// other process is tests/shared_listener_child, spawned with the sockets
// inherited; it is not linked with weft.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fd_passing.h"
#include "fork_children.h"
#include "hooks/description_sharing.h"
#include "hooks/fd_table.h"
#include "hooks_test_support.h"

extern char** environ;

namespace weft {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A child running shared_listener_child with `args`, which inherits every
// fd not close-on-exec; its stdin and stdout are pipes of ours.
struct Child {
  pid_t pid = -1;
  int in = -1;   // its stdin: closed to end a watch
  int out = -1;  // its stdout

  explicit Child(const std::vector<std::string>& args) {
    int to_child[2];
    int from_child[2];
    EXPECT_EQ(pipe2(to_child, O_CLOEXEC), 0);
    EXPECT_EQ(pipe2(from_child, O_CLOEXEC), 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, to_child[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, from_child[1], STDOUT_FILENO);
    std::vector<char*> argv{const_cast<char*>(WEFT_SHARED_LISTENER_CHILD)};
    for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    EXPECT_EQ(posix_spawn(&pid, WEFT_SHARED_LISTENER_CHILD, &actions, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
    close(to_child[0]);
    close(from_child[1]);
    in = to_child[1];
    out = from_child[0];
  }

  // Ends its stdin, reads what it printed, and reaps it (killed after 30 s).
  std::string finish() {
    close(in);
    std::string printed;
    char buffer[256];
    for (ssize_t n; (n = read(out, buffer, sizeof(buffer))) > 0;) printed.append(buffer, std::size_t(n));
    close(out);
    const auto until = Clock::now() + 30s;
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (Clock::now() >= until) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        ADD_FAILURE() << "shared_listener_child did not end";
        break;
      }
      std::this_thread::sleep_for(1ms);
    }
    return printed;
  }
};

// A blocking TCP listener on 127.0.0.1, inheritable (no SOCK_CLOEXEC).
int listen_on_loopback(sockaddr_in& address) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(listener, 0);
  address = {};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(address);
  EXPECT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), len), 0);
  EXPECT_EQ(listen(listener, 1024), 0);
  EXPECT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&address), &len), 0);
  return listener;
}

// Connects `count` times to `address` from a plain thread, closing each
// connection at once (20 s at most); how many connected.
long connect_many(const sockaddr_in& address, int count) {
  const auto until = Clock::now() + 20s;
  long connected = 0;
  for (int i = 0; i < count && Clock::now() < until; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0)
      ++connected;
    else
      ADD_FAILURE() << "connect: " << std::strerror(errno);
    close(fd);
  }
  return connected;
}

// The connections waiting in a listener's accept queue: Linux reports that
// length as a listener's tcpi_unacked (TCP_INFO). -1 if it cannot be read.
int accept_queue_length(int listener) {
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (getsockopt(listener, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return -1;
  return static_cast<int>(info.tcpi_unacked);
}

// Fibers that accept on `listener` until it is shut down, counting the
// connections and the EAGAINs (none is right: the listener is blocking and
// has no SO_RCVTIMEO).
struct FiberAcceptors {
  std::atomic<long> accepted{0};
  std::atomic<long> eagain{0};
  std::vector<Fiber> fibers;

  FiberAcceptors(Scheduler& sched, int listener, int count) {
    for (int i = 0; i < count; ++i) {
      fibers.push_back(sched.spawn([this, listener] {
        for (;;) {
          const int fd = accept(listener, nullptr, nullptr);
          if (fd >= 0) {
            accepted.fetch_add(1);
            close(fd);
          } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            eagain.fetch_add(1);
          } else if (errno != EINTR && errno != ECONNABORTED) {
            return;  // shut down
          }
        }
      }));
    }
  }
  void join() {
    for (Fiber& fiber : fibers) fiber.join();
  }
};

// A pre-fork server's shape: weft's fibers and another process accept on
// one listener. Before, every accept attempt of a fiber set O_NONBLOCK on
// the listener for a moment, and the other process's blocking accept
// failed with EAGAIN when it met one (issue 27, item 10: 108 times in
// 20,000 connections).
TEST(HooksSharedFd, AnotherProcessAcceptingOnTheListenerSeesNoEagain) {
  sockaddr_in address;
  const int listener = listen_on_loopback(address);
  Child child({"accept", std::to_string(listener)});
  {
    Scheduler sched(test::config_with(2));
    FiberAcceptors acceptors(sched, listener, 4);
    const long connected = connect_many(address, int(test::scaled(4000)));
    // Every connection accepted before the shutdown, which would otherwise
    // race the acceptors: under TSan the connections were once all made,
    // and the listener shut down, before the fibers or the other process
    // had accepted one.
    EXPECT_TRUE(test::wait_until([&] { return accept_queue_length(listener) == 0; }))
        << accept_queue_length(listener) << " connections never accepted";
    ASSERT_EQ(shutdown(listener, SHUT_RDWR), 0);
    acceptors.join();
    long accepted = -1;
    long eagain = -1;
    const std::string printed = child.finish();
    ASSERT_EQ(std::sscanf(printed.c_str(), "accepted %ld eagain %ld", &accepted, &eagain), 2) << printed;
    EXPECT_EQ(eagain, 0) << "the other process's blocking accept failed with EAGAIN (it accepted " << accepted
                         << ", weft's fibers " << acceptors.accepted.load() << ")";
    EXPECT_EQ(acceptors.eagain.load(), 0);
    EXPECT_EQ(accepted + acceptors.accepted.load(), connected)
        << "the other process accepted " << accepted << ", weft's fibers " << acceptors.accepted.load();
  }
  close(listener);
}

// The other process only looks: it reads the status flags of a listener
// and of client sockets it shares with this one, while weft's fibers accept
// on the one and connect the others. It must never see O_NONBLOCK.
TEST(HooksSharedFd, AnotherProcessNeverSeesOnoblockOnSharedSockets) {
  sockaddr_in address;
  const int listener = listen_on_loopback(address);
  const int kClients = 64;
  std::vector<int> clients;
  std::vector<std::string> args{"watch", std::to_string(listener)};
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(socket(AF_INET, SOCK_STREAM, 0));  // inheritable, blocking
    ASSERT_GE(clients.back(), 0);
    args.push_back(std::to_string(clients.back()));
  }
  Child child(args);
  long reads = -1;
  long nonblock = -1;
  {
    Scheduler sched(test::config_with(2));
    FiberAcceptors acceptors(sched, listener, 2);
    std::vector<Fiber> connectors;
    for (int fd : clients) {
      connectors.push_back(sched.spawn([fd, &address] {
        if (connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0)
          ADD_FAILURE() << "connect: " << std::strerror(errno);
      }));
    }
    for (Fiber& fiber : connectors) fiber.join();
    connect_many(address, int(test::scaled(2000)));
    ASSERT_EQ(shutdown(listener, SHUT_RDWR), 0);
    acceptors.join();
    const std::string printed = child.finish();
    ASSERT_EQ(std::sscanf(printed.c_str(), "reads %ld nonblock %ld", &reads, &nonblock), 2) << printed;
    EXPECT_EQ(acceptors.eagain.load(), 0);
  }
  EXPECT_GT(reads, 0);
  EXPECT_EQ(nonblock, 0) << "the other process saw O_NONBLOCK in " << nonblock << " of " << reads << " reads";
  for (int fd : clients) close(fd);
  close(listener);
}

// On a listener another holder shares (here a dup: the copy's record does
// not see a flip), accept still parks instead of blocking the worker: on
// one worker without spares, the fiber that connects runs while the
// acceptor waits. A blocking accept would hold the thread until the
// listener's SO_RCVTIMEO (10 s), and then fail with EAGAIN.
TEST(HooksSharedFd, AnAcceptOnASharedListenerStillParks) {
  sockaddr_in address;
  const int listener = listen_on_loopback(address);
  const int copy = dup(listener);
  ASSERT_FALSE(detail::description_private(*detail::fd_state(listener)));
  timeval timeout{10, 0};
  ASSERT_EQ(setsockopt(listener, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout)), 0);
  Scheduler sched = test::one_worker();
  int accepted = -1;
  int error = 0;
  Fiber acceptor = sched.spawn([&] {
    accepted = accept(listener, nullptr, nullptr);
    error = errno;
  });
  ASSERT_TRUE(test::io_waiters_reach(sched, 1));
  int connected = -1;
  sched
      .spawn([&] {
        const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        connected = connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
        close(fd);
      })
      .join();
  acceptor.join();
  EXPECT_EQ(connected, 0);
  EXPECT_GE(accepted, 0) << std::strerror(error);
  if (accepted >= 0) close(accepted);
  close(copy);
  close(listener);
}

// Sends one byte carrying `fd` with SCM_RIGHTS on `socket`; sendmsg's
// result.
ssize_t send_fd(int socket, int fd) { return test::send_with_fd(socket, "x", 1, fd); }

// Receives what send_fd sent, with recvmmsg (`many`) or recvmsg: the fd it
// carried, or -1.
int receive_fd(int socket, bool many) {
  char byte = 0;
  test::MessageWithFd message(&byte, 1);
  mmsghdr one{};
  one.msg_hdr = message.msg;
  const long got = many ? recvmmsg(socket, &one, 1, 0, nullptr) : recvmsg(socket, &message.msg, 0);
  if (many) message.msg = one.msg_hdr;
  return got == 1 ? message.carried() : -1;
}

// Whether the hooks take fd's description for this process's alone
// (hooks/description_sharing.h).
bool is_private(int fd) { return detail::description_private(*detail::fd_state(fd)); }

// Whether the fiber `id` of `sched` was woken and waits for its worker.
bool woken_and_waiting(Scheduler& sched, std::uint64_t id) {
  for (const FiberSnapshot& fiber : sched.snapshot().fibers)
    if (fiber.id == id) return fiber.state == "runnable";
  return false;
}

// An accept that parked on a private listener, woken for a connection that
// another thread took before it ran again, meanwhile a fork made the
// listener shared: its SO_RCVTIMEO counts once for the whole call, as the
// kernel's does across a wake that finds the queue empty. Before, the
// accept's wait on a shared listener (accept_shared) counted it afresh
// from there. The acceptor's worker is kept busy by a fiber that spins:
// the acceptor spawned it, and a fiber's newest spawn is held for its own
// worker (sched/spawn_deque.h), so it runs there once the acceptor parks;
// the woken acceptor, pinned to that worker by its hook's park, waits.
TEST(HooksSharedFd, AnAcceptWhoseListenerBecameSharedKeepsItsTimeout) {
  constexpr auto kTimeout = 3s;
  std::atomic<bool> spin{true};
  std::atomic<bool> spinning{false};
  int accepted = -2;
  int error = 0;
  Clock::duration took{};
  sockaddr_in address;
  const int listener = listen_on_loopback(address);
  ASSERT_TRUE(is_private(listener));
  timeval timeout{3, 0};
  ASSERT_EQ(setsockopt(listener, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout)), 0);
  Scheduler sched{test::config_with(2)};
  Fiber spinner;
  Fiber acceptor;
  struct JoinOnExit {  // an ASSERT's return too: no joinable fiber destroyed, no spinner left
    std::atomic<bool>& spin;
    Fiber& acceptor;
    Fiber& spinner;
    ~JoinOnExit() {
      spin = false;
      if (acceptor.joinable()) acceptor.join();  // which spawned the spinner
      if (spinner.joinable()) spinner.join();
    }
  } const join_on_exit{spin, acceptor, spinner};
  acceptor = sched.spawn([&] {
    spinner = spawn([&] {
      spinning = true;
      while (spin.load()) {
      }
    });
    const auto start = Clock::now();
    accepted = accept(listener, nullptr, nullptr);
    error = errno;
    took = Clock::now() - start;
  });
  ASSERT_TRUE(test::io_waiters_reach(sched, 1));  // parked, after a flip of a private listener
  ASSERT_TRUE(test::wait_until([&] { return spinning.load(); }, 20s));
  const pid_t parent = getpid();
  const pid_t child = fork();  // holds the listener: shared from now on
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // gone with the test, however it ends
    if (getppid() == parent) syscall(SYS_pause);
    _exit(0);
  }
  ASSERT_GT(child, 0);
  EXPECT_FALSE(is_private(listener));
  const int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_EQ(connect(client, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
  const bool woken = test::wait_until([&] { return woken_and_waiting(sched, acceptor.id()); }, 20s);
  EXPECT_TRUE(woken) << "the acceptor was not woken for the connection";
  const int taken = accept(listener, nullptr, nullptr);  // this plain thread takes it first
  EXPECT_GE(taken, 0) << std::strerror(errno);
  std::this_thread::sleep_for(1s);  // then the acceptor runs, a third of its timeout gone
  spin = false;
  acceptor.join();
  spinner.join();
  EXPECT_EQ(accepted, -1);
  EXPECT_EQ(error, EAGAIN) << std::strerror(error);
  EXPECT_LT(took, kTimeout + 600ms) << "the timeout was counted again from the wake";
  EXPECT_GE(took, kTimeout - 100ms);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  if (taken >= 0) close(taken);
  if (accepted >= 0) close(accepted);
  close(client);
  close(listener);
}

// What proves a description private (hooks/description_sharing.h), and
// what takes the proof away.
TEST(HooksSharedFd, ADescriptionIsPrivateUntilPassedOn) {
  const int fresh = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_TRUE(is_private(fresh)) << "made here";

  const int copy = dup(fresh);
  EXPECT_FALSE(is_private(fresh)) << "duplicated";
  EXPECT_FALSE(is_private(copy)) << "a duplicate";

  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
  const int sent = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_TRUE(is_private(sent));
  ASSERT_EQ(send_fd(pair[0], sent), 1);
  EXPECT_FALSE(is_private(sent)) << "sent with SCM_RIGHTS";

  // A spawned child keeps what is not close-on-exec.
  const int inherited = socket(AF_INET, SOCK_STREAM, 0);
  const int closed_on_exec = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int marked_later = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(fcntl(marked_later, F_SETFD, FD_CLOEXEC), 0);
  const int named_in_dup2 = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_TRUE(is_private(inherited));
  Child watcher({"watch", "0"});
  EXPECT_FALSE(is_private(inherited)) << "inherited by a spawned child";
  EXPECT_TRUE(is_private(closed_on_exec)) << "SOCK_CLOEXEC";
  EXPECT_TRUE(is_private(marked_later)) << "FD_CLOEXEC before the spawn";
  ASSERT_EQ(fcntl(marked_later, F_SETFD, 0), 0);
  ASSERT_EQ(fcntl(marked_later, F_SETFD, FD_CLOEXEC), 0);
  EXPECT_FALSE(is_private(marked_later)) << "FD_CLOEXEC cleared after a spawn, even if set again";
  watcher.finish();

  // posix_spawn_file_actions_adddup2 names it for a child.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  EXPECT_TRUE(is_private(named_in_dup2));
  posix_spawn_file_actions_adddup2(&actions, named_in_dup2, 3);
  EXPECT_FALSE(is_private(named_in_dup2)) << "named in a dup2 action";
  posix_spawn_file_actions_destroy(&actions);

  // A forked child holds every description.
  const int before_fork = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(0);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_FALSE(is_private(before_fork)) << "held at a fork";
  const int after_fork = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_TRUE(is_private(after_fork)) << "made after the fork";

  for (int fd : {fresh, copy, pair[0], pair[1], sent, inherited, closed_on_exec, marked_later, named_in_dup2,
                 before_fork, after_fork})
    close(fd);
}

// A vfork child that execs holds every description not close-on-exec, as
// a spawned one does. Before, vfork was not counted: a description made
// before it stayed "private", and the parent's fibers would have flipped
// O_NONBLOCK on a description the exec'd program reads.
[[gnu::noinline]] pid_t vfork_and_exec_true() {
  const pid_t child = vfork();
  if (child == 0) {
    execl("/bin/true", "true", static_cast<char*>(nullptr));
    _exit(127);
  }
  return child;
}

TEST(HooksSharedFd, AVforkChildThatExecsHoldsWhatIsNotCloseOnExec) {
#if defined(WEFT_UNDER_TSAN) || !defined(__x86_64__)
  // ThreadSanitizer's vfork is a fork (counted as one); elsewhere than
  // x86-64 weft does not interpose vfork.
  GTEST_SKIP() << "vfork is not weft's here";
#endif
  const int inherited = socket(AF_INET, SOCK_STREAM, 0);
  const int closed_on_exec = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_TRUE(is_private(inherited));
  const pid_t child = vfork_and_exec_true();
  ASSERT_GT(child, 0) << std::strerror(errno);
  int status = -1;
  EXPECT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  EXPECT_FALSE(is_private(inherited)) << "inherited by the vfork child's exec";
  EXPECT_TRUE(is_private(closed_on_exec)) << "SOCK_CLOEXEC";
  close(inherited);
  close(closed_on_exec);
}

// While a fork, posix_spawn or vfork is under way no description is
// private, and one made meanwhile by another thread, before the call's
// system call, is the child's too. Here the call waits before its system
// call for a flip in flight (FlipWindow), and a socket is made meanwhile.
// Before, the call counted itself at its start; the socket's record took
// that count for its own and passed for private after the call.
TEST(HooksSharedFd, ADescriptionMadeWhileAChildIsMadeIsTheChildsToo) {
  const int flipped = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  for (const std::string call : {"fork", "posix_spawn", "vfork"}) {
    SCOPED_TRACE(call);
#if defined(WEFT_UNDER_TSAN) || !defined(__x86_64__)
    if (call == "vfork") continue;  // not weft's here (the vfork test above)
#endif
    const int witness = socket(AF_INET, SOCK_STREAM, 0);  // private but while a child is made
    ASSERT_TRUE(is_private(witness));
    pid_t child = -1;
    int made = -1;
    bool private_meanwhile = true;
    std::thread maker;
    {
      const detail::FlipWindow flip(*detail::fd_state(flipped));
      maker = std::thread([&] {
        if (call == "fork") {
          child = fork();
          if (child == 0) _exit(0);
        } else if (call == "posix_spawn") {
          char name[] = "true";
          char* argv[] = {name, nullptr};
          EXPECT_EQ(posix_spawn(&child, "/bin/true", nullptr, nullptr, argv, environ), 0);
        } else {
          child = vfork_and_exec_true();
        }
      });
      EXPECT_TRUE(test::wait_until([&] { return !is_private(witness); }, 20s)) << "no child under way";
      made = socket(AF_INET, SOCK_STREAM, 0);
      private_meanwhile = is_private(made);
    }  // the flip ends: the call goes on
    maker.join();
    EXPECT_FALSE(private_meanwhile) << "made while the call was under way";
    EXPECT_FALSE(is_private(made)) << "made before the call's system call";
    EXPECT_GT(child, 0);
    int status = -1;
    if (child > 0) {
      EXPECT_EQ(waitpid(child, &status, 0), child);
    }
    close(made);
    close(witness);
  }
  close(flipped);
}

#if defined(__x86_64__)
// A handler installed by a raw rt_sigaction, which weft's trampolines do
// not count (Go's runtime installs its handlers so, and crash reporters
// that make their own system calls), and that forks. The kernel's
// sigaction wants a restorer of the caller's own: rt_sigreturn.
extern "C" void weft_test_restore_rt();
asm(".pushsection .text\n"
    ".type weft_test_restore_rt, @function\n"
    "weft_test_restore_rt:\n"
    "  mov $15, %rax\n"  // SYS_rt_sigreturn
    "  syscall\n"
    ".popsection\n");

struct KernelSigaction {
  void (*handler)(int);
  unsigned long flags;
  void (*restorer)();
  unsigned long mask;
};
constexpr unsigned long kRestorer = 0x04000000;  // SA_RESTORER

int raw_handlers_witness = -1;  // a socket made before the handler's fork
pid_t raw_handlers_child = -1;

void forking_raw_handler(int) {
  raw_handlers_child = fork();
  if (raw_handlers_child == 0) {
    // Its thread was inside a flip of its own, whose halves this child
    // cannot tell: nothing here is private, not even a socket made here.
    const int made_here = socket(AF_INET, SOCK_STREAM, 0);
    _exit(made_here < 0 ? 2 : is_private(made_here) ? 3 : 0);
  }
}

// A raw handler that interrupts its thread's own flip (FlipWindow) and
// forks: the fork may not wait for that flip to end, which it never would
// (the thread is in the handler). Before, the fork waited for it for good.
// Run in a child process of its own, which the test kills if it hangs.
TEST(HooksSharedFd, AForkFromAnUncountedHandlerInsideItsThreadsOwnFlipGoesOn) {
  SKIP_UNDER_TSAN();                   // its runtime wraps every handler, and defers them
  SKIP_IF_CHILDREN_CANNOT_ALLOCATE();  // the test's child makes sockets (their records)
  const pid_t test = fork();
  ASSERT_GE(test, 0);
  if (test == 0) {
    const int flipped = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    raw_handlers_witness = socket(AF_INET, SOCK_STREAM, 0);
    if (flipped < 0 || raw_handlers_witness < 0 || !is_private(raw_handlers_witness)) _exit(4);
    KernelSigaction action{&forking_raw_handler, kRestorer, &weft_test_restore_rt, 0};
    if (syscall(SYS_rt_sigaction, SIGUSR2, &action, nullptr, sizeof action.mask) != 0) _exit(5);
    {
      const detail::FlipWindow flip(*detail::fd_state(flipped));
      raise(SIGUSR2);  // handled before raise returns
    }
    if (raw_handlers_child <= 0) _exit(6);
    if (!test::child_exited_cleanly(raw_handlers_child, 5s)) _exit(7);
    // And in this process the fork counts: the witness is the child's too.
    _exit(is_private(raw_handlers_witness) ? 8 : 0);
  }
  EXPECT_TRUE(test::child_exited_cleanly(test, 10s)) << "hung, or a check failed (the exit status)";
}
#endif

// FD_CLOEXEC set while a posix_spawn is under way, after its child took
// the fd table: the child holds the description without it, across its
// exec. The socket is made while the spawn waits for a flip (as above),
// before its system call; the child then waits in its file actions, the
// opens of two FIFOs, each until a writer opens it: the first tells that
// the child exists, and the flag is set before the second lets it exec.
// Before, the record took the flag as set before the spawn, and the
// description passed for private after it.
TEST(HooksSharedFd, CloseOnExecSetWhileASpawnsChildRunsKeepsItShared) {
  const std::string fifos[] = {"/tmp/weft-spawn-first-" + std::to_string(getpid()),
                               "/tmp/weft-spawn-second-" + std::to_string(getpid())};
  for (const std::string& fifo : fifos) {
    ::unlink(fifo.c_str());
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 100, fifos[0].c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 101, fifos[1].c_str(), O_RDONLY, 0);
  const int flipped = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int witness = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_TRUE(is_private(witness));
  pid_t child = -1;
  int spawned = -1;
  int made = -1;
  std::thread spawner;
  {
    const detail::FlipWindow flip(*detail::fd_state(flipped));
    spawner = std::thread([&] {
      char name[] = "true";
      char* argv[] = {name, nullptr};
      spawned = posix_spawn(&child, "/bin/true", &actions, nullptr, argv, environ);
    });
    EXPECT_TRUE(test::wait_until([&] { return !is_private(witness); }, 20s)) << "no spawn under way";
    made = socket(AF_INET, SOCK_STREAM, 0);
  }
  // A writer's non-blocking open succeeds once the child waits in its
  // open: the child holds `made` now.
  int first = -1;
  EXPECT_TRUE(test::wait_until([&] { return (first = ::open(fifos[0].c_str(), O_WRONLY | O_NONBLOCK)) >= 0; }, 20s))
      << std::strerror(errno);
  EXPECT_EQ(fcntl(made, F_SETFD, FD_CLOEXEC), 0);
  // Lets it exec: an O_RDWR open of a FIFO never waits, and is a writer
  // (of both, in case the first wait above timed out).
  const int second = ::open(fifos[1].c_str(), O_RDWR);
  const int first_again = ::open(fifos[0].c_str(), O_RDWR);
  spawner.join();
  EXPECT_EQ(spawned, 0);
  int status = -1;
  if (child > 0) {
    EXPECT_EQ(waitpid(child, &status, 0), child);
  }
  EXPECT_FALSE(is_private(made)) << "FD_CLOEXEC was set after the child took the fd";
  posix_spawn_file_actions_destroy(&actions);
  for (const int fd : {first, first_again, second, made, witness, flipped}) close(fd);
  for (const std::string& fifo : fifos) ::unlink(fifo.c_str());
}

// An fd received with SCM_RIGHTS is the sender's too, through recvmsg and
// recvmmsg alike: its record must keep nothing of the number's last fd,
// here the "made here" of a socket closed where no hook saw it (a raw
// close). Before, recvmmsg left that record as it was, and the hooks would
// have flipped O_NONBLOCK on a description another process holds.
TEST(HooksSharedFd, AnFdReceivedIsNotPrivate) {
  for (const bool many : {false, true}) {
    SCOPED_TRACE(many ? "recvmmsg" : "recvmsg");
    int pair[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
    const int sent = socket(AF_INET, SOCK_STREAM, 0);
    const int stale = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_TRUE(is_private(stale));
    ASSERT_EQ(syscall(SYS_close, stale), 0);  // unseen by the hooks

    ASSERT_EQ(send_fd(pair[0], sent), 1);
    const int received = receive_fd(pair[1], many);
    ASSERT_EQ(received, stale) << "the kernel gives the lowest free number";
    EXPECT_FALSE(is_private(received)) << "received with SCM_RIGHTS";
    for (int fd : {pair[0], pair[1], sent, received}) close(fd);
  }
}

}  // namespace
}  // namespace weft
