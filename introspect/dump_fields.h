// The one table of weft-dump's JSON fields: every field of the document is
// named here once, next to the snapshot member it carries, and both ends
// walk these tables: the server's encoder (introspect/dump_format.cpp)
// writes them, the CLI's decoder (tools/dump_text.cpp) reads them back into
// the same weft::ProcessSnapshot. Header-only, so that the CLI needs no part
// of libweft. docs/dump.md explains each field.
//
// To add a field: one line in its struct's table (and the member in
// include/weft/snapshot.h), a line in docs/dump.md, and a bump of
// kDumpFormatVersion (introspect/dump_protocol.h).
//
// The server escapes strings with nlohmann::json, invalid UTF-8 replaced
// (U+FFFD), so the document parses whatever bytes a name holds; structure
// ({, [, keys) it writes straight from these tables, with no tree. The CLI
// reads with simdjson's On Demand parser, also with no tree: nlohmann's
// reader took seconds for a 100,000-fiber dump (docs/benchmarks.md).
#pragma once

#include <weft/snapshot.h>

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include "dump_protocol.h"

namespace weft::detail::dump {

// How a member is carried.
struct Plain {};    // as JSON has it: number, bool, string
struct Hex {};      // an address, "0x7f22...": JSON numbers are doubles to most readers
struct HexList {};  // a stack: ["0x...", ...]
struct IdList {};   // fiber ids: [5, 6]
struct OrNull {};   // a string or line number that symbolization may not find: empty (0) is null

template <class S, class M, class Codec>
struct Field {
  std::string_view name;
  M S::*member;
  Codec codec;
};
template <class S, class M, class Codec = Plain>
constexpr Field<S, M, Codec> field(std::string_view name, M S::*member, Codec codec = {}) {
  return {name, member, codec};
}

// A member of a member, written flat: a fiber's counts.
template <class S, class Outer, class M>
struct Nested {
  std::string_view name;
  Outer S::*outer;
  M Outer::*member;
};
template <class S, class Outer, class M>
constexpr Nested<S, Outer, M> nested(std::string_view name, Outer S::*outer, M Outer::*member) {
  return {name, outer, member};
}

// Some of S's own members as one object, or null when `present` says they
// mean nothing: a fiber's wait.
template <class S, class Table>
struct Group {
  std::string_view name;
  Table fields;
  bool (*present)(const S&);
};
template <class S, class Table>
constexpr Group<S, Table> group(std::string_view name, Table fields, bool (*present)(const S&)) {
  return {name, fields, present};
}

// Written, never read back: derived from other fields for readers of the
// JSON (a scheduler's worker_count in a summary, the time as text).
template <class S, class R>
struct Derived {
  std::string_view name;
  R (*value)(const S&);
};
template <class S, class R>
constexpr Derived<S, R> derived(std::string_view name, R (*value)(const S&)) {
  return {name, value};
}

// Only in a full dump ("dump"), not in a summary ("summary"); in the
// metrics' document ("metrics") if `in_metrics`.
template <class S, class M>
struct FullOnly {
  std::string_view name;
  M S::*member;
  bool in_metrics;
};
template <class S, class M>
constexpr FullOnly<S, M> full_only(std::string_view name, M S::*member, bool in_metrics = false) {
  return {name, member, in_metrics};
}

// A LatencySummary member of S, as a nested object's fields.
template <class S>
constexpr auto latency_fields(LatencySummary S::*summary) {
  using L = LatencySummary;
  return std::tuple{nested("count", summary, &L::count), nested("p50_us", summary, &L::p50_us),
                    nested("p99_us", summary, &L::p99_us), nested("max_us", summary, &L::max_us),
                    nested("sum_us", summary, &L::sum_us)};
}

// The tables, one per struct: Fields<T>::table.
template <class T>
struct Fields;

template <>
struct Fields<WorkerSnapshot> {
  using W = WorkerSnapshot;
  static constexpr auto table = std::tuple{
      field("index", &W::index),
      field("os_thread_id", &W::os_thread_id),
      field("state", &W::state),
      field("queue_length", &W::queue_length),
      field("inbox_length", &W::inbox_length),    // of queue_length: pinned, in its inbox
      field("pinned_fibers", &W::pinned_fibers),  // pinned to it, any state
      field("fibers_run", &W::fibers_run),
      field("steals", &W::steals),
      field("failed_steals", &W::failed_steals),
      field("parks", &W::parks),
      field("preempts", &W::preempts),
      field("handoffs", &W::handoffs),
      field("running_ms", &W::running_ms),
      field("stuck", &W::stuck),
      field("stuck_fiber", &W::stuck_fiber),
      field("blocked_in", &W::blocked_in),  // what a stuck thread does in the kernel
      field("spare", &W::spare),            // a spare worker (docs/sysmon.md)
      field("syscall", &W::syscall),        // the system call its thread sleeps in, decoded
      field("syscall_ms", &W::syscall_ms),
  };
};

inline bool fiber_waits(const FiberSnapshot& f) { return !f.wait_kind.empty(); }

template <>
struct Fields<FiberSnapshot> {
  using F = FiberSnapshot;
  using C = FiberCounts;
  static constexpr auto wait = std::tuple{
      field("kind", &F::wait_kind),
      field("object", &F::wait_object, Hex{}),
      field("operation", &F::wait_operation),
      field("ms", &F::waiting_ms),
      field("fd", &F::wait_fd),  // parked on an fd (docs/io.md); -1 otherwise
      field("fd_info", &F::wait_fd_info),
      field("held_by_fiber", &F::held_by_fiber),      // its owner's fiber id; 0: none or unknown
      field("held_by_thread", &F::held_by_thread),    // its owner's thread id; 0: none or unknown
      field("held_by_readers", &F::held_by_readers),  // a shared lock's readers, counted; 0: none
  };
  static constexpr auto table = std::tuple{
      field("id", &F::id),
      field("address", &F::address, Hex{}),
      field("name", &F::name),
      field("state", &F::state),
      field("worker", &F::worker),
      field("pinned", &F::pinned),
      nested("active", &F::counts, &C::active),
      nested("steal", &F::counts, &C::steal),
      nested("steal_fail", &F::counts, &C::steal_fail),
      nested("preempt", &F::counts, &C::preempt),
      nested("park", &F::counts, &C::park),
      field("runnable_ms", &F::runnable_ms),              // while runnable: since it became so
      field("runnable_total_ms", &F::runnable_total_ms),  // over its life, sampled (sched/run_latency.h)
      field("park_state", &F::park_state),
      group("wait", wait, &fiber_waits),
      field("stack", &F::stack, HexList{}),
  };
};

template <>
struct Fields<FrameSymbol> {
  using Y = FrameSymbol;
  static constexpr auto table = std::tuple{
      field("function", &Y::function, OrNull{}), field("file", &Y::file, OrNull{}),  field("line", &Y::line, OrNull{}),
      field("module", &Y::module, OrNull{}),     field("offset", &Y::offset, Hex{}),
  };
};

template <>
struct Fields<DeadlockSnapshot> {
  using D = DeadlockSnapshot;
  static constexpr auto table = std::tuple{
      field("fibers", &D::fibers, IdList{}),  // in wait order: each waits on what the next holds
  };
};

template <>
struct Fields<ThreadSnapshot> {
  using T = ThreadSnapshot;
  static constexpr auto table = std::tuple{
      field("name", &T::name),
      field("os_thread_id", &T::os_thread_id),
      field("kind", &T::kind),
      field("pool", &T::pool),
      field("state", &T::state),
      field("task_ms", &T::task_ms),
      field("syscall", &T::syscall),
      field("syscall_ms", &T::syscall_ms),
      field("stack", &T::stack, HexList{}),
  };
};

inline std::uint64_t worker_count(const SchedulerSnapshot& s) { return s.workers.size(); }

inline bool always(const SchedulerSnapshot&) { return true; }

template <>
struct Fields<SchedulerSnapshot> {
  using S = SchedulerSnapshot;
  using P = PollerSnapshot;
  static constexpr auto poller = std::tuple{
      nested("blocker", &S::poller, &P::blocker),       nested("fds_registered", &S::poller, &P::fds_registered),
      nested("io_waiters", &S::poller, &P::io_waiters), nested("polls", &S::poller, &P::polls),
      nested("events", &S::poller, &P::events),         nested("sysmon_polls", &S::poller, &P::sysmon_polls),
      nested("wakeups", &S::poller, &P::wakeups),       nested("since_poll_ms", &S::poller, &P::since_poll_ms),
  };
  using B = BlockingPoolSnapshot;
  static constexpr auto blocking = std::tuple{
      nested("threads", &S::blocking, &B::threads), nested("max_threads", &S::blocking, &B::max_threads),
      nested("busy", &S::blocking, &B::busy),       nested("queued", &S::blocking, &B::queued),
      nested("calls", &S::blocking, &B::calls),
  };
  using T = SparesSnapshot;
  static constexpr auto spares = std::tuple{
      nested("running", &S::spares, &T::running),
      nested("threads", &S::spares, &T::threads),
      nested("max_threads", &S::spares, &T::max_threads),
      nested("limit_reached", &S::spares, &T::limit_reached),
  };
  static constexpr auto sched_latency = latency_fields(&S::sched_latency);
  using FS = FiberStateCounts;
  static constexpr auto fiber_states = std::tuple{
      nested("runnable", &S::fiber_states, &FS::runnable),
      nested("running", &S::fiber_states, &FS::running),
      nested("parked", &S::fiber_states, &FS::parked),
  };
  static constexpr auto table = std::tuple{
      field("name", &S::name),
      derived("worker_count", &worker_count),
      field("fiber_count", &S::fiber_count),
      group("fiber_states", fiber_states, &always),    // fiber_count by state
      field("global_queue", &S::global_queue),         // fibers in the global queue
      group("sched_latency", sched_latency, &always),  // runnable -> running since the last dump
      group("poller", poller, &always),                // the netpoller (docs/io.md)
      group("blocking_pool", blocking, &always),       // weft::blocking's helpers
      group("spares", spares, &always),                // spare threads and Config::max_threads
      full_only("workers", &S::workers, /*in_metrics=*/true),
      full_only("fibers", &S::fibers),  // streamed: the big one
  };
};

// "2025-06-01T08:03:43.123Z", the snapshot's time for readers of the JSON.
inline std::string iso_time(const ProcessSnapshot& p) {
  const std::time_t seconds = static_cast<std::time_t>(p.unix_time_ms / 1000);
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900, utc.tm_mon + 1,
                utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, static_cast<int>(p.unix_time_ms % 1000));
  return buffer;
}

