// The scheduler: how weft runs many fibers on a few worker threads.
//
// Glossary
//   fiber    a stackful green thread (runtime/fiber_control.h).
//   worker   an OS thread that runs fibers, one at a time (sched/worker.h).
//   ready    a fiber that can run; it sits in exactly one queue.
//   park     a fiber gives up its worker until someone unparks it
//            (include/weft/detail/park.h); its worker runs another fiber meanwhile.
//
// Where a ready fiber waits (Go's runtime and tokio's scheduler are the
// models; see docs/architecture.md for the picture):
//   next slot   per worker, one fiber: the one that the running fiber just
//               woke. It runs as soon as the waker parks, so a ping-pong
//               pair stays on one worker and in cache. Capped at 3
//               consecutive runs, after which it goes to the back of the
//               run queue so that a pair cannot starve the rest. Not
//               stealable.
//   run queue   per worker, a ring of 256 fibers, owner push/pop and
//               thieves steal half (sched/run_queue.h). Yielded and woken
//               fibers go here.
//   spawned     per worker, a Chase-Lev deque of 1024 (sched/spawn_deque.h):
//               fibers it spawned, run newest first by the owner (depth
//               first, as a fork-join wants) and stolen oldest first.
//   inbox       per worker, for pinned fibers woken elsewhere: only their
//               worker may run them.
//   global      one per scheduler (sched/global_queue.h): spawns from
//               plain threads, wakes from plain threads and the timers
//               sysmon runs, and overflow from full run queues. Checked
//               every 61 ticks even when the local queues are busy, and
//               whenever they are empty.
//
// A worker's loop: pick_next (every 61st pick the due timers and the
// global queue first; then next slot, inbox, run queue, spawned, global,
// steal); if nothing, run due timers, poll the netpoller without blocking
// if fibers wait on fds, search briefly (at most half the workers at
// once; a searcher that finds work and was the last wakes another), then
// sleep on a futex (sched/idle.h has the invariant and its rules), or, for
// one sleeper while fibers wait on fds or a timer is armed, in epoll_wait
// until the earliest deadline (io/netpoller.h says how it is still woken
// like the others; sched/timers.h who runs timers). A fiber that
// parks or yields picks its successor itself and switches to it directly:
// one context switch per hand-off; only when there is nothing to run does
// it switch back to the worker's own stack to search and sleep.
//
// Sysmon (sched/sysmon.h, docs/sysmon.md) watches the workers from a
// thread of its own: it asks a fiber that has run past Config::time_slice
// to yield at its next checkpoint, hands the queued fibers of a worker
// blocked in the kernel (announced, sched/blocking_call.h, or found so) or
// burning its CPU to the global queue, and, while a worker's thread is
// blocked, lets a spare worker run them (sched/spares.h).
//
// Rejected alternatives
//   - One shared queue (a thread pool's design): every switch contends on
//     it, and it cannot keep a ping-pong pair on one core.
//   - Switching through the worker's stack on every hand-off (g0 in Go):
//     two switches where one does.
//   - Waking a worker for every fiber put in a next slot (Go's wakep):
//     the woken worker finds nothing to steal and goes back to sleep, and
//     a ping-pong pair pays a cross-core futex wake per round trip.
//
// Memory ordering: the run queues publish with release/acquire (run_queue.h);
// sleeping and waking use a seq_cst fence on both sides (idle.h); park and
// unpark decide with one CAS on the waiter's state (detail/park.h).
#pragma once

#include <weft/config.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "../runtime/fiber_control.h"
#include "../runtime/stack.h"
#include "extension.h"
#include "fiber_registry.h"
#include "fork_generation.h"
#include "global_queue.h"
#include "idle.h"
#include "idle_poller.h"
#include "latency_histogram.h"
#include "raw_lock.h"
#include "services.h"
#include "spares.h"
#include "sysmon.h"
#include "timers.h"

namespace weft {
struct SpawnOptions;
}

