// What the tests of fork() children share: which builds can run them, and
// a bounded wait for a child.
#pragma once

#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "hooks_test_support.h"

// AddressSanitizer's allocator is not fork-safe before LLVM 18
// (llvm/llvm-project#75290 added its pthread_atfork handler; GCC's
// libasan up to 14 predates it): a child that allocates hangs for ever
// when another thread of the parent was inside ASan's allocator at the
// fork, holding one of its size-class locks. These children must
// allocate (they make a scheduler).
#if defined(WEFT_UNDER_ASAN) && ((defined(__clang__) && __clang_major__ < 18) || (!defined(__clang__) && __GNUC__ < 15))
#define WEFT_ASAN_ALLOCATOR_NOT_FORK_SAFE 1
#define SKIP_IF_CHILDREN_CANNOT_ALLOCATE()                                                                    \
  GTEST_SKIP() << "this AddressSanitizer's allocator is not fork-safe (llvm/llvm-project#75290, LLVM 18): a " \
                  "child that allocates can hang in it"
#else
#define SKIP_IF_CHILDREN_CANNOT_ALLOCATE() (void)0
#endif

// ThreadSanitizer refuses threads in the child of a multi-threaded fork
// ("starting new threads after multi-threaded fork is not supported"), and
// these children make schedulers.
#ifdef WEFT_UNDER_TSAN
#define SKIP_UNDER_TSAN() GTEST_SKIP() << "ThreadSanitizer does not support threads in a multi-threaded fork's child"
#else
#define SKIP_UNDER_TSAN() (void)0
#endif

namespace weft::test {

// Waits for `child` up to `limit`; kills it if it is still running then.
// Its exit status if it exited by itself; -1 if a signal ended it or it
// was killed at the limit.
inline int child_exit_status(pid_t child, std::chrono::seconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  int status = 0;
  for (;;) {
    const pid_t done = waitpid(child, &status, WNOHANG);
    if (done == child) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (done < 0) return -1;
    if (std::chrono::steady_clock::now() >= until) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// True if `child` exited with status 0 by itself within `limit`.
inline bool child_exited_cleanly(pid_t child, std::chrono::seconds limit) {
  return child_exit_status(child, limit) == 0;
}

// Whether a child may take a uid of its own (setuid to any uid): root in
// the initial user namespace, whose uid_map maps every uid. Inside a user
// namespace, root's setuid to an unmapped uid fails.
inline bool children_can_take_another_uid() {
  if (geteuid() != 0) return false;
  std::ifstream map("/proc/self/uid_map");
  unsigned long inside = 1, outside = 1, count = 0;
  return static_cast<bool>(map >> inside >> outside >> count) && inside == 0 && outside == 0 && count == 4294967295ul;
}

// Closes the write end of `fds`, a pipe the child writes to, and returns
// all it wrote (until the child, and every other writer, closed theirs).
inline std::string what_the_child_said(int fds[2]) {
  ::close(fds[1]);
  std::string said;
  char buffer[256];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) > 0;) said.append(buffer, std::size_t(n));
  ::close(fds[0]);
  return said;
}

// Whether the thread `tid` of this process sleeps in futex(2): a plain
// thread's park, which shows in no snapshot.
inline bool sleeps_in_futex(pid_t tid) {
  if (tid == 0) return false;
  std::ifstream calls("/proc/self/task/" + std::to_string(tid) + "/syscall");
  long call = -1;
  return calls >> call && call == SYS_futex;
}

}  // namespace weft::test