// The document: {"weft_dump": <version>, "process": {...}, "schedulers":
// [...], "symbols": {"0x...": {...}}}; "process" holds the members of this
// table up to "schedulers" (dump_format.cpp, dump_text.cpp).
template <>
struct Fields<PoolSnapshot> {
  using P = PoolSnapshot;
  static constexpr auto wait = latency_fields(&P::wait);
  static constexpr auto run = latency_fields(&P::run);
  static bool always(const P&) { return true; }
  static constexpr auto table = std::tuple{
      field("name", &P::name),           field("mode", &P::mode),  // "fibers" or "threads"
      field("scheduler", &P::scheduler), field("size", &P::size),           field("queued", &P::queued),
      field("running", &P::running),     field("completed", &P::completed), field("failed", &P::failed),
      field("shut_down", &P::shut_down), group("wait", wait, &always),  // submit to start (docs/pools.md)
      group("run", run, &always),                                       // start to finish
  };
};

template <>
struct Fields<ProcessSnapshot> {
  using P = ProcessSnapshot;
  static constexpr auto process = std::tuple{
      field("pid", &P::pid),
      field("name", &P::name),
      derived("time", &iso_time),
      field("unix_time_ms", &P::unix_time_ms),
  };
  static constexpr std::string_view version = "weft_dump";
  static constexpr std::string_view process_key = "process";
  static constexpr std::string_view schedulers = "schedulers";
  static constexpr std::string_view pools = "pools";          // in both details: --list shows them too
  static constexpr std::string_view threads = "threads";      // full only
  static constexpr std::string_view symbols = "symbols";      // full only
  static constexpr std::string_view deadlocks = "deadlocks";  // full only
  static constexpr std::string_view error = "error";          // a refusal: {"weft_dump": N, "error": "..."}
};

// A document that does not follow these tables, worded for the operator.
struct DumpFormatError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// "0x7f22a0c0" for an address.
inline std::string hex(std::uintptr_t value) {
  char buffer[24] = "0x";
  const auto [end, ec] = std::to_chars(buffer + 2, buffer + sizeof(buffer), value, 16);
  return std::string(buffer, static_cast<std::size_t>(end - buffer));
}

// The address in "0x...", or throws naming `what`.
inline std::uintptr_t parse_hex(std::string_view text, const char* what) {
  std::uintptr_t value = 0;
  const char* end = text.data() + text.size();
  if (text.size() > 2 && text[0] == '0' && text[1] == 'x') {
    const auto [ptr, ec] = std::from_chars(text.data() + 2, end, value, 16);
    if (ec == std::errc() && ptr == end) return value;
  }
  throw DumpFormatError(std::string(what) + " is not an address (\"0x...\"): \"" + std::string(text) + "\"");
}

}  // namespace weft::detail::dump
