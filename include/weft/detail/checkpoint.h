// The checkpoint: where a fiber that sysmon asked to yield (it has run
// longer than Config::time_slice, docs/sysmon.md) does so. Every weft call
// that does not wait is one (docs/sync.md lists them), and so is every
// hooked libc call (hooks/hook_support.h, CheckpointOnReturn, which adds a pin
// around the yield); a call that parks needs none, since it switches
// anyway.
//
// The fast path is inline and reads no thread_local: one relaxed load of a
// process-wide count of pending requests, which sysmon writes at most once
// a slice per worker and which therefore stays in every core's cache. A
// thread_local could not be read inline safely: a fiber may resume on
// another thread, and the compiler keeps a thread_local's address across
// calls (sched/worker.cpp, current_worker()). While any request is pending
// (on any worker, of any scheduler) every checkpoint takes the slow path,
// which looks at its own worker's request and returns at once if it is not
// the one asked; a request is cleared when it is honoured or when its
// worker next switches (Worker::switch_in), so that is a short window.
//
// Rules for callers: call it only with no lock held (a SpinLock of a
// primitive, a Mutex's internals): it may switch to another fiber. Off a
// fiber (a plain thread, a worker's own loop) it does nothing.
#pragma once

#include <atomic>
#include <cstdint>

#include "require_cxx20.h"
#include "visibility.h"

namespace weft::detail {

// Workers with a preemption request outstanding, over the whole process.
// Written only by Worker::request_preempt and the clearing of a request.
WEFT_API extern std::atomic<std::uint32_t> pending_preempt_requests;

// Yields if sysmon asked the fiber running on this thread to.
WEFT_API void checkpoint_slow() noexcept;

inline void checkpoint() noexcept {
  if (pending_preempt_requests.load(std::memory_order_relaxed) != 0) [[unlikely]]
    checkpoint_slow();
}

}  // namespace weft::detail
