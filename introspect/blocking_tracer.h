// WEFT_TRACE_BLOCKING=MS: a fiber that holds its worker in the kernel for
// longer than MS milliseconds (a blocking call weft does not park, a read
// of a slow disk, a lock of a library's own) has its stack printed to
// stderr, once per call site, as Loom's jdk.tracePinnedThreads does for a
// virtual thread pinned to its carrier (docs/dump.md).
//
// A thread of its own (`weft-trace-blk`), started with the first scheduler
// when the variable is set, samples each scheduler's workers every MS/4
// (at least 1 ms, at most 50 ms): a worker that runs the same fiber (its
// switch count unchanged) asleep in a system call for MS or more is
// reported. The fiber's stack is walked from the call's stack pointer
// (introspect/thread_stack.h) while the thread still sleeps there. Nothing
// runs, and nothing is paid, without the variable.
#pragma once

namespace weft::detail {

class SchedulerCore;

// Watches `core` if WEFT_TRACE_BLOCKING is set (a positive number of ms;
// anything else is reported on stderr once and ignored).
void trace_blocking_of(SchedulerCore& core);
// Stops watching `core`; returns once no sample reads it.
void stop_tracing_blocking_of(SchedulerCore& core) noexcept;

}  // namespace weft::detail
