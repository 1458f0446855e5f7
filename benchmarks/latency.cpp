// latency: how late timers fire and how long a woken fiber waits to run
// (docs/benchmarks.md, "Timer and wake-up latency"), on 1 and 2 workers,
// with the workers otherwise idle and beside as many busy fibers as
// workers: `yield` loops, or CPU-bound `hog`s with a checkpoint every few
// microseconds (Config's default 10 ms slice).
//
//   timer        10 fibers each sleep 1 ms in a loop: how late each wakes
//   wake_fiber   a fiber releases a Semaphore that another fiber waits on:
//                release -> the woken fiber runs
//   wake_thread  the same, released by a plain thread (the global queue)
//   idle pair    a plain thread spawns two CPU-bound fibers onto 2 workers
//                that sleep: how long after the first the second starts
//                (on the other worker); --pair-trials trials, half of them
//                with one worker just back from a fiber (searching) when
//                the two come, the spawns 0-3 us apart
//
//   latency                 # the table, p50/p99/max in microseconds
//   latency --json          # {"idle_pair": {...}, "results": [{"workers": 1, "load": "idle", ...}, ...]}
//   latency --samples 2000  # per measurement (default 300)
//   latency --only-pair --pair-trials 200
#include <sys/syscall.h>
#include <unistd.h>
#include <weft/weft.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "cli.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr int kSleepers = 10;
constexpr auto kSleep = 1ms;
// Between two wake-ups: long enough for idle workers to fall asleep, so
// that an idle sample pays the wake of a sleeping worker.
constexpr auto kWakeGap = 200us;

enum class Load { idle, yield, hog };
const char* name_of(Load load) {
  switch (load) {
    case Load::idle:
      return "idle";
    case Load::yield:
      return "yield";
    case Load::hog:
      return "hog";
  }
  return "?";
}

struct Summary {
  double p50_us = 0;
  double p99_us = 0;
  double max_us = 0;
  std::size_t samples = 0;
};

Summary summarize(std::vector<double> us) {
  Summary s;
  if (us.empty()) return s;
  std::sort(us.begin(), us.end());
  auto at = [&](double p) { return us[std::min(us.size() - 1, static_cast<std::size_t>(p * (us.size() - 1) + 0.5))]; };
  s.p50_us = at(0.50);
  s.p99_us = at(0.99);
  s.max_us = us.back();
  s.samples = us.size();
  return s;
}

double us_since(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::micro>(to - from).count();
}

std::uint64_t compute(std::uint64_t x) {
  for (int i = 0; i < 1000; ++i) x = x * 6364136223846793005ull + 1442695040888963407ull;
  return x;
}

// The busy fibers, one per worker, until `stop`.
std::vector<weft::Fiber> start_load(weft::Scheduler& sched, Load load, unsigned workers, std::atomic<bool>& stop,
                                    std::atomic<std::uint64_t>& sink) {
  std::vector<weft::Fiber> fibers;
  if (load == Load::idle) return fibers;
  for (unsigned i = 0; i < workers; ++i) {
    fibers.push_back(sched.spawn([load, &stop, &sink] {
      std::uint64_t x = 1;
      while (!stop.load(std::memory_order_relaxed)) {
        if (load == Load::yield) {
          weft::this_fiber::yield();
        } else {
          x = compute(x);
          weft::this_fiber::checkpoint();
        }
      }
      sink.fetch_add(x, std::memory_order_relaxed);
    }));
  }
  return fibers;
}

Summary measure_timers(weft::Scheduler& sched, std::size_t samples) {
  std::vector<std::vector<double>> lateness(kSleepers);
  std::vector<weft::Fiber> sleepers;
  const std::size_t each = (samples + kSleepers - 1) / kSleepers;
  for (int i = 0; i < kSleepers; ++i) {
    sleepers.push_back(sched.spawn([each, &mine = lateness[i]] {
      mine.reserve(each);
      for (std::size_t n = 0; n < each; ++n) {
        const auto deadline = Clock::now() + kSleep;
        weft::this_fiber::sleep_until(deadline);
        mine.push_back(us_since(deadline, Clock::now()));
      }
    }));
  }
  for (auto& f : sleepers) f.join();
  std::vector<double> all;
  for (const auto& mine : lateness) all.insert(all.end(), mine.begin(), mine.end());
  return summarize(std::move(all));
}

