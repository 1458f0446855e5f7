#include "dump_format.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <string_view>

namespace weft::detail {
namespace {

// Just enough JSON writing for the dump: objects, arrays, strings and
// numbers, appended to one string. Commas are tracked per nesting level.
class JsonWriter {
 public:
  explicit JsonWriter(std::size_t reserve) { out_.reserve(reserve); }

  // Hands what is written so far to `send` once there is `piece` of it.
  void flush_if_over(std::size_t piece, const std::function<bool(std::string_view)>& send) {
    if (out_.size() < piece) return;
    if (sending_) sending_ = send(out_);
    out_.clear();
  }
  bool sending() const noexcept { return sending_; }

  void begin_object() { open('{'); }
  void end_object() { close('}'); }
  void begin_array() { open('['); }
  void end_array() { close(']'); }

  void key(const char* name) {
    separate();
    write_string(name);
    out_ += ':';
    after_key_ = true;
  }
  // No temporaries: a 100,000-fiber dump writes some two million values.
  void value(std::string_view text) {
    separate();
    write_string(text);
  }
  void value(const std::string& text) { value(std::string_view(text)); }
  void value(const char* text) { value(std::string_view(text)); }
  void value(std::uint64_t number) { integer(number); }
  void value(std::int64_t number) { integer(number); }
  void value(int number) { integer(number); }
  void value(unsigned number) { integer(number); }
  void value(bool flag) { raw(flag ? "true" : "false"); }
  void value(double number) {
    // Milliseconds to three decimals, as "%.3f" but without printf.
    char buffer[48];
    const auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), number, std::chars_format::fixed, 3);
    raw(ec == std::errc() ? std::string_view(buffer, static_cast<std::size_t>(end - buffer)) : "0");
  }
  // Addresses as hex strings ("0x7f22..."): JSON numbers are doubles to
  // most readers.
  void address(const void* pointer) {
    char buffer[24] = "0x";
    const auto [end, ec] =
        std::to_chars(buffer + 2, buffer + sizeof(buffer), reinterpret_cast<std::uintptr_t>(pointer), 16);
    separate();
    out_ += '"';
    out_.append(buffer, static_cast<std::size_t>(end - buffer));
    out_ += '"';
  }
  void null() { raw("null"); }

  template <class T>
  void field(const char* name, const T& v) {
    key(name);
    value(v);
  }

  std::string take() { return std::move(out_); }

 private:
  void open(char c) {
    separate();
    out_ += c;
    first_ = true;
  }
  void close(char c) {
    out_ += c;
    first_ = false;
  }
  void raw(std::string_view text) {
    separate();
    out_ += text;
  }
  template <class T>
  void integer(T number) {
    char buffer[24];
    const auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), number);
    raw(std::string_view(buffer, static_cast<std::size_t>(end - buffer)));
  }
  void separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (!first_) out_ += ',';
    first_ = false;
  }
  void write_string(std::string_view text) {
    out_ += '"';
    // Most strings need no escape: appended whole.
    if (std::none_of(text.begin(), text.end(), [](char ch) {
          const auto c = static_cast<unsigned char>(ch);
          return c == '"' || c == '\\' || c < 0x20;
        })) {
      out_ += text;
      out_ += '"';
      return;
    }
    for (const char ch : text) {
      const auto c = static_cast<unsigned char>(ch);
      if (c == '"' || c == '\\') {
        out_ += '\\';
        out_ += ch;
      } else if (c < 0x20) {
        char buffer[8];
        std::snprintf(buffer, sizeof(buffer), "\\u%04x", c);
        out_ += buffer;
      } else {
        out_ += ch;  // UTF-8 passes through; names are user-chosen bytes
      }
    }
    out_ += '"';
  }

  std::string out_;
  bool sending_ = true;
  bool first_ = true;
  bool after_key_ = false;
};

std::string iso_time(std::int64_t unix_time_ms) {
  const std::time_t seconds = static_cast<std::time_t>(unix_time_ms / 1000);
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900, utc.tm_mon + 1,
                utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, static_cast<int>(unix_time_ms % 1000));
  return buffer;
}

void write_worker(JsonWriter& json, const WorkerSnapshot& w) {
  json.begin_object();
  json.field("index", w.index);
  json.field("os_thread_id", w.os_thread_id);
  json.field("state", w.state);
  json.field("queue_length", static_cast<unsigned>(w.queue_length));
  json.field("fibers_run", w.fibers_run);
  json.field("steals", w.steals);
  json.field("failed_steals", w.failed_steals);
  json.field("parks", w.parks);
  json.field("preempts", w.preempts);
  json.field("handoffs", w.handoffs);
  json.field("running_ms", w.running_ms);
  json.field("stuck", w.stuck);
  json.field("stuck_fiber", w.stuck_fiber);
  json.end_object();
}

// "0x...": {"function": ..., "file": ..., "line": ..., "module": ...,
// "offset": "0x..."}, a member of the document's "symbols"; what could not
// be found is null.
void write_symbol(JsonWriter& json, std::uintptr_t address, const FrameSymbol& symbol) {
  auto text_or_null = [&](const char* name, const std::string& text) {
    json.key(name);
    if (text.empty())
      json.null();
    else
      json.value(text);
  };
  char name[24] = "0x";
  const auto [end, ec] = std::to_chars(name + 2, name + sizeof(name) - 1, address, 16);
  *end = '\0';
  json.key(name);
  json.begin_object();
  text_or_null("function", symbol.function);
  text_or_null("file", symbol.file);
  json.key("line");
  if (symbol.line != 0)
    json.value(symbol.line);
  else
    json.null();
  text_or_null("module", symbol.module);
  json.key("offset");
  json.address(reinterpret_cast<const void*>(symbol.offset));
  json.end_object();
}

