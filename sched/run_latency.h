// Scheduling latency: how long a fiber waits, runnable, before a worker runs
// it (Go's /sched/latencies). weft-dump shows its p50/p99/max per scheduler
// and each fiber's total time runnable (docs/dump.md).
//
// Sampled, as Go does (gTrackingPeriod): every kRunLatencyPeriod-th time a
// fiber is made runnable (woken, spawned, yielded or preempted), the time
// is read then and again when a worker switches it in; the difference goes
// into that worker's histogram, and kRunLatencyPeriod times it into the
// fiber's runnable time, which is therefore an estimate. A clock read at
// every wake and every switch cost two per PingPong hand-off; sampled, the
// unsampled rest pays an increment and a compare (docs/benchmarks.md).
// Go samples one in 8 around its schedule(); a weft switch is several
// times shorter, and a CLOCK_MONOTONIC read a large part of it
// (docs/benchmarks.md, "Figures behind the comments"), so one in 32 keeps
// the clock to Go's share of the switch. The price: a process that makes
// few fibers runnable gets few samples (1 in 32 of its wakes), so its p99
// over a short interval is nearly its max.
#pragma once

#include <time.h>

#include <cstdint>

#include "../runtime/fast_clock.h"
#include "../runtime/fiber_control.h"

namespace weft::detail {

inline constexpr std::uint32_t kRunLatencyPeriod = 32;

// Call where `fiber` becomes runnable, before it is published to a queue:
// the time it did, for weft-dump's `runnable=` (every time, on the fast
// clock), and whether this wait is sampled.
inline void mark_runnable(FiberControl& fiber) noexcept {
  fiber.runnable_since_ns.store(fast_now_ns(), std::memory_order_relaxed);
  fiber.runnable_sampled = ++fiber.runnable_seq % kRunLatencyPeriod == 0;
}

}  // namespace weft::detail
