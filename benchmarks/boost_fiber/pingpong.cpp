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
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

long parse_rounds(int argc, char** argv) {
  long rounds = 1'000'000;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const char* value = nullptr;
    if (arg == "--rounds" && i + 1 < argc)
      value = argv[++i];
    else if (arg.rfind("--rounds=", 0) == 0)
      value = argv[i] + std::strlen("--rounds=");
    char* end = nullptr;
    if (value != nullptr) rounds = std::strtol(value, &end, 10);
    if (value == nullptr || *end != '\0' || rounds < 1) {
      std::fprintf(stderr, "usage: pingpong_boost_fiber [--rounds N >= 1]\n");
      std::exit(2);
    }
  }
  return rounds;
}

}  // namespace

int main(int argc, char** argv) {
  const long rounds = parse_rounds(argc, argv);
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
