// FiberControl: the control block of one fiber. It outlives the fiber's
// stack: a finished fiber hands its stack back at once, and only this small
// block waits for join() (or for the dump to let go of it).
//
// Ownership: two references, one for the runtime (dropped after the fiber's
// last switch) and one for the weft::Fiber handle (dropped by join/detach).
#pragma once

#include <weft/detail/fiber_body.h>
#include <weft/detail/spin_lock.h>
#include <weft/detail/wait_list.h>
#include <weft/snapshot.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "block_cache.h"
#include "context.h"
#include "stack.h"

namespace weft {
class Scheduler;
}

namespace weft::detail {

class SchedulerCore;
class Worker;

enum class FiberState : std::uint8_t { runnable, running, parked, done };
const char* to_string(FiberState state) noexcept;

// Written only by the thread running the fiber (steal_fail: by the thief
// that failed); read by the dump. Relaxed atomics: counts, not fences.
struct FiberCounters {
  std::atomic<std::uint64_t> active{0};      // times switched in
  std::atomic<std::uint64_t> steal{0};       // times it resumed on another worker
  std::atomic<std::uint64_t> steal_fail{0};  // times a thief found it pinned
  std::atomic<std::uint64_t> preempt{0};     // times preempted at a checkpoint
  std::atomic<std::uint64_t> park{0};        // times parked
  // Time spent runnable, waiting for a worker: sampled, and scaled by the
  // sampling period (sched/run_latency.h); written at switch in.
  std::atomic<std::uint64_t> runnable_ns{0};
};

struct FiberLocalValue {
  void* value = nullptr;
  void (*destroy)(void*) = nullptr;
};

struct FiberControl {
  FiberControl(SchedulerCore& core, std::uint64_t fiber_id) : scheduler(&core), id(fiber_id) {}
  FiberControl(const FiberControl&) = delete;
  FiberControl& operator=(const FiberControl&) = delete;
  // From a per-thread cache (runtime/block_cache.h).
  static void* operator new(std::size_t size) { return BlockCache::allocate(size); }
  static void operator delete(void* block, std::size_t size) noexcept { BlockCache::free(block, size); }

  // --- scheduling -------------------------------------------------------
  ExecutionContext context;
  SchedulerCore* const scheduler;
  std::atomic<Worker*> worker{nullptr};  // the worker it runs or last ran on
  FiberControl* link = nullptr;          // intrusive link for worker inboxes
  // this_fiber::pin()'s count and the hooks'. Written by the fiber while it
  // runs (sched/current.h, pin_current) and by sysmon only while the fiber
  // waits in a queue (Worker::release_hook_pinned); the queue orders the
  // two, so neither needs a locked add. Read by thieves (relaxed).
  std::atomic<std::uint32_t> pin_count{0};
  // The pins of pin_count that the scheduler may release: sysmon releases
  // them when the worker's thread is blocked in the kernel, so that the
  // fiber still runs (Worker::release_hook_pinned); each release bumps
  // pin_releases. The libc hooks pin this way around a park
  // (hooks/hook_support.h, ParkScope). Written by the fiber while it runs,
  // and by sysmon only while the fiber waits in its worker's inbox: the
  // inbox's CAS orders the two.
  std::uint32_t releasable_pins = 0;
  std::uint32_t pin_releases = 0;
  // What the last release was behind, written with it: the worker that
  // released it, that worker's blocking call (Worker::blocking_call(), a
  // count; 0 for a raw system call, which no hook announced), the raw
  // call's number (-1 for an announced one) and the worker's switch tick
  // then. The hook's ErrnoHome writes to that thread's errno only while it
  // is still in that call (Worker::still_in_the_call_released_behind).
  Worker* released_from = nullptr;
  std::uint32_t released_behind_call = 0;
  std::int32_t released_in_syscall = -1;
  std::uint64_t released_at_tick = 0;
  std::atomic<FiberState> state{FiberState::runnable};
  FiberCounters counters;
  // When it was last made runnable (runtime/fast_clock.h), written by
  // whoever makes it so (sched/run_latency.h) and read by the worker that
  // then runs it (the run queue between them orders the two) and by the
  // dump (relaxed: a time, not a fence).
  std::atomic<std::int64_t> runnable_since_ns{0};
  // Scheduling-latency sampling: times made runnable, and whether this time
  // is sampled. Plain fields, ordered as above.
  std::uint32_t runnable_seq = 0;
  bool runnable_sampled = false;
  // While a trace is recorded (sched/trace.h): the wake that made it
  // runnable, for the flow arrow to its run; ordered as above.
  std::uint64_t trace_flow = 0;

  // --- identity ---------------------------------------------------------
  const std::uint64_t id;
  std::string name() const;  // "fiber-<id>" unless set
  void set_name(std::string_view name) noexcept;
  // Async-signal-safe copy of the name into `out` (NUL-terminated).
  void copy_name(char* out, std::size_t size) const noexcept;

