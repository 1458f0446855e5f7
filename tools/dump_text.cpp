#include "dump_text.h"

#include <algorithm>
#include <cstdio>

namespace weft::tools {
namespace {

// Bits of the fields a worker or fiber must have.
template <std::size_t N>
void require(unsigned seen, const char* what) {
  if (seen != (1u << N) - 1) throw JsonError(std::string("a ") + what + " lacks a field");
}

DumpWorker read_worker(JsonCursor& json) {
  DumpWorker w;
  unsigned seen = 0;
  json.begin_object();
  for (std::string_view key; json.next_key(key);) {
    if (key == "index") {
      w.index = json.uint();
      seen |= 1;
    } else if (key == "os_thread_id") {
      w.os_thread_id = json.integer();
      seen |= 2;
    } else if (key == "state") {
      w.state = json.string();
      seen |= 4;
    } else if (key == "queue_length") {
      w.queue_length = json.uint();
      seen |= 8;
    } else if (key == "fibers_run") {
      w.fibers_run = json.uint();
      seen |= 16;
    } else if (key == "steals") {
      w.steals = json.uint();
      seen |= 32;
    } else if (key == "failed_steals") {
      w.failed_steals = json.uint();
      seen |= 64;
    } else if (key == "parks") {
      w.parks = json.uint();
      seen |= 128;
    } else if (key == "preempts") {
      w.preempts = json.uint();
      seen |= 256;
    } else if (key == "handoffs") {
      w.handoffs = json.uint();
      w.has_handoffs = true;
    } else if (key == "running_ms") {
      w.running_ms = json.number();
    } else if (key == "stuck") {
      w.stuck = json.boolean();
    } else if (key == "stuck_fiber") {
      w.stuck_fiber = json.uint();
    } else {
      json.skip();
    }
  }
  require<9>(seen, "worker");
  return w;
}

void read_wait(JsonCursor& json, DumpFiber& f) {
  if (json.null()) return;
  f.has_wait = true;
  json.begin_object();
  for (std::string_view key; json.next_key(key);) {
    if (key == "kind")
      f.wait_kind = json.string();
    else if (key == "object")
      f.wait_object = json.null() ? std::string_view() : json.string();
    else if (key == "operation")
      f.wait_operation = json.string();
    else if (key == "ms")
      f.wait_ms = json.number();
    else
      json.skip();
  }
}

// Absent from older processes' JSON: then no frames.
void read_stack(JsonCursor& json, DumpFiber& f, std::vector<std::string_view>& frames) {
  f.first_frame = frames.size();
  json.begin_array();
  while (json.next_item()) frames.push_back(json.string());
  f.frame_count = frames.size() - f.first_frame;
}

void read_symbols(JsonCursor& json, std::unordered_map<std::string_view, DumpSymbol>& symbols) {
  json.begin_object();
  for (std::string_view address; json.next_key(address);) {
    DumpSymbol symbol;
    json.begin_object();
    for (std::string_view key; json.next_key(key);) {
      std::string_view* text = key == "function" ? &symbol.function
                               : key == "file"   ? &symbol.file
                               : key == "module" ? &symbol.module
                               : key == "offset" ? &symbol.offset
                                                 : nullptr;
      if (text != nullptr) {
        if (!json.null()) *text = json.string();
      } else if (key == "line") {
        if (!json.null()) symbol.line = json.uint();
      } else {
        json.skip();
      }
    }
    symbols.emplace(address, symbol);
  }
}

DumpFiber read_fiber(JsonCursor& json, std::vector<std::string_view>& frames) {
  DumpFiber f;
  unsigned seen = 0;
  json.begin_object();
  for (std::string_view key; json.next_key(key);) {
    // Ordered as the server writes them; a key costs a few compares.
    if (key == "id") {
      f.id = json.uint();
      seen |= 1;
    } else if (key == "address") {
      f.address = json.string();
      seen |= 2;
    } else if (key == "name") {
      f.name = json.string();
      seen |= 4;
    } else if (key == "state") {
      f.state = json.string();
      seen |= 8;
    } else if (key == "worker") {
      f.worker = json.integer();
      seen |= 16;
    } else if (key == "pinned") {
      f.pinned = json.boolean();
      seen |= 32;
    } else if (key == "active") {
      f.active = json.uint();
      seen |= 64;
    } else if (key == "steal") {
      f.steal = json.uint();
      seen |= 128;
    } else if (key == "steal_fail") {
      f.steal_fail = json.uint();
      seen |= 256;
    } else if (key == "preempt") {
      f.preempt = json.uint();
      seen |= 512;
    } else if (key == "park") {
      f.park = json.uint();
      seen |= 1024;
    } else if (key == "park_state") {
      f.park_state = json.integer();
      seen |= 2048;
    } else if (key == "wait") {
      read_wait(json, f);
      seen |= 4096;
    } else if (key == "stack") {
      read_stack(json, f, frames);
    } else {
      json.skip();
    }
  }
  require<13>(seen, "fiber");
  return f;
}

DumpScheduler read_scheduler(JsonCursor& json) {
  DumpScheduler s;
  json.begin_object();
  for (std::string_view key; json.next_key(key);) {
    if (key == "name") {
      s.name = json.string();
    } else if (key == "worker_count") {
      s.worker_count = json.uint();
    } else if (key == "fiber_count") {
      s.fiber_count = json.uint();
    } else if (key == "workers") {
      json.begin_array();
      while (json.next_item()) s.workers.push_back(read_worker(json));
    } else if (key == "fibers") {
      s.fibers.reserve(s.fiber_count);
      json.begin_array();
      while (json.next_item()) s.fibers.push_back(read_fiber(json, s.frames));
    } else {
      json.skip();
    }
  }
  return s;
}

// Appends printf-formatted text to `out` without a temporary string.
template <class... Args>
void append(std::string& out, const char* format, Args... args) {
  char buffer[512];
  const int n = std::snprintf(buffer, sizeof(buffer), format, args...);
  if (n > 0) out.append(buffer, std::min<std::size_t>(static_cast<std::size_t>(n), sizeof(buffer) - 1));
}

void append_view(std::string& out, std::string_view text) { out.append(text.data(), text.size()); }

using ull = unsigned long long;
using ll = long long;

void worker_line(std::string& out, const DumpWorker& w) {
  append(out, "  Worker %llu [tid %lld] ", ull(w.index), ll(w.os_thread_id));
  append_view(out, w.state);
  append(out, " queue=%llu fibers_run=%llu steals=%llu failed_steals=%llu parks=%llu preempts=%llu",
         ull(w.queue_length), ull(w.fibers_run), ull(w.steals), ull(w.failed_steals), ull(w.parks), ull(w.preempts));
  if (w.has_handoffs) append(out, " handoffs=%llu", ull(w.handoffs));
  if (w.stuck)
    append(out, "\n   STUCK: fiber #%llu has run %.1f ms without a switch (no checkpoint, or a blocking call)",
           ull(w.stuck_fiber), w.running_ms);
  out += '\n';
}

// "weft::BlockingQueue@0x55d0c3a0 (take)"; no address for waits on no
// object (a sleep).
void wait_site(std::string& out, const DumpFiber& f) {
  append_view(out, f.wait_kind);
  if (!f.wait_object.empty()) {
    out += '@';
    append_view(out, f.wait_object);
  }
  if (!f.wait_operation.empty()) {
    out += " (";
    append_view(out, f.wait_operation);
    out += ')';
  }
}

std::string_view base_name(std::string_view path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// jstack's "\tat pkg.Class.method(File.java:42)", innermost first:
//       at weft::Mutex::acquire(...) (libweft.so.0+0x36bef)
//       at lock_mutex(weft::Mutex&) (dump_child.cpp:58)
// With no debug information, the object and offset stand in for file and
// line; with no symbol either, the address stands in for the function.
void stack_lines(std::string& out, const DumpFiber& f, const DumpScheduler& s, const Dump& dump) {
  for (std::size_t i = f.first_frame; i < f.first_frame + f.frame_count && i < s.frames.size(); ++i) {
    const std::string_view address = s.frames[i];
    const auto it = dump.symbols.find(address);
    const DumpSymbol unknown;
    const DumpSymbol& symbol = it != dump.symbols.end() ? it->second : unknown;
    out += "      at ";
    append_view(out, symbol.function.empty() ? address : symbol.function);
    out += " (";
    if (!symbol.file.empty()) {
      append_view(out, base_name(symbol.file));
      if (symbol.line != 0) append(out, ":%llu", ull(symbol.line));
    } else if (!symbol.module.empty()) {
      append_view(out, base_name(symbol.module));
      out += '+';
      append_view(out, symbol.offset);
    } else {
      out += "unknown";
    }
    out += ")\n";
  }
}

void fiber_block(std::string& out, const DumpFiber& f, const DumpScheduler& s, const Dump& dump) {
  out += "\n- Fiber [";
  append_view(out, f.address);
  out += "] \"";
  append_view(out, f.name);
  append(out, "\" #%llu active=%llu steal=%llu steal_fail=%llu preempt=%llu park=%llu/%lld\n   ", ull(f.id),
         ull(f.active), ull(f.steal), ull(f.steal_fail), ull(f.preempt), ull(f.park), ll(f.park_state));
  append_view(out, f.state);
  if (f.state == "running")
    append(out, " on worker %lld", ll(f.worker));
  else if (f.worker >= 0)
    append(out, " (last ran on worker %lld)", ll(f.worker));
  else
    out += " (not started yet)";
  if (f.pinned) out += ", pinned to its worker";
  out += '\n';
  if (f.has_wait) {
    if (f.park_state == 1) {
      out += "   woken from waiting on ";
      wait_site(out, f);
      out += ", waits for a worker (parked " + format_duration_ms(f.wait_ms) + " ago)\n";
    } else if (f.state == "parked") {
      out += "   waiting on ";
      wait_site(out, f);
      out += " for " + format_duration_ms(f.wait_ms) + "\n";
      stack_lines(out, f, s, dump);
    }
  }
}

DumpLatency read_latency(JsonCursor& json) {
  DumpLatency l;
  json.begin_object();
  for (std::string_view key; json.next_key(key);) {
    if (key == "count")
      l.count = json.uint();
    else if (key == "p50_us")
      l.p50_us = json.number();
    else if (key == "p99_us")
      l.p99_us = json.number();
    else if (key == "max_us")
      l.max_us = json.number();
    else
      json.skip();
  }
  return l;
}

DumpPool read_pool(JsonCursor& json) {
  DumpPool p;
  unsigned seen = 0;
  json.begin_object();
  for (std::string_view key; json.next_key(key);) {
    if (key == "name") {
      p.name = json.string();
      seen |= 1;
    } else if (key == "mode") {
      p.mode = json.string();
      seen |= 2;
    } else if (key == "size") {
      p.size = json.uint();
      seen |= 4;
    } else if (key == "scheduler") {
      p.scheduler = json.string();
    } else if (key == "queued") {
      p.queued = json.uint();
    } else if (key == "running") {
      p.running = json.uint();
    } else if (key == "completed") {
      p.completed = json.uint();
    } else if (key == "failed") {
      p.failed = json.uint();
    } else if (key == "shut_down") {
      p.shut_down = json.boolean();
    } else if (key == "wait") {
      p.wait = read_latency(json);
    } else if (key == "run") {
      p.run = read_latency(json);
    } else {
      json.skip();
    }
  }
  require<3>(seen, "pool");
  return p;
}

// "0.4 us" below 10 us, "850 us" below a millisecond, else as
// format_duration_ms.
std::string format_us(double us) {
  if (us < 1000) {
    char buffer[32];
    std::snprintf(buffer, sizeof(buffer), us < 10 ? "%.1f us" : "%.0f us", us);
    return buffer;
  }
  return format_duration_ms(us / 1000);
}

}  // namespace

void append_pool_text(std::string& out, const DumpPool& p) {
  out += "Pool \"";
  append_view(out, p.name);
  out += "\" ";
  append_view(out, p.mode);
  if (!p.scheduler.empty()) {
    out += " on \"";
    append_view(out, p.scheduler);
    out += "\"";
  }
  append(out, " size=%llu queued=%llu running=%llu completed=%llu failed=%llu%s\n", ull(p.size), ull(p.queued),
         ull(p.running), ull(p.completed), ull(p.failed), p.shut_down ? " (shut down)" : "");
  out += "   wait p50=" + format_us(p.wait.p50_us) + " p99=" + format_us(p.wait.p99_us) +
         " max=" + format_us(p.wait.max_us) + "   run p50=" + format_us(p.run.p50_us) +
         " p99=" + format_us(p.run.p99_us) + " max=" + format_us(p.run.max_us) + "\n";
}

Dump read_dump(ByteBuffer text) {
  Dump dump;
  dump.text = std::move(text);
  JsonCursor json(dump.text.data(), dump.text.size());
  bool has_process = false, has_schedulers = false;
  json.begin_object();
  for (std::string_view key; json.next_key(key);) {
    if (key == "process") {
      has_process = true;
      json.begin_object();
      for (std::string_view k; json.next_key(k);) {
        if (k == "pid")
          dump.pid = json.integer();
        else if (k == "name")
          dump.name = json.string();
        else if (k == "time")
          dump.time = json.string();
        else if (k == "unix_time_ms")
          dump.unix_time_ms = json.integer();
        else
          json.skip();
      }
    } else if (key == "schedulers") {
      has_schedulers = true;
      json.begin_array();
      while (json.next_item()) dump.schedulers.push_back(read_scheduler(json));
    } else if (key == "pools") {
      json.begin_array();
      while (json.next_item()) dump.pools.push_back(read_pool(json));
    } else if (key == "symbols") {
      read_symbols(json, dump.symbols);
    } else {
      json.skip();
    }
  }
  json.end();
  if (!has_process || !has_schedulers) throw JsonError("not a full dump: no process or schedulers");
  return dump;
}

std::string format_duration_ms(double ms) {
  char buffer[64];
  if (ms < 10'000)
    std::snprintf(buffer, sizeof(buffer), "%.1f ms", ms);
  else
    std::snprintf(buffer, sizeof(buffer), "%.1f s", ms / 1000);
  return buffer;
}

std::string render_dump_text(const Dump& dump, std::FILE* file) {
  std::size_t fibers = 0, frames = 0;
  for (const DumpScheduler& s : dump.schedulers) {
    fibers += s.fibers.size();
    frames += s.frames.size();
  }
  constexpr std::size_t kPiece = 64 * 1024;
  std::string out;
  out.reserve(file != nullptr ? kPiece + 4096 : 4096 + fibers * 240 + frames * 200);
  std::string time(dump.time);  // ISO 8601: 2025-06-01T08:03:43.123Z
  std::replace(time.begin(), time.end(), 'T', ' ');
  if (!time.empty() && time.back() == 'Z') time.replace(time.size() - 1, 1, " UTC");
  out += time + "\n";
  append(out, "Full fiber dump of pid %lld (", ll(dump.pid));
  append_view(out, dump.name);
  out += "):\n";
  if (!dump.pools.empty()) out += "\n";
  for (const DumpPool& p : dump.pools) append_pool_text(out, p);
  if (dump.schedulers.empty()) out += "\n(no running weft schedulers)\n";
  for (const DumpScheduler& s : dump.schedulers) {
    out += "\nScheduler \"";
    append_view(out, s.name);
    append(out, "\": %llu workers, %llu fibers\n\n", ull(s.worker_count), ull(s.fiber_count));
    for (const DumpWorker& w : s.workers) worker_line(out, w);
    std::vector<const DumpFiber*> sorted;
    sorted.reserve(s.fibers.size());
    for (const DumpFiber& f : s.fibers) sorted.push_back(&f);
    std::sort(sorted.begin(), sorted.end(), [](const DumpFiber* a, const DumpFiber* b) { return a->id < b->id; });
    for (const DumpFiber* f : sorted) {
      fiber_block(out, *f, s, dump);
      if (file != nullptr && out.size() >= kPiece) {
        std::fwrite(out.data(), 1, out.size(), file);
        out.clear();
      }
    }
  }
  if (file != nullptr) {
    std::fwrite(out.data(), 1, out.size(), file);
    out.clear();
  }
  return out;
}

}  // namespace weft::tools
