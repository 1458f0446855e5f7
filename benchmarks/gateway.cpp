// The seed's gateway, written as a C++ team would with blocking code: a
// cpp-httplib server whose handler makes one blocking httplib::Client GET
// to the backend (benchmarks/backend.cpp) and answers "Ok!".
//
//   build/benchmarks/gateway --port 8080 --backend-port 8081 [--threads 8]
//
// cpp-httplib runs each connection as a task of its TaskQueue; here that
// queue is a weft::Pool named "gateway" with --threads runners (default 8,
// cpp-httplib's own default on a small machine). Without WEFT_FIBERS it is
// the thread pool a user has today; with WEFT_FIBERS=name:gateway* the same
// binary runs its connections on fibers: libweft's libc hooks park the
// fiber in cpp-httplib's blocking recv, send, connect and select, and answer
// its per-request getnameinfo/getaddrinfo of numeric addresses inline.
// tools/bench-gateway measures both (docs/benchmarks.md).
#include <httplib.h>
#include <signal.h>
#include <weft/weft.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "cli.h"
#include "http_pool_queue.h"

namespace {

[[noreturn]] void usage(const char* error) {
  if (error != nullptr) std::fprintf(stderr, "gateway: %s\n", error);
  std::fprintf(stderr, "usage: gateway --port P --backend-port Q [--threads N]\n");
  std::exit(2);
}
void usage_and_exit(const char* error) { usage(error); }

}  // namespace

int main(int argc, char** argv) {
  int port = 0, backend_port = 0;
  unsigned threads = 8;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) usage(("missing value after " + arg).c_str());
    if (arg == "--port")
      port = weft::bench::parse_count<int>(argv[++i], "--port", 1, 65535, usage_and_exit);
    else if (arg == "--backend-port")
      backend_port = weft::bench::parse_count<int>(argv[++i], "--backend-port", 1, 65535, usage_and_exit);
    else if (arg == "--threads")
      threads = weft::bench::parse_count<unsigned>(argv[++i], "--threads", 1, 100000, usage_and_exit);
    else
      usage(("unknown option " + arg).c_str());
  }
  if (port == 0 || backend_port == 0) usage("--port and --backend-port are required");

  httplib::Server server;
  server.new_task_queue = [threads] { return new weft::bench::PoolQueue("gateway", "gateway", threads); };
  server.set_keep_alive_max_count(100);
  server.set_tcp_nodelay(true);
  server.Get("/", [backend_port](const httplib::Request&, httplib::Response& res) {
    httplib::Client backend("127.0.0.1", backend_port);
    backend.set_connection_timeout(5);
    backend.set_read_timeout(5);
    backend.set_tcp_nodelay(true);
    const httplib::Result answer = backend.Get("/");
    if (!answer || answer->status != 200) {
      res.status = 502;
      res.set_content(answer ? "backend answered " + std::to_string(answer->status)
                             : "backend failed: " + httplib::to_string(answer.error()),
                      "text/plain");
      return;
    }
    res.set_content("Ok!", "text/plain");
  });

  // SIGINT and SIGTERM stop the server (and so the pool) cleanly.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::thread stopper([&] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    server.stop();
  });
  stopper.detach();

  return weft::bench::listen_wide(server, "gateway", port) ? 0 : 1;
}
