// blocking_io: the calls that are not sockets, from fibers and from
// threads, side by side in one run (issue 28's targets; docs/benchmarks.md,
// "Blocking calls that are not sockets"):
//
//   dns       100 lookups at once against a nameserver that answers after
//             200 ms (tests/dns_responder.py in a private mount and network
//             namespace: needs root or user namespaces), 100 fibers on 2
//             workers vs 100 threads
//   blocking  200 fibers x weft::blocking of a 100 ms call, vs 200 threads
//   static    100 fibers reach a function-local static whose initializer
//             (run by the first) sleeps 5 ms, vs 100 threads: the others
//             wait in __cxa_guard_acquire's futex (hooks/hooks_futex.cpp)
//   fsync     100 fibers vs 100 threads, each writing 4 KiB and fsyncing
//             its own file: flushes per second over --seconds after a
//             0.5 s warm-up; beside them, the ratio of the two whole runs'
//             rates and when each side's last writer first flushed
//   range     the same with sync_file_range (WAIT_BEFORE | WRITE |
//             WAIT_AFTER, the whole file) for fsync
//   pread     a 4 KiB pread of a cached file: ns per call from a fiber vs
//             from a thread
//   shm       the same on tmpfs (/dev/shm), which refuses RWF_NOWAIT
//   write     a 4 KiB write into the page cache: ns per call, fiber vs thread
//   file      a whole cached file of 100,000 bytes read: open, 64 KiB reads
//             to the end, close; ns per file, fiber vs thread
//   sem       round trips between two waiters over two sem_t: 2 fibers on
//             2 workers (the waits announced), the same fibers pinned (the
//             waits made on helpers while they park), 2 threads; us each
//   ticker    a fiber sleeping 1 ms in a loop beside fibers doing file I/O
//             with fsync, system() and popen(), and beside 4 fibers that
//             only write files (2 in 64 KiB blocks, 2 in 4 KiB): its worst
//             lateness, and the same ticker alone (the machine's own noise);
//             then each as threads (a thread ticker beside thread load)
//
//   blocking_io                 # all
//   blocking_io fsync pread     # some
//   blocking_io --seconds 2
//   blocking_io fsync --writers 8
#include <fcntl.h>
#include <netdb.h>
#include <semaphore.h>
#include <sys/wait.h>
#include <unistd.h>
#include <weft/weft.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cli.h"
#include "tests/dns_sandbox.h"

namespace {

using Clock = std::chrono::steady_clock;
double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

int seconds = 1;
int writers = 100;

weft::Config two_workers(const char* name) {
  weft::Config config;
  config.workers = 2;
  config.name = name;
  return config;
}

// Runs `body(i)` for i in [0, n) on n fibers (2 workers) or n threads; the
// wall time of the whole, from just after `on_start` (called once the
// scheduler is up, before the first spawn or thread).
double on_fibers(int n, const std::function<void(int)>& body, const std::function<void()>& on_start = {}) {
  weft::Scheduler sched{two_workers("bench")};
  if (on_start) on_start();
  const auto start = Clock::now();
  std::vector<weft::Fiber> fibers;
  for (int i = 0; i < n; ++i) fibers.push_back(sched.spawn([&, i] { body(i); }));
  for (auto& fiber : fibers) fiber.join();
  return ms(Clock::now() - start);
}

double on_threads(int n, const std::function<void(int)>& body, const std::function<void()>& on_start = {}) {
  if (on_start) on_start();
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) threads.emplace_back([&, i] { body(i); });
  for (auto& thread : threads) thread.join();
  return ms(Clock::now() - start);
}

void print_pair(const char* what, double fibers_ms, double threads_ms) {
  std::printf("%-44s fibers %8.1f ms  threads %8.1f ms  ratio %.2f\n", what, fibers_ms, threads_ms,
              fibers_ms / threads_ms);
}

bool dns_ready = false;

void bench_dns() {
  if (!dns_ready) {
    std::printf("dns: skipped (no private nameserver; see above)\n");
    return;
  }
  auto lookup = [](int i) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    addrinfo* result = nullptr;
    std::string name = "h";  // appended: GCC 12's -Wrestrict misfires on "h" + std::to_string(i) + ...
    name += std::to_string(i);
    name += ".weft.test";
    if (::getaddrinfo(name.c_str(), nullptr, &hints, &result) == 0)
      ::freeaddrinfo(result);
    else
      std::fprintf(stderr, "dns: %s did not resolve\n", name.c_str());
  };
  for (int round = 0; round < 3; ++round)
    print_pair("100 x getaddrinfo, 200 ms nameserver", on_fibers(100, lookup), on_threads(100, lookup));
}

