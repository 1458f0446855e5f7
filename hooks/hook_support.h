// What every libc hook shares (hooks/hooks_*.cpp): whether the caller should
// park at all, deadlines from timeouts, and the one way a hook waits for an
// fd (through the netpoller's wait_fd).
//
// The rule every hook keeps: when parking_enabled() is false it calls the
// real function and nothing else (apart from recording fd state), so a
// plain thread, code before any scheduler, a forked child's thread, a call
// from an excluded library (WEFT_HOOKS_EXCLUDE) and WEFT_HOOKS=0 get
// exactly libc's behaviour.
#pragma once

#include <time.h>
#include <weft/detail/checkpoint.h>
#include <weft/detail/park.h>
#include <weft/this_fiber.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "../io/netpoller.h"
#include "../runtime/fiber_control.h"
#include "excluded_callers.h"
#include "signal_handlers.h"

namespace weft::detail {

class Worker;

// WEFT_HOOKS=0 (or off/false/no), read once: the hooks pass everything through.
bool hooks_enabled() noexcept;

// WEFT_HOOK_LOCKS=0 (or off/false/no), or WEFT_HOOKS=0, read once: the
// pthread mutex, condition variable and rwlock hooks are libc's calls.
// Inline: every std::mutex lock and unlock asks.
[[gnu::visibility("hidden")]] extern std::atomic<int> lock_hooks_state;  // -1 until read, then 0 or 1
bool read_lock_hooks_switch() noexcept;
inline bool lock_hooks_enabled() noexcept {
  const int state = lock_hooks_state.load(std::memory_order_relaxed);
  return state > 0 || (state < 0 && read_lock_hooks_switch());
}

// True in the child of vfork, which runs on its parent thread's memory,
// thread-locals included, until it execs or exits (hooks/vfork_mark.cpp):
// it looks like the parent's fiber, but no worker can resume it, and what
// weft keeps (the fd records, the pollers) is its parent's, which the
// child's calls must leave alone. (A fork() child's thread is no fiber:
// sched/worker.cpp.)
bool in_vfork_child() noexcept;
// In a vfork child: whether its `fd` is still the open file description
// its parent's `fd` is (inherited, not a number it closed or dup2'd over),
// so that a change to the description (O_NONBLOCK, a socket option) is
// the parent's too.
bool vfork_child_shares_parents_fd(int fd) noexcept;

// True when a blocking call should park the calling fiber: a fiber made
// it, not in a signal handler (hooks/signal_handlers.h), where every hook
// is libc's call, and not from an excluded library (excluded_callers.h).
// `caller` and `frame` say where the call was made: their defaults are
// evaluated in the function that calls parking_enabled(), as its own
// return address and frame, so that a hook's gate, `if
// (!parking_enabled()) return real::read()(...)`, asks about the hook's
// caller, and a gate in one of weft's helpers is followed out to it. The
// caller's check comes last: it is the only one that may do more than a
// load (dladdr, once per call site).
inline bool parking_enabled(const void* caller = __builtin_return_address(0),
                            const void* frame = __builtin_frame_address(0)) noexcept {
  return !in_signal_handler() && current_fiber() != nullptr && hooks_enabled() && !in_vfork_child() &&
         !caller_excluded(caller, frame);
}

// The running fiber if it can be pinned to its thread: null on a plain
// thread and in a vfork child (a fiber there has no worker).
FiberControl* pinnable_fiber() noexcept;

// Keeps the calling fiber on its thread for its scope with the pin of
// this_fiber::pin(), which sysmon never releases (unlike ParkScope's): for
// state that must be put back on the thread it was set on, such as
// system()'s signal mask. Nothing on a plain thread. A pinned fiber's
// contended std::mutex blocks its thread (docs/locks.md): take none in the
// scope that a fiber of the same worker may hold.
class [[nodiscard]] ThreadPin {
 public:
  ThreadPin() noexcept;
  ~ThreadPin();
  ThreadPin(const ThreadPin&) = delete;
  ThreadPin& operator=(const ThreadPin&) = delete;

