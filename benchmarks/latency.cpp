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
//
//   latency                 # the table, p50/p99/max in microseconds
//   latency --json          # {"results": [{"workers": 1, "load": "idle", "timer": {...}, ...}, ...]}
//   latency --samples 2000  # per measurement (default 300)
#include <weft/weft.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>
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
  bool json = false;
  CLI::App app{"latency: how late timers fire and how long a woken fiber waits to run", "latency"};
  weft::bench::add_count(app, "--samples", samples, std::size_t{10}, std::size_t{1'000'000}, "per measurement");
  app.add_flag("--json", json, "print one JSON object on stdout");
  weft::bench::parse(app, argc, argv);
  std::vector<Row> rows;
  for (unsigned workers : {1u, 2u})
    for (Load load : {Load::idle, Load::yield, Load::hog}) rows.push_back(run(workers, load, samples));
  if (json) {
    std::printf("{\"samples\": %zu, \"results\": [", samples);
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
  return 0;
}
