#include "dump_text.h"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace weft::tools {
namespace {

std::string printf_string(const char* format, auto... args) {
  char buffer[512];
  std::snprintf(buffer, sizeof(buffer), format, args...);
  return buffer;
}

unsigned long long u(const JsonValue& object, const char* key) { return object.uint(key); }

std::string worker_line(const JsonValue& w) {
  std::string line = printf_string(
      "  Worker %llu [tid %lld] %s queue=%llu fibers_run=%llu steals=%llu failed_steals=%llu "
      "parks=%llu preempts=%llu",
      u(w, "index"), static_cast<long long>(w.integer("os_thread_id")), w.str("state").c_str(), u(w, "queue_length"),
      u(w, "fibers_run"), u(w, "steals"), u(w, "failed_steals"), u(w, "parks"), u(w, "preempts"));
  // Sysmon's fields (docs/sysmon.md); absent from older processes' JSON.
  if (!w["handoffs"].is_null()) line += printf_string(" handoffs=%llu", u(w, "handoffs"));
  if (!w["stuck"].is_null() && w["stuck"].as_bool())
    line += printf_string("\n   STUCK: fiber #%llu has run %.1f ms without a switch (no checkpoint, or a blocking call)",
                          u(w, "stuck_fiber"), w["running_ms"].as_double());
  return line + "\n";
}

// "weft::BlockingQueue@0x55d0c3a0 (take)"; no address for waits on no
// object (a sleep).
std::string wait_site(const JsonValue& wait) {
  std::string site = wait.str("kind");
  if (!wait["object"].is_null()) site += "@" + wait.str("object");
  if (!wait.str("operation").empty()) site += " (" + wait.str("operation") + ")";
  return site;
}

std::string state_line(const JsonValue& f) {
  const std::string& state = f.str("state");
  const std::int64_t worker = f.integer("worker");
  std::string line = "   " + state;
  if (state == "running")
    line += " on worker " + std::to_string(worker);
  else if (worker >= 0)
    line += " (last ran on worker " + std::to_string(worker) + ")";
  else
    line += " (not started yet)";
  if (f["pinned"].as_bool()) line += ", pinned to its worker";
  return line + "\n";
}

std::string fiber_block(const JsonValue& f) {
  std::string block = printf_string(
      "- Fiber [%s] \"%s\" #%llu active=%llu steal=%llu steal_fail=%llu preempt=%llu "
      "park=%llu/%lld\n",
      f.str("address").c_str(), f.str("name").c_str(), u(f, "id"), u(f, "active"), u(f, "steal"), u(f, "steal_fail"),
      u(f, "preempt"), u(f, "park"), static_cast<long long>(f.integer("park_state")));
  block += state_line(f);
  const JsonValue& wait = f["wait"];
  if (!wait.is_null()) {
    const std::string since = format_duration_ms(wait["ms"].as_double());
    if (f.integer("park_state") == 1)
      block += "   woken from waiting on " + wait_site(wait) + ", waits for a worker (parked " + since + " ago)\n";
    else if (f.str("state") == "parked")
      block += "   waiting on " + wait_site(wait) + " for " + since + "\n";
  }
  return block;
}

}  // namespace

std::string format_duration_ms(double ms) {
  return ms < 10'000 ? printf_string("%.1f ms", ms) : printf_string("%.1f s", ms / 1000);
}

std::string render_dump_text(const JsonValue& dump) {
  const JsonValue& process = dump["process"];
  std::string time = process.str("time");  // ISO 8601: 2025-06-01T08:03:43.123Z
  std::replace(time.begin(), time.end(), 'T', ' ');
  if (!time.empty() && time.back() == 'Z') time.replace(time.size() - 1, 1, " UTC");
  std::string out = time + "\n";
  out += printf_string("Full fiber dump of pid %lld (%s):\n", static_cast<long long>(process.integer("pid")),
                       process.str("name").c_str());
  const auto& schedulers = dump["schedulers"].as_array();
  if (schedulers.empty()) out += "\n(no running weft schedulers)\n";
  for (const JsonValue& s : schedulers) {
    out += printf_string("\nScheduler \"%s\": %llu workers, %llu fibers\n\n", s.str("name").c_str(),
                         u(s, "worker_count"), u(s, "fiber_count"));
    for (const JsonValue& w : s["workers"].as_array()) out += worker_line(w);
    std::vector<const JsonValue*> fibers;
    for (const JsonValue& f : s["fibers"].as_array()) fibers.push_back(&f);
    std::sort(fibers.begin(), fibers.end(),
              [](const JsonValue* a, const JsonValue* b) { return a->uint("id") < b->uint("id"); });
    for (const JsonValue* f : fibers) {
      out += '\n';
      out += fiber_block(*f);
    }
  }
  return out;
}

}  // namespace weft::tools