namespace weft::detail {

class Worker;

// What a core is built from besides its Config: the parts of the layers
// above sched/, behind interfaces that sched/ owns, so that the arrows point
// down at link time too. The composition root (compose/scheduler.cpp) fills
// it in: io/'s netpoller and blocking pool, introspect/'s services.
struct SchedulerParts {
  // The netpoller (idle_poller.h): made by the core's constructor once the
  // config is validated, before the workers start. Required.
  std::unique_ptr<IdlePoller> (*make_poller)(SchedulerCore& core) = nullptr;
  // Made by the core's constructor after the poller, kept until the core is
  // destroyed (extension.h).
  std::vector<std::unique_ptr<Extension> (*)(const Config& config)> extensions;
  // Told of the core once it is fully built; null: none.
  SchedulerServices* services = nullptr;
};

class SchedulerCore {
 public:
  // Throws std::invalid_argument for a bad Config, or for parts without a
  // poller.
  SchedulerCore(Config config, const SchedulerParts& parts);
  SchedulerCore(const SchedulerCore&) = delete;
  SchedulerCore& operator=(const SchedulerCore&) = delete;
  ~SchedulerCore();

  const Config& config() const noexcept { return config_; }

  // --- fibers' lives ----------------------------------------------------
  // A new fiber with room for its callable (f->callable): in its control
  // block, the stack to come when it first runs (start_fiber), if the
  // callable fits there and the stack is of the pool's size; else at the
  // top of a stack taken now. Throws StackError (only when it takes the
  // stack now), std::invalid_argument for a bad stack size, or
  // std::logic_error once shutdown has begun (from outside the scheduler)
  // or ended.
  FiberControl* prepare_fiber(const SpawnOptions& options, std::size_t callable_size, std::size_t callable_align);
  // Undoes prepare_fiber when the callable could not be constructed.
  void abandon_fiber(FiberControl* fiber) noexcept;
  // Makes a prepared fiber runnable.
  void launch_fiber(FiberControl* fiber, FiberBody body) noexcept;
  // A fiber about to run on `worker` for the first time without a context
  // (!has_context()): its stack, from the worker's cache, and its context.
  // False if no stack could be had: the fiber then holds the StackError,
  // and must be ended with end_unstarted.
  bool start_fiber(FiberControl& fiber, const Worker& worker) noexcept;
  // Ends a fiber that start_fiber could not start: destroys its callable,
  // wakes its joiners (join() rethrows the StackError) or reports the error
  // as unhandled if it was detached. The callable's destructor and the
  // report are the user's code: on a worker, call it only from the
  // worker's own stack, never from a fiber's that may be parking.
  void end_unstarted(FiberControl* fiber) noexcept;

  // Makes a parked fiber runnable again, from any thread.
  void ready(FiberControl* fiber) noexcept;

  // Waits for every fiber, then stops the workers (see Config). Safe from
  // any number of threads at once; each returns once the workers are gone.
  // In a forked child it does nothing: the workers are the parent's threads.
  void shutdown();

  // True in a child forked after this scheduler was made: it has none of
  // the scheduler's threads, so it cannot run fibers; spawn throws, and the
  // Scheduler leaks its core instead of joining threads that are not there
  // (docs/usage.md, "fork").
  bool in_forked_child() const noexcept;

  // The workers' scheduling latency since the previous call (the first:
  // since the start): their histograms summed, less the sums of the last
  // call. Any thread; calls are serialized.
  LatencySummary sched_latency_since_last();

  // --- parts, for the worker and park -----------------------------------
  // The Config::workers workers (spares are in spares()).
  std::vector<std::unique_ptr<Worker>>& workers() noexcept { return workers_; }
  // How many workers may hold fibers: the workers, and the spares up to
  // the last running one (sched/spares.h); worker(i) below that.
  std::size_t steal_span() const noexcept { return config_.workers + spares_.span(); }
  Worker& worker(std::size_t i) const noexcept {
    return i < config_.workers ? *workers_[i] : spares_.at(static_cast<unsigned>(i - config_.workers));
  }
  TimerQueue& timers() noexcept { return timers_; }
  // Arms `node` and wakes whoever must watch it (sched/timers.h, "Arming").
  // On a worker, or any thread.
  void arm_timer(TimerNode& node);
  IdleWorkers& idle() noexcept { return idle_; }
  FiberRegistry& registry() noexcept { return registry_; }
  StackPool& stacks() noexcept { return stacks_; }
  Sysmon& sysmon() noexcept { return sysmon_; }
  Spares& spares() noexcept { return spares_; }
  IdlePoller& poller() noexcept { return *poller_; }
  const IdlePoller& poller() const noexcept { return *poller_; }

