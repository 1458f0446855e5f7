// Context-switch cost as a whole program (scripts/bench-peers; the Go and
// tokio peers do the same): two fibers each call this_fiber::yield()
// --per-fiber times on --workers workers.
//
//   yield --workers 1 --per-fiber 5000000
//
// Prints one JSON object: {"ns_per_yield": ..., "yields": ..., "workers": ...};
// exits 2 on bad arguments.
#include <weft/weft.h>

#include <chrono>
#include <cstdio>

#include "cli.h"

int main(int argc, char** argv) {
  CLI::App app{"yield: two fibers that yield to each other; ns per yield", "yield"};
  unsigned workers = 1;
  unsigned per_fiber = 5'000'000;
  weft::bench::add_count(app, "--workers", workers, 1u, 1024u, "worker threads");
  weft::bench::add_count(app, "--per-fiber", per_fiber, 1u, 1'000'000'000u, "yields per fiber");
  weft::bench::parse(app, argc, argv);

  weft::Config config;
  config.name = "yield";
  config.workers = workers;
  weft::Scheduler sched{config};
  double ns = 0;
  sched
      .spawn([&] {
        const auto begin = std::chrono::steady_clock::now();
        auto body = [per_fiber] {
          for (unsigned i = 0; i < per_fiber; ++i) weft::this_fiber::yield();
        };
        weft::Fiber a = weft::spawn(body);
        weft::Fiber b = weft::spawn(body);
        a.join();
        b.join();
        ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - begin).count();
      })
      .join();
  std::printf("{\"ns_per_yield\": %.1f, \"yields\": %llu, \"workers\": %u}\n", ns / (2.0 * per_fiber), 2ull * per_fiber,
              workers);
}
