// Both ends of a pipe or a socketpair for the I/O tests, closed through
// weft (detail::fd_closing, then close) when the pair goes.
#pragma once

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include "io/netpoller.h"

namespace weft::test {

struct FdPair {
  int reader = -1;
  int writer = -1;
  FdPair() = default;
  FdPair(int read_end, int write_end) : reader(read_end), writer(write_end) {}
  FdPair(const FdPair&) = delete;
  FdPair& operator=(const FdPair&) = delete;
  FdPair(FdPair&& other) noexcept : reader(other.reader), writer(other.writer) { other.reader = other.writer = -1; }
  ~FdPair() {
    close_fd(reader);
    close_fd(writer);
  }
  static void close_fd(int& fd) {
    if (fd < 0) return;
    detail::fd_closing(fd);
    ::close(fd);
    fd = -1;
  }
};

inline FdPair make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) throw std::system_error(errno, std::generic_category(), "pipe2");
  return {fds[0], fds[1]};
}

// `type` as socket()'s, SOCK_CLOEXEC added.
inline FdPair make_socketpair(int type = SOCK_STREAM | SOCK_NONBLOCK) {
  int fds[2];
  if (::socketpair(AF_UNIX, type | SOCK_CLOEXEC, 0, fds) != 0)
    throw std::system_error(errno, std::generic_category(), "socketpair");
  return {fds[0], fds[1]};
}

}  // namespace weft::test