  // --- what it waits on (read by the dump) ------------------------------
  std::atomic<const char*> wait_kind{nullptr};
  std::atomic<const void*> wait_object{nullptr};
  std::atomic<const char*> wait_operation{nullptr};
  std::atomic<std::int64_t> parked_since_ns{0};  // runtime/fast_clock.h's CLOCK_MONOTONIC; 0: not parked
  void record_wait(const WaitSite& site) noexcept;
  void clear_wait() noexcept;
  // Where it parked: park()'s frame (it stays live while the fiber is
  // parked) and park()'s return address, its call site. Two relaxed stores
  // per park; the dump walks the frame chain from here
  // (introspect/fiber_stack_walk.h).
  std::atomic<std::uintptr_t> park_frame{0};
  std::atomic<std::uintptr_t> park_call_site{0};

  // --- kept for a layer above -------------------------------------------
  // Room for a small value that a layer above sched/ keeps per fiber where
  // a FiberLocal's lookup would cost too much on its path: io/'s drain note
  // (io/netpoller.h, "Drain notes"). runtime/ and sched/ never read it; it
  // is zero when the fiber starts. The fiber's own: written and read only
  // by the fiber itself.
  alignas(8) unsigned char upper_slot[16] = {};

  // --- body -------------------------------------------------------------
  // Where the callable lives: in callable_storage below, and then the
  // fiber's stack is taken only when it first runs (SchedulerCore::
  // start_fiber), from its worker's stack cache; or, for a callable too big
  // for that and for a stack size other than the pool's, at the top of a
  // stack taken at spawn (SchedulerCore::prepare_fiber). A fiber spawned
  // and not yet run holds no stack.
  Stack stack;
  FiberBody body = nullptr;  // runs (or only destroys) the callable
  void* callable = nullptr;
  std::vector<FiberLocalValue> locals;  // indexed by FiberLocal slot
  // Whether the fiber has a context to switch to: false only for one whose
  // stack is taken at its first run. Read by the worker about to run it.
  bool has_context() const noexcept { return context.saved != nullptr; }

  // --- end of life ------------------------------------------------------
  enum EndFlags : std::uint32_t { finished = 1, detached = 2 };
  std::atomic<int> refs{2};
  std::atomic<std::uint32_t> end_flags{0};
  std::exception_ptr exception;  // written before `finished`, read after
  SpinLock join_lock;
  // The weft::Mutexes it holds (sync/mutex.cpp), written by the fiber
  // alone. 0 when it ends (fiber_main checks): a mutex it left locked
  // could never be unlocked, and a later fiber given this block would
  // pass for its owner.
  std::uint32_t weft_mutexes_held = 0;
  WaitList joiners;

  // --- registry of live fibers (for the dump), guarded by its shard -----
  FiberControl* registry_prev = nullptr;
  FiberControl* registry_next = nullptr;
  unsigned registry_shard = 0;

  void release_reference() noexcept {
    // The last holder needs no locked subtraction: nobody else can touch
    // the count any more. The acquire pairs with the other's release.
    if (refs.load(std::memory_order_acquire) == 1 || refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

 private:
  friend struct GdbLayoutAccess;  // introspect/gdb_layout.cpp: where gdb finds the name
  mutable SpinLock name_lock_;
  char name_[48] = {};  // empty: the default name

 public:
  // Last, so that the fields above keep their offsets (gdb's layout). A
  // lambda that captures a few pointers, or a std::string, fits.
  static constexpr std::size_t kInlineCallableSize = 64;
  static constexpr std::size_t kInlineCallableAlign = 16;
  alignas(kInlineCallableAlign) unsigned char callable_storage[kInlineCallableSize];
};

FiberCounts read_counts(const FiberControl& fiber) noexcept;
FiberSnapshot take_snapshot(const FiberControl& fiber);

// The fiber running on this thread, or null on a plain thread (or on a
// worker between fibers). Never cached across a switch: a fiber may resume
// on another thread.
FiberControl* current_fiber() noexcept;
// The fiber whose identity the calling code has: the running fiber; in the
// child of a fork() a fiber made, whose thread is no fiber there
// (sched/worker.cpp), that fiber still, so that what it holds and keeps
// (the weft::Mutexes it locked, its FiberLocals, its name) stays its own,
// as a thread's do across fork. Null on a plain thread.
FiberControl* own_fiber() noexcept;
// In the fork child: keeps `fiber` (the forking thread's running fiber) as
// own_fiber()'s answer once the running-fiber cell is unbound.
void keep_identity_in_forked_child(FiberControl* fiber) noexcept;
// The thread's running-fiber cell: a worker thread binds the cell in which
// it records the fiber it runs (Worker's current_), once at its start, and
// unbinds it (null) at its end; current_fiber() reads it.
void bind_running_fiber_cell(const std::atomic<FiberControl*>* cell) noexcept;

}  // namespace weft::detail