// One waiter fiber; `release` is called `samples` times, kWakeGap apart,
// by a fiber or by this thread, and each time the waiter records how long
// after the release it ran.
Summary measure_wake(weft::Scheduler& sched, std::size_t samples, bool from_fiber) {
  weft::Semaphore go;
  weft::Semaphore done;
  std::atomic<std::int64_t> released_ns{0};
  std::vector<double> us;
  us.reserve(samples);
  weft::Fiber waiter = sched.spawn([&] {
    for (std::size_t n = 0; n < samples; ++n) {
      go.acquire();
      const auto now = Clock::now();
      us.push_back(us_since(Clock::time_point(Clock::duration(released_ns.load())), now));
      done.release();
    }
  });
  auto releaser = [&] {
    for (std::size_t n = 0; n < samples; ++n) {
      if (from_fiber)
        weft::this_fiber::sleep_for(kWakeGap);
      else
        std::this_thread::sleep_for(kWakeGap);
      released_ns.store(Clock::now().time_since_epoch().count());
      go.release();
      done.acquire();
    }
  };
  if (from_fiber)
    sched.spawn(releaser).join();
  else
    releaser();
  waiter.join();
  return summarize(std::move(us));
}

// The idle pair: per trial, both workers asleep (or one of them just back
// from a trivial fiber), a plain thread spawns two fibers that each spin
// for kPairSpin; the gap between their starts. A wake that is lost
// leaves the second behind the first until sysmon hands it to the
// sleeping worker (milliseconds), or until the first one ends.
constexpr auto kPairSpin = 5ms;

// How long `task` (a thread id; 0: the calling thread) has waited for a CPU
// while runnable, in ns: the second field of its schedstat. On a loaded
// machine a woken worker waits there, which no scheduler can help.
std::int64_t run_delay_ns(long task) {
  const std::string path =
      task == 0 ? "/proc/thread-self/schedstat" : "/proc/self/task/" + std::to_string(task) + "/schedstat";
  std::FILE* file = std::fopen(path.c_str(), "r");
  if (file == nullptr) return 0;
  long long ran = 0, waited = 0;
  const int read = std::fscanf(file, "%lld %lld", &ran, &waited);
  std::fclose(file);
  return read == 2 ? waited : 0;
}

std::vector<long> process_threads() {
  std::vector<long> threads;
  std::error_code error;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", error))
    threads.push_back(std::stol(task.path().filename().string()));
  return threads;
}

struct PairResult {
  Summary gap;  // the second start after the first
  // The same, less what the second's worker thread and the spawning thread
  // waited for a CPU meanwhile: a worker woken onto the spawner's CPU may
  // run there first, holding up the second spawn (sched/idle.h).
  Summary unexplained;
  std::size_t one_after_other = 0;
};

PairResult measure_idle_pair(std::size_t trials) {
  weft::Config config;
  config.workers = 2;
  config.name = "idle-pair";
  config.dump = false;
  weft::Scheduler sched{config};
  std::vector<double> us, net_us;
  us.reserve(trials);
  net_us.reserve(trials);
  PairResult result;
  for (std::size_t trial = 0; trial < trials; ++trial) {
    std::this_thread::sleep_for(2ms);  // every worker asleep
    if (trial % 2 == 1) {
      std::atomic<bool> went{false};
      sched.spawn([&] { went.store(true); }).detach();
      const auto give_up = Clock::now() + 5s;
      while (!went.load() && Clock::now() < give_up) {
      }
    }
    std::map<long, std::int64_t> delay_before;
    for (long task : process_threads()) delay_before[task] = run_delay_ns(task);
    Clock::time_point start[2], end[2];
    long thread_of[2] = {0, 0};
    std::int64_t delay_at_start[2] = {0, 0};
    auto spinner = [&](int i) {
      return [&, i] {
        start[i] = Clock::now();
        thread_of[i] = static_cast<long>(::syscall(SYS_gettid));
        delay_at_start[i] = run_delay_ns(0);
        while (Clock::now() - start[i] < kPairSpin) {
        }
        end[i] = Clock::now();
      };
    };
    const std::int64_t spawner_delay_before = run_delay_ns(0);
    weft::Fiber a = sched.spawn(spinner(0));
    const auto gap_until = Clock::now() + std::chrono::microseconds(trial / 2 % 4);
    while (Clock::now() < gap_until) {
    }
    weft::Fiber b = sched.spawn(spinner(1));
    const std::int64_t spawner_waited_ns = run_delay_ns(0) - spawner_delay_before;
    a.join();
    b.join();
    const int first = start[0] <= start[1] ? 0 : 1;
    const int second = 1 - first;
    if (start[second] >= end[first]) ++result.one_after_other;
    const double gap = us_since(start[first], start[second]);
    const auto before = delay_before.find(thread_of[second]);
    const double waited =
        (before == delay_before.end() ? 0 : (delay_at_start[second] - before->second) / 1e3) + spawner_waited_ns / 1e3;
    us.push_back(gap);
    net_us.push_back(std::max(0.0, gap - waited));
  }
  result.gap = summarize(std::move(us));
  result.unexplained = summarize(std::move(net_us));
  return result;
}

