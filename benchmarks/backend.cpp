// The seed's backend: answers GET / with "Ok!" after --delay-ms (100 ms),
// a stand-in for a database or a downstream service.
//
//   build/benchmarks/backend --port 8081 [--delay-ms 100] [--threads 4096]
//
// A cpp-httplib server on a weft::Pool named "backend". The delay is
// weft::this_fiber::sleep_for, which parks a fiber and sleeps a thread, so
// the backend never bounds the gateway's benchmark: as threads (the
// default) it serves --threads connections at once; with
// WEFT_FIBERS=name:backend* it runs on weft fibers, the hooks parking
// cpp-httplib's socket calls (tools/bench-gateway --backend fibers).
#include <httplib.h>
#include <signal.h>
#include <weft/weft.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "cli.h"
#include "http_pool_queue.h"

namespace {

[[noreturn]] void usage(const char* error) {
  if (error != nullptr) std::fprintf(stderr, "backend: %s\n", error);
  std::fprintf(stderr, "usage: backend --port Q [--delay-ms 100] [--threads 4096]\n");
  std::exit(2);
}
void usage_and_exit(const char* error) { usage(error); }

}  // namespace

int main(int argc, char** argv) {
  int port = 0;
  unsigned delay_ms = 100, threads = 4096;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) usage(("missing value after " + arg).c_str());
    if (arg == "--port")
      port = weft::bench::parse_count<int>(argv[++i], "--port", 1, 65535, usage_and_exit);
    else if (arg == "--delay-ms")
      delay_ms = weft::bench::parse_count<unsigned>(argv[++i], "--delay-ms", 0, 60000, usage_and_exit);
    else if (arg == "--threads")
      threads = weft::bench::parse_count<unsigned>(argv[++i], "--threads", 1, 100000, usage_and_exit);
    else
      usage(("unknown option " + arg).c_str());
  }
  if (port == 0) usage("--port is required");

  httplib::Server server;
  server.new_task_queue = [threads] { return new weft::bench::PoolQueue("backend", "backend", threads); };
  server.set_keep_alive_max_count(100);
  server.set_tcp_nodelay(true);
  server.Get("/", [delay_ms](const httplib::Request&, httplib::Response& res) {
    weft::this_fiber::sleep_for(std::chrono::milliseconds(delay_ms));
    res.set_content("Ok!", "text/plain");
  });

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

  return weft::bench::listen_wide(server, "backend", port) ? 0 : 1;
}
