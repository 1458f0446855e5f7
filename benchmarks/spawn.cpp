// Spawn cost as a whole program (scripts/bench-peers; the Go and tokio peers
// do the same): spawn --tasks fibers that do nothing, then join every one of
// them, on --workers workers. The clock covers both loops.
//
//   spawn --workers 1 --tasks 1000000
//
// Prints one JSON object: {"ns_per_task": ..., "tasks": ..., "workers": ...};
// exits 2 on bad arguments.
#include <weft/weft.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "cli.h"

int main(int argc, char** argv) {
  CLI::App app{"spawn: spawn N fibers that do nothing, then join them all; ns per fiber", "spawn"};
  unsigned workers = 1;
  unsigned tasks = 1'000'000;
  weft::bench::add_count(app, "--workers", workers, 1u, 1024u, "worker threads");
  weft::bench::add_count(app, "--tasks", tasks, 1u, 100'000'000u, "fibers to spawn and join");
  weft::bench::parse(app, argc, argv);

  weft::Config config;
  config.name = "spawn";
  config.workers = workers;
  weft::Scheduler sched{config};
  double ns = 0;
  sched
      .spawn([&] {
        std::vector<weft::Fiber> fibers;
        fibers.reserve(tasks);
        const auto begin = std::chrono::steady_clock::now();
        for (unsigned i = 0; i < tasks; ++i) fibers.push_back(weft::spawn([] {}));
        for (weft::Fiber& fiber : fibers) fiber.join();
        ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - begin).count();
      })
      .join();
  std::printf("{\"ns_per_task\": %.1f, \"tasks\": %u, \"workers\": %u}\n", ns / tasks, tasks, workers);
}