void write_fiber(JsonWriter& json, const FiberSnapshot& f) {
  json.begin_object();
  json.field("id", f.id);
  json.key("address");
  json.address(f.address);
  json.field("name", f.name);
  json.field("state", f.state);
  json.field("worker", f.worker);
  json.field("pinned", f.pinned);
  json.field("active", f.counts.active);
  json.field("steal", f.counts.steal);
  json.field("steal_fail", f.counts.steal_fail);
  json.field("preempt", f.counts.preempt);
  json.field("park", f.counts.park);
  json.field("park_state", f.park_state);
  json.key("wait");
  if (f.wait_kind.empty()) {
    json.null();
  } else {
    json.begin_object();
    json.field("kind", f.wait_kind);
    json.key("object");
    if (f.wait_object != nullptr)
      json.address(f.wait_object);
    else
      json.null();
    json.field("operation", f.wait_operation);
    json.field("ms", f.waiting_ms);
    json.end_object();
  }
  // Addresses only: their names are in the document's "symbols", once
  // however many fibers share them. As frame objects, 100,000 fibers parked
  // at one call site made 103 MB of JSON instead of 27, and the server spent
  // 2 s instead of 0.1 writing it.
  json.key("stack");
  json.begin_array();
  for (const std::uintptr_t address : f.stack) json.address(reinterpret_cast<const void*>(address));
  json.end_array();
  json.end_object();
}

// {"count": n, "p50_us": ..., "p99_us": ..., "max_us": ...}
void write_latency(JsonWriter& json, const char* name, const LatencySummary& l) {
  json.key(name);
  json.begin_object();
  json.field("count", l.count);
  json.field("p50_us", l.p50_us);
  json.field("p99_us", l.p99_us);
  json.field("max_us", l.max_us);
  json.end_object();
}

void write_pool(JsonWriter& json, const PoolSnapshot& p) {
  json.begin_object();
  json.field("name", p.name);
  json.field("mode", p.mode);
  json.field("scheduler", p.scheduler);
  json.field("size", p.size);
  json.field("queued", p.queued);
  json.field("running", p.running);
  json.field("completed", p.completed);
  json.field("failed", p.failed);
  json.field("shut_down", p.shut_down);
  write_latency(json, "wait", p.wait);
  write_latency(json, "run", p.run);
  json.end_object();
}

}  // namespace

namespace {

constexpr std::size_t kNoPieces = static_cast<std::size_t>(-1);

// The document, to `send` in pieces of `piece` bytes (kNoPieces: at the end).
bool write_document(const ProcessSnapshot& snapshot, DumpDetail detail, std::size_t piece,
                    const std::function<bool(std::string_view)>& send) {
  std::size_t fibers = 0, frames = 0;
  for (const auto& s : snapshot.schedulers) {
    fibers += s.fibers.size();
    for (const auto& f : s.fibers) frames += f.stack.size();
  }
  JsonWriter json(piece != kNoPieces ? piece + 4096
                                     : 1024 + (detail == DumpDetail::full ? fibers * 320 + frames * 20 : 0));
  json.begin_object();
  json.field("weft_dump", kDumpFormatVersion);
  json.key("process");
  json.begin_object();
  json.field("pid", snapshot.pid);
  json.field("name", snapshot.name);
  json.field("time", iso_time(snapshot.unix_time_ms));
  json.field("unix_time_ms", snapshot.unix_time_ms);
  json.end_object();
  json.key("schedulers");
  json.begin_array();
  for (const auto& s : snapshot.schedulers) {
    json.begin_object();
    json.field("name", s.name);
    json.field("worker_count", static_cast<unsigned>(s.workers.size()));
    json.field("fiber_count", s.fiber_count);
    if (detail == DumpDetail::full) {
      json.key("workers");
      json.begin_array();
      for (const auto& w : s.workers) write_worker(json, w);
      json.end_array();
      json.key("fibers");
      json.begin_array();
      for (const auto& f : s.fibers) {
        write_fiber(json, f);
        json.flush_if_over(piece, send);
      }
      json.end_array();
    }
    json.end_object();
  }
  json.end_array();
  // Pools in both details: --list shows them too.
  json.key("pools");
  json.begin_array();
  for (const auto& p : snapshot.pools) write_pool(json, p);
  json.end_array();
  if (detail == DumpDetail::full) {
    json.key("symbols");
    json.begin_object();
    for (const auto& [address, symbol] : snapshot.symbols) write_symbol(json, address, symbol);
    json.end_object();
  }
  json.end_object();
  std::string out = json.take();
  out += '\n';
  return json.sending() && send(out);
}

}  // namespace

std::string to_json(const ProcessSnapshot& snapshot, DumpDetail detail) {
  std::string out;
  write_document(snapshot, detail, kNoPieces, [&](std::string_view all) {
    out = all;
    return true;
  });
  return out;
}

bool write_json(const ProcessSnapshot& snapshot, DumpDetail detail,
                const std::function<bool(std::string_view piece)>& send) {
  return write_document(snapshot, detail, 64 * 1024, send);
}

std::string error_json(const std::string& message) {
  JsonWriter json(64 + message.size());
  json.begin_object();
  json.field("weft_dump", kDumpFormatVersion);
  json.field("error", message);
  json.end_object();
  std::string out = json.take();
  out += '\n';
  return out;
}

}  // namespace weft::detail