 private:
  FiberControl* fiber_;
};

// Held by a hook around every park (wait_for_fd, sleep_parked, the
// resolver's offload). Two jobs:
//
// 1. It keeps the calling fiber on its worker, so that the hooked call
//    returns on the thread it was made on. Not for weft's sake: for the
//    caller's. __errno_location() is declared const, so compiled code
//    computes errno's address once per function and keeps it across calls
//    (GCC -O2 does, in the caller of read() as much as anywhere): a fiber
//    that resumed on another worker would have its errno written to one
//    thread and read from another. The same holds for any thread_local the
//    caller's library cached. A fiber still moves between workers at
//    weft's own suspension points (docs/io.md, "what changes for your code").
//    The pin is released in one case (Worker::release_hook_pinned): when
//    the worker's thread is blocked in the kernel while the fiber waits
//    for it (it may be waiting for a std::mutex this fiber holds). The
//    fiber then resumes elsewhere, and the hook's ErrnoHome copies its
//    errno to the thread the call was made on, where the caller reads it.
//
// 2. Under ThreadSanitizer, the hook is reached from inside TSan's own
//    interceptor of the same call (read, poll, nanosleep...), which marks
//    the caller as in a blocking call and ignores its synchronisation
//    (atomics and mutexes) until the real call returns: the scheduler's
//    park and wake-up would look like races. So the park runs as a
//    separate TSan fiber, synchronised with the caller's on entry and exit.
//    Everything a hook does to weft's shared state around the park (the fd
//    records, the netpoller, a close() it makes itself) belongs inside the
//    scope too: outside it, TSan sees that state written with no lock
//    held, and reports a race with the next thread that takes the lock.
//
// 3. It keeps the thread's h_errno, which the fibers that run meanwhile
//    may set (the resolver hooks do): on a thread, a call other than the
//    resolver's leaves it alone. (errno is each hook's own: most set it.)
//
// Scopes nest (one around a whole multiplexer wait, inner ones in
// wait_for_fd and sleep_parked): pins count, and each inner TSan fiber
// switches back to the one outside it.
class [[nodiscard]] ParkScope {
 public:
  ParkScope();
  ~ParkScope();
  ParkScope(const ParkScope&) = delete;
  ParkScope& operator=(const ParkScope&) = delete;

 private:
  std::uint32_t releases_;  // the fiber's pin_releases when pinned: another means sysmon released it
  int host_error_;          // h_errno at entry
  [[maybe_unused]] void* own_tsan_fiber_ = nullptr;  // under TSan only
  [[maybe_unused]] void* park_tsan_fiber_ = nullptr;
};

// h_errno's address on the running thread, asked afresh: like
// __errno_location, __h_errno_location is declared const, and compiled
// code keeps its result across a park (ParkScope, point 1).
int* h_errno_here() noexcept;

// Held by a hook's whole parking path, from before its first attempt to
// its return: if the park's pin was released and the fiber resumed on
// another thread (ParkScope, point 1), the errno the hook leaves is copied
// to the calling thread's errno, which the caller may have the address of,
// if that thread is still asleep in the call the fiber was released behind
// (Worker::still_in_the_call_released_behind): then no fiber runs there to
// see the write. Once that call has ended (it may end by itself: a futex
// wait with a timeout, a lookup), the errno there is the next fiber's, and
// the write is left out: the caller's cached address then reads what its
// thread's last call left. Not exact: the write can meet a call that ends
// between the check and the store, a few instructions apart, and a raw
// system call is told only by the thread's switch count and the call's
// number, so a second such call of the same fiber, with no switch between,
// passes for the first. A fiber released twice in one hooked call (by the
// thread it was made on, then by the one it moved to) leaves the write
// out: the record kept is the second release's (FiberControl::
// released_from), which says nothing of the first thread.
class [[nodiscard]] ErrnoHome {
 public:
  // Out of line, so that each asks for the running thread's errno afresh.
  ErrnoHome() noexcept;
  ~ErrnoHome();
  // Whether the thread the call was made on may be written to: the fiber
  // is still on it, or that thread is still in the call it was released
  // behind. (offload.h writes h_errno there likewise.)
  bool may_write_home() const noexcept;
  ErrnoHome(const ErrnoHome&) = delete;
  ErrnoHome& operator=(const ErrnoHome&) = delete;

