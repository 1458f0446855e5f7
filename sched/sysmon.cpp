#include "sysmon.h"

#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>

#include "../runtime/log.h"
#include "asymmetric_fence.h"
#include "kernel_call.h"
#include "scheduler_core.h"

namespace weft::detail {
namespace {

// 'S' (interruptible) or 'D' (uninterruptible, a disk read): asleep in the
// kernel, not merely waiting for a CPU ('R').
bool in_kernel_sleep(char state) noexcept { return state == 'S' || state == 'D'; }

std::int64_t to_ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

Sysmon::Sysmon(SchedulerCore& core)
    : core_(core),
      slice_(core.config().time_slice),
      running_cap_(std::clamp<std::chrono::microseconds>(slice_ / 8, kMinTick, kMaxTick)),
      pause_after_(std::max<std::chrono::microseconds>(2 * slice_, kMinPause)),
      watches_(std::make_unique<Watch[]>(core.config().workers)),
      spare_watches_(std::make_unique<std::atomic<Watch*>[]>(core.config().max_threads - core.config().workers)) {}

Sysmon::~Sysmon() {
  stop();
  for (unsigned i = 0, n = core_.config().max_threads - core_.config().workers; i < n; ++i)
    delete spare_watches_[i].load(std::memory_order_relaxed);
}

Sysmon::Watch* Sysmon::watch(std::size_t i) noexcept {
  const unsigned workers = core_.config().workers;
  if (i < workers) return &watches_[i];
  std::atomic<Watch*>& slot = spare_watches_[i - workers];
  Watch* watch = slot.load(std::memory_order_relaxed);
  if (watch == nullptr) {
    watch = new (std::nothrow) Watch;
    // Release: a snapshot that finds it finds it built.
    slot.store(watch, std::memory_order_release);
  }
  return watch;
}

const Sysmon::Watch* Sysmon::find_watch(std::size_t i) const noexcept {
  const unsigned workers = core_.config().workers;
  if (i < workers) return &watches_[i];
  if (i >= core_.config().max_threads) return nullptr;
  return spare_watches_[i - workers].load(std::memory_order_acquire);
}

void Sysmon::start(RawLatch& started) {
  heavy_fence_available();  // registers for membarrier now, not in the middle of a hand-off
  thread_ = std::thread([this, &started] { run(started); });
}

void Sysmon::stop() noexcept {
  if (!thread_.joinable()) return;
  stopping_.store(true, std::memory_order_seq_cst);
  // Not ring(): a wake even if the word is set, so that the futex call
  // orders stopping_ before sysmon's next look at it.
  wake_word_.store(1, std::memory_order_release);
  futex_wake(wake_word_);
  thread_.join();
}

void Sysmon::wake() noexcept {
  if (!deep_asleep_.exchange(false, std::memory_order_acq_rel)) return;  // someone else did
  ring();
}

Sysmon::WorkerView Sysmon::view(unsigned worker) const noexcept {
  WorkerView view;
  const Watch* found = find_watch(worker);
  if (found == nullptr) return view;
  const Watch& watch = *found;
  const std::int64_t since = watch.running_since_ns.load(std::memory_order_relaxed);
  if (since != 0) view.running_ms = static_cast<double>(to_ns(Clock::now()) - since) / 1e6;
  view.stuck = watch.stuck.load(std::memory_order_relaxed);
  if (view.stuck) view.fiber_id = watch.stuck_fiber.load(std::memory_order_relaxed);
  return view;
}

void Sysmon::alert() noexcept {
  if (!napping_.exchange(false, std::memory_order_relaxed)) return;  // someone else did, or it woke
  ring();
}

void Sysmon::look_now() noexcept {
  napping_.store(false, std::memory_order_relaxed);
  ring();
}

void Sysmon::ring() noexcept {
  // One futex wake per sleep: the word stays set until sysmon, awake,
  // clears it before its next sleep.
  if (wake_word_.exchange(1, std::memory_order_release) == 0) futex_wake(wake_word_);
}

void Sysmon::run(RawLatch& started) {
  {
    const std::string thread_name = (core_.config().name + "/sysmon").substr(0, 15);
    pthread_setname_np(pthread_self(), thread_name.c_str());
  }
  started.count_down();
  std::chrono::microseconds delay = kMinTick;
  unsigned idle_rounds = 0;
  Clock::time_point last_look{};  // epoch: none since start or deep sleep
  while (!stopping_.load(std::memory_order_acquire)) {
    const Clock::time_point now = Clock::now();
    // Sysmon itself did not run for much longer than it slept (the process
    // was stopped, the machine stalled, a slow on_stuck_worker handler):
    // what a worker did meanwhile is unknown, so no fiber is blamed for it.
    if (last_look != Clock::time_point{} && now - last_look > delay + pause_after_) restart_observations(now);
    last_look = now;
    const Tally tally = scan(now);
    // Workers busy with fibers that never idle never poll: do it for them
    // (Go's sysmon: "poll network if not polled for more than 10ms").
    core_.poller().poll_if_stale(kPollStaleAfter);
    // Likewise timers a slice overdue (sched/timers.h): their fibers go to
    // the global queue, and the busy workers' fibers are asked to yield to
    // them at the slice.
    core_.timers().run_due(slice_);
    // Timers that a worker which sleeps could run, but none does: the one
    // that ran them left its epoll_wait for a fiber, which blocked, while
    // the others sleep on their futexes. One of them runs them, into its
    // own next slot.
    if (tally.idle > 0 && core_.timers().due(kTimerOverdue)) core_.idle().notify_work();
    delay = next_delay(delay, tally);
    idle_rounds = tally.all_sleeping ? idle_rounds + 1 : 0;
    if (idle_rounds >= kDeepSleepAfter) {
      deep_sleep();
      idle_rounds = 0;
      last_look = {};  // every worker slept: nothing was being watched
      continue;
    }
    // Awake at the next timer's deadline too, if it is still ahead: on an
    // overloaded machine that wake-up is what got the process's busy
    // workers back onto a CPU in time (sched/timers.h). One already due
    // is a worker's to run, or the backstop's above; sysmon looks again
    // when the rule above would wake a sleeper for it.
    const Clock::time_point woken_by_tick = Clock::now() + delay;
    Clock::time_point next_timer = core_.timers().earliest();
    if (next_timer <= Clock::now()) next_timer += kTimerOverdue;
    // Napping: an announced blocking call wakes it (alert). Not fenced
    // against the announcement: one that misses this store is seen at the
    // next look, a running tick at most later.
    napping_.store(delay > kBlockingCallGrace, std::memory_order_relaxed);
    futex_wait(wake_word_, 0, next_timer > Clock::now() && next_timer < woken_by_tick ? next_timer : woken_by_tick);
    // Cleared by alert(): an announcement woke it, so it stays alert for a
    // while (a stop() sets the word again after stopping_, seen above).
    if (!napping_.exchange(false, std::memory_order_relaxed) && delay > kBlockingCallGrace)
      alert_rounds_ = kAlertRounds;
    wake_word_.store(0, std::memory_order_relaxed);
  }
}

std::chrono::microseconds Sysmon::next_delay(std::chrono::microseconds delay, const Tally& tally) noexcept {
  if (tally.acted)
    delay = kMinTick;
  else
    delay = std::min(delay * 2, tally.any_running ? running_cap_ : kMaxTick);
  if (tally.in_call) alert_rounds_ = kAlertRounds;
  // A thread found asleep in the kernel is looked at again after the grace.
  if (tally.confirming) delay = std::min(delay, std::chrono::microseconds(kKernelSleepGrace));
  if (alert_rounds_ > 0) {
    --alert_rounds_;
    delay = std::min(delay, std::chrono::microseconds(kBlockingCallGrace));
  }
  return delay;
}

void Sysmon::deep_sleep() {
  wake_word_.store(0, std::memory_order_relaxed);
  deep_asleep_.store(true, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  bool all_sleeping = true;
  for (std::size_t i = 0, span = core_.steal_span(); i < span; ++i) {
    const WorkerState state = core_.worker(i).state();
    if (state != WorkerState::sleeping && state != WorkerState::stopped && state != WorkerState::spare)
      all_sleeping = false;
  }
  if (!all_sleeping || stopping_.load(std::memory_order_acquire)) {
    deep_asleep_.store(false, std::memory_order_relaxed);
    return;
  }
  while (wake_word_.load(std::memory_order_acquire) == 0) futex_wait(wake_word_, 0);
  deep_asleep_.store(false, std::memory_order_relaxed);
  // Consumed; a stop() after this point sets it again.
  wake_word_.store(0, std::memory_order_relaxed);
}

void Sysmon::forget(Worker& worker, Watch& watch) noexcept {
  worker.set_stuck(false);
  // Ours, for the fiber that no longer runs: keeping it would keep every
  // checkpoint of the process on its slow path (detail/checkpoint.h).
  if (watch.asked != Clock::time_point{}) worker.take_preempt_request();
  watch.watching = false;
  watch.reported = false;
  watch.asked = {};
  watch.asked_cpu_ns = 0;
  watch.look_cpu_ns = -1;
  watch.kernel_since = {};
  watch.running_since_ns.store(0, std::memory_order_relaxed);
  watch.stuck.store(false, std::memory_order_relaxed);
  watch.stuck_fiber.store(0, std::memory_order_relaxed);
}

void Sysmon::restart_observations(Clock::time_point now) noexcept {
  const std::size_t span = core_.steal_span();
  for (std::size_t i = 0; i < span; ++i) {
    Watch* found = watch(i);
    if (found == nullptr) continue;
    Watch& watch = *found;
    // A verdict already given rests on time sysmon did watch: it stands,
    // and is not given twice.
    if (!watch.watching || watch.reported) continue;
    watch.since = now;
    watch.asked = {};
    watch.look_cpu_ns = -1;
    watch.kernel_since = {};
    watch.running_since_ns.store(to_ns(now), std::memory_order_relaxed);
  }
}

Sysmon::Tally Sysmon::scan(Clock::time_point now) {
  Tally tally;
  const std::size_t span = core_.steal_span();
  for (std::size_t i = 0; i < span; ++i) {
    Worker& worker = core_.worker(i);
    Watch* found = watch(i);
    if (found == nullptr) continue;  // no memory for a spare's watch: left alone until there is
    Watch& watch = *found;
    watch.holding_up = false;
    watch.in_kernel = false;
    watch.short_run = false;
    watch.switching_busily = false;
    watch.state_known = false;
    watch.asleep = false;
    const WorkerState state = worker.state();
    if (state != WorkerState::sleeping && state != WorkerState::stopped && state != WorkerState::spare)
      tally.all_sleeping = false;
    if (state == WorkerState::sleeping || state == WorkerState::searching) ++tally.idle;
    if (state != WorkerState::running) {
      if (watch.watching) forget(worker, watch);
      watch.call = 0;
      continue;
    }
    tally.any_running = true;
    look_at(worker, watch, now, tally);
  }
  const bool held_up_work = hand_off(tally.blocked, tally.idle, tally.acted);
  if (core_.spares().capacity() > 0 && manage_spares(tally.blocked, tally.idle, held_up_work)) tally.acted = true;
  return tally;
}

void Sysmon::look_at(Worker& worker, Watch& watch, Clock::time_point now, Tally& tally) {
  // An announced call is followed from its first sight, whether or not
  // its fiber switched in since the last look.
  const bool announced = blocking_call_outlasted_grace(worker, watch, now);
  // Ticking at the grace only while a call awaits its verdict: one handed
  // off, or one with nothing behind it, needs no faster look (and a sysmon
  // waking every 100 us competes with the spare for a loaded machine's
  // CPUs).
  if (watch.call != 0 && !announced && verdict_awaited(worker)) tally.in_call = true;
  // A call that sleeps always is judged at its first sight, after the
  // switch that started its fiber.
  if (switched_in(worker, watch, now) && !announced) return;
  // A fiber in an announced call with nothing waiting for its worker (its
  // queue handed off, or none) is not asked to yield: it is not hogging a
  // CPU, and yielding at its hook's return it would take fibers from the
  // global queue and wait behind them, pinned to this thread (the caller's
  // errno and thread-locals), through their blocking calls
  // (docs/benchmarks.md, "fsync: a hand-off at the call's entry"). A fiber
  // pinned here, which no hand-off moves, still gets its turn at the
  // slice's end.
  const bool nothing_waits = watch.call != 0 && someone_to_take() && !worker.pinned_may_wait();
  if (announced) {
    // Blocked, as the fiber's own code said: no /proc read, no delay. The
    // hook pins of the fibers behind it stay (the thread comes back from
    // this call, and would find its errno written), unless the call waits
    // for another party (Sleeps::until_woken), which may be one of them:
    // then they go once it has lasted kReleaseHookPinsAfter. With nothing
    // waiting, its slice starts again and an earlier request to yield is
    // taken back.
    if (nothing_waits) {
      watch.since = now;
      if (watch.asked != Clock::time_point{}) worker.take_preempt_request();
      watch.asked = {};
    } else {
      ask_to_yield(worker, watch, now, tally);
    }
    worker.judge_call_blocked(watch.call);
    worker.set_stuck(true);
    watch.holding_up = true;
    watch.in_kernel = true;
    ++tally.blocked;
    if (worker.call_waits_to_be_woken()) release_hook_pins_if_waiting(worker, watch.call_since, watch.call, now, tally);
    return;
  }
  // Before the verdict likewise, without the restart: the verdict makes it.
  if (!nothing_waits) ask_to_yield(worker, watch, now, tally);
  judge_hold_up(worker, watch, now, tally);
  if (watch.in_kernel) {
    ++tally.blocked;
    release_hook_pins_if_waiting(worker, watch.kernel_since, 0, now, tally);
  }
}

bool Sysmon::switched_in(Worker& worker, Watch& watch, Clock::time_point now) noexcept {
  const std::uint64_t tick = worker.switch_tick();
  if (watch.watching && tick == watch.tick) return false;
  const std::uint64_t switches = tick - watch.tick;
  const bool busily = watch.watching && switches >= kBusySwitches &&
                      now - watch.tick_time <= static_cast<std::int64_t>(switches) * kBusySwitchGap;
  // A fiber switched in since the last look: it started no earlier than
  // that look, so counting from now never preempts one too soon.
  forget(worker, watch);
  watch.watching = true;
  watch.tick = tick;
  watch.tick_time = now;
  watch.since = now;
  watch.running_since_ns.store(to_ns(now), std::memory_order_relaxed);
  watch.short_run = true;
  watch.switching_busily = busily;
  return true;
}

void Sysmon::ask_to_yield(Worker& worker, Watch& watch, Clock::time_point now, Tally& tally) {
  const bool preemption = core_.config().preemption;
  const auto ran = now - watch.since;
  watch.short_run = ran < kHandOffAfter;
  const bool asked = watch.asked != Clock::time_point{};
  // Stuck: twice the slice, and a further full slice in which the fiber
  // ignored sysmon (ignored_request): with preemption, a request still
  // stands; without, the fiber just went on. A lone fiber that reaches
  // its checkpoints with nothing else to run clears the request: it
  // blocks nobody. This check comes before the request is renewed
  // below, which restarts its clock.
  const bool unanswered = !watch.reported && asked && now - watch.asked >= slice_ &&
                          (!preemption || worker.preempt_requested()) && ignored_request(worker, watch, now);
  if (ran >= 2 * slice_ && unanswered) {
    watch.reported = true;
    report_stuck(worker, watch, now);
  }
  if (ran >= slice_ && (!asked || now - watch.asked >= slice_)) {
    if (preemption) {
      worker.request_preempt(watch.tick);
      // Acting, for a quick look that sees the switch the request brings,
      // from which the next slice counts. None comes where no other fiber
      // waits: the fiber clears the request at its checkpoint. Fibers
      // found between their file calls drew a thousand such requests a
      // second beside a hundred writers, each of which put sysmon back to
      // its shortest tick.
      if (others_wait(worker)) tally.acted = true;
    }
    watch.asked = now;
    // Read only for the report, which is made once (a system call per
    // slice for each of a thousand threads blocked in the kernel).
    if (!watch.reported) watch.asked_cpu_ns = worker.os_thread().cpu_time_ns();
  }
}

bool Sysmon::blocking_call_outlasted_grace(Worker& worker, Watch& watch, Clock::time_point now) noexcept {
  const std::uint32_t call = worker.blocking_call();
  if ((call & 1) == 0) {
    watch.call = 0;
    return false;
  }
  if (call != watch.call) {
    // A call sysmon has not seen yet: it began at most a tick ago.
    watch.call = call;
    watch.call_since = now;
    return worker.call_sleeps_always() && someone_to_take();
  }
  const bool past_grace = worker.call_sleeps_always() || now - watch.call_since >= kBlockingCallGrace;
  return past_grace && someone_to_take();
}

void Sysmon::judge_hold_up(Worker& worker, Watch& watch, Clock::time_point now, Tally& tally) noexcept {
  if (!someone_to_take()) return;
  // Asleep in the kernel: at every look, without a switch, for the grace
  // (a raw system call). The thread's state is read only when it did not
  // burn its CPU since the last look, and neither is read while a verdict
  // from a read still holds (still_blocked_without_a_read).
  const bool unread = still_blocked_without_a_read(worker, watch, now);
  const std::int64_t cpu_before = watch.look_cpu_ns;
  const bool burning = !unread && burned_cpu_since_last_look(worker, watch, now);
  // Found asleep before and not one nanosecond on a CPU since: still
  // asleep, without a /proc read (with a thousand threads blocked on a
  // std::mutex, those reads made every scan take milliseconds).
  const bool still =
      unread || (watch.kernel_since != Clock::time_point{} && cpu_before > 0 && watch.look_cpu_ns == cpu_before);
  const bool asleep = still || (!burning && in_kernel_sleep(worker.os_thread().state()));
  watch.state_known = still || !burning;
  watch.asleep = asleep;
  if (!asleep)
    watch.kernel_since = {};
  else if (watch.kernel_since == Clock::time_point{})
    watch.kernel_since = now;
  watch.in_kernel = asleep && now - watch.kernel_since >= kKernelSleepGrace;
  if (asleep && !watch.in_kernel) tally.confirming = true;
  // Burning its CPU in one fiber past the hand-off delay: its queue goes
  // to idle workers (hand_off); a thread that only waits for a CPU keeps it.
  watch.holding_up = watch.in_kernel || ((burning || asleep) && now - watch.since >= kHandOffAfter);
  if (watch.holding_up) worker.set_stuck(true);
}

bool Sysmon::still_blocked_without_a_read(Worker& worker, const Watch& watch, Clock::time_point now) noexcept {
  // The verdict came from a read: the look that last read the thread found
  // it asleep for the grace already. Not while fibers pinned to it wait:
  // releasing their pins rests on the thread staying asleep, so its looks
  // read it every time (release_hook_pins_if_waiting).
  const bool judged_by_a_read =
      watch.kernel_since != Clock::time_point{} && watch.look_time - watch.kernel_since >= kKernelSleepGrace;
  return judged_by_a_read && now - watch.look_time < kAsleepRecheck && !worker.pinned_may_wait();
}

bool Sysmon::burned_cpu_since_last_look(Worker& worker, Watch& watch, Clock::time_point now) noexcept {
  const std::int64_t cpu = worker.os_thread().cpu_time_ns();
  const bool known = watch.look_cpu_ns >= 0 && cpu != 0;
  const bool burned = known && 2 * (cpu - watch.look_cpu_ns) >= to_ns(now) - to_ns(watch.look_time);
  watch.look_cpu_ns = cpu;
  watch.look_time = now;
  return burned;
}

void Sysmon::release_hook_pins_if_waiting(Worker& worker, Clock::time_point since, std::uint32_t call,
                                          Clock::time_point now, Tally& tally) noexcept {
  // Fibers woken for this worker that only a hook's park pins here (their
  // caller's errno lives on this thread) would wait for it as long as it
  // stays blocked: forever, if it waits for one of them: in futex(2) for a
  // std::mutex one of them holds, in a raw read(2) of a pipe one of them
  // would write (stdio's own calls, which no hook sees), or in an announced
  // call (sem_wait, a barrier, a join, pause) for what one of them would
  // do once it runs on.
  // Only then, and only after a long wait, do they move (a spare or an
  // idle worker runs them): the hook then writes the caller's errno on
  // this thread (hooks/hook_support.h, ErrnoHome), safe only while it
  // stays asleep. A fiber preempted in a hooked call that did not park
  // waits in the ring, pinned likewise. The queues first: two loads, the
  // system call a /proc read.
  if (!worker.pinned_may_wait() || now - since < kReleaseHookPinsAfter) return;
  // An announced call (`call`, its count) is checked after its thread's
  // state is read: still the call watched since `since`, asleep. A raw
  // one: asleep in a system call, whichever.
  const long syscall = call != 0 ? -1 : kernel_call(worker.os_thread().id());
  const bool waiting =
      call != 0 ? in_kernel_sleep(worker.os_thread().state()) && worker.blocking_call() == call : syscall >= 0;
  if (waiting && worker.release_hook_pinned(scratch_, call, syscall) != 0) {
    core_.idle().notify_work();
    tally.acted = true;
  }
}

bool Sysmon::hand_off(unsigned blocked, unsigned idle, bool& acted) noexcept {
  const std::size_t span = core_.steal_span();
  // manage_spares' rule: a spare starts for fibers a blocked thread holds
  // up while fewer spares run than threads are blocked.
  const unsigned spare_target = std::min(blocked, core_.spares().capacity());
  const unsigned active = core_.spares().active();
  unsigned spares_to_start = active < spare_target ? spare_target - active : 0;
  int takers = -1;  // idle and free running threads not yet given a hand-off; -1: not counted yet
  bool held_up_work = false;
  for (std::size_t i = 0; i < span; ++i) {
    Watch* found = watch(i);
    if (found == nullptr) continue;
    Watch& watch = *found;
    Worker& worker = core_.worker(i);
    if (!watch.holding_up || !worker.has_work_to_hand_off(watch.in_kernel)) continue;
    // The global queue is a hand-off only if some thread will take from
    // it: an idle worker (woken below), a spare about to start, or a
    // worker that is running fibers one after another; one hand-off per
    // such thread and scan. With every thread blocked the fibers would
    // only go from one blocked worker's queue to the next's, each time one
    // of them came back for a moment (docs/benchmarks.md, "Sysmon"). They
    // stay, and thieves take them once a thread is free.
    //
    // A CPU-bound worker's queue goes only to an idle worker: a busy peer
    // takes no more from the global queue's back than from the run queue, and a
    // timer's sleeper queued behind the moved fibers waited several slices
    // there (tests/checkpoint_test.cpp).
    if (watch.in_kernel && spares_to_start > 0) {
      --spares_to_start;
    } else if (!watch.in_kernel && idle == 0) {
      continue;
    } else {
      if (takers < 0) takers = static_cast<int>(idle) + count_free_runners();
      if (takers == 0) {
        if (watch.in_kernel) held_up_work = true;
        continue;
      }
      --takers;
    }
    const std::size_t moved = worker.hand_off_queued(scratch_, watch.in_kernel);
    // Nothing moved and nothing for thieves: what waits here is pinned to
    // this thread (a fiber that yielded inside a hook), and no other
    // thread may run it. Nobody is woken or started for it: beside 8
    // fsync writers, a wake at every look kept the blocker polling about
    // 4,800 times a second for such fibers.
    if (moved == 0 && !worker.has_stealable_spawns()) continue;
    if (watch.in_kernel) held_up_work = true;
    if (moved != 0) acted = true;
    // For what moved, and for what thieves may now take (its spawns, which
    // stay): at every look while they wait, since a thief that searched
    // before the worker was marked stuck went back to sleep without them.
    core_.idle().notify_work();
  }
  return held_up_work;
}

int Sysmon::count_free_runners() noexcept {
  const std::size_t span = core_.steal_span();
  int free_runners = 0;
  for (std::size_t i = 0; i < span; ++i) {
    // Switched within the hand-off delay and not asleep in the kernel now
    // (a fiber that blocked at once is not running fibers: two workers
    // looping in raw 20 ms sleeps would have their fibers handed between
    // them), nor in an announced blocking call. The state comes from
    // /proc (three system calls; at a thousand connections these reads
    // were a third of sysmon's CPU time) only when the look has not told
    // it already: judge_hold_up read it for a fiber that did not switch,
    // and a worker switching busily since the last look runs fibers one
    // after another (one that blocks right after such a look counts once
    // too often, and is judged blocked at the looks after).
    const Watch* watch = find_watch(i);
    if (watch == nullptr || !watch->short_run || watch->call != 0) continue;
    const bool asleep = watch->state_known        ? watch->asleep
                        : watch->switching_busily ? false
                                                  : in_kernel_sleep(core_.worker(i).os_thread().state());
    if (!asleep) ++free_runners;
  }
  return free_runners;
}

bool Sysmon::manage_spares(unsigned blocked, unsigned idle, bool held_up_work) noexcept {
  // One spare per thread blocked in the kernel: so the threads that run
  // fibers on a CPU stay at most Config::workers (the invariant of
  // sched/spares.h). A surplus spare retires at its next switch, or now if
  // it sleeps idle.
  Spares& spares = core_.spares();
  const unsigned target = std::min(blocked, spares.capacity());
  spares.set_target(target);
  spares.tidy();
  // Start one only for fibers that wait and that no idle worker will
  // take, or, when no thread runs fibers at all, for the timers and fds
  // that nobody else would serve (Go's handoffp starts an M for a P's
  // timers and the netpoller likewise).
  const bool waiting =
      idle == 0 && (held_up_work || core_.global_size() > 0 ||
                    ((core_.timers().armed() || core_.poller().has_waiters()) && count_free_runners() == 0));
  spares.set_short_of_threads(waiting && blocked > spares.capacity());
  if (!waiting) return false;
  bool acted = false;
  while (spares.active() < target && spares.activate()) acted = true;
  return acted;
}

bool Sysmon::movable_fibers_wait(Worker& worker) const noexcept {
  return worker.has_work_to_hand_off(true) || core_.global_size() > 0;
}

bool Sysmon::verdict_awaited(Worker& worker) const noexcept {
  return movable_fibers_wait(worker) || core_.timers().armed();
}

bool Sysmon::others_wait(Worker& worker) const noexcept {
  return movable_fibers_wait(worker) || worker.pinned_may_wait() || core_.timers().due();
}

bool Sysmon::someone_to_take() const noexcept {
  // With one worker and no spares there is nobody to hand off to: the
  // global queue would only feed the same worker, in FIFO order.
  return core_.config().workers > 1 || core_.spares().capacity() > 0;
}

bool Sysmon::ignored_request(Worker& worker, const Watch& watch, Clock::time_point now) noexcept {
  // A request is pending for a while even for a fiber that checkpoints
  // every few microseconds when its thread waits for a CPU on a loaded
  // machine, and a fiber without preemption runs long in wall time that
  // way: neither is stuck. Ignored means its thread ran on a CPU for at
  // least half the time since the request, or sleeps in the kernel (a
  // blocking call: it will not answer at all).
  // Found asleep in the kernel at every look for a while: no /proc read
  // (a thousand threads blocked on a std::mutex took sysmon's every tick).
  if (watch.kernel_since != Clock::time_point{} && now - watch.kernel_since >= kKernelSleepGrace) return true;
  const std::int64_t cpu = worker.os_thread().cpu_time_ns();
  if (cpu == 0 || watch.asked_cpu_ns == 0) return true;  // no CPU clock: the wall clock decides alone
  if (2 * (cpu - watch.asked_cpu_ns) >= to_ns(now) - to_ns(watch.asked)) return true;
  return in_kernel_sleep(worker.os_thread().state());
}

void Sysmon::report_stuck(Worker& worker, Watch& watch, Clock::time_point now) {
  // Identify the fiber under the registry's lock: a fiber in the registry
  // is alive, and the pointer is only compared, never followed.
  const FiberControl* running = worker.current();
  std::uint64_t fiber_id = 0;
  std::string fiber_name;
  if (running != nullptr) {
    core_.registry().for_each([&](FiberControl& fiber) {
      if (&fiber == running) {
        fiber_id = fiber.id;
        fiber_name = fiber.name();
      }
    });
  }
  if (worker.switch_tick() != watch.tick) return;  // it moved on meanwhile
  watch.stuck_fiber.store(fiber_id, std::memory_order_relaxed);
  watch.stuck.store(true, std::memory_order_relaxed);
  const Config& config = core_.config();
  if (!config.on_stuck_worker) return;
  StuckWorker report;
  report.scheduler = config.name;
  report.worker = worker.index();
  report.os_thread_id = worker.os_thread().id();
  report.fiber_id = fiber_id;
  report.fiber_name = fiber_name;
  report.running_for = std::chrono::duration_cast<std::chrono::milliseconds>(now - watch.since);
  const std::string blocked_in = describe_kernel_call(worker.os_thread().id());
  report.blocked_in = blocked_in;
  try {
    config.on_stuck_worker(report);
  } catch (...) {
    log_message(LogLevel::fatal, "weft: the on_stuck_worker handler of scheduler \"%s\" threw", config.name.c_str());
    std::terminate();
  }
}

}  // namespace weft::detail
