// PingPong: Wisp2's headline benchmark, in weft.
//
// Two tasks and two blocking queues of one byte. Task A runs
// `for i in rounds: out.put(in.take())`, task B is its mirror, and main seeds
// one token, so exactly one token circulates and every round trip is two
// hand-offs (A -> B -> A). As in the Java original, the clock starts once
// both tasks have been started and stops once both are done.
//
//   pingpong --mode all                    # fiber x1, fiber x2, thread, std; table and ratios
//   pingpong --mode fiber --workers 2 --rounds 1000000
//   pingpong --mode all --json             # one JSON array on stdout
//
// Modes:
//   fiber   two fibers on a weft::Scheduler (--workers N, default 1)
//   thread  two std::threads on the same weft::BlockingQueue<uint8_t>
//   std     two std::threads on a std::mutex + std::condition_variable +
//           std::deque queue: what a user has without weft
//
// The thread and std modes cost tens of microseconds per round trip on a VM
// (every hand-off is a futex wake of a thread on the other core), so --mode
// all runs them for --slow-rounds (default: rounds / 100, at least 1000) and
// compares ns per round trip.
#include <weft/weft.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cli.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Result {
  std::string mode;
  unsigned workers = 0;  // 0: not a fiber mode
  std::uint64_t rounds = 0;
  double ms = 0;
  double ns_per_round_trip() const { return ms * 1e6 / static_cast<double>(rounds); }
};

// The std baseline: the queue a user writes with the standard library.
class StdQueue {
 public:
  void put(std::uint8_t item) {
    {
      std::lock_guard guard(lock_);
      items_.push_back(item);
    }
    ready_.notify_one();
  }
  std::uint8_t take() {
    std::unique_lock guard(lock_);
    ready_.wait(guard, [this] { return !items_.empty(); });
    const std::uint8_t item = items_.front();
    items_.pop_front();
    return item;
  }

 private:
  std::mutex lock_;
  std::condition_variable ready_;
  std::deque<std::uint8_t> items_;
};

template <class Queue>
void relay(Queue& in, Queue& out, std::uint64_t rounds) {
  for (std::uint64_t i = 0; i < rounds; ++i) out.put(in.take());
}

// Runs A and B with `start` (which starts a task and returns its handle) and
// `finish` (which waits for one), timed from both started to both done.
template <class Queue, class Start, class Finish>
double time_pair(std::uint64_t rounds, Start start, Finish finish) {
  Queue a_in, b_in;
  auto a = start([&] { relay(a_in, b_in, rounds); });
  auto b = start([&] { relay(b_in, a_in, rounds); });
  const auto begin = Clock::now();
  a_in.put(std::uint8_t{1});
  finish(a);
  finish(b);
  const auto end = Clock::now();
  // B's last put leaves the token in A's queue.
  (void)a_in.take();
  return std::chrono::duration<double, std::milli>(end - begin).count();
}

Result run_fiber(unsigned workers, std::uint64_t rounds) {
  weft::Config config;
  config.workers = workers;
  config.name = "pingpong";
  weft::Scheduler sched{config};
  const double ms = time_pair<weft::BlockingQueue<std::uint8_t>>(
      rounds, [&](auto body) { return sched.spawn(body); }, [](weft::Fiber& f) { f.join(); });
  return {"fiber", workers, rounds, ms};
}

Result run_thread(std::uint64_t rounds) {
  const double ms = time_pair<weft::BlockingQueue<std::uint8_t>>(
      rounds, [](auto body) { return std::thread(body); }, [](std::thread& t) { t.join(); });
  return {"thread", 0, rounds, ms};
}

Result run_std(std::uint64_t rounds) {
  const double ms = time_pair<StdQueue>(
      rounds, [](auto body) { return std::thread(body); }, [](std::thread& t) { t.join(); });
  return {"std", 0, rounds, ms};
}

std::string label(const Result& r) {
  return r.workers == 0 ? r.mode
                        : r.mode + " (" + std::to_string(r.workers) + (r.workers == 1 ? " worker)" : " workers)");
}

