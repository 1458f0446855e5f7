// Worker: one OS thread of a scheduler, the loop that runs fibers on it,
// and the queues it owns. Everything here runs on the worker's own thread
// except what says "any thread".
#pragma once

#include <weft/detail/checkpoint.h>

#include <atomic>
#include <cstdint>
#include <thread>

#include "../runtime/context.h"
#include "../runtime/fiber_control.h"
#include "../runtime/stack.h"
#include "blocking_call.h"
#include "current.h"
#include "idle.h"
#include "latency_histogram.h"
#include "next_slot.h"
#include "os_thread.h"
#include "raw_lock.h"
#include "run_queue.h"
#include "spawn_deque.h"

namespace weft::detail {

class SchedulerCore;
class IdlePoller;

// A run-queue entry: the fiber with its pinned flag in the low bit, so that
// a thief can pass over a pinned fiber without dereferencing it.
class RunQueueEntry {
 public:
  RunQueueEntry() noexcept = default;
  explicit RunQueueEntry(FiberControl* fiber) noexcept
      : bits_(reinterpret_cast<std::uintptr_t>(fiber) |
              (fiber->pin_count.load(std::memory_order_relaxed) != 0 ? 1u : 0u)) {}
  FiberControl* fiber() const noexcept { return reinterpret_cast<FiberControl*>(bits_ & ~std::uintptr_t{1}); }
  bool pinned() const noexcept { return (bits_ & 1u) != 0; }

 private:
  std::uintptr_t bits_ = 0;
};

// spare: a spare worker that is not running fibers (retired, or never
// started); see "Spare workers" below.
enum class WorkerState : std::uint8_t { running, searching, sleeping, stopped, spare };
const char* to_string(WorkerState state) noexcept;

// Written by the worker's thread (handoffs: by sysmon), read by the dump.
struct WorkerCounters {
  std::atomic<std::uint64_t> fibers_run{0};     // fibers switched in
  std::atomic<std::uint64_t> steals{0};         // fibers taken from other workers
  std::atomic<std::uint64_t> failed_steals{0};  // steals stopped by a pinned fiber
  std::atomic<std::uint64_t> parks{0};
  std::atomic<std::uint64_t> preempts{0};
  std::atomic<std::uint64_t> handoffs{0};  // fibers sysmon moved off while it was stuck
};

// A spare worker (sched/spares.h) is a Worker too: `spare` at construction,
// its thread started and retired by Spares, the same loop and queues.
class Worker {
 public:
  Worker(SchedulerCore& core, unsigned index, bool spare = false);
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  // A request still pending would keep every checkpoint of the process on
  // its slow path (detail/checkpoint.h) after this scheduler is gone.
  ~Worker() { take_preempt_request(); }

  // Starts the worker's thread; with `started`, counts it down once the
  // thread has set itself up (SchedulerCore's constructor waits for that).
  void start(RawLatch* started = nullptr);
  void join();

  SchedulerCore& core() const noexcept { return core_; }
  unsigned index() const noexcept { return index_; }
  FiberControl* current() const noexcept { return current_.load(std::memory_order_relaxed); }

  // --- on this worker's thread, from a fiber ----------------------------
  // Puts the running fiber at the back of the local queue and runs another.
  void yield_current();
  // Switches the running fiber out; `after` runs once it is saved.
  void park_current(SwitchAction after);
  // The running fiber has finished: picks what runs next and returns the
  // switch there, for the fiber's entry to return (exit_context).
  [[nodiscard]] transfer_t exit_current(SwitchAction after);

