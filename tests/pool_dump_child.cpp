// The process that tests/dump_test.cpp inspects for pools: a fiber pool
// "rpc-handler" (4 runners on the default scheduler) and a thread pool
// "db-writer" (2 threads), each with 100 tasks done and one still running,
// blocked until the test is over. Prints "ready", waits for a line on stdin,
// then releases the blocked tasks and exits 0.
#include <weft/weft.h>

#include <iostream>
#include <string>

int main() {
  weft::Pool rpc{{.name = "rpc-handler", .threads = 4, .mode = weft::RunMode::fibers}};
  weft::Pool db{{.name = "db-writer", .threads = 2, .mode = weft::RunMode::threads}};
  for (int i = 0; i < 100; ++i) {
    rpc.post([] { weft::this_fiber::sleep_for(std::chrono::microseconds(100)); });
    db.post([] {});
  }
  rpc.wait();
  db.wait();
  weft::Latch release{1};
  rpc.post([&] { release.wait(); });
  db.post([&] { release.wait(); });
  while (rpc.running() != 1 || db.running() != 1) weft::this_fiber::sleep_for(std::chrono::milliseconds(1));
  std::cout << "ready" << std::endl;
  std::string line;
  std::getline(std::cin, line);
  release.count_down();
  return 0;
}
