// io_pingpong: one byte back and forth over socketpairs, to measure the
// netpoller (io/netpoller.h) against threads blocked in read(2).
//
//   io_pingpong                              # every mode; a table and the ratios
//   io_pingpong --mode fiber --workers 2 --pairs 100 --rounds 20000
//
// Each pair is two ends of an AF_UNIX socketpair and two tasks: A writes a
// byte and waits for the answer, B answers each byte, for --rounds round
// trips. With --pairs P, P pairs run at once and the figure is ns per round
// trip of all of them together (throughput), with one pair it is latency.
// Besides wall time it prints the process's CPU time per round trip, the
// steadier figure on a loaded machine.
//
// Modes:
//   fiber   2 P fibers on a weft::Scheduler (--workers N, default 1 and 2
//           in the table), non-blocking sockets, weft::io::wait_readable
//           after each EAGAIN: every wait parks through the poller
//   thread  2 P std::threads on blocking sockets, read(2) and write(2):
//           what a user has without weft
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <weft/io.h>
#include <weft/weft.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cli.h"
#include "io/netpoller.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string mode = "all";
  unsigned workers = 1;
  std::uint64_t rounds = 100'000;
  std::uint64_t pairs = 1;
};

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "io_pingpong: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

// Reads one byte, parking on the poller while there is none (the shape of
// a hooked read: try, then wait on EAGAIN).
void fiber_read(int fd) {
  char c;
  for (;;) {
    const ssize_t n = ::read(fd, &c, 1);
    if (n == 1) return;
    if (n < 0 && errno == EAGAIN) {
      weft::io::wait_readable(fd);
      continue;
    }
    fail("read");
  }
}

void write_byte(int fd) {
  if (::write(fd, "x", 1) != 1) fail("write");
}

void blocking_read(int fd) {
  char c;
  if (::read(fd, &c, 1) != 1) fail("read");
}

struct Pair {
  int a = -1, b = -1;
};

std::vector<Pair> make_pairs(std::uint64_t count, bool nonblocking) {
  std::vector<Pair> pairs(count);
  for (Pair& p : pairs) {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0), 0, fds) != 0)
      fail("socketpair");
    p.a = fds[0];
    p.b = fds[1];
  }
  return pairs;
}

void close_pairs(std::vector<Pair>& pairs) {
  for (Pair& p : pairs) {
    for (int fd : {p.a, p.b}) {
      weft::detail::fd_closing(fd);
      ::close(fd);
    }
  }
}

double run_fibers(unsigned workers, std::uint64_t pairs_count, std::uint64_t rounds) {
  std::vector<Pair> pairs = make_pairs(pairs_count, true);
  weft::Config config;
  config.workers = workers;
  config.name = "io_pingpong";
  weft::Scheduler sched{config};
  std::vector<weft::Fiber> fibers;
  const auto start = Clock::now();
  for (const Pair& p : pairs) {
    fibers.push_back(sched.spawn([p, rounds] {
      for (std::uint64_t i = 0; i < rounds; ++i) {
        write_byte(p.a);
        fiber_read(p.a);
      }
    }));
    fibers.push_back(sched.spawn([p, rounds] {
      for (std::uint64_t i = 0; i < rounds; ++i) {
        fiber_read(p.b);
        write_byte(p.b);
      }
    }));
  }
  for (auto& f : fibers) f.join();
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  close_pairs(pairs);
  return ms;
}

double run_threads(std::uint64_t pairs_count, std::uint64_t rounds) {
  std::vector<Pair> pairs = make_pairs(pairs_count, false);
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (const Pair& p : pairs) {
    threads.emplace_back([p, rounds] {
      for (std::uint64_t i = 0; i < rounds; ++i) {
        write_byte(p.a);
        blocking_read(p.a);
      }
    });
    threads.emplace_back([p, rounds] {
      for (std::uint64_t i = 0; i < rounds; ++i) {
        blocking_read(p.b);
        write_byte(p.b);
      }
    });
  }
  for (auto& t : threads) t.join();
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  close_pairs(pairs);
  return ms;
}

// The process's user + system CPU time, in ms.
double cpu_ms() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto ms = [](const timeval& t) { return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_usec) / 1e3; };
  return ms(usage.ru_utime) + ms(usage.ru_stime);
}

double ns_per_round_trip(double ms, std::uint64_t pairs, std::uint64_t rounds) {
  return ms * 1e6 / static_cast<double>(pairs * rounds);
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"io_pingpong: a byte back and forth over socket pairs, fibers parked in the netpoller or threads",
               "io_pingpong"};
  app.add_option("--mode", options.mode, "fiber, thread, or all (thread mode there with a tenth of the rounds)")
      ->check(CLI::IsMember({"all", "fiber", "thread"}))
      ->capture_default_str();
  weft::bench::add_count(app, "--workers", options.workers, 1u, 256u, "fiber mode: worker threads");
  weft::bench::add_count(app, "--rounds", options.rounds, std::uint64_t{1}, std::uint64_t{1'000'000'000},
                         "round trips per pair");
  weft::bench::add_count(app, "--pairs", options.pairs, std::uint64_t{1}, std::uint64_t{4096}, "socket pairs");
  weft::bench::parse(app, argc, argv);
  std::printf("%-10s %6s %9s %10s %15s %15s\n", "mode", "pairs", "rounds", "ms", "ns/round trip", "CPU ns/trip");
  double cpu_before = cpu_ms();
  auto row = [&](const std::string& mode, std::uint64_t rounds, double ms) {
    const double cpu_after = cpu_ms();
    const double ns = ns_per_round_trip(ms, options.pairs, rounds);
    std::printf("%-10s %6llu %9llu %10.1f %15.1f %15.1f\n", mode.c_str(),
                static_cast<unsigned long long>(options.pairs), static_cast<unsigned long long>(rounds), ms, ns,
                ns_per_round_trip(cpu_after - cpu_before, options.pairs, rounds));
    cpu_before = cpu_after;
    return ns;
  };
  if (options.mode == "fiber") {
    row("fiber x" + std::to_string(options.workers), options.rounds,
        run_fibers(options.workers, options.pairs, options.rounds));
    return 0;
  }
  if (options.mode == "thread") {
    row("thread", options.rounds, run_threads(options.pairs, options.rounds));
    return 0;
  }
  const double one = row("fiber x1", options.rounds, run_fibers(1, options.pairs, options.rounds));
  const double two = row("fiber x2", options.rounds, run_fibers(2, options.pairs, options.rounds));
  const std::uint64_t slow_rounds = std::max<std::uint64_t>(options.rounds / 10, 1000);
  const double thread = row("thread", slow_rounds, run_threads(options.pairs, slow_rounds));
  std::printf("thread / fiber x1: %.1fx   thread / fiber x2: %.1fx\n", thread / one, thread / two);
  return 0;
}
