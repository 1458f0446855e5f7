// Event recording for `weft-dump --trace SECONDS <pid>` (docs/dump.md, "A
// timeline"): while a trace is being recorded, each thread that switches,
// wakes, steals, hands off or polls writes a record into a buffer of its
// own; introspect/trace_recorder.h turns them into Chrome's Trace Event
// JSON. Off by default: every recording point is one relaxed load of
// `tracing_on` and a branch that is never taken.
//
// Records (TraceRecord):
//   switch   a worker switched from `left` (0: its own loop) to `fiber`
//            (0: to its loop, idle); why `left` left (parked on its wait
//            site, yielded, preempted, exited); the wake that made `fiber`
//            runnable (`flow`, 0: none seen)
//   wake     `fiber` was made runnable by this thread; `flow` names it
//   steal    this worker took `fiber` from worker `arg`
//   handoff  sysmon moved `arg` fibers off worker `fiber` (an index here)
//   poll     this thread's epoll_wait returned `arg` events
//
// Buffers: one per thread, made on its first record, listed for the
// recorder and freed when the thread ends. A record is written, then
// published by a release store of the count, so that the recorder reads
// only whole ones while others are still being written. A full buffer
// drops further records (and counts them).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>

#include "../runtime/fast_clock.h"

namespace weft::detail {

struct FiberControl;

enum class TraceKind : std::uint8_t { switch_to, wake, steal, handoff, poll };
enum class TraceLeft : std::uint8_t { none, parked, yielded, preempted, exited };

struct TraceRecord {
  std::int64_t ns;
  std::uint64_t fiber;
  std::uint64_t left;
  std::uint64_t flow;
  const char* wait_kind;  // a parked `left`'s wait site, static strings
  const char* wait_operation;
  std::uint32_t arg;
  TraceKind kind;
  TraceLeft why;
};

extern std::atomic<bool> tracing_on;

inline bool tracing() noexcept { return tracing_on.load(std::memory_order_relaxed); }

// The recording points, to be called only when tracing(); out of line.
void trace_switch(FiberControl* left, TraceLeft why, FiberControl* fiber) noexcept;
void trace_wake(FiberControl& fiber) noexcept;
void trace_steal(std::uint64_t fiber, unsigned victim) noexcept;
void trace_handoff(unsigned worker, std::size_t moved) noexcept;
void trace_poll(int events) noexcept;

// For the recorder: starts a session (records before it are dropped), and
// ends it.
void start_trace_session() noexcept;
void stop_trace_session() noexcept;
// Calls `each` for every thread's buffer of the last session: its tid, its
// records in order, and how many it dropped. Under the buffers' lock (a
// thread that ends meanwhile waits).
void for_each_trace_buffer(
    const std::function<void(int tid, const TraceRecord* records, std::size_t count, std::size_t dropped)>& each);

}  // namespace weft::detail
