// Loopback TCP for the tests: a listener on 127.0.0.1 and a free port, and
// a connected client/server pair made through one. Only 127.0.0.1.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace weft::test {

// "127.0.0.1:<port>", as weft's snapshots name a TCP endpoint.
inline std::string endpoint(const sockaddr_in& address) {
  return "127.0.0.1:" + std::to_string(ntohs(address.sin_port));
}

// A TCP listener on 127.0.0.1 and a free port. The socket is made through
// socket(), so a test that links libweft has it recorded by the hooks.
struct LoopbackListener {
  int fd = -1;
  sockaddr_in addr{};
  explicit LoopbackListener(int backlog = 128) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_GE(fd, 0) << std::strerror(errno);
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), len), 0) << std::strerror(errno);
    EXPECT_EQ(::listen(fd, backlog), 0) << std::strerror(errno);
    EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0) << std::strerror(errno);
  }
  LoopbackListener(const LoopbackListener&) = delete;
  LoopbackListener& operator=(const LoopbackListener&) = delete;
  ~LoopbackListener() {
    if (fd >= 0) ::close(fd);
  }
  const sockaddr* address() const { return reinterpret_cast<const sockaddr*>(&addr); }
};

// A connected TCP pair on 127.0.0.1, made with blocking calls on the
// calling thread (a plain thread: the connect completes in the kernel's
// backlog before the accept). Closes both ends and its listener.
struct LoopbackTcpPair {
  LoopbackListener listener{4};
  int client = -1;
  int server = -1;
  sockaddr_in client_addr{};
  LoopbackTcpPair() {
    client = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_EQ(::connect(client, listener.address(), sizeof(sockaddr_in)), 0) << std::strerror(errno);
    socklen_t length = sizeof(client_addr);
    EXPECT_EQ(::getsockname(client, reinterpret_cast<sockaddr*>(&client_addr), &length), 0);
    server = ::accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC);
    EXPECT_GE(server, 0) << std::strerror(errno);
  }
  LoopbackTcpPair(const LoopbackTcpPair&) = delete;
  LoopbackTcpPair& operator=(const LoopbackTcpPair&) = delete;
  ~LoopbackTcpPair() {
    for (int fd : {client, server})
      if (fd >= 0) ::close(fd);
  }
  // The client's end as weft names it: "127.0.0.1:<local> -> 127.0.0.1:<peer>".
  std::string client_description() const { return endpoint(client_addr) + " -> " + endpoint(listener.addr); }
};

}  // namespace weft::test
