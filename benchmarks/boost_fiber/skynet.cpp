// Skynet (github.com/atemerev/skynet), Boost.Fiber's peer of
// benchmarks/skynet.cpp (scripts/bench-peers): each node launches 10 fibers
// and sums what they send on one channel it shares with them, down to
// 1,000,000 leaves, on --threads threads sharing work through Boost.Fiber's
// work_stealing scheduler.
//
//   skynet_boost_fiber [--threads N]
//
// Prints one JSON object: {"ms": ..., "sum": ..., "ok": ..., "threads": ...};
// exits 1 if the sum is wrong.
#include <boost/fiber/all.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

#include "../cli.h"

namespace {

using Channel = boost::fibers::buffered_channel<std::uint64_t>;

void skynet(Channel& out, std::uint64_t num, std::uint64_t size) {
  if (size == 1) {
    out.push(num);
    return;
  }
  Channel replies{16};  // a power of two above the 10 children
  for (std::uint64_t i = 0; i < 10; ++i) {
    boost::fibers::fiber([&replies, num, i, size] { skynet(replies, num + i * (size / 10), size / 10); }).detach();
  }
  std::uint64_t sum = 0;
  for (int i = 0; i < 10; ++i) sum += replies.value_pop();
  out.push(sum);
}

}  // namespace

int main(int argc, char** argv) {
  unsigned threads = 2;
  CLI::App app{"skynet_boost_fiber: Boost.Fiber's skynet, 1,111,111 fibers on work-stealing threads",
               "skynet_boost_fiber"};
  weft::bench::add_count(app, "--threads", threads, 1u, 1024u, "threads, main included");
  weft::bench::parse(app, argc, argv);
  constexpr std::uint64_t kLeaves = 1'000'000;
  constexpr std::uint64_t kExpected = kLeaves * (kLeaves - 1) / 2;
  // Every thread that takes part, main included, installs the scheduler;
  // the helpers then wait until main is done.
  boost::fibers::barrier ready(threads);
  boost::fibers::mutex done_mutex;
  boost::fibers::condition_variable_any done_cv;
  bool done = false;
  std::vector<std::thread> helpers;
  for (unsigned t = 1; t < threads; ++t) {
    helpers.emplace_back([&] {
      boost::fibers::use_scheduling_algorithm<boost::fibers::algo::work_stealing>(threads);
      ready.wait();
      std::unique_lock<boost::fibers::mutex> lock(done_mutex);
      done_cv.wait(lock, [&] { return done; });
    });
  }
  boost::fibers::use_scheduling_algorithm<boost::fibers::algo::work_stealing>(threads);
  ready.wait();
  const auto start = std::chrono::steady_clock::now();
  Channel root{2};
  boost::fibers::fiber([&root] { skynet(root, 0, kLeaves); }).detach();
  const std::uint64_t sum = root.value_pop();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  {
    std::unique_lock<boost::fibers::mutex> lock(done_mutex);
    done = true;
  }
  done_cv.notify_all();
  for (auto& helper : helpers) helper.join();
  std::printf("{\"ms\": %.1f, \"sum\": %llu, \"ok\": %s, \"threads\": %u}\n", ms, static_cast<unsigned long long>(sum),
              sum == kExpected ? "true" : "false", threads);
  return sum == kExpected ? 0 : 1;
}
