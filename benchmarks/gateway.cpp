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
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cli.h"
#include "http_pool_queue.h"

namespace {

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
  std::string backend_client = "keep-alive";
  CLI::App app{"gateway: the seed's cpp-httplib gateway, its handlers on a weft::Pool", "gateway"};
  weft::bench::add_count(app, "--port", port, 1, 65535, "port on 127.0.0.1")->required();
  weft::bench::add_count(app, "--backend-port", backend_port, 1, 65535, "the backend's port on 127.0.0.1")->required();
  weft::bench::add_count(app, "--threads", threads, 1u, 100'000u, "the handlers' pool size");
  app.add_option("--backend-client", backend_client,
                 "keep-alive: idle backend connections are kept; per-request: a connection per request")
      ->check(CLI::IsMember({"keep-alive", "per-request"}))
      ->capture_default_str();
  weft::bench::parse(app, argc, argv);
  keep_alive = backend_client == "keep-alive";

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