void bench_blocking() {
  auto call = [](int) { std::this_thread::sleep_for(std::chrono::milliseconds(100)); };
  for (int round = 0; round < 3; ++round) {
    const double fibers = on_fibers(200, [&](int i) { weft::blocking([&] { call(i); }); });
    print_pair("200 x weft::blocking of a 100 ms call", fibers, on_threads(200, call));
  }
}

// A function-local static per instance, so that each round initializes
// its own: the first caller sleeps 5 ms in the initializer, the others
// wait for it.
template <int Instance>
int slow_static() {
  static const int value = [] {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return Instance + 1;
  }();
  return value;
}

template <int... Instances>
constexpr std::array<int (*)(), sizeof...(Instances)> statics(std::integer_sequence<int, Instances...>) {
  return {&slow_static<Instances>...};
}

void bench_static() {
  constexpr auto instances = statics(std::make_integer_sequence<int, 6>{});
  for (int round = 0; round < 3; ++round) {
    auto reach = [](int (*get)()) { return [get](int) { (void)get(); }; };
    const double fibers = on_fibers(100, reach(instances[2 * round]));
    const double threads = on_threads(100, reach(instances[2 * round + 1]));
    print_pair("100 x a static's 5 ms initializer", fibers, threads);
  }
}

// The flushes of one side of the fsync case: per second over the
// measured interval (after the warm-up) and over the whole run (from the
// first spawn or thread start to the last join), and when the last
// writer's first flush ended, from that start (ms; or how many writers
// never flushed).
struct Flushes {
  double steady = 0;
  double whole = 0;
  double all_flushing_ms = 0;
  int never_flushed = 0;
};

// A fresh scheduler starts its spare threads as its workers block, one
// after another (each fiber reaches its first fsync only once a thread
// took it from the blocked one before), so its first round ramps up more
// slowly than 100 threads started at once; as bench-echo's warm-up, the
// measured interval begins after kFlushWarmUp, and the whole runs' ratio
// and the ramps are printed beside it.
constexpr auto kFlushWarmUp = std::chrono::milliseconds(500);

// Each of n writers appends 4 KiB and flushes its own file (fsync, or
// with `range` sync_file_range of the whole file, waiting for it) until
// the time is up.
Flushes flush_rates(bool fibers, int n, bool range) {
  std::atomic<long> measured{0};
  std::atomic<long> all{0};
  std::vector<Clock::duration> first_flush(std::size_t(n), Clock::duration::max());  // each writer's own
  Clock::time_point start;  // set before the first writer starts
  Clock::time_point from;
  Clock::time_point end;
  auto started = [&] {
    start = Clock::now();
    from = start + kFlushWarmUp;
    end = from + std::chrono::seconds(seconds);
  };
  auto writer = [&](int i) {
    const std::string path = "/tmp/weft-bench-fsync-" + std::to_string(::getpid()) + "-" + std::to_string(i);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    char block[4096];
    std::memset(block, 'x', sizeof block);
    long mine = 0;
    long in_interval = 0;
    while (Clock::now() < end) {
      if (::write(fd, block, sizeof block) != sizeof block) break;
      constexpr unsigned kWholeRange = SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER;
      if ((range ? ::sync_file_range(fd, 0, 0, kWholeRange) : ::fsync(fd)) != 0) break;
      const auto done = Clock::now();
      if (mine++ == 0) first_flush[std::size_t(i)] = done - start;
      if (done >= from && done < end) ++in_interval;
    }
    ::close(fd);
    ::unlink(path.c_str());
    all += mine;
    measured += in_interval;
  };
  const double wall = fibers ? on_fibers(n, writer, started) : on_threads(n, writer, started);
  Flushes flushes;
  flushes.steady = static_cast<double>(measured.load()) / seconds;
  flushes.whole = static_cast<double>(all.load()) / (wall / 1000);
  for (const Clock::duration first : first_flush) {
    if (first == Clock::duration::max())
      ++flushes.never_flushed;
    else
      flushes.all_flushing_ms = std::max(flushes.all_flushing_ms, ms(first));
  }
  return flushes;
}

