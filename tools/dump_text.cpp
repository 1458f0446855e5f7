#include "dump_text.h"

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <limits>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dump_frames.h"

namespace weft::tools {
namespace {

namespace dump = detail::dump;
using dump::Fields;
namespace od = simdjson::ondemand;

// The decoder: simdjson's On Demand reader walks the document once, in its
// order, and each member is matched against its struct's field table. A
// tree (nlohmann::json's) of a 100,000-fiber dump took seconds to build
// (docs/benchmarks.md).

std::string_view text_of(od::value v) { return v.get_string(); }

// One value, by its member's type and the field's codec; simdjson throws
// on a value of another JSON type, caught by read_object to name the field.
template <class M>
void read_value(od::value v, M& out, dump::Plain) {
  if constexpr (std::is_same_v<M, bool>) {
    out = v.get_bool();
  } else if constexpr (std::is_floating_point_v<M>) {
    out = static_cast<M>(double(v.get_double()));
  } else if constexpr (std::is_integral_v<M> && std::is_signed_v<M>) {
    const std::int64_t n = v.get_int64();
    if (n < std::numeric_limits<M>::min() || n > std::numeric_limits<M>::max())
      throw DumpFormatError("out of range: " + std::to_string(n));
    out = static_cast<M>(n);
  } else if constexpr (std::is_integral_v<M>) {
    const std::uint64_t n = v.get_uint64();
    if (n > std::numeric_limits<M>::max()) throw DumpFormatError("out of range: " + std::to_string(n));
    out = static_cast<M>(n);
  } else {
    out = text_of(v);
  }
}
inline void read_value(od::value v, const void*& out, dump::Hex) {
  out = v.is_null() ? nullptr : reinterpret_cast<const void*>(dump::parse_hex(text_of(v), "a value"));
}
inline void read_value(od::value v, std::uintptr_t& out, dump::Hex) { out = dump::parse_hex(text_of(v), "a value"); }
inline void read_value(od::value v, std::vector<std::uintptr_t>& out, dump::HexList) {
  out.clear();
  for (od::value address : v.get_array()) out.push_back(dump::parse_hex(text_of(address), "a frame"));
}
inline void read_value(od::value v, std::vector<std::uint64_t>& out, dump::IdList) {
  out.clear();
  for (od::value id : v.get_array()) out.push_back(id.get_uint64());
}
template <class M>
void read_value(od::value v, M& out, dump::OrNull) {
  if (v.is_null())
    out = M{};
  else
    read_value(v, out, dump::Plain{});
}

template <class S, class Table>
void read_object(od::value v, S& s, const Table& table, const char* what);

// Whether a document must have the entry's key.
template <class S, class M, class Codec>
constexpr bool required(const dump::Field<S, M, Codec>&) {
  return true;
}
template <class S, class Outer, class M>
constexpr bool required(const dump::Nested<S, Outer, M>&) {
  return true;
}
template <class S, class Table>
constexpr bool required(const dump::Group<S, Table>&) {
  return true;
}
template <class S, class R>
constexpr bool required(const dump::Derived<S, R>&) {
  return false;
}
template <class S, class M>
constexpr bool required(const dump::FullOnly<S, M>&) {
  return false;  // absent from a summary
}

template <class S, class M, class Codec>
void read_entry(od::value v, S& s, const dump::Field<S, M, Codec>& f) {
  read_value(v, s.*f.member, f.codec);
}
template <class S, class Outer, class M>
void read_entry(od::value v, S& s, const dump::Nested<S, Outer, M>& f) {
  read_value(v, (s.*f.outer).*f.member, dump::Plain{});
}
template <class S, class Table>
void read_entry(od::value v, S& s, const dump::Group<S, Table>& g) {
  if (!v.is_null()) read_object(v, s, g.fields, g.name.data());
}
template <class S, class R>
void read_entry(od::value, S&, const dump::Derived<S, R>&) {}
template <class S, class E>
void read_entry(od::value v, S& s, const dump::FullOnly<S, std::vector<E>>& list) {
  auto& out = s.*list.member;
  for (od::value element : v.get_array()) read_object(element, out.emplace_back(), Fields<E>::table, list.name.data());
}

template <class S, class Table, std::size_t... I>
void read_object(od::value v, S& s, const Table& table, const char* what, std::index_sequence<I...>) {
  static_assert(sizeof...(I) <= 64);
  std::uint64_t seen = 0;
  for (od::field member : v.get_object()) {
    const std::string_view key = member.unescaped_key();
    try {
      // The entry named `key`, if any; unknown keys are skipped.
      (void)((key == std::get<I>(table).name &&
              (read_entry(member.value(), s, std::get<I>(table)), seen |= std::uint64_t{1} << I, true)) ||
             ...);
    } catch (const simdjson::simdjson_error& e) {
      throw DumpFormatError(std::string(what) + " field \"" + std::string(key) + "\": " + e.what());
    } catch (const DumpFormatError& e) {
      throw DumpFormatError(std::string(what) + " field \"" + std::string(key) + "\": " + e.what());
    }
  }
  auto check = [&](const auto& entry, std::size_t i) {
    if (required(entry) && (seen & (std::uint64_t{1} << i)) == 0)
      throw DumpFormatError(std::string(what) + " lacks \"" + std::string(entry.name) + "\"");
  };
  (check(std::get<I>(table), I), ...);
}

template <class S, class Table>
void read_object(od::value v, S& s, const Table& table, const char* what) {
  read_object(v, s, table, what, std::make_index_sequence<std::tuple_size_v<Table>>{});
}

// Appends formatted text to `out`, however long it is.
template <class... Args>
void append(std::string& out, fmt::format_string<Args...> format, Args&&... args) {
  fmt::format_to(std::back_inserter(out), format, std::forward<Args>(args)...);
}

using ull = unsigned long long;
using ll = long long;

void worker_line(std::string& out, const WorkerSnapshot& w) {
  append(out, "  {} {} [tid {}] ", w.spare ? "Spare" : "Worker", ull(w.index), ll(w.os_thread_id));
  append_printable(out, w.state);
  append(out, " queue={} pinned={} fibers_run={} steals={} failed_steals={} parks={} preempts={} handoffs={}",
         w.queue_length, w.pinned_fibers, w.fibers_run, w.steals, w.failed_steals, w.parks, w.preempts, w.handoffs);
  // Pinned fibers wait in the inbox, which no thief takes from.
  if (w.inbox_length != 0)
    append(out,
           "\n   {} of its queue are pinned to it (this_fiber::pin(), or a hooked call's pin), in its inbox: only this "
           "worker may run them",
           w.inbox_length);
  if (!w.syscall.empty()) {
    out += "\n   in the kernel: ";
    append_printable(out, w.syscall);
    if (w.syscall_ms >= 0) out += " for " + format_duration_ms(w.syscall_ms);
  }
  if (w.stuck) {
    append(out, "\n   STUCK: fiber #{} has run {:.1f} ms without a switch", ull(w.stuck_fiber), w.running_ms);
    if (w.blocked_in.empty()) {
      out += " (no checkpoint, or a blocking call)";
    } else {
      out += ", ";
      append_printable(out, w.blocked_in);
    }
  }
  out += '\n';
}

//   Poller: worker 1 blocked in epoll_wait, 3 fds registered, 2 fibers waiting on I/O, 120 polls, 45 events
void poller_line(std::string& out, const PollerSnapshot& p) {
  out += "  Poller: ";
  if (p.blocker >= 0)
    append(out, "worker {} blocked in epoll_wait", ll(p.blocker));
  else
    append(out, "nobody blocked in epoll_wait, last poll {:.1f} ms ago", p.since_poll_ms);
  append(out, ", {} fds registered, {} fibers waiting on I/O, {} polls ({} by sysmon), {} events\n",
         ull(p.fds_registered), ull(p.io_waiters), ull(p.polls), ull(p.sysmon_polls), ull(p.events));
}

// "weft::BlockingQueue@0x55d0c3a0 (take)"; no address for waits on no
// object (a sleep). An fd: "fd 7 (readable) 127.0.0.1:41234 -> 127.0.0.1:6379".
void wait_site(std::string& out, const FiberSnapshot& f) {
  if (f.wait_fd >= 0) {
    append(out, "fd {} (", ll(f.wait_fd));
    append_printable(out, f.wait_operation);
    out += ')';
    if (!f.wait_fd_info.empty()) {
      out += ' ';
      append_printable(out, f.wait_fd_info);
    }
    return;
  }
  append_printable(out, f.wait_kind);
  if (f.wait_object != nullptr) {
    out += '@';
    out += hex_address(f.wait_object);
  }
  if (!f.wait_operation.empty()) {
    out += " (";
    append_printable(out, f.wait_operation);
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
void stack_lines(std::string& out, const FiberSnapshot& f, const ProcessSnapshot& dump, const TextOptions& options) {
  for (const ShownFrame& frame : frames_to_show(f, dump, options.all_frames)) {
    out += "      at ";
    append_printable(out, frame.function);
    out += " (";
    const FrameSymbol* symbol = frame.where;
    if (symbol != nullptr && !symbol->file.empty()) {
      append_printable(out, base_name(symbol->file));
      if (symbol->line != 0) append(out, ":{}", symbol->line);
    } else if (symbol != nullptr && !symbol->module.empty()) {
      append_printable(out, base_name(symbol->module));
      out += '+';
      out += dump::hex(symbol->offset);
    } else {
      out += "unknown";
    }
    out += ")\n";
  }
}

using FibersById = std::unordered_map<std::uint64_t, const FiberSnapshot*>;

// ` (held by fiber #5 "writer")`, ` (held by thread 1234)` or ` (held by 3
// readers)`: who holds what the fiber waits on, when weft knows.
void held_by(std::string& out, const FiberSnapshot& f, const FibersById& fibers) {
  if (f.held_by_fiber != 0) {
    append(out, " (held by fiber #{}", ull(f.held_by_fiber));
    if (const auto it = fibers.find(f.held_by_fiber); it != fibers.end()) {
      out += " \"";
      append_printable(out, it->second->name);
      out += '"';
    }
    out += ')';
  } else if (f.held_by_thread != 0) {
    append(out, " (held by thread {})", ll(f.held_by_thread));
  } else if (f.held_by_readers != 0) {
    append(out, " (held by {} reader{})", ull(f.held_by_readers), f.held_by_readers == 1 ? "" : "s");
  }
}

void fiber_block(std::string& out, const FiberSnapshot& f, const ProcessSnapshot& dump, const FibersById& fibers,
                 const TextOptions& options) {
  out += "\n- Fiber [";
  out += hex_address(f.address);
  out += "] \"";
  append_printable(out, f.name);
  append(out, "\" #{} active={} steal={} steal_fail={} preempt={} park={}/{} runnable={:.3f}ms\n   ", ull(f.id),
         ull(f.counts.active), ull(f.counts.steal), ull(f.counts.steal_fail), ull(f.counts.preempt), ull(f.counts.park),
         ll(f.park_state), f.runnable_ms);
  append_printable(out, f.state);
  if (f.state == "running")
    append(out, " on worker {}", ll(f.worker));
  else if (f.worker >= 0)
    append(out, " (last ran on worker {})", ll(f.worker));
  else
    out += " (not started yet)";
  if (f.pinned) out += ", pinned to its worker";
  out += '\n';
  if (!f.wait_kind.empty()) {
    if (f.park_state == 1) {
      out += "   woken from waiting on ";
      wait_site(out, f);
      out += ", waits for a worker (parked " + format_duration_ms(f.waiting_ms) + " ago)\n";
    } else if (f.state == "parked") {
      out += "   waiting on ";
      wait_site(out, f);
      held_by(out, f, fibers);
      out += " for " + format_duration_ms(f.waiting_ms) + "\n";
      stack_lines(out, f, dump, options);
    }
  } else if (f.state == "running" && !f.stack.empty()) {
    // Its worker's thread sleeps in a system call (the worker line says
    // which): where the fiber made it.
    out += "   in a system call on its worker's thread (see the worker line)\n";
    stack_lines(out, f, dump, options);
  }
}

// `"writer" #5`, as jstack names a thread in its deadlock report.
void fiber_title(std::string& out, std::uint64_t id, const FibersById& fibers) {
  const auto it = fibers.find(id);
  out += '"';
  if (it != fibers.end()) append_printable(out, it->second->name);
  append(out, "\" #{}", id);
}

// After the fibers, as jstack's "Found one Java-level deadlock:": each
// cycle, who waits on what and who holds it, then the stacks of its fibers.
void deadlock_report(std::string& out, const ProcessSnapshot& dump, const FibersById& fibers,
                     const TextOptions& options) {
  for (const DeadlockSnapshot& cycle : dump.deadlocks) {
    out += "\nFound one weft deadlock:\n=======================\n";
    for (std::size_t i = 0; i < cycle.fibers.size(); ++i) {
      const auto it = fibers.find(cycle.fibers[i]);
      if (it == fibers.end()) continue;
      fiber_title(out, it->second->id, fibers);
      out += ":\n  waiting on ";
      wait_site(out, *it->second);
      out += ",\n  which is held by ";
      fiber_title(out, cycle.fibers[(i + 1) % cycle.fibers.size()], fibers);
      out += '\n';
    }
    out += "\nStacks of the fibers listed above:\n==================================\n";
    for (const std::uint64_t id : cycle.fibers) {
      fiber_title(out, id, fibers);
      out += ":\n";
      if (const auto it = fibers.find(id); it != fibers.end()) stack_lines(out, *it->second, dump, options);
    }
  }
  if (!dump.deadlocks.empty())
    append(out, "\nFound {} deadlock{}.\n", dump.deadlocks.size(), dump.deadlocks.size() == 1 ? "" : "s");
}

}  // namespace

ProcessSnapshot read_dump(std::string_view json) {
  using P = Fields<ProcessSnapshot>;
  ProcessSnapshot dump;
  try {
    const simdjson::padded_string padded(json);
    od::parser parser;
    od::document document = parser.iterate(padded);
    bool first = true, process = false, schedulers = false;
    for (od::field member : document.get_object()) {
      const std::string_view key = member.unescaped_key();
      if (first) {
        // The version comes first, and decides how to read the rest.
        if (key != P::version) throw DumpFormatError("not a weft dump: no \"" + std::string(P::version) + "\" first");
        const std::int64_t version = member.value().get_int64();
        if (version != detail::kDumpFormatVersion)
          throw DumpFormatError("schema version " + std::to_string(version) + ", but this weft-dump reads version " +
                                std::to_string(detail::kDumpFormatVersion) +
                                " (use the weft-dump of the target's weft)");
        first = false;
      } else if (key == P::process_key) {
        read_object(member.value(), dump, P::process, "process");
        process = true;
      } else if (key == P::schedulers) {
        for (od::value s : member.value().get_array())
          read_object(s, dump.schedulers.emplace_back(), Fields<SchedulerSnapshot>::table, "scheduler");
        schedulers = true;
      } else if (key == P::pools) {
        for (od::value p : member.value().get_array())
          read_object(p, dump.pools.emplace_back(), Fields<PoolSnapshot>::table, "pool");
      } else if (key == P::threads) {
        for (od::value t : member.value().get_array())
          read_object(t, dump.threads.emplace_back(), Fields<ThreadSnapshot>::table, "thread");
      } else if (key == P::deadlocks) {
        for (od::value d : member.value().get_array())
          read_object(d, dump.deadlocks.emplace_back(), Fields<DeadlockSnapshot>::table, "deadlock");
      } else if (key == P::symbols) {
        for (od::field symbol : member.value().get_object()) {
          const std::uintptr_t address = dump::parse_hex(std::string_view(symbol.unescaped_key()), "a symbol's key");
          read_object(symbol.value(), dump.symbols[address], Fields<FrameSymbol>::table, "symbol");
        }
      } else if (key == P::error) {
        throw DumpRefused(printable(text_of(member.value())));
      }
    }
    if (first || !process || !schedulers) throw DumpFormatError("not a weft dump: no version, process or schedulers");
  } catch (const simdjson::simdjson_error& e) {
    throw DumpFormatError(std::string("not valid JSON: ") + e.what());
  }
  return dump;
}

std::string format_duration_ms(double ms) {
  return ms < 10'000 ? fmt::format("{:.1f} ms", ms) : fmt::format("{:.1f} s", ms / 1000);
}

namespace {

// The code point of the bidirectional formatting control that `text`
// starts with, or 0: the embeddings and overrides U+202A-U+202E, the
// isolates U+2066-U+2069, and the marks U+200E, U+200F and U+061C. Each
// can reorder the rest of a terminal line, so a name holding one could
// show as another fiber's line.
char32_t bidi_control(std::string_view text) {
  if (text.size() >= 2 && static_cast<unsigned char>(text[0]) == 0xd8 && static_cast<unsigned char>(text[1]) == 0x9c)
    return 0x061c;
  if (text.size() < 3 || static_cast<unsigned char>(text[0]) != 0xe2) return 0;
  const auto b1 = static_cast<unsigned char>(text[1]), b2 = static_cast<unsigned char>(text[2]);
  const char32_t cp = 0x2000 | static_cast<char32_t>((b1 & 0x3f) << 6) | (b2 & 0x3f);
  const bool bidi = (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0x200e || cp == 0x200f;
  return (b1 & 0xc0) == 0x80 && (b2 & 0xc0) == 0x80 && bidi ? cp : 0;
}

}  // namespace

void append_printable(std::string& out, std::string_view text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const bool c1 = c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
                    static_cast<unsigned char>(text[i + 1]) <= 0x9f;  // U+0080-U+009F in UTF-8
    if (c < 0x20 || c == 0x7f) {
      append(out, "\\x{:02x}", unsigned(c));
    } else if (c1) {
      append(out, "\\x{:02x}", unsigned(static_cast<unsigned char>(text[++i])));
    } else if (const char32_t bidi = c >= 0xd8 ? bidi_control(text.substr(i)) : 0) {
      append(out, "\\u{:04x}", static_cast<unsigned>(bidi));
      i += bidi == 0x061c ? 1 : 2;
    } else if (c == '\\' || c == '"') {
      out += '\\';
      out += static_cast<char>(c);
    } else {
      out += static_cast<char>(c);
    }
  }
}

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  append_printable(out, text);
  return out;
}

std::string hex_address(const void* address) { return dump::hex(reinterpret_cast<std::uintptr_t>(address)); }

// "0.4 us" below 10 us, "850 us" below a millisecond, else as
// format_duration_ms.
std::string format_us(double us) {
  if (us < 1000) return us < 10 ? fmt::format("{:.1f} us", us) : fmt::format("{:.0f} us", us);
  return format_duration_ms(us / 1000);
}

// Thread "db-writer-0" [tid 1234] of pool "db-writer": sleeping, its task has run 12.3 ms
//    in the kernel: futex(0x7f...) on weft::ConditionVariable@0x... (wait) for 1.2 s
//       at ...
void thread_lines(std::string& out, const ThreadSnapshot& t, const ProcessSnapshot& dump, const TextOptions& options) {
  out += "Thread \"";
  append_printable(out, t.name);
  append(out, "\" [tid {}] ", t.os_thread_id);
  if (t.kind == "pool") {
    out += "of pool \"";
    append_printable(out, t.pool);
    out += "\"";
  } else {
    out += "a weft::Thread";
  }
  out += ": ";
  append_printable(out, t.state.empty() ? "gone" : t.state);
  if (t.task_ms >= 0) out += ", its task has run " + format_duration_ms(t.task_ms);
  out += '\n';
  if (!t.syscall.empty()) {
    out += "   in the kernel: ";
    append_printable(out, t.syscall);
    if (t.syscall_ms >= 0) out += " for " + format_duration_ms(t.syscall_ms);
    out += '\n';
    FiberSnapshot frames;  // the frames' printer takes a fiber's
    frames.stack = t.stack;
    stack_lines(out, frames, dump, options);
  }
}

void pool_lines(std::string& out, const PoolSnapshot& p) {
  out += "Pool \"";
  append_printable(out, p.name);
  out += "\" ";
  append_printable(out, p.mode);
  if (!p.scheduler.empty()) {
    out += " on \"";
    append_printable(out, p.scheduler);
    out += "\"";
  }
  append(out, " size={} queued={} running={} completed={} failed={}{}\n", ull(p.size), ull(p.queued), ull(p.running),
         ull(p.completed), ull(p.failed), p.shut_down ? " (shut down)" : "");
  out += "   wait p50=" + format_us(p.wait.p50_us) + " p99=" + format_us(p.wait.p99_us) +
         " max=" + format_us(p.wait.max_us) + "   run p50=" + format_us(p.run.p50_us) +
         " p99=" + format_us(p.run.p99_us) + " max=" + format_us(p.run.max_us) + "\n";
}

std::string render_dump_text(const ProcessSnapshot& dump, std::FILE* file, const TextOptions& options) {
  std::size_t fibers = 0, frames = 0;
  FibersById by_id;
  for (const SchedulerSnapshot& s : dump.schedulers) {
    fibers += s.fibers.size();
    for (const FiberSnapshot& f : s.fibers) {
      frames += f.stack.size();
      by_id.emplace(f.id, &f);
    }
  }
  constexpr std::size_t kPiece = 64 * 1024;
  std::string out;
  out.reserve(file != nullptr ? kPiece + 4096 : 4096 + fibers * 240 + frames * 200);
  std::string time = dump::iso_time(dump);  // 2025-06-01T08:03:43.123Z
  std::replace(time.begin(), time.end(), 'T', ' ');
  if (!time.empty() && time.back() == 'Z') time.replace(time.size() - 1, 1, " UTC");
  out += time + "\n";
  append(out, "Full fiber dump of pid {} (", ll(dump.pid));
  append_printable(out, dump.name);
  out += "):\n";
  if (!dump.pools.empty()) out += "\n";
  for (const PoolSnapshot& p : dump.pools) pool_lines(out, p);
  if (!dump.threads.empty()) out += "\n";
  for (const ThreadSnapshot& t : dump.threads) thread_lines(out, t, dump, options);
  if (dump.schedulers.empty()) out += "\n(no running weft schedulers)\n";
  for (const SchedulerSnapshot& s : dump.schedulers) {
    out += "\nScheduler \"";
    append_printable(out, s.name);
    append(out, "\": {} workers, {} fibers\n", ull(s.workers.size()), ull(s.fiber_count));
    // The global queue is no worker's: their queue= does not count it.
    append(out, "  global queue: {} fibers; scheduling latency since the last dump: ", ull(s.global_queue));
    if (s.sched_latency.count == 0)
      out += "no samples\n";
    else
      append(out, "p50 {:.1f} us, p99 {:.1f} us, max {:.1f} us ({} samples)\n", s.sched_latency.p50_us,
             s.sched_latency.p99_us, s.sched_latency.max_us, ull(s.sched_latency.count));
    if (s.blocking.threads != 0)
      append(out, "  weft::blocking: {} of {} helper threads, {} busy, {} calls queued, {} done\n",
             ull(s.blocking.threads), ull(s.blocking.max_threads), ull(s.blocking.busy), ull(s.blocking.queued),
             ull(s.blocking.calls));
    if (s.spares.threads != 0 || s.spares.limit_reached)
      append(out, "  spare threads: {} running, {} alive, limit {} threads in all{}\n", ull(s.spares.running),
             ull(s.spares.threads), ull(s.spares.max_threads),
             s.spares.limit_reached ? " REACHED: raise Config::max_threads (WEFT_MAX_THREADS)" : "");
    out += '\n';
    for (const WorkerSnapshot& w : s.workers) worker_line(out, w);
    poller_line(out, s.poller);
    std::vector<const FiberSnapshot*> sorted;
    sorted.reserve(s.fibers.size());
    for (const FiberSnapshot& f : s.fibers) sorted.push_back(&f);
    std::sort(sorted.begin(), sorted.end(),
              [](const FiberSnapshot* a, const FiberSnapshot* b) { return a->id < b->id; });
    for (const FiberSnapshot* f : sorted) {
      fiber_block(out, *f, dump, by_id, options);
      if (file != nullptr && out.size() >= kPiece) {
        std::fwrite(out.data(), 1, out.size(), file);
        out.clear();
      }
    }
  }
  deadlock_report(out, dump, by_id, options);
  if (file != nullptr) {
    std::fwrite(out.data(), 1, out.size(), file);
    out.clear();
  }
  return out;
}

}  // namespace weft::tools
