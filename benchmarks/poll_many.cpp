// poll_many: one poll(2) over many fds, in a fiber and on a plain thread
// (docs/benchmarks.md, "poll over many fds").
//
//   poll_many                      # 1,000 fds, 2,000 events, both sides and the ratio
//   poll_many --fds 100 --events 5000 --runs 5
//
// The poller waits in poll() on the read ends of --fds socketpairs. A plain
// thread, the writer, writes one byte to one of them (a different one each
// time) and waits for the poller's answer on a control socketpair; the
// poller, woken, reads the byte and answers. The figure is microseconds per
// event, wall time over all events, and the process's CPU time per event.
// Sides: `thread`, the poller on a std::thread (libc's poll); `fiber`, the
// poller in a fiber of a one-worker weft::Scheduler (the hooked poll parks
// the fiber). Sides alternate within each run; medians over the runs.
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <weft/weft.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cli.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int fds = 1000;
  int events = 2000;
  int runs = 3;
};

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

struct Pairs {
  std::vector<int> readers, writers;
  int control[2] = {-1, -1};  // the poller answers on [0], the writer waits on [1]
  explicit Pairs(int n) {
    for (int i = 0; i < n; ++i) {
      int fds[2];
      if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) {
        std::perror("socketpair");
        std::exit(1);
      }
      readers.push_back(fds[0]);
      writers.push_back(fds[1]);
    }
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, control) != 0) std::exit(1);
  }
  ~Pairs() {
    for (int fd : readers) close(fd);
    for (int fd : writers) close(fd);
    close(control[0]);
    close(control[1]);
  }
};

// The poller's loop: `events` times, poll all, read the ready byte, answer.
void poller(Pairs& pairs, int events) {
  std::vector<pollfd> fds;
  for (int fd : pairs.readers) fds.push_back({fd, POLLIN, 0});
  for (int done = 0; done < events;) {
    const int n = poll(fds.data(), fds.size(), 10'000);
    if (n <= 0) {
      std::fprintf(stderr, "poll_many: poll returned %d (%s)\n", n, n < 0 ? std::strerror(errno) : "timeout");
      std::exit(1);
    }
    for (pollfd& entry : fds) {
      if ((entry.revents & POLLIN) == 0) continue;
      char byte;
      if (read(entry.fd, &byte, 1) != 1) std::exit(1);
      if (write(pairs.control[0], "a", 1) != 1) std::exit(1);
      ++done;
    }
  }
}

void writer(Pairs& pairs, int events) {
  for (int i = 0; i < events; ++i) {
    const int fd = pairs.writers[std::size_t(i * 7919) % pairs.writers.size()];
    char byte;
    if (write(fd, "e", 1) != 1 || read(pairs.control[1], &byte, 1) != 1) std::exit(1);
  }
}

struct Result {
  double wall_us = 0;
  double cpu_us = 0;
};

Result measure(const Options& options, bool in_fiber) {
  Pairs pairs(options.fds);
  weft::Config config;
  config.workers = 1;
  config.name = "poll_many";
  weft::Scheduler sched(config);
  const double cpu_before = cpu_seconds();
  const auto start = Clock::now();
  std::thread writing([&] { writer(pairs, options.events); });
  if (in_fiber) {
    sched.spawn([&] { poller(pairs, options.events); }).join();
  } else {
    std::thread([&] { poller(pairs, options.events); }).join();
  }
  writing.join();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  const double cpu = cpu_seconds() - cpu_before;
  return {wall / options.events * 1e6, cpu / options.events * 1e6};
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"poll_many: one poll(2) over many fds, in a fiber and on a plain thread; us per event", "poll_many"};
  weft::bench::add_count(app, "--fds", options.fds, 1, 100'000, "socketpairs polled at once");
  weft::bench::add_count(app, "--events", options.events, 1, 10'000'000, "bytes written, one event each");
  weft::bench::add_count(app, "--runs", options.runs, 1, 101, "runs of each side (the median is printed)");
  weft::bench::parse(app, argc, argv);
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  if (limit.rlim_cur < rlim_t(2 * options.fds + 64)) {
    limit.rlim_cur = std::min<rlim_t>(limit.rlim_max, rlim_t(2 * options.fds + 64));
    setrlimit(RLIMIT_NOFILE, &limit);
  }
  std::vector<double> thread_wall, thread_cpu, fiber_wall, fiber_cpu;
  for (int run = 0; run < options.runs; ++run) {
    for (const bool in_fiber : {run % 2 == 1, run % 2 == 0}) {  // alternating which side goes first
      const Result result = measure(options, in_fiber);
      (in_fiber ? fiber_wall : thread_wall).push_back(result.wall_us);
      (in_fiber ? fiber_cpu : thread_cpu).push_back(result.cpu_us);
    }
  }
  std::printf("poll over %d fds, %d events, median of %d runs\n", options.fds, options.events, options.runs);
  std::printf("%-8s %12s %12s\n", "side", "us/event", "cpu us/event");
  std::printf("%-8s %12.1f %12.1f\n", "thread", median(thread_wall), median(thread_cpu));
  std::printf("%-8s %12.1f %12.1f\n", "fiber", median(fiber_wall), median(fiber_cpu));
  std::printf("fiber/thread: %.2fx wall, %.2fx cpu\n", median(fiber_wall) / median(thread_wall),
              median(fiber_cpu) / median(thread_cpu));
  return 0;
}