std::string ramp(const Flushes& flushes) {
  if (flushes.never_flushed != 0) return std::to_string(flushes.never_flushed) + " never flushed";
  return std::to_string(static_cast<long>(flushes.all_flushing_ms + 0.5)) + " ms";
}

void bench_fsync(bool range) {
  for (int round = 0; round < 3; ++round) {
    const Flushes fibers = flush_rates(true, writers, range);
    const Flushes threads = flush_rates(false, writers, range);
    const std::string what =
        std::to_string(writers) + (range ? " x (write 4 KiB + sync_file_range)" : " x (write 4 KiB + fsync)");
    std::printf(
        "%-44s fibers %8.0f /s  threads %8.0f /s  ratio %.2f  (whole runs' ratio %.2f; all flushing after %s / %s)\n",
        what.c_str(), fibers.steady, threads.steady, fibers.steady / threads.steady, fibers.whole / threads.whole,
        ramp(fibers).c_str(), ramp(threads).c_str());
  }
}

double pread_ns(int fd, int calls) {
  char block[4096];
  const auto start = Clock::now();
  for (int i = 0; i < calls; ++i) {
    if (::pread(fd, block, sizeof block, static_cast<off_t>(i % 256) * 4096) != sizeof block) std::abort();
  }
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count() / calls;
}

double write_ns(int fd, int calls) {
  char block[4096];
  std::memset(block, 'w', sizeof block);
  ::lseek(fd, 0, SEEK_SET);
  const auto start = Clock::now();
  for (int i = 0; i < calls; ++i) {
    if (i % 256 == 0) ::lseek(fd, 0, SEEK_SET);
    if (::write(fd, block, sizeof block) != sizeof block) std::abort();
  }
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count() / calls;
}

// Opens the file `fd` is open on again, reads it to the end in 64 KiB
// reads and closes it, `calls` times (the last read of each is short).
double whole_file_ns(int fd, int calls) {
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  std::vector<char> block(64 << 10);
  const auto start = Clock::now();
  for (int i = 0; i < calls; ++i) {
    const int file = ::open(path.c_str(), O_RDONLY);
    if (file < 0) std::abort();
    ssize_t n;
    while ((n = ::read(file, block.data(), block.size())) > 0) {
    }
    if (n < 0) std::abort();
    ::close(file);
  }
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count() / calls;
}

// `per_call(fd, calls)` on a file of `size` bytes in `directory`, from a
// fiber and from a thread in turn, 5 rounds; prints the medians.
void fiber_vs_thread_ns(const char* what, int calls, double (*per_call)(int, int), std::size_t size = 1 << 20,
                        const char* directory = "/tmp") {
  const std::string path = std::string(directory) + "/weft-bench-file-" + std::to_string(::getpid());
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) {
    std::printf("%-44s no file in %s: %s\n", what, directory, std::strerror(errno));
    return;
  }
  std::vector<char> data(size, 'y');
  if (::write(fd, data.data(), data.size()) != static_cast<ssize_t>(data.size())) std::abort();
  weft::Scheduler sched{two_workers("file")};
  std::vector<double> fibers, threads;
  for (int round = 0; round < 5; ++round) {
    double f = 0;
    sched.spawn([&] { f = per_call(fd, calls); }).join();
    double t = 0;
    std::thread([&] { t = per_call(fd, calls); }).join();
    fibers.push_back(f);
    threads.push_back(t);
  }
  std::sort(fibers.begin(), fibers.end());
  std::sort(threads.begin(), threads.end());
  std::printf("%-44s fibers %8.0f ns  threads %8.0f ns  ratio %.2f (medians of 5)\n", what, fibers[2], threads[2],
              fibers[2] / threads[2]);
  ::close(fd);
  ::unlink(path.c_str());
}

