// `weft-dump --trace SECONDS <pid>`: records the schedulers' events for a
// while (sched/trace.h) and writes them as Chrome's Trace Event JSON, which
// ui.perfetto.dev and chrome://tracing open (docs/dump.md, "A timeline"):
//
//   - one track per thread that recorded: each worker and each spare (by
//     their thread names, "<scheduler>/<index>"), sysmon, the netpoller's
//     blocker, plain threads that woke fibers;
//   - on a worker's track, one slice per run of a fiber (B/E), named after
//     the fiber, whose end says why it left: parked (on what), yielded,
//     preempted, exited;
//   - instants for wakes, steals, hand-offs and poller wake-ups, and a flow
//     arrow from each wake to the run it caused.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>

namespace weft::detail {

using FiberNames = std::unordered_map<std::uint64_t, std::string>;

// Records for `duration`, or until `cut_short` returns true (it is asked
// every few ms), then returns the JSON document, with the names that
// `names` gives the fibers seen. Throws std::runtime_error when a trace is
// being recorded already.
std::string record_trace(std::chrono::milliseconds duration, const std::function<bool()>& cut_short,
                         const std::function<FiberNames()>& names);

}  // namespace weft::detail
