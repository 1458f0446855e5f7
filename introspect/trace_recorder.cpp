#include "trace_recorder.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>
#include <vector>

#include "../runtime/fast_clock.h"
#include "../sched/trace.h"

namespace weft::detail {
namespace {

std::atomic<bool> recording{false};

std::string thread_name(int tid) {
  const std::string path = std::string("/proc/self/task/") + std::to_string(tid) + "/comm";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::string("thread ") + std::to_string(tid);
  char name[64];
  const ssize_t n = ::read(fd, name, sizeof(name));
  ::close(fd);
  std::string out(name, n > 0 ? static_cast<std::size_t>(n) : 0);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out + std::string(" [") + std::to_string(tid) + "]";
}

const char* why_left(TraceLeft why) {
  switch (why) {
    case TraceLeft::parked:
      return "parked";
    case TraceLeft::yielded:
      return "yielded";
    case TraceLeft::preempted:
      return "preempted";
    case TraceLeft::exited:
      return "exited";
    case TraceLeft::none:
      break;
  }
  return "left";
}

// A JSON string of `text` (escaped; invalid UTF-8 replaced).
std::string quoted(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The events of one track (a thread), in time order, and the B/E pairs
// kept matched: a run that started before the trace begins at its start,
// one still going at its end ends there. Written as text, event by event:
// a busy trace has hundreds of thousands.
class TrackWriter {
 public:
  TrackWriter(std::string& out, int pid, int tid, std::int64_t start_ns, std::int64_t end_ns, const FiberNames& names)
      : out_(out), pid_(pid), tid_(tid), start_ns_(start_ns), end_ns_(end_ns), names_(names) {}

  void add(const TraceRecord& r) {
    switch (r.kind) {
      case TraceKind::switch_to:
        if (r.left != 0) leave(r);
        if (r.fiber != 0) run(r);
        break;
      case TraceKind::wake:
        instant(r.ns, std::string("wake ") + fiber_name(r.fiber), "{\"fiber\":" + std::to_string(r.fiber) + "}");
        event(r.ns, "s", "\"wake\"", ",\"cat\":\"wake\",\"id\":" + std::to_string(r.flow));
        break;
      case TraceKind::steal:
        instant(r.ns, std::string("steal ") + fiber_name(r.fiber),
                "{\"fiber\":" + std::to_string(r.fiber) + ",\"from_worker\":" + std::to_string(r.arg) + "}");
        break;
      case TraceKind::handoff:
        instant(r.ns,
                std::string("hand-off of ") + std::to_string(r.arg) + " fibers from worker " + std::to_string(r.fiber),
                "{\"worker\":" + std::to_string(r.fiber) + ",\"fibers\":" + std::to_string(r.arg) + "}");
        break;
      case TraceKind::poll:
        instant(r.ns, std::string("poll: ") + std::to_string(r.arg) + " events",
                "{\"events\":" + std::to_string(r.arg) + "}");
        break;
    }
  }
  void finish() {
    if (open_ != 0) event(end_ns_, "E", quoted(fiber_name(open_)), ",\"args\":{\"left\":\"still running\"}");
    open_ = 0;
  }

 private:
  void run(const TraceRecord& r) {
    open_ = r.fiber;
    event(r.ns, "B", quoted(fiber_name(r.fiber)), ",\"args\":{\"fiber\":" + std::to_string(r.fiber) + "}");
    // The arrow from the wake that made it runnable lands on this run.
    if (r.flow != 0) event(r.ns, "f", "\"wake\"", ",\"cat\":\"wake\",\"bp\":\"e\",\"id\":" + std::to_string(r.flow));
  }
  void leave(const TraceRecord& r) {
    if (open_ != r.left) {
      if (any_ || open_ != 0) return;  // a record lost (a full buffer): no E without its B
      // Began before the trace.
      event(start_ns_, "B", quoted(fiber_name(r.left)), ",\"args\":{\"fiber\":" + std::to_string(r.left) + "}");
    }
    std::string args = std::string(",\"args\":{\"left\":\"") + why_left(r.why) + "\"";
    if (r.why == TraceLeft::parked && r.wait_kind != nullptr)
      args += ",\"on\":" + quoted(std::string(r.wait_kind) +
                                  (r.wait_operation != nullptr ? std::string(" (") + r.wait_operation + ")" : ""));
    event(r.ns, "E", quoted(fiber_name(r.left)), args + "}");
    if (r.why == TraceLeft::preempted)
      instant(r.ns, std::string("preempted ") + fiber_name(r.left), "{\"fiber\":" + std::to_string(r.left) + "}");
    open_ = 0;
  }
  void instant(std::int64_t ns, const std::string& name, const std::string& args) {
    event(ns, "i", quoted(name), ",\"s\":\"t\",\"args\":" + args);
  }
  // `name` is already JSON (quoted); `rest` the other members, each after
  // a comma.
  void event(std::int64_t ns, const char* ph, const std::string& name, const std::string& rest) {
    char head[160];
    const double ts = static_cast<double>(std::max(ns, start_ns_) - start_ns_) / 1000.0;  // microseconds
    std::snprintf(head, sizeof(head),
                  "%s{\"ph\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"name\":", out_.back() == '[' ? "\n" : ",\n", ph,
                  pid_, tid_, ts);
    out_ += head;
    out_ += name;
    out_ += rest;
    out_ += '}';
    any_ = true;
  }
  std::string fiber_name(std::uint64_t id) const {
    const auto it = names_.find(id);
    return (it != names_.end() ? "\"" + it->second + "\" " : std::string()) + "#" + std::to_string(id);
  }

  std::string& out_;
  const int pid_, tid_;
  const std::int64_t start_ns_, end_ns_;
  const FiberNames& names_;
  std::uint64_t open_ = 0;  // the fiber whose B has no E yet
  bool any_ = false;        // this track has an event
};

}  // namespace

std::string record_trace(std::chrono::milliseconds duration, const std::function<bool()>& cut_short,
                         const std::function<FiberNames()>& names) {
  if (recording.exchange(true)) throw std::runtime_error("a trace is being recorded already; try again after it");
  struct Done {
    ~Done() { recording.store(false); }
  } done;
  const std::int64_t start = fast_now_ns();
  start_trace_session();
  const auto until = std::chrono::steady_clock::now() + duration;
  while (std::chrono::steady_clock::now() < until && !cut_short())
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  stop_trace_session();
  // Writers that saw tracing() just before it turned off finish their record.
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const std::int64_t end = fast_now_ns();
  const FiberNames fibers = names();
  const int pid = ::getpid();
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  std::vector<int> tids;
  std::size_t dropped = 0;
  for_each_trace_buffer([&](int tid, const TraceRecord* records, std::size_t count, std::size_t lost) {
    tids.push_back(tid);
    dropped += lost;
    TrackWriter track(out, pid, tid, start, end, fibers);
    for (std::size_t i = 0; i < count; ++i) track.add(records[i]);
    track.finish();
  });
  // Metadata: the process's and each track's name (ts 0, as every event
  // has one).
  const auto meta = [&](const char* what, int tid, const std::string& name) {
    nlohmann::json e{{"ph", "M"}, {"name", what}, {"pid", pid}, {"tid", tid}, {"ts", 0}, {"args", {{"name", name}}}};
    out += out.back() == '[' ? "\n" : ",\n";
    out += e.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  meta("process_name", pid, thread_name(pid));
  for (const int tid : tids) meta("thread_name", tid, thread_name(tid));
  nlohmann::json other{
      {"weft_trace", 1}, {"seconds", static_cast<double>(end - start) / 1e9}, {"dropped_records", dropped}};
  out += "\n],\"otherData\":" + other.dump() + "}\n";
  return out;
}

}  // namespace weft::detail
