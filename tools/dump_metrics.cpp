#include "dump_metrics.h"

#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace weft::tools {
namespace {

// A label value as OpenMetrics quotes it: backslash, double quote and
// newline escaped; anything else (valid UTF-8: the server's JSON has
// nothing else) as it is.
std::string quoted(std::string_view value) {
  std::string out = "\"";
  for (const char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out + '"';
}

// `{scheduler="x",worker="0"}`
std::string labels(std::initializer_list<std::pair<std::string_view, std::string>> pairs) {
  std::string out = "{";
  for (const auto& [name, value] : pairs) {
    if (out.size() > 1) out += ',';
    out += name;
    out += '=';
    out += quoted(value);
  }
  return out + '}';
}

// One metric family: its metadata, then its samples (OpenMetrics wants a
// family's samples together, so each family walks the whole snapshot).
class Writer {
 public:
  // A gauge or a counter; a counter's samples are named <name>_total.
  void family(std::string_view name, std::string_view type, std::string_view help, std::string_view unit = {}) {
    name_ = name;
    suffix_ = type == "counter" ? "_total" : "";
    fmt::format_to(std::back_inserter(out_), "# TYPE {} {}\n", name, type);
    if (!unit.empty()) fmt::format_to(std::back_inserter(out_), "# UNIT {} {}\n", name, unit);
    fmt::format_to(std::back_inserter(out_), "# HELP {} {}\n", name, help);
  }
  // A sample of the family, named as its type wants.
  template <class T>
  void sample(const std::string& labels, T value) {
    sample_named(suffix_, labels, value);
  }
  // A sample named <family><suffix>: a summary's quantiles (""), _count, _sum.
  template <class T>
  void sample_named(std::string_view suffix, const std::string& labels, T value) {
    fmt::format_to(std::back_inserter(out_), "{}{}{} {}\n", name_, suffix, labels, value);
  }
  std::string finish() {
    out_ += "# EOF\n";
    return std::move(out_);
  }

 private:
  std::string out_;
  std::string name_, suffix_;
};

using Worker = std::pair<const SchedulerSnapshot*, const WorkerSnapshot*>;

std::vector<Worker> every_worker(const ProcessSnapshot& p) {
  std::vector<Worker> out;
  for (const SchedulerSnapshot& s : p.schedulers)
    for (const WorkerSnapshot& w : s.workers) out.emplace_back(&s, &w);
  return out;
}

void fiber_metrics(Writer& w, const ProcessSnapshot& p) {
  w.family("weft_fibers", "gauge", "Live fibers, by state.");
  for (const SchedulerSnapshot& s : p.schedulers) {
    w.sample(labels({{"scheduler", s.name}, {"state", "runnable"}}), s.fiber_states.runnable);
    w.sample(labels({{"scheduler", s.name}, {"state", "running"}}), s.fiber_states.running);
    w.sample(labels({{"scheduler", s.name}, {"state", "parked"}}), s.fiber_states.parked);
  }
  w.family("weft_global_queue_fibers", "gauge",
           "Fibers in the scheduler's global queue, which no worker's queue counts.");
  for (const SchedulerSnapshot& s : p.schedulers) w.sample(labels({{"scheduler", s.name}}), s.global_queue);
}

void worker_metrics(Writer& w, const ProcessSnapshot& p) {
  const std::vector<Worker> workers = every_worker(p);
  const auto label = [](const Worker& x) {
    return labels({{"scheduler", x.first->name}, {"worker", std::to_string(x.second->index)}});
  };
  struct Counter {
    const char* name;
    const char* help;
    std::uint64_t WorkerSnapshot::*member;
  };
  static constexpr Counter kCounters[] = {
      {"weft_worker_runs", "Fibers the worker switched in.", &WorkerSnapshot::fibers_run},
      {"weft_worker_steals", "Fibers the worker took from other workers' queues.", &WorkerSnapshot::steals},
      {"weft_worker_failed_steals", "Steals stopped at a fiber pinned to its worker.", &WorkerSnapshot::failed_steals},
      {"weft_worker_parks", "Times a fiber parked on the worker.", &WorkerSnapshot::parks},
      {"weft_worker_preempts", "Times a fiber was preempted at a checkpoint on the worker.", &WorkerSnapshot::preempts},
      {"weft_worker_handoffs", "Fibers sysmon moved off the worker's queue while it was stuck.",
       &WorkerSnapshot::handoffs},
  };
  for (const Counter& c : kCounters) {
    w.family(c.name, "counter", c.help);
    for (const Worker& x : workers) w.sample(label(x), x.second->*c.member);
  }
  w.family("weft_worker_queued_fibers", "gauge", "Fibers ready to run that wait in the worker's own queues.");
  for (const Worker& x : workers) w.sample(label(x), x.second->queue_length);
  w.family("weft_worker_stuck", "gauge", "1 while sysmon finds the worker stuck in one fiber.");
  for (const Worker& x : workers) w.sample(label(x), x.second->stuck ? 1 : 0);
  // Spares (docs/sysmon.md): those started, and of them those running
  // fibers now (the others are retired).
  w.family("weft_spare_threads", "gauge", "Spare worker threads started, and those running fibers now.");
  for (const SchedulerSnapshot& s : p.schedulers) {
    std::uint64_t started = 0, running = 0;
    for (const WorkerSnapshot& x : s.workers) {
      if (!x.spare) continue;
      ++started;
      if (x.state != "spare") ++running;
    }
    w.sample(labels({{"scheduler", s.name}, {"state", "started"}}), started);
    w.sample(labels({{"scheduler", s.name}, {"state", "running"}}), running);
  }
}

void poller_metrics(Writer& w, const ProcessSnapshot& p) {
  const auto each = [&](const char* name, const char* type, const char* help, auto value) {
    w.family(name, type, help);
    for (const SchedulerSnapshot& s : p.schedulers) w.sample(labels({{"scheduler", s.name}}), value(s.poller));
  };
  each("weft_poller_polls", "counter", "epoll_wait calls of the netpoller.",
       [](const PollerSnapshot& x) { return x.polls; });
  each("weft_poller_sysmon_polls", "counter", "Polls sysmon made because nobody had for 10 ms.",
       [](const PollerSnapshot& x) { return x.sysmon_polls; });
  each("weft_poller_events", "counter", "fd events the netpoller handled.",
       [](const PollerSnapshot& x) { return x.events; });
  each("weft_poller_fds", "gauge", "fds registered in the netpoller's epoll set.",
       [](const PollerSnapshot& x) { return x.fds_registered; });
  each("weft_poller_waiting_fibers", "gauge", "Fibers parked on an fd.",
       [](const PollerSnapshot& x) { return x.io_waiters; });
}

void blocking_metrics(Writer& w, const ProcessSnapshot& p) {
  const auto each = [&](const char* name, const char* type, const char* help, auto value) {
    w.family(name, type, help);
    for (const SchedulerSnapshot& s : p.schedulers) w.sample(labels({{"scheduler", s.name}}), value(s.blocking));
  };
  each("weft_blocking_threads", "gauge", "Helper threads of weft::blocking started.",
       [](const BlockingPoolSnapshot& x) { return x.threads; });
  each("weft_blocking_busy_threads", "gauge", "Helper threads running a call now.",
       [](const BlockingPoolSnapshot& x) { return x.busy; });
  each("weft_blocking_queued_calls", "gauge", "weft::blocking calls waiting for a helper.",
       [](const BlockingPoolSnapshot& x) { return x.queued; });
  each("weft_blocking_calls", "counter", "weft::blocking calls completed.",
       [](const BlockingPoolSnapshot& x) { return x.calls; });
}

void pool_metrics(Writer& w, const ProcessSnapshot& p) {
  const auto each = [&](const char* name, const char* type, const char* help, auto value) {
    w.family(name, type, help);
    for (const PoolSnapshot& x : p.pools) w.sample(labels({{"pool", x.name}, {"mode", x.mode}}), value(x));
  };
  each("weft_pool_size", "gauge", "The pool's concurrency bound (PoolOptions::threads).",
       [](const PoolSnapshot& x) { return x.size; });
  each("weft_pool_queued_tasks", "gauge", "Tasks waiting for a runner.",
       [](const PoolSnapshot& x) { return x.queued; });
  each("weft_pool_running_tasks", "gauge", "Tasks running now.", [](const PoolSnapshot& x) { return x.running; });
  each("weft_pool_completed_tasks", "counter", "Tasks finished, those that threw included.",
       [](const PoolSnapshot& x) { return x.completed; });
  each("weft_pool_failed_tasks", "counter", "post()ed tasks that threw.",
       [](const PoolSnapshot& x) { return x.failed; });
  // Summaries: p50 and p99 within 12.5 % (the histogram's buckets), and the
  // max exact as quantile 1.
  const auto summary = [&](const char* name, const char* help, LatencySummary PoolSnapshot::*member) {
    w.family(name, "summary", help, "seconds");
    for (const PoolSnapshot& x : p.pools) {
      const LatencySummary& l = x.*member;
      const std::pair<const char*, double> quantiles[] = {{"0.5", l.p50_us}, {"0.99", l.p99_us}, {"1", l.max_us}};
      for (const auto& [q, us] : quantiles)
        w.sample_named("", labels({{"pool", x.name}, {"mode", x.mode}, {"quantile", q}}), us / 1e6);
      w.sample_named("_count", labels({{"pool", x.name}, {"mode", x.mode}}), l.count);
      w.sample_named("_sum", labels({{"pool", x.name}, {"mode", x.mode}}), l.sum_us / 1e6);
    }
  };
  summary("weft_pool_wait_seconds", "Time tasks waited between submit and start.", &PoolSnapshot::wait);
  summary("weft_pool_run_seconds", "Time tasks ran.", &PoolSnapshot::run);
}

}  // namespace

std::string render_metrics(const ProcessSnapshot& process) {
  Writer w;
  fiber_metrics(w, process);
  worker_metrics(w, process);
  poller_metrics(w, process);
  blocking_metrics(w, process);
  pool_metrics(w, process);
  return w.finish();
}

}  // namespace weft::tools