  // --- on this worker's thread ------------------------------------------
  // Back of the run queue (spills half to global when full); `notify` wakes an
  // idle worker to steal it.
  void push_local(FiberControl* fiber, bool notify = true);
  // A yield's requeue: to a sleeping peer if one is seen, else push_local.
  void push_yielded(FiberControl* fiber);
  void push_next(FiberControl* fiber);  // run next: the fiber just woken
  // A fiber spawned here that has not run yet (sched/spawn_deque.h).
  void push_spawned(FiberControl* fiber);
  // Yields the running fiber if sysmon asked for it (the slow half of
  // checkpoint(); see sched/sysmon.h).
  void preempt_current();
  // A fiber running here pinned itself (+1) or unpinned (-1): a spare with
  // pinned fibers may not retire, since only it may run them. This
  // worker's thread only.
  void count_pin(int delta) noexcept {
    pins_counted_.store(pins_counted_.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
  }

  // --- any thread -------------------------------------------------------
  // Hands a pinned fiber to this worker, the only one allowed to run it, or
  // a fiber that has not run yet placed here (placed_elsewhere).
  void push_inbox(FiberControl* fiber) noexcept;
  // What placement weighs (worker.cpp, "Where a fiber starts"): the fibers
  // that only this worker runs, each once: those pinned here, in any state
  // (a pinned fiber woken into the inbox among them), and those a peer
  // placed in the inbox.
  std::uint32_t home_load() const noexcept { return pinned_count() + placed_in_inbox(); }
  IdleSlot& idle_slot() noexcept { return idle_slot_; }

  // --- sysmon (sched/sysmon.h) ------------------------------------------
  // Bumped on every switch in: while it stands still, one fiber runs.
  std::uint64_t switch_tick() const noexcept { return switch_tick_.load(std::memory_order_relaxed); }
  // Asks the fiber that was switched in at `tick` (never 0) to yield at its
  // next checkpoint; a request for an older tick is dropped there.
  // Invariant: pending_preempt_requests counts the workers whose
  // preempt_tick_ is not 0 (detail/checkpoint.h), so every change of
  // preempt_tick_ between 0 and not 0 is an exchange that adjusts it.
  void request_preempt(std::uint64_t tick) noexcept {
    if (tick != 0 && preempt_tick_.exchange(tick, std::memory_order_relaxed) == 0)
      pending_preempt_requests.fetch_add(1, std::memory_order_relaxed);
  }
  bool preempt_requested() const noexcept { return preempt_tick_.load(std::memory_order_relaxed) != 0; }
  // Clears the preemption request and returns its tick (0: there was none).
  // The worker, at its switches and checkpoints; sysmon, once the fiber it
  // was for has stopped running (a request re-issued just after the worker
  // dropped it would otherwise outlive it).
  std::uint64_t take_preempt_request() noexcept {
    const std::uint64_t tick = preempt_tick_.exchange(0, std::memory_order_relaxed);
    if (tick != 0) pending_preempt_requests.fetch_sub(1, std::memory_order_relaxed);
    return tick;
  }
  // Whether a thief may take a fiber from here now: the run queue's, and the
  // spawns but one held for this worker (all of them while it is stuck).
  // The next slot is not stealable (only sysmon's hand-off seizes it).
  bool has_stealable_work() const noexcept;
  // Its spawned fibers that a thief may take now.
  bool has_stealable_spawns() const noexcept;
  // What sysmon's hand-off would move, or let thieves take; `blocked`: the
  // worker's thread is blocked in the kernel (see hand_off_queued).
  bool has_work_to_hand_off(bool blocked) const noexcept {
    return !next_.empty() || has_stealable_work() || (blocked && placed_in_inbox_.load(std::memory_order_relaxed) > 0);
  }
  // Set while one fiber has run longer than the hand-off delay: thieves
  // then take even the newest spawned fiber.
  void set_stuck(bool stuck) noexcept {
    if (stuck_.load(std::memory_order_relaxed) != stuck) stuck_.store(stuck, std::memory_order_relaxed);
  }
  bool stuck() const noexcept { return stuck_.load(std::memory_order_relaxed); }
  // Moves the next slot and the run queue's unpinned prefix to the global
  // queue, through `scratch` (an empty queue of sysmon's own), and, if
  // `blocked` (its thread is blocked in the kernel), the fibers placed in
  // its inbox. A worker that burns CPU in one fiber keeps those: it runs
  // them at its next switch, a time slice away at most when that fiber
  // reaches a checkpoint. Any thread; returns how many fibers moved.
  std::size_t hand_off_queued(RunQueue<RunQueueEntry>& scratch, bool blocked) noexcept;
  // For a worker whose thread is blocked in the kernel: the fibers in its
  // inbox and its run queue that only a libc hook pins here (parked, or
  // preempted at the hook's checkpoint) go to the global queue, their pins
  // released (a std::mutex held across a hooked read must not deadlock the
  // workers waiting for it; hooks/hook_support.h); the run queue's other fibers go
  // where hand_off_queued would put them (the user-pinned to the inbox),
  // through `scratch`. Returns how many moved.
  // `call`: the blocking call they are released behind (blocking_call(); 0
  // for a raw system call, `syscall` its number, else -1), recorded in each
  // (FiberControl::released_behind_call, released_in_syscall).
  std::size_t release_hook_pinned(RunQueue<RunQueueEntry>& scratch, std::uint32_t call, long syscall) noexcept;
  // Whether this worker's thread is still asleep in the call that `fiber`
  // was released behind: a released hook may then write its errno there,
  // where its caller holds the address (hooks/hook_support.h, ErrnoHome),
  // and no fiber runs to see it. Once the call has ended the thread runs a
  // fiber again, whose errno that is. Any thread; a /proc read for a raw
  // system call.
  bool still_in_the_call_released_behind(const FiberControl& fiber) const noexcept;
  // Whether fibers pinned here may wait in the inbox or the run queue (cheap:
  // three loads).
  bool pinned_may_wait() const noexcept {
    return inbox_.load(std::memory_order_relaxed) != nullptr ||
           inbox_fifo_.load(std::memory_order_relaxed) != nullptr || run_queue_.size() != 0;
  }

  // --- announced blocking calls (sched/blocking_call.h) -----------------
  // Odd while the running fiber is in an announced blocking call: bumped at
  // the call's entry and at its exit, so that sysmon tells one long call
  // from two short ones by its value. Written by this worker's thread only.
  std::uint32_t blocking_call() const noexcept { return blocking_call_.load(std::memory_order_relaxed); }
  // False (and nothing changes) if the worker is marked already: the
  // announcement is nested in another.
  bool begin_blocking_call(Sleeps sleeps) noexcept {
    const std::uint32_t calls = blocking_call_.load(std::memory_order_relaxed);
    if ((calls & 1) != 0) return false;
    call_sleeps_.store(sleeps, std::memory_order_relaxed);
    blocking_call_.store(calls + 1, std::memory_order_relaxed);
    return true;
  }
  // Returns the count of the call it ends (odd), for judged_call().
  std::uint32_t end_blocking_call() noexcept {
    const std::uint32_t call = blocking_call_.load(std::memory_order_relaxed);
    blocking_call_.store(call + 1, std::memory_order_relaxed);
    return call;
  }
  // Counts an announced call that returned without a verdict; true at every
  // kTimerLookCalls-th, when the call asks whether a timer is due.
  bool count_call_for_timers() noexcept { return (++calls_since_timer_look_ & (kTimerLookCalls - 1)) == 0; }
  static constexpr std::uint32_t kTimerLookCalls = 8;  // a power of two
  // Whether the call in progress said Sleeps::always. Read with
  // blocking_call() without a fence: a look that pairs one call's count
  // with the last call's flag judges that call a look early or late.
  bool call_sleeps_always() const noexcept { return call_sleeps_.load(std::memory_order_relaxed) == Sleeps::always; }
  // Whether it said Sleeps::until_woken (read likewise).
  bool call_waits_to_be_woken() const noexcept {
    return call_sleeps_.load(std::memory_order_relaxed) == Sleeps::until_woken;
  }
  // Sysmon's verdict that the announced call counted `call` (an odd
  // blocking_call()) outlasted the grace: that call was blocked. Kept apart
  // from stuck(), which a fiber holding the worker also draws while its
  // short calls come and go. A hint, written by sysmon before stuck(): a
  // store seen late makes the call look unjudged.
  void judge_call_blocked(std::uint32_t call) noexcept { judged_call_.store(call, std::memory_order_relaxed); }
  std::uint32_t judged_call() const noexcept { return judged_call_.load(std::memory_order_relaxed); }

  // --- spares (sched/spares.h) ------------------------------------------
  bool is_spare() const noexcept { return spare_; }
  // Running fibers, or about to: set by an activation, cleared by the
  // spare's thread once it has retired and flushed its queues.
  bool spare_running() const noexcept { return spare_running_.load(std::memory_order_acquire); }
  // Whether the spare has a thread (running, or retired and waiting).
  bool spare_thread_alive() const noexcept { return (spare_activations_.load(std::memory_order_relaxed) & 1u) == 0; }

  // --- read by the dump (any thread) ------------------------------------
  WorkerState state() const noexcept { return state_.load(std::memory_order_relaxed); }
  // Its thread as the OS sees it: id, /proc state, CPU time.
  const OsThread& os_thread() const noexcept { return os_thread_; }
  // Fibers waiting to run here: ring, next slot, spawns and inbox.
  std::uint32_t queue_length() const noexcept;
  // Of those, the pinned fibers in the inbox, which only this worker may
  // run (the inbox also holds fibers placed here before their first run).
  std::uint32_t inbox_length() const noexcept;
  // Every fiber in the inbox.
  std::uint32_t in_inbox() const noexcept;
  // Of those, the fibers a peer placed here, which are not pinned.
  std::uint32_t placed_in_inbox() const noexcept;
  // Fibers pinned to this worker, in any state (this_fiber::pin, the hooks).
  std::uint32_t pinned_count() const noexcept;
  const WorkerCounters& counters() const noexcept { return counters_; }
  WorkerCounters& counters() noexcept { return counters_; }
  // Sampled scheduling latency of the fibers it switched in
  // (sched/run_latency.h); recorded by this worker only.
  const LatencyHistogram& run_latency() const noexcept { return run_latency_; }

 private:
  friend struct GdbLayoutAccess;  // introspect/gdb_layout.cpp: where gdb finds the thread id
  friend class Spares;            // a spare's thread, its activations and retirement
  void run_loop(RawLatch* started);
  // Runs fibers until the scheduler stops, or (a spare) until it retires.
  void run_fibers();
  // A spare that should stop running fibers at this switch: surplus, with
  // nothing pinned here. Cheap when false: one branch for a worker.
  bool leaving() const noexcept;
  // A retiring spare's queued fibers go to the global queue.
  void flush_to_global() noexcept;
  // Next fiber to run, without blocking: next slot, inbox, run queue, spawned,
  // global queue, then stealing. Null if there is nothing.
  FiberControl* pick_next();
  FiberControl* pick_queued();  // pick_next's search, before the held spawn's release
  // pick_next's slow path: `fiber` has never run and has no stack yet
  // (SchedulerCore::start_fiber). Returns it with one, or, if none could be
  // had, ends it (on this worker's own stack) or sets it aside in
  // unstarted_ (on a fiber's) and picks again; null where pick_next would
  // be null, and when a fiber was set aside on a fiber's stack: then the
  // caller goes back to the loop, which ends it (end_set_aside).
  FiberControl* start_or_pick_again(FiberControl* fiber);
  void end_set_aside() noexcept;
  // The running fiber waits in the run queue while this worker goes back to
  // its own stack: a spare that retires, or unstarted_ to end.
  void requeue_via_loop();
  // Ends the hold on the newest spawn (sched/spawn_deque.h) once the fiber
  // that spawned it stops running, and publishes it: from then on a thief
  // may take every spawn waiting here.
  void release_held_spawn() noexcept {
    if (spawned_.held()) [[unlikely]]
      publish_held_spawn();
  }
  void publish_held_spawn() noexcept;
  // Every kGlobalCheckInterval-th pick: due timers, then a batch of the
  // global queue so that it is never starved by a busy run queue (Go's schedule).
  FiberControl* pick_periodic();
  FiberControl* pick_global();
  // The slow paths of push_local and push_spawned: the run queue or deque is full.
  void spill_half_of_run_queue();
  void spill_half_of_spawns();
  // Whether a fiber waits in this worker's run queue, spawn deque or inbox.
  bool has_local_waiting() const noexcept;
  // `fresh`, a fiber that has never run, is about to start here: true if it
  // went to a peer that holds markedly fewer fibers instead (worker.cpp,
  // "Where a fiber starts"). Two loads when this worker holds few.
  bool placed_elsewhere(FiberControl* fresh) noexcept {
    const std::uint32_t mine = home_load();
    return !spare_ && mine > kPlacementSlack && place_on_lighter_peer(fresh, mine);
  }
  bool place_on_lighter_peer(FiberControl* fresh, std::uint32_t mine) noexcept;
  // A worker (not a spare) that sleeps and is not in an announced call, or
  // null; its state as last published, so it may be waking already.
  Worker* sleeping_peer() noexcept;
  // From another worker: `fiber` (not pinned) into this one's inbox, counted
  // as placed, and this worker woken if it sleeps.
  void accept_placed(FiberControl* fiber) noexcept;
  // Sysmon's side of the inbox: takes the whole stack (the owner drains it
  // by the same exchange, so each fiber is taken by one of the two) and
  // offers each fiber to `take`; those it declines go back.
  template <class Take>
  void drain_inbox(Take&& take) noexcept;
  // The imbalance placement tolerates, in fibers, beside an eighth of the
  // lighter worker's load.
  static constexpr std::uint32_t kPlacementSlack = 8;
  FiberControl* steal();
  // Whether a fiber waits in the global queue or in any worker's queues
  // (this one's included): sched/idle.h's rules 2 and 3.
  bool work_visible() const noexcept;
  // Searches briefly, then sleeps; null when the scheduler stops. Its
  // steps, in order:
  FiberControl* wait_for_work();
  // Due timers, then the netpoller without blocking: what they readied.
  FiberControl* run_due_and_polled(IdlePoller& poller);
  // A few rounds of pick_next as a searcher (sched/idle.h); sets
  // `last_searcher` when it found nothing and was the last.
  FiberControl* search(bool& last_searcher);
  // A listed sleeper that became the poller's blocker: sleeps in epoll_wait
  // until an event, a wake or the earliest timer, then returns what it
  // readied.
  FiberControl* sleep_as_blocker(IdlePoller& poller);
  // The idle loop's non-blocking poll, its readied fibers' wakes deferred.
  bool poll_here(IdlePoller& poller) noexcept;
  // After the idle loop's poll: the next fiber, and one wake for the rest.
  FiberControl* run_after_poll();
  // Bookkeeping for `next`, which is about to run here.
  void switch_in(FiberControl* next) noexcept;
  // A trace's record of the switch from the current fiber to `next`
  // (null: to the loop).
  void trace_switch_to(FiberControl* next) noexcept;
  // The sampled half of switch_in (sched/run_latency.h).
  void record_run_latency(FiberControl& next) noexcept;
  void switch_away(SwitchAction action);

  SchedulerCore& core_;
  const unsigned index_;
  const bool spare_;
  std::thread thread_;
  OsThread os_thread_;
  std::atomic<WorkerState> state_{WorkerState::running};

  ExecutionContext loop_context_;  // the thread's own stack
  // Written by the worker only; atomic so that sysmon may compare it.
  std::atomic<FiberControl*> current_{nullptr};

  RunQueue<RunQueueEntry> run_queue_;  // fibers that have run: woken, yielded, preempted
  // Room for a burst of spawns (a server accepting a thousand connections)
  // before the older half is spilled to the global queue, through which
  // each costs more (docs/benchmarks.md, "Figures behind the comments").
  // 8 KiB.
  SpawnDeque<FiberControl*, 1024> spawned_;
  NextSlot next_;  // sysmon may seize it (hand_off_queued)
  // Set while this worker's idle loop polls: the fibers the poll readies
  // are pushed without a wake each; run_after_poll() wakes once for all.
  bool polling_here_ = false;
  // Fibers that never ran and got no stack, waiting for the loop to end
  // them (start_or_pick_again), linked through FiberControl::link.
  FiberControl* unstarted_ = nullptr;
  unsigned next_streak_ = 0;                      // consecutive runs from next_
  std::atomic<FiberControl*> inbox_{nullptr};     // pinned and placed fibers (LIFO stack)
  std::atomic<std::int32_t> inbox_count_{0};      // in inbox_ and inbox_fifo_, for the dump
  std::atomic<std::int32_t> placed_in_inbox_{0};  // of those, unpinned: placed here by a peer
  bool preempting_ = false;                       // preempt_current's switch, for a trace
  // The inbox drained by pick_queued, oldest first. Only this worker pops
  // from it, and sysmon takes all of it (drain_inbox) to release or hand
  // off what waits behind a blocked thread: a private list hid those
  // fibers from it. Each side takes the list whole with an exchange before
  // it reads a link, so neither reads a node the other holds.
  std::atomic<FiberControl*> inbox_fifo_{nullptr};
  std::atomic<std::uint32_t> pinned_steal_fails_{0};  // to charge to the pinned head

  std::uint32_t until_global_check_;                // pick_next calls left before a look at the global queue
  std::atomic<std::uint64_t> switch_tick_{0};       // written by the worker
  std::atomic<std::uint64_t> preempt_tick_{0};      // sysmon's request; 0: none
  std::atomic<std::uint32_t> blocking_call_{0};     // odd: in an announced blocking call
  std::atomic<Sleeps> call_sleeps_{Sleeps::maybe};  // with blocking_call_
  std::atomic<std::uint32_t> judged_call_{0};       // written by sysmon: judge_call_blocked
  std::uint32_t calls_since_timer_look_ = 0;        // this worker's thread only
  std::atomic<bool> stuck_{false};                  // written by sysmon
  std::uint64_t random_state_;
  // Fibers pinned on this worker: pins_counted_ less pins_released_. Two
  // words, so that the worker's own count (count_pin, at every pin a hook
  // takes) needs no locked add: only its thread writes pins_counted_, only
  // sysmon pins_released_ (release_hook_pinned). Read by the worker's own
  // thread exactly (released only grows meanwhile: an overcount).
  std::atomic<int> pins_counted_{0};
  std::atomic<int> pins_released_{0};
  int pinned_here() const noexcept {
    const int released = pins_released_.load(std::memory_order_relaxed);
    return pins_counted_.load(std::memory_order_relaxed) - released;
  }
  // Spares: a futex word bumped by each activation, bit 0 set while the
  // spare has no thread (sched/spares.cpp); and whether it runs fibers.
  std::atomic<std::uint32_t> spare_activations_;
  std::atomic<bool> spare_running_{false};
  IdleSlot idle_slot_;
  WorkerCounters counters_;
  LatencyHistogram run_latency_;
};

}  // namespace weft::detail
