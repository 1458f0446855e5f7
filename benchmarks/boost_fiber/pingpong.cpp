// PingPong, Boost.Fiber's peer of benchmarks/pingpong.cpp
// (scripts/bench-peers): two fibers on the main thread bounce one message
// through two unbuffered channels, --rounds round trips. The measuring fiber
// starts its clock before its first receive, as in the Go and tokio peers.
//
//   pingpong_boost_fiber [--rounds N]
//
// Prints one JSON object: {"ns_per_round_trip": ..., "rounds": ...}.
#include <boost/fiber/all.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>

#include "../cli.h"

int main(int argc, char** argv) {
  long rounds = 1'000'000;
  CLI::App app{"pingpong_boost_fiber: Boost.Fiber's PingPong through two unbuffered channels; ns per round trip",
               "pingpong_boost_fiber"};
  weft::bench::add_count(app, "--rounds", rounds, 1L, 1'000'000'000'000L, "round trips");
  weft::bench::parse(app, argc, argv);
  boost::fibers::unbuffered_channel<std::uint8_t> ping, pong;
  boost::fibers::fiber echo([&] {
    for (long i = 0; i < rounds; ++i) pong.push(ping.value_pop());
  });
  std::chrono::steady_clock::duration elapsed{};
  boost::fibers::fiber measure([&] {
    std::chrono::steady_clock::time_point start;
    for (long i = 0; i < rounds; ++i) {
      if (i == 0) start = std::chrono::steady_clock::now();
      const std::uint8_t v = pong.value_pop();
      if (i + 1 < rounds) ping.push(v);
    }
    elapsed = std::chrono::steady_clock::now() - start;
  });
  ping.push(1);
  echo.join();
  measure.join();
  const double ns = std::chrono::duration<double, std::nano>(elapsed).count();
  std::printf("{\"ns_per_round_trip\": %.1f, \"rounds\": %ld}\n", ns / static_cast<double>(rounds), rounds);
}
