// Socket helpers shared by echo_server and echo_load (docs/benchmarks.md,
// "Echo server"). Loopback only: nothing here takes an address.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace weft::bench {

// A 127.0.0.1 address; port 0 lets the kernel pick a free one.
inline sockaddr_in loopback(std::uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

// 1,000 connections need more descriptors than the usual soft limit of
// 1024 once the other side, the listener and the epoll fds are counted;
// the hard limit is ours to take.
inline void raise_fd_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &limit);
}

// Echo is request/response with small messages: no side should wait for
// Nagle's timer. Go sets TCP_NODELAY on every TCP connection by default, so
// every mode here does too.
inline void set_nodelay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

inline bool set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  return flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

[[noreturn]] inline void die_errno(const char* program, const char* what) {
  std::fprintf(stderr, "%s: %s: %s\n", program, what, std::strerror(errno));
  std::exit(1);
}

}  // namespace weft::bench
