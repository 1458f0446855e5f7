// IdlePoller: what the idle loop and sysmon ask of a scheduler's netpoller.
// sched/ declares it and calls it; io/netpoller.cpp implements it, and the
// composition root (compose/scheduler.cpp) hands the core io/'s
// make_idle_poller (SchedulerParts), so that the arrows point down at link
// time too (runtime <- sched <- io). The protocol is written at the top of
// io/netpoller.h.
#pragma once

#include <weft/detail/wait_list.h>  // Clock
#include <weft/snapshot.h>

#include <chrono>
#include <memory>

namespace weft::detail {

class SchedulerCore;

// The WaitSite kind of a fiber parked on an fd; its object is the fd number
// (cast to a pointer), its operation "readable" or "writable".
inline constexpr const char kFdWaitKind[] = "fd";

class IdlePoller {
 public:
  virtual ~IdlePoller() = default;

  // Whether fibers of this scheduler are parked on an fd (a relaxed load).
  virtual bool has_waiters() const noexcept = 0;
  // Polls without blocking and readies the fibers whose fds are ready,
  // unless another thread is polling or blocked in epoll_wait. True if it
  // readied a fiber. Never call it while holding a record's lock, i.e. on a
  // parking fiber's stack: only from a worker's own loop or from sysmon.
  virtual bool poll_now() noexcept = 0;
  // Polls without blocking if fibers wait and nobody has polled for
  // `stale_after` (sysmon's fallback).
  virtual void poll_if_stale(std::chrono::nanoseconds stale_after) noexcept = 0;
  // Becomes the one blocker; false if there is one already.
  virtual bool try_begin_block(unsigned worker) noexcept = 0;
  // The blocker sleeps in epoll_wait until an event, wake() or `until`
  // (the earliest timer; time_point::max(): none) and readies what it
  // found. It is still the blocker: end_block() follows.
  virtual void block(Clock::time_point until) noexcept = 0;
  // Stops being the blocker (after block(), or without sleeping when its
  // slot was woken first).
  virtual void end_block() noexcept = 0;
  // Breaks the blocker's epoll_wait (any thread; at most one in flight).
  virtual void wake() noexcept = 0;
  // For snapshots (any thread).
  virtual PollerSnapshot view() const noexcept = 0;
};

}  // namespace weft::detail
