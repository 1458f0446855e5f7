// Context-switch cost as a whole program (scripts/bench-peers; the Go and
// tokio peers do the same): two fibers each call this_fiber::yield()
// --per-fiber times on --workers workers.
//
//   yield --workers 1 --per-fiber 5000000
//
// Prints one JSON object: {"ns_per_yield": ..., "yields": ..., "workers": ...};
// exits 2 on bad arguments.
#include <weft/weft.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

int main(int argc, char** argv) {
  CLI::App app{"two fibers that yield to each other"};
  unsigned workers = 1;
  unsigned per_fiber = 5'000'000;
  app.add_option("--workers", workers, "worker threads")->check(CLI::Range(1, 1024));
  app.add_option("--per-fiber", per_fiber, "yields per fiber")->check(CLI::Range(1u, 1'000'000'000u));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

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