void bench_pread() { fiber_vs_thread_ns("4 KiB cached pread", 200'000, pread_ns); }

void bench_shm_pread() { fiber_vs_thread_ns("4 KiB pread, tmpfs", 200'000, pread_ns, 1 << 20, "/dev/shm"); }

void bench_write() { fiber_vs_thread_ns("4 KiB write (page cache)", 50'000, write_ns); }

void bench_whole_file() {
  fiber_vs_thread_ns("a cached file read whole (100,000 bytes)", 20'000, whole_file_ns, 100'000);
}

enum class TickerLoad { none, fsync_and_processes, writes };

// A file of its own (unlinked when done) written block by block until `end`,
// from its start again every 256 blocks.
void write_blocks(const std::string& name, std::size_t block_size, Clock::time_point end) {
  const std::string path = "/tmp/weft-bench-" + name + "-" + std::to_string(::getpid());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  const std::vector<char> block(block_size, 'w');
  for (long n = 1; fd >= 0 && Clock::now() < end; ++n) {
    if (::write(fd, block.data(), block.size()) != static_cast<ssize_t>(block.size())) break;
    if (n % 256 == 0 && (::ftruncate(fd, 0) != 0 || ::lseek(fd, 0, SEEK_SET) != 0)) break;
  }
  if (fd >= 0) ::close(fd);
  ::unlink(path.c_str());
}

// The load beside the ticker: bodies to run as fibers or as threads, each
// until `end`.
std::vector<std::function<void()>> ticker_load(TickerLoad what_load, Clock::time_point end) {
  std::vector<std::function<void()>> load;
  if (what_load == TickerLoad::fsync_and_processes) {
    for (int i = 0; i < 8; ++i) {
      load.emplace_back([end, i] {
        const std::string path = "/tmp/weft-bench-tick-" + std::to_string(::getpid()) + "-" + std::to_string(i);
        const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        char block[65536];
        std::memset(block, 'z', sizeof block);
        while (Clock::now() < end) {
          if (::write(fd, block, sizeof block) != sizeof block) break;
          ::fsync(fd);
        }
        ::close(fd);
        ::unlink(path.c_str());
      });
    }
    load.emplace_back([end] {
      while (Clock::now() < end) (void)std::system("sleep 0.05");
    });
    load.emplace_back([end] {
      while (Clock::now() < end) {
        FILE* pipe = ::popen("sleep 0.05; echo done", "r");
        char line[32];
        while (pipe != nullptr && std::fgets(line, sizeof line, pipe) != nullptr) {
        }
        if (pipe != nullptr) ::pclose(pipe);
      }
    });
  } else if (what_load == TickerLoad::writes) {
    for (int i = 0; i < 4; ++i)
      load.emplace_back([end, i] { write_blocks("writes-" + std::to_string(i), i < 2 ? 65536 : 4096, end); });
  }
  return load;
}

struct TickerResult {
  double worst_ms = 0;
  long ticks = 0;
};

// A task sleeping 1 ms in a loop for --seconds, beside `load` (or none),
// all fibers of one scheduler or all threads; its worst lateness and ticks.
// `start(body)` starts a task (a std::thread or a weft::Fiber: anything
// with join()).
template <class Start>
TickerResult run_ticker(TickerLoad what_load, Start start) {
  // The last case's dirty pages written back first, not during this one.
  ::sync();
  std::atomic<bool> stop{false};
  TickerResult result;
  // weft::this_fiber::sleep_for sleeps a plain thread as std::this_thread's.
  auto ticker = start([&] {
    while (!stop.load()) {
      const auto due = Clock::now() + std::chrono::milliseconds(1);
      weft::this_fiber::sleep_for(std::chrono::milliseconds(1));
      result.worst_ms = std::max(result.worst_ms, ms(Clock::now() - due));
      ++result.ticks;
    }
  });
  const auto end = Clock::now() + std::chrono::seconds(seconds);
  std::vector<decltype(ticker)> load;
  for (auto& body : ticker_load(what_load, end)) load.push_back(start(std::move(body)));
  if (load.empty()) std::this_thread::sleep_until(end);
  for (auto& task : load) task.join();
  stop = true;
  ticker.join();
  return result;
}

// The ticker on fibers, then the same on threads (what the machine does to
// a thread's 1 ms sleep beside the same load).
void ticker_beside(const char* what, TickerLoad what_load) {
  TickerResult fibers;
  {
    weft::Scheduler sched{two_workers("ticker")};  // gone before the threads' run
    fibers = run_ticker(what_load, [&](std::function<void()> body) { return sched.spawn(std::move(body)); });
  }
  const TickerResult threads =
      run_ticker(what_load, [](std::function<void()> body) { return std::thread(std::move(body)); });
  std::printf("%-44s worst lateness %6.2f ms over %ld ticks  threads %6.2f ms over %ld ticks\n", what, fibers.worst_ms,
              fibers.ticks, threads.worst_ms, threads.ticks);
}

// `trips` round trips over two semaphores, the two sides run by
// `start(ping, pong)`; us per round trip.
template <class Start>
double sem_round_trip_us(int trips, Start&& start) {
  sem_t there, back;
  ::sem_init(&there, 0, 0);
  ::sem_init(&back, 0, 0);
  const auto begin = Clock::now();
  start(
      [&] {
        for (int i = 0; i < trips; ++i) {
          ::sem_post(&there);
          ::sem_wait(&back);
        }
      },
      [&] {
        for (int i = 0; i < trips; ++i) {
          ::sem_wait(&there);
          ::sem_post(&back);
        }
      });
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - begin).count() / trips;
  ::sem_destroy(&there);
  ::sem_destroy(&back);
  return us;
}

void bench_sem() {
  constexpr int kTrips = 5'000;
  weft::Scheduler sched{two_workers("sem")};
  const auto as_fibers = [&](bool pinned) {
    return [&, pinned](auto ping, auto pong) {
      // A pinned fiber's worker sends its waits to helpers
      // (hooks/hooks_announced.cpp, waited_for_another).
      const auto run = [pinned](auto side) {
        return [pinned, side] {
          if (pinned) {
            const auto pin = weft::this_fiber::pin();
            side();
          } else {
            side();
          }
        };
      };
      weft::Fiber a = sched.spawn(run(ping));
      weft::Fiber b = sched.spawn(run(pong));
      a.join();
      b.join();
    };
  };
  std::vector<double> announced, helped, threads;
  for (int round = 0; round < 5; ++round) {
    announced.push_back(sem_round_trip_us(kTrips, as_fibers(false)));
    helped.push_back(sem_round_trip_us(kTrips, as_fibers(true)));
    threads.push_back(sem_round_trip_us(kTrips, [](auto ping, auto pong) {
      std::thread a(ping), b(pong);
      a.join();
      b.join();
    }));
  }
  for (auto* v : {&announced, &helped, &threads}) std::sort(v->begin(), v->end());
  std::printf("%-44s fibers %.1f us, pinned (helpers) %.1f us, threads %.1f us: %.2f / %.2f (medians of 5)\n",
              "sem_t round trip", announced[2], helped[2], threads[2], announced[2] / threads[2],
              helped[2] / threads[2]);
}

void bench_ticker() {
  for (int round = 0; round < 3; ++round) {
    ticker_beside("1 ms ticker alone (the machine's own noise)", TickerLoad::none);
    ticker_beside("1 ms ticker beside fsync, system(), popen()", TickerLoad::fsync_and_processes);
    ticker_beside("1 ms ticker beside 4 fibers writing files", TickerLoad::writes);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each figure as it comes, also into a pipe
  std::vector<std::string> cases;
  CLI::App app{"blocking_io: calls that are not sockets, from fibers and from threads", "blocking_io"};
  app.add_option("cases", cases, "the cases to run (all by default)")
      ->check(CLI::IsMember(
          {"dns", "blocking", "static", "fsync", "range", "pread", "shm", "write", "file", "sem", "ticker"}));
  weft::bench::add_count(app, "--seconds", seconds, 1, 600,
                         "the fsync case's measured interval, after its 0.5 s warm-up");
  weft::bench::add_count(app, "--writers", writers, 1, 10'000, "fibers (and threads) of the fsync case");
  weft::bench::parse(app, argc, argv);
  if (cases.empty())
    cases = {"dns", "blocking", "static", "fsync", "range", "pread", "shm", "write", "file", "sem", "ticker"};
  auto wanted = [&](const char* name) { return std::find(cases.begin(), cases.end(), name) != cases.end(); };
  if (wanted("dns")) {
    // Before any thread starts: the namespaces are the calling thread's.
    const std::string why = weft::test::DnsSandbox::enter(WEFT_DNS_RESPONDER, 200);
    dns_ready = why.empty();
    if (!dns_ready) std::printf("dns: no private nameserver: %s\n", why.c_str());
  }
  if (wanted("dns")) bench_dns();
  if (wanted("blocking")) bench_blocking();
  if (wanted("static")) bench_static();
  if (wanted("fsync")) bench_fsync(false);
  if (wanted("range")) bench_fsync(true);
  if (wanted("pread")) bench_pread();
  if (wanted("shm")) bench_shm_pread();
  if (wanted("write")) bench_write();
  if (wanted("file")) bench_whole_file();
  if (wanted("sem")) bench_sem();
  if (wanted("ticker")) bench_ticker();
  weft::test::DnsSandbox::stop();
}