 private:
  FiberControl* fiber_;
  int* home_;
  std::uint32_t releases_;
};

// The checkpoint of a hooked call (include/weft/detail/checkpoint.h):
// every hook holds one for its whole body, so that its call, having been
// made, lets a fiber that sysmon asked to yield do so before it returns,
// also when the call did not park: a loop on a socket that always has data,
// a write with room or a poll of a ready fd shares its
// worker. (A call that parked switched anyway; its request was cleared at
// the switch, so the check finds none.) With nothing pending, anywhere,
// this is the one relaxed load and branch of detail::checkpoint(); the
// slow half is hook_checkpoint_slow().
//
// A hook returns libc's call before it makes one of these when
// parking_enabled() is false (`if (!parking_enabled()) return real...;`):
// off a fiber a checkpoint does nothing, and there the real function stays
// a tail call. Code after it costs more than its load and branch: with the
// checkpoint on that path, a plain thread's read() of /dev/zero took about
// 20 ns more CPU time (hooks_bench, docs/benchmarks.md), most of it, as far
// as can be seen, the extra return after a system call.
//
// Not held by the calls that only record fd state (socket, close, fcntl,
// dup...): weft's own code makes those (a multiplexer's private epoll fd is
// closed inside its ParkScope), and none of them waits.
//
// Rule for weft's own code: a call that must not yield (made with a lock
// held, from the netpoller, from a signal handler) goes to the real
// function (real::read() and so on, hooks/real_calls.h), not to the hook.
//
// A regular file's calls are checkpoints too (read, write, pread, the
// announced calls: hooks/announced.h): a fiber copying or logging to a file
// in a loop otherwise kept its worker for as long as the loop ran. A fiber
// preempted there while it holds a std::mutex is no worse off than at a
// socket's call: the lock hooks park the fibers that want the mutex
// (docs/locks.md), and a thread that blocks on one the hooks pass through
// gets the holder released by sysmon (Worker::release_hook_pinned).
class [[nodiscard]] CheckpointOnReturn {
 public:
  CheckpointOnReturn() = default;
  ~CheckpointOnReturn() {
    if (pending_preempt_requests.load(std::memory_order_relaxed) != 0) [[unlikely]]
      hook_checkpoint_slow();
  }
  CheckpointOnReturn(const CheckpointOnReturn&) = delete;
  CheckpointOnReturn& operator=(const CheckpointOnReturn&) = delete;

  // Yields if sysmon asked this fiber to, on the thread the call was made
  // on and with errno as the call left it: the caller may hold errno's
  // address, or a thread_local's, from before the call (ParkScope, point 1).
  static void hook_checkpoint_slow() noexcept;
};

// A socket timeout in nanoseconds (0: none; below 0: at once, as
// socket_timeout_ns says a negative one, hooks/fd_table.h) as a deadline.
inline Clock::time_point deadline_after_ns(std::int64_t ns) {
  if (ns < 0) return Clock::now();
  if (ns == 0) return no_deadline;
  return deadline_after(std::chrono::nanoseconds(ns));
}

// glibc's checks of an absolute deadline for its futex waits (semaphores,
// mutexes, rwlocks, condition variables): the nanoseconds below a second
// (valid_nanoseconds), a clock it waits on (futex_abstimed_supported_
// clockid). `deadline` is read as glibc reads it: a bad pointer faults.
inline bool valid_nanoseconds(const timespec* deadline) noexcept {
  return deadline->tv_nsec >= 0 && deadline->tv_nsec < 1'000'000'000;
}
inline bool glibc_waits_on(clockid_t clock) noexcept { return clock == CLOCK_REALTIME || clock == CLOCK_MONOTONIC; }

// Whether the kernel takes `ts` as a timeout: nothing negative, the
// nanoseconds below a second (else EINVAL). Null, no timeout, is valid.
inline bool valid_timespec(const timespec* ts) noexcept {
  return ts == nullptr || (ts->tv_sec >= 0 && valid_nanoseconds(ts));
}

// A relative timeout as a deadline (null: none), `timeout` valid: exact
// where steady_clock can hold it, "never" beyond (deadline_after), so that
// the time left is still what was asked less what went.
inline Clock::time_point deadline_after_timespec(const timespec* timeout) {
  if (timeout == nullptr) return no_deadline;
  return deadline_after(
      WideNanos(static_cast<long double>(timeout->tv_sec) * 1e9L + static_cast<long double>(timeout->tv_nsec)));
}

// The time from now until `deadline`, never below zero, as a timespec.
inline timespec time_left(Clock::time_point deadline) {
  const auto left = std::max(deadline - Clock::now(), Clock::duration::zero());
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
  return timespec{time_t(ns / 1'000'000'000), long(ns % 1'000'000'000)};
}

// Waits until `fd` is ready for `direction`, or the deadline. Returns 0
// when ready, else the errno the blocking call would have reported:
// EAGAIN at the deadline (a socket timeout), EBADF when the fd was closed
// meanwhile, or what wait_fd threw (EPERM for an fd epoll cannot watch).
// `mark`: fd_wait_mark() from before the call that would have blocked;
// `harvested`: as for wait_fd; `record`: the fd's, if the caller has it.
int wait_for_fd(int fd, FdDirection direction, Clock::time_point deadline, const FdWaitMark* mark = nullptr,
                std::uint32_t* harvested = nullptr, FdRecord* record = nullptr) noexcept;

// Parks the calling fiber until `deadline`.
void sleep_parked(Clock::time_point deadline) noexcept;

}  // namespace weft::detail
