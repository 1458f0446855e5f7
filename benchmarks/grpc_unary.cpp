// grpc_unary: gRPC's synchronous unary client from fibers against the same
// client from threads (issue 27, docs/io.md, "Libraries that are not
// fiber-safe, and why"; figures in docs/benchmarks.md). An echo server on
// 127.0.0.1 (tests/grpc/echo_server, a child process); N clients share one
// channel and make --calls calls between them, each reply checked. Fibers
// run on a weft::Scheduler of 2 workers with its default settings (gRPC's
// calls stay on their thread: the default WEFT_HOOKS_EXCLUDE), threads are
// N std::threads. The two alternate, --runs times each; medians.
//
//   grpc_unary                     # 10 and 100 clients, 10000 calls a run, 5 runs
//   grpc_unary --clients 100 --calls 20000 --runs 9
#include <sys/resource.h>
#include <weft/weft.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "cli.h"
#include "echo_support.h"

namespace {

using Clock = std::chrono::steady_clock;

// This process's CPU time (user and system, all threads), in ms.
double cpu_ms() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto ms = [](const timeval& tv) { return static_cast<double>(tv.tv_sec) * 1e3 + tv.tv_usec / 1e3; };
  return ms(usage.ru_utime) + ms(usage.ru_stime);
}

struct Run {
  double ms = -1;     // wall clock; negative if a call failed
  double cpu_ms = 0;  // the client process's CPU time
};

// One run: `clients` clients make `calls` calls between them.
Run run_once(bool fibers, int clients, int calls, weft::echo::Echo::Stub& stub) {
  std::vector<weft::test::CallResults> results(static_cast<std::size_t>(clients));
  auto client = [&](int i) {
    const int mine = calls / clients + (i < calls % clients ? 1 : 0);
    results[static_cast<std::size_t>(i)] =
        weft::test::make_calls(stub, std::int64_t{i} * 1'000'000, mine, std::chrono::seconds(30));
  };
  const auto start = Clock::now();
  const double cpu_start = cpu_ms();
  if (fibers) {
    weft::Config config;
    config.workers = 2;
    config.name = "grpc-clients";
    weft::Scheduler sched(config);
    std::vector<weft::Fiber> running;
    for (int i = 0; i < clients; ++i) running.push_back(sched.spawn([&client, i] { client(i); }));
    for (weft::Fiber& f : running) f.join();
  } else {
    std::vector<std::thread> running;
    for (int i = 0; i < clients; ++i) running.emplace_back(client, i);
    for (std::thread& t : running) t.join();
  }
  Run run;
  run.ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  run.cpu_ms = cpu_ms() - cpu_start;
  for (const weft::test::CallResults& r : results) {
    if (r.failed != 0) {
      std::fprintf(stderr, "grpc_unary: %s\n", r.first_error.c_str());
      run.ms = -1;
    }
  }
  return run;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> client_counts = {10, 100};
  int calls = 10'000;
  int clients = 0;
  int runs = 5;
  CLI::App app{"grpc_unary: gRPC's sync unary client on fibers and on threads, against an echo server", "grpc_unary"};
  weft::bench::add_count(app, "--clients", clients, 1, 1000, "clients at once (default: 10, then 100)")
      ->default_str("");
  weft::bench::add_count(app, "--calls", calls, 1, 10'000'000, "calls per run, shared among the clients");
  weft::bench::add_count(app, "--runs", runs, 1, 101, "runs per mode, alternating");
  weft::bench::parse(app, argc, argv);
  if (clients != 0) client_counts = {clients};
  const weft::test::EchoServerProcess server(WEFT_GRPC_ECHO_SERVER);
  const auto channel = ::grpc::CreateChannel(server.target(), ::grpc::InsecureChannelCredentials());
  const auto stub = weft::echo::Echo::NewStub(channel);
  if (run_once(false, 1, 100, *stub).ms < 0) return 1;  // connect and warm up
  std::printf("gRPC sync unary calls to an echo server on 127.0.0.1; %d calls a run, %d runs each, medians\n", calls,
              runs);
  std::printf("(CPU: the client process's user + system time; the server's is not counted)\n");
  std::printf("%8s %11s %11s %15s %12s %12s %16s\n", "clients", "fibers ms", "threads ms", "fibers/threads",
              "fibers CPU", "threads CPU", "fibers/threads");
  for (const int clients : client_counts) {
    std::vector<double> ms[2], cpu[2];  // [0] fibers, [1] threads
    for (int run = 0; run < runs; ++run) {
      for (const bool fibers : {true, false}) {
        const Run r = run_once(fibers, clients, calls, *stub);
        if (r.ms < 0) return 1;
        ms[fibers ? 0 : 1].push_back(r.ms);
        cpu[fibers ? 0 : 1].push_back(r.cpu_ms);
      }
    }
    const double f = median(ms[0]), t = median(ms[1]), fc = median(cpu[0]), tc = median(cpu[1]);
    std::printf("%8d %11.1f %11.1f %15.2f %12.1f %12.1f %16.2f\n", clients, f, t, f / t, fc, tc, fc / tc);
  }
}
