// The seed's gateway, written as a C++ team would with blocking code: a
// cpp-httplib server whose handler makes one blocking httplib::Client GET
// to the backend (benchmarks/backend.cpp) and answers "Ok!".
//
//   build/benchmarks/gateway --port 8080 --backend-port 8081 [--threads 8]
//                            [--backend-client keep-alive|per-request]
//
// cpp-httplib runs each connection as a task of its TaskQueue; here that
// queue is a weft::Pool named "gateway" with --threads runners (default 8,
// cpp-httplib's own default on a small machine). Without WEFT_FIBERS it is
// the thread pool a user has today; with WEFT_FIBERS=name:gateway* the same
// binary runs its connections on fibers: libweft's libc hooks park the
// fiber in cpp-httplib's blocking recv, send, connect and select, and answer
// its per-request getnameinfo/getaddrinfo of numeric addresses inline.
// scripts/bench-gateway measures both (docs/benchmarks.md).
//
// The backend connections are kept alive, as a service keeps them: a
// handler takes an idle httplib::Client from a free list (or makes one),
// makes its GET and gives it back. --backend-client per-request makes a
// new Client, and so a new TCP connection, for every request instead.
#include <httplib.h>
#include <signal.h>
#include <weft/weft.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cli.h"
#include "http_pool_queue.h"

namespace {

[[noreturn]] void usage(const char* error) {
  if (error != nullptr) std::fprintf(stderr, "gateway: %s\n", error);
  std::fprintf(stderr,
               "usage: gateway --port P --backend-port Q [--threads N] [--backend-client keep-alive|per-request]\n");
  std::exit(2);
}
void usage_and_exit(const char* error) { usage(error); }

// Idle keep-alive clients to the backend. The std::mutex is held only to
// take or return one, never across the GET, so it is as safe on fibers as
// on threads (docs/pools.md).
class BackendClients {
 public:
  BackendClients(int port, bool keep_alive) : port_(port), keep_alive_(keep_alive) {}

  std::unique_ptr<httplib::Client> take() {
    if (keep_alive_) {
      std::lock_guard lock(mutex_);
      if (!idle_.empty()) {
        auto client = std::move(idle_.back());
        idle_.pop_back();
        return client;
      }
    }
    auto client = std::make_unique<httplib::Client>("127.0.0.1", port_);
    client->set_connection_timeout(5);
    client->set_read_timeout(5);
    // cpp-httplib writes a request's headers and body separately: without
    // TCP_NODELAY the second write waits for the first's delayed ACK.
    client->set_tcp_nodelay(true);
    client->set_keep_alive(keep_alive_);
    return client;
  }

  void give_back(std::unique_ptr<httplib::Client> client) {
    if (!keep_alive_) return;
    std::lock_guard lock(mutex_);
    idle_.push_back(std::move(client));
  }

 private:
  const int port_;
  const bool keep_alive_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<httplib::Client>> idle_;
};

}  // namespace

int main(int argc, char** argv) {
  int port = 0, backend_port = 0;
  unsigned threads = 8;
  bool keep_alive = true;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) usage(("missing value after " + arg).c_str());
    if (arg == "--port")
      port = weft::bench::parse_count<int>(argv[++i], "--port", 1, 65535, usage_and_exit);
    else if (arg == "--backend-port")
      backend_port = weft::bench::parse_count<int>(argv[++i], "--backend-port", 1, 65535, usage_and_exit);
    else if (arg == "--threads")
      threads = weft::bench::parse_count<unsigned>(argv[++i], "--threads", 1, 100000, usage_and_exit);
    else if (arg == "--backend-client") {
      const std::string value = argv[++i];
      if (value != "keep-alive" && value != "per-request")
        usage(("--backend-client takes keep-alive or per-request, not " + value).c_str());
      keep_alive = value == "keep-alive";
    } else
      usage(("unknown option " + arg).c_str());
  }
  if (port == 0 || backend_port == 0) usage("--port and --backend-port are required");

  httplib::Server server;
  server.new_task_queue = [threads] { return new weft::bench::PoolQueue("gateway", "gateway", threads); };
  server.set_keep_alive_max_count(100);
  server.set_tcp_nodelay(true);
  BackendClients clients(backend_port, keep_alive);
  server.Get("/", [&clients](const httplib::Request&, httplib::Response& res) {
    std::unique_ptr<httplib::Client> backend = clients.take();
    const httplib::Result answer = backend->Get("/");
    // A failed GET leaves the client's connection closed; the next GET on
    // it connects again.
    clients.give_back(std::move(backend));
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
