// A child process that asks the kernel for SIGTERM when the thread that
// forked it ends (prctl(PR_SET_PDEATHSIG)), as supervised helpers do, and
// exits 0 once released, or dies of SIGALRM after 30 s if never released.
#pragma once

#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace weft::test {

class DeathSignalChild {
 public:
  DeathSignalChild() {
    if (::pipe(release_) != 0) release_[0] = release_[1] = -1;
  }
  ~DeathSignalChild() {
    if (pid_ > 0 && !reaped_) finish();
    for (const int fd : release_)
      if (fd >= 0) ::close(fd);
  }
  DeathSignalChild(const DeathSignalChild&) = delete;
  DeathSignalChild& operator=(const DeathSignalChild&) = delete;

  // Forks it from the calling thread, which becomes its parent.
  void start() {
    if (release_[0] < 0) return;
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
      // Raw calls only: this copy of a threaded process has one thread.
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) ::_exit(3);  // the thread ended before the request
      ::alarm(30);
      char c;
      ::syscall(SYS_read, release_[0], &c, 1);
      ::_exit(0);
    }
    pid_ = pid;
  }
  pid_t pid() const { return pid_; }

  // Releases it and returns how it ended (waitpid's status).
  int finish() {
    if (::write(release_[1], "x", 1) != 1) return -1;
    int status = -1;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
    return status;
  }

  static std::string describe(int status) {
    if (WIFEXITED(status)) return "exited with " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return std::string("killed by ") + ::strsignal(WTERMSIG(status));
    return "status " + std::to_string(status);
  }

 private:
  int release_[2] = {-1, -1};
  pid_t pid_ = -1;
  bool reaped_ = false;
};

}  // namespace weft::test