void print_header() {
  std::printf("%-20s %12s %12s %16s\n", "mode", "rounds", "ms", "ns/round trip");
  std::fflush(stdout);
}

void print_row(const Result& r) {
  std::printf("%-20s %12llu %12.1f %16.1f\n", label(r).c_str(), static_cast<unsigned long long>(r.rounds), r.ms,
              r.ns_per_round_trip());
  std::fflush(stdout);
}

void print_json(const std::vector<Result>& results) {
  std::printf("[\n");
  for (std::size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    std::printf(
        "  {\"mode\": \"%s\", \"workers\": %u, \"rounds\": %llu, \"ms\": %.3f, \"ns_per_round_trip\": %.2f}%s\n",
        r.mode.c_str(), r.workers, static_cast<unsigned long long>(r.rounds), r.ms, r.ns_per_round_trip(),
        i + 1 < results.size() ? "," : "");
  }
  std::printf("]\n");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = "fiber";
  unsigned workers = 1;
  std::uint64_t rounds = 1'000'000;
  std::uint64_t slow_rounds = 0;
  bool json = false;

  CLI::App app{"PingPong: two tasks pass one token through two blocking queues; ns per round trip", "pingpong"};
  app.add_option("--mode", mode, "fiber, thread, std, or all (fiber x1, fiber x2, thread, std)")
      ->check(CLI::IsMember({"fiber", "thread", "std", "all"}))
      ->capture_default_str();
  CLI::Option* workers_option =
      weft::bench::add_count(app, "--workers", workers, 1u, 1024u, "fiber mode: worker threads");
  weft::bench::add_count(app, "--rounds", rounds, std::uint64_t{1}, std::uint64_t{1'000'000'000'000}, "round trips");
  CLI::Option* slow_option =
      app.add_option("--slow-rounds", slow_rounds,
                     "round trips for thread and std in --mode all (default rounds/100, at least 1000)")
          ->transform(weft::bench::decimal)
          ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1'000'000'000'000}));
  app.add_flag("--json", json, "print one JSON array on stdout instead of the table");
  weft::bench::parse(app, argc, argv);
  if (workers_option->count() != 0 && mode != "fiber")
    weft::bench::usage_error(app, "--workers applies to --mode fiber only");
  if (slow_option->count() != 0 && mode != "all")
    weft::bench::usage_error(app, "--slow-rounds applies to --mode all only");

  std::vector<Result> results;
  auto record = [&](Result r) {
    if (!json) print_row(r);
    results.push_back(std::move(r));
  };

  if (mode == "all") {
    const std::uint64_t slow = slow_option->count() != 0 ? slow_rounds : std::max<std::uint64_t>(rounds / 100, 1000);
    if (!json) {
      std::printf("PingPong: %llu round trips for fibers, %llu for threads (see --slow-rounds)\n",
                  static_cast<unsigned long long>(rounds), static_cast<unsigned long long>(slow));
      print_header();
    }
    record(run_fiber(1, rounds));
    record(run_fiber(2, rounds));
    record(run_thread(slow));
    record(run_std(slow));
    if (!json) {
      const double fiber1 = results[0].ns_per_round_trip();
      const double fiber2 = results[1].ns_per_round_trip();
      const double thread = results[2].ns_per_round_trip();
      const double stdq = results[3].ns_per_round_trip();
      std::printf("\nratios (ns per round trip, same run):\n");
      std::printf("  std / fiber (1 worker)      %8.1fx\n", stdq / fiber1);
      std::printf("  thread / fiber (1 worker)   %8.1fx\n", thread / fiber1);
      std::printf("  std / fiber (2 workers)     %8.1fx\n", stdq / fiber2);
      std::printf("  thread / fiber (2 workers)  %8.1fx\n", thread / fiber2);
      std::printf("  fiber 2 workers / 1 worker  %8.2fx\n", fiber2 / fiber1);
    }
  } else {
    if (!json) print_header();
    if (mode == "fiber")
      record(run_fiber(workers, rounds));
    else if (mode == "thread")
      record(run_thread(rounds));
    else
      record(run_std(rounds));
  }
  if (json) print_json(results);
  return 0;
}
