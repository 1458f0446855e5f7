// weft-dump's text: a jstack-like rendering of the dump server's JSON
// (schema in docs/dump.md). Rendering from the JSON, never from the
// snapshot structs, keeps the text and `--json` telling the same story.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "json.h"

namespace weft::tools {

// A dump read with JsonCursor: flat structs whose strings are views into
// `text`, so that 100,000 fibers cost a vector, not a tree of allocations.
struct DumpWorker {
  std::uint64_t index = 0;
  std::int64_t os_thread_id = 0;
  std::string_view state;
  std::uint64_t queue_length = 0, fibers_run = 0, steals = 0, failed_steals = 0, parks = 0, preempts = 0;
  bool has_handoffs = false;  // sysmon's fields: absent from older processes' JSON
  std::uint64_t handoffs = 0;
  double running_ms = 0;
  bool stuck = false;
  std::uint64_t stuck_fiber = 0;
};

// What an address of the stacks is (the document's "symbols"); empty views
// for JSON nulls.
struct DumpSymbol {
  std::string_view function, file, module, offset;
  std::uint64_t line = 0;  // 0: unknown
};

struct DumpFiber {
  std::uint64_t id = 0;
  std::string_view address, name, state;
  std::int64_t worker = -1;
  bool pinned = false;
  std::uint64_t active = 0, steal = 0, steal_fail = 0, preempt = 0, park = 0;
  std::int64_t park_state = 0;
  bool has_wait = false;
  std::string_view wait_kind, wait_object, wait_operation;  // wait_object empty: null
  double wait_ms = 0;
  // Its stack: the return addresses [first_frame, first_frame + frame_count)
  // of its scheduler's `frames`, innermost first (one vector for all, not
  // one per fiber).
  std::size_t first_frame = 0, frame_count = 0;
};

struct DumpScheduler {
  std::string_view name;
  std::uint64_t worker_count = 0, fiber_count = 0;
  std::vector<DumpWorker> workers;
  std::vector<DumpFiber> fibers;
  std::vector<std::string_view> frames;  // every fiber's stack, one after another
};

// A weft::Pool's line of the dump (the document's "pools"); latencies in
// microseconds.
struct DumpLatency {
  std::uint64_t count = 0;
  double p50_us = 0, p99_us = 0, max_us = 0;
};
struct DumpPool {
  std::string_view name, mode, scheduler;
  std::uint64_t size = 0, queued = 0, running = 0, completed = 0, failed = 0;
  bool shut_down = false;
  DumpLatency wait, run;
};

struct Dump {
  ByteBuffer text;  // the server's JSON, its strings unescaped in place by the reader
  std::int64_t pid = 0;
  std::string_view name, time;
  std::int64_t unix_time_ms = 0;
  std::vector<DumpScheduler> schedulers;
  std::vector<DumpPool> pools;                               // absent from older processes' JSON: empty
  std::unordered_map<std::string_view, DumpSymbol> symbols;  // by address ("0x...")
};

// Reads the server's answer; throws JsonError if it is malformed or lacks
// a field the text needs. Unknown fields are skipped.
Dump read_dump(ByteBuffer json);

// The whole dump: a header, then per scheduler its workers and its fibers
// (by id) in Wisp's line shape. With `out`, written there in 64 KiB pieces
// as it is made (and the result is empty): 100,000 fibers are ~20 MB.
std::string render_dump_text(const Dump& dump, std::FILE* out = nullptr);

// One pool in two lines: its shape and counters, then its latencies.
void append_pool_text(std::string& out, const DumpPool& pool);

// "12.4 ms" below ten seconds, "42.0 s" above.
std::string format_duration_ms(double ms);

}  // namespace weft::tools
