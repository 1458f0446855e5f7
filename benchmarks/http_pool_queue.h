// What the gateway and the backend share: cpp-httplib's TaskQueue on a
// weft::Pool, and a listen with room for 1,000 connections arriving at
// once.
#pragma once

#include <httplib.h>
#include <sys/socket.h>
#include <weft/weft.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace weft::bench {

// cpp-httplib runs each connection as one task of its TaskQueue: here, of a
// weft::Pool, so WEFT_FIBERS decides whether connections run on threads or
// on fibers.
class PoolQueue : public httplib::TaskQueue {
 public:
  PoolQueue(const char* program, const std::string& name, unsigned threads)
      : pool_{{.name = name, .threads = threads}} {
    std::fprintf(stderr, "%s: pool \"%s\" of %u on %s\n", program, name.c_str(), threads,
                 pool_.runs_on_fibers() ? "fibers" : "threads");
  }
  void enqueue(std::function<void()> fn) override { pool_.post(std::move(fn)); }
  void shutdown() override { pool_.shutdown(); }

 private:
  weft::Pool pool_;
};

// Debian's cpp-httplib is a compiled library that listens with a backlog
// of 5: 1,000 connections arriving at once would have their SYNs dropped,
// and each retransmit costs a second that would swamp the tail. listen()
// again on the bound socket raises it (the kernel caps it at
// net.core.somaxconn). False, with a message, if the port is taken.
inline bool listen_wide(httplib::Server& server, const char* program, int port) {
  int fd = -1;
  server.set_socket_options([&fd](socket_t sock) {
    fd = sock;
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  if (!server.bind_to_port("127.0.0.1", port)) {
    std::fprintf(stderr, "%s: cannot listen on 127.0.0.1:%d: %s\n", program, port, std::strerror(errno));
    return false;
  }
  if (fd >= 0) ::listen(fd, 4096);
  return server.listen_after_bind();
}

}  // namespace weft::bench
