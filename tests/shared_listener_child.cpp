// Another process holding the same sockets as a weft process (a pre-fork
// server's worker, a socket-activated sibling), for hooks_shared_fd_test.
// Not linked with weft.
//
//   shared_listener_child accept LISTENER_FD
//     accepts with libc's blocking accept until the listener is shut down;
//     prints "accepted N eagain M": a blocking listener never fails with
//     EAGAIN (no SO_RCVTIMEO), so each is another holder's O_NONBLOCK.
//   shared_listener_child watch FD...
//     reads each fd's status flags with F_GETFL until its stdin closes;
//     prints "reads N nonblock M": how often one had O_NONBLOCK set.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

int accept_until_shut_down(int listener) {
  long accepted = 0;
  long eagain = 0;
  for (;;) {
    const int fd = accept(listener, nullptr, nullptr);
    if (fd >= 0) {
      ++accepted;
      close(fd);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      ++eagain;
    } else if (errno != EINTR && errno != ECONNABORTED) {
      break;  // EINVAL: the listener was shut down
    }
  }
  std::printf("accepted %ld eagain %ld\n", accepted, eagain);
  return 0;
}

int watch_until_stdin_closes(const std::vector<int>& fds) {
  long reads = 0;
  long nonblock = 0;
  for (;;) {
    for (int fd : fds) {
      const int flags = fcntl(fd, F_GETFL);
      ++reads;
      if (flags >= 0 && (flags & O_NONBLOCK)) ++nonblock;
    }
    pollfd in{STDIN_FILENO, POLLIN, 0};
    if (poll(&in, 1, 0) != 0) break;  // EOF (or anything else) on stdin
  }
  std::printf("reads %ld nonblock %ld\n", reads, nonblock);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "accept") == 0) return accept_until_shut_down(std::atoi(argv[2]));
  if (argc >= 3 && std::strcmp(argv[1], "watch") == 0) {
    std::vector<int> fds;
    for (int i = 2; i < argc; ++i) fds.push_back(std::atoi(argv[i]));
    return watch_until_stdin_closes(fds);
  }
  std::fprintf(stderr, "usage: shared_listener_child accept FD | watch FD...\n");
  return 2;
}
