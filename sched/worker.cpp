#include "worker.h"

#include <pthread.h>

#include <iterator>
#include <string>

#include "../runtime/overflow_handler.h"
#include "futex.h"
#include "idle_poller.h"
#include "kernel_call.h"
#include "run_latency.h"
#include "scheduler_core.h"
#include "trace.h"

namespace weft::detail {
namespace {

[[gnu::tls_model("initial-exec")]] thread_local Worker* tls_worker = nullptr;

// The child of a fork() made on a worker (by a fiber) has that thread
// alone: its worker's loop, the other workers, sysmon and the poller are
// the parent's. The thread stops being a worker and the fiber a fiber, so
// that everything weft does there (a park, a yield, a join, a hook) is a
// plain thread's; before, a park or a yield switched to the worker's loop,
// which ran copies of the parent's fibers in the child. Its identity stays
// (own_fiber(): its weft::Mutexes, FiberLocals, name). The fiber's end in
// the child is its thread's end (fiber_main).
void stop_being_a_worker_in_forked_child() noexcept {
  keep_identity_in_forked_child(current_fiber());
  tls_worker = nullptr;
  bind_running_fiber_cell(nullptr);
}
[[gnu::constructor]] void register_fork_handler() {
  pthread_atfork(nullptr, nullptr, &stop_being_a_worker_in_forked_child);
}

// Tokio caps its LIFO slot at 3: enough to keep a ping-pong pair hot,
// little enough that the run queue behind it still moves.
constexpr unsigned kNextStreakLimit = 3;
// Go's schedule(): a prime, so it does not beat with periodic workloads.
constexpr std::uint32_t kGlobalCheckInterval = 61;
// Rounds of looking for work before going to sleep: a few, briefly (Go's
// spinning M makes four passes over the Ps without pausing). A worker that
// just ran out of work usually finds none for a while (its fibers wait on
// fds: the blocker or the next poll readies them), and each futex sleep it
// avoids by spinning longer costs more CPU than the sleep itself
// (docs/benchmarks.md, "The idle path", and "Figures behind the comments").
constexpr int kSearchRounds = 4;
constexpr int kPausesPerRound = 8;
constexpr std::size_t kGlobalBatch = 32;

// Counters are written by one thread at a time: a plain load and store, not
// a locked read-modify-write, keeps them off the hot path's critical cost.
inline void bump(std::atomic<std::uint64_t>& counter, std::uint64_t by = 1) noexcept {
  counter.store(counter.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

bool not_pinned(FiberControl* fiber) noexcept { return fiber->pin_count.load(std::memory_order_relaxed) == 0; }
bool stealable(RunQueueEntry entry) noexcept { return !entry.pinned(); }

// SwitchActions, run on the worker that switched the fiber out: the one it
// last ran on, which switch_in recorded.
Worker* last_worker(void* fiber) noexcept {
  return static_cast<FiberControl*>(fiber)->worker.load(std::memory_order_relaxed);
}
void requeue(void* fiber) {
  mark_runnable(*static_cast<FiberControl*>(fiber));
  last_worker(fiber)->push_local(static_cast<FiberControl*>(fiber), false);
}
void requeue_and_notify(void* fiber) {
  mark_runnable(*static_cast<FiberControl*>(fiber));
  last_worker(fiber)->push_local(static_cast<FiberControl*>(fiber), true);
}
void requeue_yielded(void* fiber) {
  mark_runnable(*static_cast<FiberControl*>(fiber));
  last_worker(fiber)->push_yielded(static_cast<FiberControl*>(fiber));
}
}  // namespace

// Not inlined, and with a compiler barrier: a fiber can resume on another
// thread, and the compiler must not reuse a TLS address computed before.
[[gnu::noinline]] Worker* current_worker() noexcept {
  asm volatile("" ::: "memory");
  return tls_worker;
}

bool preempt_requested_here() noexcept {
  const Worker* worker = current_worker();
  return worker != nullptr && worker->preempt_requested();
}

constinit std::atomic<std::uint32_t> pending_preempt_requests{0};

// Out of line, and with the same barrier as current_worker(): the caller
// may have resumed on another thread since its last look at tls_worker.
void checkpoint_slow() noexcept {
  asm volatile("" ::: "memory");
  Worker* worker = tls_worker;
  if (worker == nullptr || !worker->preempt_requested()) return;  // another worker's request, or a plain thread
  worker->preempt_current();
}

const char* to_string(WorkerState state) noexcept {
  switch (state) {
    case WorkerState::running:
      return "running";
    case WorkerState::searching:
      return "searching";
    case WorkerState::sleeping:
      return "sleeping";
    case WorkerState::stopped:
      return "stopped";
    case WorkerState::spare:
      return "spare";
  }
  return "unknown";
}

Worker::Worker(SchedulerCore& core, unsigned index, bool spare)
    : core_(core),
      index_(index),
      spare_(spare),
      state_(spare ? WorkerState::spare : WorkerState::running),
      until_global_check_(kGlobalCheckInterval),
      random_state_(0x9E3779B97F4A7C15ull * (index + 1)),
      spare_activations_(spare ? 1u : 0u) {}  // a spare starts without a thread

void Worker::start(RawLatch* started) {
  thread_ = std::thread([this, started] { run_loop(started); });
}

void Worker::join() {
  if (thread_.joinable()) thread_.join();
}

bool Worker::leaving() const noexcept {
  if (!spare_) [[likely]]
    return false;
  return pinned_here() == 0 && core_.spares().surplus();
}

void Worker::flush_to_global() noexcept {
  FiberControl* batch[RunQueue<RunQueueEntry>::capacity];
  std::size_t n = 0;
  if (FiberControl* next = next_.take()) batch[n++] = next;
  auto owner = run_queue_.owner();
  while (FiberControl* fiber = owner.pop().fiber()) batch[n++] = fiber;
  core_.push_global_bulk(batch, n);
  // Nothing pinned is here (leaving() and the idle retirement check
  // pinned_here()), so the inbox is empty.
  n = 0;
  while (FiberControl* fiber = spawned_.pop()) {
    batch[n++] = fiber;
    if (n == std::size(batch)) {
      core_.push_global_bulk(batch, n);
      n = 0;
    }
  }
  core_.push_global_bulk(batch, n);
  core_.idle().notify_work();
}

std::uint32_t Worker::queue_length() const noexcept {
  return run_queue_.size() + static_cast<std::uint32_t>(spawned_.size()) + (next_.empty() ? 0 : 1) + in_inbox();
}

std::uint32_t Worker::in_inbox() const noexcept {
  const std::int32_t n = inbox_count_.load(std::memory_order_relaxed);  // may dip below 0 for a moment
  return n > 0 ? static_cast<std::uint32_t>(n) : 0;
}

std::uint32_t Worker::inbox_length() const noexcept {
  const std::int32_t n =
      inbox_count_.load(std::memory_order_relaxed) - placed_in_inbox_.load(std::memory_order_relaxed);
  return n > 0 ? static_cast<std::uint32_t>(n) : 0;
}

std::uint32_t Worker::placed_in_inbox() const noexcept {
  // Counted before the push (accept_placed) and after the take, so never
  // below 0.
  return static_cast<std::uint32_t>(placed_in_inbox_.load(std::memory_order_relaxed));
}

std::uint32_t Worker::pinned_count() const noexcept {
  const int n = pinned_here();
  return n > 0 ? static_cast<std::uint32_t>(n) : 0;
}

bool Worker::has_stealable_work() const noexcept { return run_queue_.size() != 0 || has_stealable_spawns(); }

bool Worker::has_stealable_spawns() const noexcept { return spawned_.stealable(stuck()); }

template <class Take>
void Worker::drain_inbox(Take&& take) noexcept {
  // Both lists taken before either is walked: what `take` leaves goes back
  // onto the stack, and is not offered twice.
  FiberControl* lists[] = {inbox_fifo_.exchange(nullptr, std::memory_order_acquire),
                           inbox_.exchange(nullptr, std::memory_order_acquire)};
  for (FiberControl* list : lists) {
    while (list != nullptr) {
      FiberControl* fiber = list;
      list = fiber->link;
      inbox_count_.fetch_sub(1, std::memory_order_relaxed);
      if (!take(fiber)) push_inbox(fiber);
    }
  }
}

std::size_t Worker::hand_off_queued(RunQueue<RunQueueEntry>& scratch, bool blocked) noexcept {
  std::size_t moved = 0;
  // The next slot never holds a pinned fiber (ready() sends those to the
  // inbox, which stays here).
  if (FiberControl* next = next_.seize()) {
    core_.push_global(next);
    ++moved;
  }
  // The run queue's unpinned prefix, half at a time, as a thief would take it;
  // a pinned fiber ends it (docs/sysmon.md).
  auto owner = scratch.owner();
  for (;;) {
    const auto result = run_queue_.thief().steal_into(owner, stealable);
    if (result.taken == 0) break;
    FiberControl* batch[RunQueue<RunQueueEntry>::capacity];
    std::size_t n = 0;
    while (FiberControl* fiber = owner.pop().fiber()) batch[n++] = fiber;
    core_.push_global_bulk(batch, n);
    moved += n;
  }
  // Fibers a peer placed in the inbox have not started either, so they may
  // run anywhere: off a blocked thread they go too. The inbox's pinned
  // fibers stay.
  if (blocked && placed_in_inbox_.load(std::memory_order_relaxed) > 0) {
    drain_inbox([&](FiberControl* fiber) {
      if (!not_pinned(fiber)) return false;
      placed_in_inbox_.fetch_sub(1, std::memory_order_relaxed);
      core_.push_global(fiber);
      ++moved;
      return true;
    });
  }
  // Spawned fibers that have not started stay: idle thieves take them, the
  // newest included while the worker is marked stuck, and run each at once,
  // depth first. Through the FIFO global queue, a busy peer would start
  // them one after another, breadth first (sched/spawn_deque.h), and a
  // fork-join would keep many times more fibers alive (docs/benchmarks.md,
  // "Figures behind the comments").
  if (moved != 0) bump(counters_.handoffs, moved);
  if (moved != 0 && tracing()) [[unlikely]]
    trace_handoff(index_, moved);
  return moved;
}

bool Worker::still_in_the_call_released_behind(const FiberControl& fiber) const noexcept {
  if (fiber.released_behind_call != 0) return blocking_call() == fiber.released_behind_call;
  return switch_tick() == fiber.released_at_tick && kernel_call(os_thread_.id()) == fiber.released_in_syscall;
}

std::size_t Worker::release_hook_pinned(RunQueue<RunQueueEntry>& scratch, std::uint32_t call, long syscall) noexcept {
  const std::uint64_t tick = switch_tick();
  std::size_t released = 0;
  // Pinned by hooks alone: the caller's cached &errno is this thread's,
  // and ErrnoHome writes the result there (hooks/hook_support.h). A fiber
  // taken from the inbox or the run queue is not running, so its pin fields are
  // ours until it is queued again.
  const auto release = [&](FiberControl* fiber) {
    const std::uint32_t pins = fiber->pin_count.load(std::memory_order_relaxed);
    if (fiber->releasable_pins == 0 || pins != fiber->releasable_pins) return false;
    fiber->pin_count.store(0, std::memory_order_relaxed);
    fiber->releasable_pins = 0;
    ++fiber->pin_releases;
    fiber->released_from = this;
    fiber->released_behind_call = call;
    fiber->released_in_syscall = static_cast<std::int32_t>(syscall);
    fiber->released_at_tick = tick;
    pins_released_.fetch_add(1, std::memory_order_relaxed);
    core_.push_global(fiber);
    ++released;
    return true;
  };
  // A fiber pinned by its own code (this_fiber::pin) stays.
  drain_inbox(release);
  // The run queue: a fiber preempted inside a hooked call that did not park
  // waits there, pinned by the hook (its checkpoint, hooks/hook_support.h).
  // Everything is taken, pinned or not, by the thief's side: the unpinned
  // go to the global queue (as hand_off_queued would move them), the
  // user-pinned to the inbox, which stays here.
  auto owner = scratch.owner();
  for (;;) {
    const auto result = run_queue_.thief().steal_into(owner, [](RunQueueEntry) { return true; });
    if (result.taken == 0) break;
    while (FiberControl* fiber = owner.pop().fiber()) {
      if (release(fiber)) continue;
      if (not_pinned(fiber)) {
        core_.push_global(fiber);
        ++released;
      } else {
        push_inbox(fiber);
      }
    }
  }
  if (released != 0) bump(counters_.handoffs, released);
  if (released != 0 && tracing()) [[unlikely]]
    trace_handoff(index_, released);
  return released;
}

void Worker::run_loop(RawLatch* started) {
  tls_worker = this;
  bind_running_fiber_cell(&current_);
  os_thread_.record_calling_thread();
  const std::string thread_name = (core_.config().name + "/" + std::to_string(index_)).substr(0, 15);
  pthread_setname_np(pthread_self(), thread_name.c_str());
  adopt_thread_context(loop_context_);
  AltSignalStack alt_stack;
  if (started != nullptr) started->count_down();

  if (!spare_)
    run_fibers();
  else
    core_.spares().serve(*this);
  state_.store(WorkerState::stopped, std::memory_order_relaxed);
  os_thread_.ended();
  bind_running_fiber_cell(nullptr);
  tls_worker = nullptr;
}

void Worker::run_fibers() {
  for (;;) {
    if (unstarted_ != nullptr) [[unlikely]]
      end_set_aside();
    if (spare_ && pinned_here() == 0 && core_.spares().retire_if_surplus()) return;
    FiberControl* next = pick_next();
    if (next == nullptr) {
      if (unstarted_ != nullptr) continue;  // set aside by that pick: end it first
      // Idle: a spare that is still needed sleeps like a worker (it may be
      // the netpoller's blocker, the one that runs the timers); a surplus
      // one comes back here to retire.
      next = wait_for_work();
      if (next == nullptr) {
        if (core_.stopping()) return;
        continue;
      }
      // Back from idle: a sysmon that went to sleep with every worker
      // idle must watch this one again (sched/sysmon.h).
      state_.store(WorkerState::running, std::memory_order_relaxed);
      core_.sysmon().worker_woke();
    }
    switch_in(next);
    switch_context(loop_context_, next->context, SwitchAction{});
    // Back on the thread's own stack: a fiber found nothing to hand off to.
  }
}

// Out of the switch path: only while a trace is recorded (sched/trace.h).
[[gnu::noinline, gnu::cold]] void Worker::trace_switch_to(FiberControl* next) noexcept {
  FiberControl* left = current_.load(std::memory_order_relaxed);
  TraceLeft why = TraceLeft::none;
  if (left != nullptr) {
    const FiberState state = left->state.load(std::memory_order_relaxed);
    why = state == FiberState::parked ? TraceLeft::parked
          : state == FiberState::done ? TraceLeft::exited
          : preempting_               ? TraceLeft::preempted
                                      : TraceLeft::yielded;
  }
  preempting_ = false;
  trace_switch(left, why, next);
}

// Inlined into its four callers: a call and a return fewer per switch.
[[gnu::always_inline]] inline void Worker::switch_in(FiberControl* next) noexcept {
  if (tracing()) [[unlikely]]
    trace_switch_to(next);
  current_.store(next, std::memory_order_relaxed);
  // A request for the fiber that leaves is void now; dropping it here ends
  // the slow path of every checkpoint in the process (detail/checkpoint.h).
  if (preempt_tick_.load(std::memory_order_relaxed) != 0) [[unlikely]]
    take_preempt_request();
  switch_tick_.store(switch_tick_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  state_.store(WorkerState::running, std::memory_order_relaxed);
  Worker* last = next->worker.load(std::memory_order_relaxed);
  if (last != this) {
    if (last != nullptr) bump(next->counters.steal);
    // Release: a dump that loads the pointer with acquire may read the
    // worker it names (a spare made moments ago by sysmon, on its thread).
    next->worker.store(this, std::memory_order_release);
  }
  // Release: a fiber's first run starts here, after start_fiber wrote its
  // context; the dump's readers of its stack bounds load this count with
  // acquire first (introspect/fiber_stack_walk.cpp, introspect/snapshot.cpp).
  next->counters.active.store(next->counters.active.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  bump(counters_.fibers_run);
  next->state.store(FiberState::running, std::memory_order_relaxed);
  if (next->runnable_sampled) [[unlikely]]
    record_run_latency(*next);
}

[[gnu::noinline, gnu::cold]] void Worker::record_run_latency(FiberControl& next) noexcept {
  const std::int64_t waited = fast_now_ns() - next.runnable_since_ns.load(std::memory_order_relaxed);
  next.runnable_sampled = false;
  const std::uint64_t ns = waited < 0 ? 0 : static_cast<std::uint64_t>(waited);
  run_latency_.record_single_writer(ns);
  bump(next.counters.runnable_ns, ns * kRunLatencyPeriod);
}

void Worker::switch_away(SwitchAction action) {
  FiberControl* self = current();
  FiberControl* next = leaving() ? nullptr : pick_next();
  if (next != nullptr) {
    switch_in(next);
    switch_context(self->context, next->context, action);
  } else {
    if (tracing()) [[unlikely]]
      trace_switch_to(nullptr);
    current_.store(nullptr, std::memory_order_relaxed);
    take_preempt_request();  // void, as at a switch: nobody runs now
    switch_context(self->context, loop_context_, action);
  }
  // Resumed, perhaps on another worker: `this` may no longer be ours.
}

void Worker::requeue_via_loop() {
  // A spare's loop retires and flushes the run queue to the global queue;
  // a worker's ends unstarted_ and picks again.
  FiberControl* self = current();
  self->state.store(FiberState::runnable, std::memory_order_relaxed);
  if (tracing()) [[unlikely]]
    trace_switch_to(nullptr);
  current_.store(nullptr, std::memory_order_relaxed);
  switch_context(self->context, loop_context_, SwitchAction{&requeue, self});
}

void Worker::yield_current() {
  if (leaving()) {
    requeue_via_loop();
    return;
  }
  FiberControl* self = current();
  FiberControl* next = pick_next();
  if (next == nullptr) {
    if (unstarted_ != nullptr) [[unlikely]]
      requeue_via_loop();
    return;  // nothing else wants this worker
  }
  self->state.store(FiberState::runnable, std::memory_order_relaxed);
  switch_in(next);
  switch_context(self->context, next->context, SwitchAction{&requeue_yielded, self});
}

void Worker::preempt_current() {
  // Clear the request; one for an earlier fiber (this worker switched since)
  // is simply dropped.
  const std::uint64_t requested = take_preempt_request();
  if (requested == 0) return;
  FiberControl* self = current();
  if (self == nullptr || requested != switch_tick_.load(std::memory_order_relaxed)) return;
  if (leaving()) {
    yield_current();  // which goes back to the loop to retire
    return;
  }
  // Due timers first, so that their fibers are among those this one
  // yields to (sysmon asks every slice while a fiber runs), and the first
  // of them: ready() put the last one fired in the next slot, and this
  // preemption may have been asked for it (a blocking call's timer look,
  // sched/blocking_call.h). Behind the global queue's oldest below, it
  // waited for that fiber's whole slice, a CPU-bound one's (a 1 ms ticker
  // beside fibers writing files: docs/benchmarks.md, "Timers first").
  FiberControl* next = core_.timers().run_due() != 0 ? next_.take() : nullptr;
  // The back of the run queue means behind every fiber that became ready
  // while this one ran, and sysmon and other threads put those in the
  // global queue, of which pick_next takes one batch (and which is not FIFO
  // across producers). So first take this worker's share of it, and run
  // the oldest of that share now (unless a timer's fiber runs first): it
  // has waited since it was made runnable, while what the run queue holds
  // under a hog is mostly fibers preempted after a slice of their own,
  // behind which a sleeper would wait for slices
  // (tests/checkpoint_test.cpp).
  const std::int64_t waiting = core_.global_size();
  if (waiting > 0) {
    auto owner = run_queue_.owner();
    std::int64_t share = waiting / static_cast<std::int64_t>(core_.config().workers) + 1;
    FiberControl* batch[kGlobalBatch];
    while (share > 0 && RunQueue<RunQueueEntry>::capacity - owner.size() >= kGlobalBatch) {
      const std::size_t n = core_.pop_global_bulk(batch, kGlobalBatch);
      for (std::size_t i = 0; i < n; ++i) {
        if (next == nullptr)
          next = batch[i];
        else
          owner.push(RunQueueEntry(batch[i]));
      }
      if (n < kGlobalBatch) break;
      share -= static_cast<std::int64_t>(n);
    }
  }
  if (next == nullptr) {
    next = pick_next();
  } else {
    release_held_spawn();  // as pick_next does: the spawner is switching out
    if (!next->has_context()) next = start_or_pick_again(next);
  }
  if (next == nullptr) {
    if (unstarted_ != nullptr) [[unlikely]]
      requeue_via_loop();
    return;  // nothing else to run: the fiber keeps the worker
  }
  bump(self->counters.preempt);
  bump(counters_.preempts);
  self->state.store(FiberState::runnable, std::memory_order_relaxed);
  preempting_ = true;  // for a trace's record of why it left
  switch_in(next);
  // Back of the run queue, and a sleeping peer is woken to share it.
  switch_context(self->context, next->context, SwitchAction{&requeue_and_notify, self});
}

void Worker::park_current(SwitchAction after) {
  FiberControl* self = current();
  self->state.store(FiberState::parked, std::memory_order_relaxed);
  bump(self->counters.park);
  bump(counters_.parks);
  switch_away(after);
}

transfer_t Worker::exit_current(SwitchAction after) {
  FiberControl* self = current();
  FiberControl* next = leaving() ? nullptr : pick_next();
  if (next != nullptr) {
    switch_in(next);
    return exit_context(self->context, next->context, after);
  }
  if (tracing()) [[unlikely]]
    trace_switch_to(nullptr);
  current_.store(nullptr, std::memory_order_relaxed);
  take_preempt_request();  // void, as at a switch: nobody runs now
  return exit_context(self->context, loop_context_, after);
}

void Worker::push_local(FiberControl* fiber, bool notify) {
  if (!run_queue_.owner().push(RunQueueEntry(fiber))) {
    spill_half_of_run_queue();
    run_queue_.owner().push(RunQueueEntry(fiber));
    notify = true;
  }
  if (notify) core_.idle().notify_work();
}

// Out of line: its 2 KiB of arrays made every push_local save registers and
// set up a frame, a noticeable share of a yield's instructions (callgrind).
[[gnu::noinline, gnu::cold]] void Worker::spill_half_of_run_queue() {
  // Move the older half to the global queue (pinned fibers to our inbox,
  // since no other worker may run them).
  constexpr std::uint32_t half_capacity = RunQueue<RunQueueEntry>::capacity / 2;
  RunQueueEntry half[half_capacity];
  const std::uint32_t n = run_queue_.owner().take_half(half);
  FiberControl* movable[half_capacity];
  std::size_t movable_count = 0;
  for (std::uint32_t i = 0; i < n; ++i) {
    if (!half[i].pinned())
      movable[movable_count++] = half[i].fiber();
    else
      push_inbox(half[i].fiber());
  }
  core_.push_global_bulk(movable, movable_count);
}

// A yield's requeue. While a peer sleeps, the yielder goes to it rather
// than to the back of this run queue: a wake alone is not enough, since a
// thief woken for it loses the race for it to the yields here (the queue
// holds it only between one yield's requeue and the next one's pick), and
// two yield loops shared this worker for good while the other slept
// (sched/idle.h, rule 1; tests/scheduler_test.cpp). Without a sleeper in
// sight, one relaxed load: a sleeper that listed itself unseen gets the
// fiber at a later yield here, or is woken by a preempt (notify_work).
void Worker::push_yielded(FiberControl* fiber) {
  if (core_.idle().seen_sleeping() && not_pinned(fiber)) {
    if (Worker* peer = sleeping_peer()) {
      peer->accept_placed(fiber);
      return;
    }
  }
  push_local(fiber, false);
}

Worker* Worker::sleeping_peer() noexcept {
  // Workers only: spares neither place nor receive (they retire).
  for (unsigned i = 0, workers = core_.config().workers; i < workers; ++i) {
    Worker& peer = core_.worker(i);
    if (&peer != this && peer.state() == WorkerState::sleeping && (peer.blocking_call() & 1) == 0) return &peer;
  }
  return nullptr;
}

void Worker::accept_placed(FiberControl* fiber) noexcept {
  // Counted first: this worker's pick may take the fiber at once.
  placed_in_inbox_.fetch_add(1, std::memory_order_relaxed);
  push_inbox(fiber);
}

void Worker::push_next(FiberControl* fiber) {
  // While the idle loop polls, one wake for the whole batch follows it
  // (wait_for_work, run_after_poll).
  if (FiberControl* previous = next_.put(fiber)) push_local(previous, !polling_here_);
}

void Worker::push_spawned(FiberControl* fiber) {
  if (!spawned_.push(fiber)) {
    spill_half_of_spawns();
    spawned_.push(fiber);
  }
  // A thief leaves the newest to us, so wake one only for a second.
  if (spawned_.size() >= 2) core_.idle().notify_work();
}

// Out of line for the same reason as spill_half_of_run_queue().
[[gnu::noinline, gnu::cold]] void Worker::spill_half_of_spawns() {
  // The older half goes to the global queue.
  FiberControl* oldest[decltype(spawned_)::capacity / 2];
  std::size_t n = 0;
  while (n < std::size(oldest)) {
    FiberControl* old = spawned_.steal();
    if (old == nullptr) break;
    oldest[n++] = old;
  }
  core_.push_global_bulk(oldest, n);
}

void Worker::push_inbox(FiberControl* fiber) noexcept {
  inbox_count_.fetch_add(1, std::memory_order_relaxed);
  FiberControl* head = inbox_.load(std::memory_order_relaxed);
  do {
    fiber->link = head;
  } while (!inbox_.compare_exchange_weak(head, fiber, std::memory_order_seq_cst, std::memory_order_relaxed));
  if (current_worker() != this) core_.idle().notify_worker(idle_slot_);
}

bool Worker::has_local_waiting() const noexcept {
  return run_queue_.size() != 0 || spawned_.size() != 0 || inbox_fifo_.load(std::memory_order_relaxed) != nullptr ||
         inbox_.load(std::memory_order_relaxed) != nullptr;
}

FiberControl* Worker::pick_global() {
  FiberControl* batch[kGlobalBatch];
  const std::size_t workers = core_.config().workers;
  std::size_t want = kGlobalBatch;
  if (workers > 1) {
    // Take a fair share, not everything: others may be idle too.
    const auto share = static_cast<std::size_t>(core_.global_size() / static_cast<std::int64_t>(workers)) + 1;
    if (share < want) want = share;
  }
  const std::size_t n = core_.pop_global_bulk(batch, want);
  if (n == 0) return nullptr;
  auto owner = run_queue_.owner();
  for (std::size_t i = 1; i < n; ++i) {
    if (!owner.push(RunQueueEntry(batch[i]))) push_local(batch[i]);
  }
  if (n > 1) core_.idle().notify_work();
  return batch[0];
}

FiberControl* Worker::steal() {
  // The workers and the spares up to the last running one (a retired
  // spare's queues are empty; a running one's may be stolen from).
  const std::size_t count = core_.steal_span();
  if (count < 2) return nullptr;
  random_state_ ^= random_state_ << 13;
  random_state_ ^= random_state_ >> 7;
  random_state_ ^= random_state_ << 17;
  const std::size_t start = random_state_ % count;
  auto owner = run_queue_.owner();
  for (std::size_t i = 0; i < count; ++i) {
    Worker& victim = core_.worker((start + i) % count);
    if (&victim == this) continue;
    const auto result = victim.run_queue_.thief().steal_into(owner, stealable);
    if (result.blocked.fiber() != nullptr) {
      // Charged to the pinned fiber by its own worker (see pick_next): a
      // thief must not touch a fiber it does not own.
      victim.pinned_steal_fails_.fetch_add(1, std::memory_order_relaxed);
      bump(counters_.failed_steals);
    }
    if (result.taken > 0) {
      bump(counters_.steals, result.taken);
      FiberControl* fiber = owner.pop().fiber();
      if (tracing()) [[unlikely]]
        trace_steal(fiber->id, victim.index());
      return fiber;
    }
    // A held spawn is left to its worker (its spawner still runs there),
    // unless that one is stuck.
    if (FiberControl* fiber = victim.spawned_.steal(victim.stuck())) {
      if (placed_elsewhere(fiber)) continue;
      bump(counters_.steals);
      if (tracing()) [[unlikely]]
        trace_steal(fiber->id, victim.index());
      return fiber;
    }
  }
  return nullptr;
}

// Out of line, and reached once in kGlobalCheckInterval picks: inlined,
// its calls made every pick_next save and restore registers (callgrind:
// 5 instructions a pick, a tenth of a PingPong hand-off's growth).
[[gnu::noinline]] FiberControl* Worker::pick_periodic() {
  until_global_check_ = kGlobalCheckInterval;
  // Due timers (sched/timers.h): their fibers go to the next slot and the
  // run queue, and pick_queued picks them. A relaxed load unless a timer is armed.
  core_.timers().run_due();
  if (core_.global_empty()) return nullptr;
  return pick_global();
}

FiberControl* Worker::pick_next() {
  FiberControl* fiber = pick_queued();
  // The running fiber is about to switch out, or to go on with nothing
  // else to run: a spawn it left held is no longer about to run here
  // (a pop of it has released it already).
  release_held_spawn();
  // Its first run: its stack is taken now (SchedulerCore::start_fiber).
  if (fiber != nullptr && !fiber->has_context()) return start_or_pick_again(fiber);
  return fiber;
}

// Out of line: a PingPong's picks pay only the test above.
[[gnu::noinline]] FiberControl* Worker::start_or_pick_again(FiberControl* fiber) {
  for (;;) {
    if (core_.start_fiber(*fiber, *this)) return fiber;
    // No stack: it ends with the StackError, which runs the user's code
    // (its callable's destructor, maybe the unhandled-exception handler).
    // Not on a fiber's stack, which may be parking with its primitive's
    // lock held: there it waits for the loop, to which the caller goes.
    if (current() != nullptr) {
      fiber->link = unstarted_;
      unstarted_ = fiber;
      return nullptr;
    }
    core_.end_unstarted(fiber);
    fiber = pick_queued();
    release_held_spawn();
    if (fiber == nullptr || fiber->has_context()) return fiber;
  }
}

[[gnu::noinline, gnu::cold]] void Worker::end_set_aside() noexcept {
  while (FiberControl* fiber = unstarted_) {
    unstarted_ = fiber->link;
    fiber->link = nullptr;
    core_.end_unstarted(fiber);
  }
}

[[gnu::noinline, gnu::cold]] void Worker::publish_held_spawn() noexcept {
  spawned_.release();
  // Rule 1 of sched/idle.h: the spawn is now in a queue that idle workers
  // take from; notify_work's fence orders the release before its look.
  if (spawned_.size() != 0) core_.idle().notify_work();
}

FiberControl* Worker::pick_queued() {
  if (--until_global_check_ == 0) [[unlikely]] {
    if (FiberControl* fiber = pick_periodic()) return fiber;
  }
  if (FiberControl* next = next_.take()) {
    // Past the limit, the next slot yields to what waits here, if anything
    // does; with nothing waiting, requeueing would only cost a round trip
    // through the run queue.
    if (next_streak_ < kNextStreakLimit || !has_local_waiting()) {
      ++next_streak_;
      return next;
    }
    push_local(next, false);
  }
  next_streak_ = 0;
  // A load first: the exchange is a locked instruction, and the list is
  // mostly empty.
  FiberControl* arrived = inbox_fifo_.load(std::memory_order_relaxed) != nullptr
                              ? inbox_fifo_.exchange(nullptr, std::memory_order_acquire)
                              : nullptr;
  if (arrived == nullptr && inbox_.load(std::memory_order_relaxed) != nullptr) {
    // Drain the inbox stack, reversing it into arrival order.
    FiberControl* stack = inbox_.exchange(nullptr, std::memory_order_acquire);
    while (stack != nullptr) {
      FiberControl* below = stack->link;
      stack->link = arrived;
      arrived = stack;
      stack = below;
    }
  }
  if (arrived != nullptr) {
    // The rest back, with release: sysmon's exchange reads their links.
    if (arrived->link != nullptr) inbox_fifo_.store(arrived->link, std::memory_order_release);
    arrived->link = nullptr;
    inbox_count_.fetch_sub(1, std::memory_order_relaxed);
    if (not_pinned(arrived)) placed_in_inbox_.fetch_sub(1, std::memory_order_relaxed);
    return arrived;
  }
  if (FiberControl* fiber = run_queue_.owner().pop().fiber()) {
    if (pinned_steal_fails_.load(std::memory_order_relaxed) != 0 && !not_pinned(fiber))
      bump(fiber->counters.steal_fail, pinned_steal_fails_.exchange(0, std::memory_order_relaxed));
    return fiber;
  }
  while (FiberControl* fiber = spawned_.pop()) {
    if (!placed_elsewhere(fiber)) return fiber;
  }
  if (!core_.global_empty()) {
    if (FiberControl* fiber = pick_global()) return fiber;
  }
  return steal();
}

// Where a fiber starts. A fiber that has never run may start on any
// worker, but where it starts is usually where it stays: once it parks in a
// hooked call it is pinned to that worker's thread until the call returns
// (the caller's cached &errno; hooks/hook_support.h), and a fiber that
// lives in hooked calls, as a connection's does, is never anywhere else.
// Left to who takes it first, a burst of spawns (a server accepting its
// connections) all started on the worker that was on a CPU at the time:
// under CPU load, an idle peer asleep in epoll_wait was woken too late to
// steal any, and all 500 connections of an echo server stayed on one
// worker, up to 472 of them runnable, while the other ran nothing
// (tests/placement_test.cpp, docs/benchmarks.md, "Echo beside CPU
// burners"). So a worker about to start a fresh fiber, if it holds more
// fibers than the lightest peer that can take one by more than the slack,
// places the fiber in that peer's inbox and wakes it. "Holds" counts the
// fibers pinned to a worker and those placed in its inbox (home_load), so
// that a burst is split evenly however late the peer wakes; not its whole
// inbox, whose pinned fibers are counted as pinned already (counted twice,
// the connections a server's first echoes woke kept a burst of new ones
// off their busy worker: tests/placement_test.cpp). A peer in an
// announced blocking call is passed over; one blocked in the kernel
// otherwise has its placed fibers handed off by sysmon (hand_off_queued).
// One that runs a long fiber is not passed over: it runs them at its next
// switch, while passing it over gave a long-running acceptor's spawns all
// to its idle peer. Spares neither place nor receive: they retire.
bool Worker::place_on_lighter_peer(FiberControl* fresh, std::uint32_t mine) noexcept {
  Worker* lightest = nullptr;
  std::uint32_t least = mine;
  for (unsigned i = 0, workers = core_.config().workers; i < workers; ++i) {
    Worker& peer = core_.worker(i);
    if (&peer == this || (peer.blocking_call() & 1) != 0 || peer.state() == WorkerState::stopped) continue;
    const std::uint32_t load = peer.home_load();
    if (load < least) {
      least = load;
      lightest = &peer;
    }
  }
  if (lightest == nullptr || mine <= least + kPlacementSlack + least / 8) return false;
  lightest->accept_placed(fresh);
  return true;
}

bool Worker::work_visible() const noexcept {
  if (!core_.global_empty()) return true;
  for (std::size_t i = 0, count = core_.steal_span(); i < count; ++i)
    if (core_.worker(i).has_stealable_work()) return true;
  return false;
}

bool Worker::poll_here(IdlePoller& poller) noexcept {
  polling_here_ = true;
  const bool readied = poller.poll_now();
  polling_here_ = false;
  return readied;
}

FiberControl* Worker::run_after_poll() {
  FiberControl* fiber = pick_next();
  // The fibers the poll readied beyond the one about to run wait in this
  // worker's run queue, their wakes skipped (push_next): one wake for all of
  // them, as Go's netpoll hands its list to injectglist, instead of a wake
  // per fiber, each taking the idle lock while peers go to sleep. A peer so
  // woken searches, so rule 2 of sched/idle.h wakes more if more remain.
  // The invariant holds meanwhile: this worker is awake and about to run
  // what it readied, and it wakes a sleeper now for the rest.
  if (fiber != nullptr && run_queue_.size() != 0) core_.idle().notify_work();
  return fiber;
}

FiberControl* Worker::wait_for_work() {
  IdleWorkers& idle = core_.idle();
  IdlePoller& poller = core_.poller();
  for (;;) {
    // A spare that has become surplus while idle retires (Spares::tidy
    // wakes it for that).
    if (leaving()) return nullptr;
    if (FiberControl* fiber = run_due_and_polled(poller)) return fiber;
    bool last_searcher = false;
    if (FiberControl* fiber = search(last_searcher)) return fiber;
    // Registered as a sleeper, then every queue once more (sched/idle.h,
    // rule 3), then asleep: in epoll_wait as the blocker, or on the futex.
    state_.store(WorkerState::sleeping, std::memory_order_relaxed);
    idle.prepare_sleep(idle_slot_);
    if (core_.stopping()) {
      idle.cancel_sleep(idle_slot_);
      return nullptr;
    }
    if (FiberControl* fiber = pick_next()) {
      // Rule 3: publishers may have skipped their wake while we searched,
      // or woken this worker, listed but awake, in place of a sleeper.
      const bool took_a_wake = idle.cancel_sleep(idle_slot_);
      if ((last_searcher || took_a_wake) && work_visible()) idle.notify_work();
      return fiber;
    }
    // Fibers wait on fds or timers: one sleeper sleeps in epoll_wait
    // instead, until the earliest deadline, so that readiness and timers
    // are seen without anyone spinning. A timer armed after prepare_sleep's
    // fence is seen here, or its arm() sees this worker asleep and wakes
    // it (sched/timers.h, "Arming").
    if ((poller.has_waiters() || core_.timers().armed()) && poller.try_begin_block(index_)) {
      if (FiberControl* fiber = sleep_as_blocker(poller)) return fiber;
      if (core_.stopping()) return nullptr;
      continue;
    }
    idle.wait(idle_slot_);
    if (core_.stopping()) return nullptr;
  }
}

FiberControl* Worker::run_due_and_polled(IdlePoller& poller) {
  // Due timers, on entry and after every sleep: the blocker's timeout is
  // the earliest deadline, and this is where its fibers are readied.
  if (core_.timers().run_due() != 0) {
    if (FiberControl* fiber = pick_next()) return fiber;
  }
  // Before stealing: fds that became ready (io/netpoller.h). Here, on the
  // worker's own stack, and never in pick_next, which also runs on a
  // parking fiber's stack while it holds its fd record's lock.
  if (poller.has_waiters() && poll_here(poller)) return run_after_poll();
  return nullptr;
}

FiberControl* Worker::search(bool& last_searcher) {
  // The rules of sched/idle.h: a searcher that finds work ends its search
  // before running it and, if it was the last, wakes another (pick_next's
  // own notify_work, e.g. for the rest of a global batch, is skipped while
  // this worker still counts as searching).
  IdleWorkers& idle = core_.idle();
  if (!idle.begin_search()) return nullptr;
  state_.store(WorkerState::searching, std::memory_order_relaxed);
  for (int round = 0; round < kSearchRounds && !core_.stopping(); ++round) {
    if (FiberControl* fiber = pick_next()) {
      if (idle.end_search() && work_visible()) idle.notify_work();
      return fiber;
    }
    for (int i = 0; i < kPausesPerRound; ++i) cpu_relax();
  }
  last_searcher = idle.end_search();
  return nullptr;
}

FiberControl* Worker::sleep_as_blocker(IdlePoller& poller) {
  IdleWorkers& idle = core_.idle();
  TimerQueue& timers = core_.timers();
  if (idle.begin_poll(idle_slot_)) {
    // What the poll readies waits in this worker's queues, unannounced,
    // until the sleep is cancelled below: a wake then would pick this
    // very slot, still listed, and write the eventfd to itself.
    polling_here_ = true;
    poller.block(timers.begin_blocking());
    polling_here_ = false;
    // Before end_block: once another worker may become the blocker, its
    // begin_blocking must not be undone by ours.
    timers.end_blocking();
  }
  poller.end_block();
  idle.cancel_sleep(idle_slot_);  // whatever ended it; a wake is absorbed
  if (core_.stopping()) return nullptr;
  // Straight to what the poll readied (the timers first: the poll's
  // timeout may have been the earliest deadline), without the
  // non-blocking poll at the top of wait_for_work, which would find
  // nothing the blocking one has not just taken.
  timers.run_due();
  return run_after_poll();
}

}  // namespace weft::detail