struct Row {
  unsigned workers;
  Load load;
  Summary timer, wake_fiber, wake_thread;
};

Row run(unsigned workers, Load load, std::size_t samples) {
  weft::Config config;
  config.workers = workers;
  config.name = "latency";
  config.dump = false;
  weft::Scheduler sched{config};
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> sink{0};
  std::vector<weft::Fiber> busy = start_load(sched, load, workers, stop, sink);
  Row row{workers, load, {}, {}, {}};
  row.timer = measure_timers(sched, samples);
  row.wake_fiber = measure_wake(sched, samples, true);
  row.wake_thread = measure_wake(sched, samples, false);
  stop.store(true);
  for (auto& f : busy) f.join();
  return row;
}

void print_json(const char* name, const Summary& s, bool last) {
  std::printf("\"%s\": {\"p50_us\": %.1f, \"p99_us\": %.1f, \"max_us\": %.1f, \"samples\": %zu}%s", name, s.p50_us,
              s.p99_us, s.max_us, s.samples, last ? "" : ", ");
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t samples = 300;
  std::size_t pair_trials = 200;
  bool only_pair = false;
  bool json = false;
  CLI::App app{"latency: how late timers fire and how long a woken fiber waits to run", "latency"};
  weft::bench::add_count(app, "--samples", samples, std::size_t{10}, std::size_t{1'000'000}, "per measurement");
  weft::bench::add_count(app, "--pair-trials", pair_trials, std::size_t{1}, std::size_t{1'000'000},
                         "trials of the idle pair");
  app.add_flag("--only-pair", only_pair, "measure only the idle pair");
  app.add_flag("--json", json, "print one JSON object on stdout");
  weft::bench::parse(app, argc, argv);
  std::vector<Row> rows;
  if (!only_pair) {
    for (unsigned workers : {1u, 2u})
      for (Load load : {Load::idle, Load::yield, Load::hog}) rows.push_back(run(workers, load, samples));
  }
  const PairResult pair = measure_idle_pair(pair_trials);
  if (json) {
    std::printf("{\"samples\": %zu, \"idle_pair\": {\"trials\": %zu, \"one_after_the_other\": %zu, ", samples,
                pair.gap.samples, pair.one_after_other);
    print_json("gap", pair.gap, false);
    print_json("unexplained", pair.unexplained, true);
    std::printf("}, \"results\": [");
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::printf("{\"workers\": %u, \"load\": \"%s\", ", r.workers, name_of(r.load));
      print_json("timer", r.timer, false);
      print_json("wake_fiber", r.wake_fiber, false);
      print_json("wake_thread", r.wake_thread, true);
      std::printf("}%s", i + 1 < rows.size() ? ", " : "");
    }
    std::printf("]}\n");
    return 0;
  }
  std::printf("%-7s %-5s  %-26s  %-26s  %-26s\n", "workers", "load", "timer late p50/p99/max us",
              "wake fiber p50/p99/max us", "wake thread p50/p99/max us");
  for (const Row& r : rows) {
    auto cell = [](const Summary& s) {
      char text[64];
      std::snprintf(text, sizeof(text), "%.1f / %.1f / %.1f", s.p50_us, s.p99_us, s.max_us);
      return std::string(text);
    };
    std::printf("%-7u %-5s  %-26s  %-26s  %-26s\n", r.workers, name_of(r.load), cell(r.timer).c_str(),
                cell(r.wake_fiber).c_str(), cell(r.wake_thread).c_str());
  }
  std::printf(
      "idle pair, %zu trials: the second of two fibers spawned onto 2 sleeping workers started %.1f / %.1f / %.1f "
      "us (p50/p99/max) after the first; less its and the spawner's waits for a CPU, %.1f / %.1f / %.1f us; %zu ran "
      "one after the other\n",
      pair.gap.samples, pair.gap.p50_us, pair.gap.p99_us, pair.gap.max_us, pair.unexplained.p50_us,
      pair.unexplained.p99_us, pair.unexplained.max_us, pair.one_after_other);
  return 0;
}
