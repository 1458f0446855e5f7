// The process that tests/dump_test.cpp inspects for pools: a fiber pool
// "rpc-handler" (4 runners on the default scheduler) and a thread pool
// "db-writer" (2 threads), each with 100 tasks done and one still running,
// blocked until the test is over. Prints "ready", waits for a line on stdin,
// then releases the blocked tasks and exits 0. With --threads-only there is
// only the thread pool, and so no scheduler at all.
#include <weft/weft.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

int main(int argc, char** argv) {
  const bool threads_only = argc > 1 && std::string(argv[1]) == "--threads-only";
  std::unique_ptr<weft::Pool> rpc;
  if (!threads_only) rpc.reset(new weft::Pool({.name = "rpc-handler", .threads = 4, .mode = weft::RunMode::fibers}));
  weft::Pool db{{.name = "db-writer", .threads = 2, .mode = weft::RunMode::threads}};
  for (int i = 0; i < 100; ++i) {
    if (rpc) rpc->post([] { weft::this_fiber::sleep_for(std::chrono::microseconds(100)); });
    db.post([] {});
  }
  if (rpc) rpc->wait();
  db.wait();
  weft::Latch release{1};
  if (rpc) rpc->post([&] { release.wait(); });
  db.post([&] { release.wait(); });
  while ((rpc && rpc->running() != 1) || db.running() != 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // A task counts as running before its runner parks on the latch: ready
  // once every fiber of the default scheduler is parked (a loaded machine
  // may take its time), or after 30 s, when the test will say what is not.
  const auto parked = [] {
    const weft::SchedulerSnapshot snap = weft::default_scheduler().snapshot();
    return snap.fiber_states.runnable == 0 && snap.fiber_states.running == 0;
  };
  for (const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
       rpc && !parked() && std::chrono::steady_clock::now() < until;)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::cout << "ready" << std::endl;
  std::string line;
  std::getline(std::cin, line);
  release.count_down();
  return 0;
}