  void push_global(FiberControl* fiber) noexcept;
  void push_global_bulk(FiberControl* const* fibers, std::size_t count) noexcept;
  std::size_t pop_global_bulk(FiberControl** out, std::size_t max) noexcept;
  bool global_empty() const noexcept { return global_size() <= 0; }
  std::int64_t global_size() const noexcept { return global_.size(); }
  bool stopping() const noexcept { return stopping_.load(std::memory_order_acquire); }

  // Runs on the fiber's own stack when its body has returned; the fiber's
  // entry returns what this returns, its last switch (exit_context).
  [[nodiscard]] transfer_t finish_fiber(FiberControl* fiber) noexcept;
  std::uint64_t live_fibers() const noexcept;
  // An exception escaped a detached fiber: the Config's handler, or terminate.
  void report_unhandled(FiberControl* fiber) noexcept;

  // --- parts of the layers above (sched/extension.h) --------------------
  // The extension of type T the core was built with, else null. Any thread.
  template <class T>
  T* find_extension() const noexcept {
    for (const auto& extension : extensions_)
      if (auto* found = dynamic_cast<T*>(extension.get())) return found;
    return nullptr;
  }

 private:
  static void release_finished(void* fiber) noexcept;
  // What every fiber's end does, run or not: off the registry, `finished`
  // for its joiners, and an exception nobody will join reported.
  void end_fiber(FiberControl* fiber) noexcept;
  void report_stuck_fibers();
  void fiber_exited() noexcept;
  // The calling thread's worker if it is one of this scheduler's, else null.
  Worker* own_worker() const noexcept;
  // The per-worker slot of `own` (own_worker()) in the registry and the
  // live counts: i + 1 for worker i; 0 for plain threads and spares, which
  // share it (they are few, and come and go).
  unsigned local_slot(const Worker* own) const noexcept;
  // `own`'s stack cache (StackPool): a worker's own; none for a spare.
  unsigned stack_cache(const Worker* own) const noexcept;
  std::atomic<std::int64_t>& live_count(Worker* own) noexcept;  // `own`: own_worker()'s slot
  std::int64_t live_sum() const noexcept;

  const Config config_;
  const ForkGeneration made_in_;  // in_forked_child()
  StackPool stacks_;
  FiberRegistry registry_;
  IdleWorkers idle_;
  // The netpoller (io/netpoller.h); built before the workers start.
  std::unique_ptr<IdlePoller> poller_;
  TimerQueue timers_;
  GlobalQueue global_{config_.workers};
  std::vector<std::unique_ptr<Worker>> workers_;
  Spares spares_;
  Sysmon sysmon_{*this};  // after workers_ and spares_: it watches them
  RawMutex sched_latency_lock_;
  LatencyHistogram::Counts sched_latency_seen_{};  // the sums at the last sched_latency_since_last()

  // Live fibers, counted in slots: 0 for plain threads, i + 1 for worker i.
  // A fiber adds 1 where it is spawned and takes 1 off where it finishes,
  // so a slot may go below zero; the sum is the count. A cache line each:
  // one shared counter bounced between the workers on every spawn and
  // every exit (docs/benchmarks.md, "Figures behind the comments").
  struct alignas(64) LiveCount {
    std::atomic<std::int64_t> n{0};
  };
  std::unique_ptr<LiveCount[]> live_;
  std::atomic<bool> shutting_down_{false};
  std::atomic<bool> stopping_{false};
  RawMutex shutdown_lock_;
  RawCondition all_exited_;        // fiber exits, and the end of shutdown
  bool shutdown_claimed_ = false;  // a shutdown() caller is its leader
  bool stopped_ = false;
  // Destroyed after services_ (weft-dump may read them) and before
  // everything above (their threads may still call ready()).
  std::vector<std::unique_ptr<Extension>> extensions_;
  // Last: weft-dump stops seeing this scheduler before any part of it dies.
  ServiceRegistration services_;
};

// The scheduler of the calling fiber; throws std::logic_error on a thread
// that is not a weft worker. `what` names the caller in the message.
SchedulerCore& current_scheduler(const char* what);

}  // namespace weft::detail
