#include "sysmon.h"

#include <pthread.h>
#include <sys/syscall.h>

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
      watches_(std::make_unique<Watch[]>(core.config().workers + core.config().spare_workers)) {}

void Sysmon::start() {
  heavy_fence_available();  // registers for membarrier now, not in the middle of a hand-off
  thread_ = std::thread([this] { run(); });
}

void Sysmon::stop() noexcept {
  if (!thread_.joinable()) return;
  stopping_.store(true, std::memory_order_seq_cst);
  wake_word_.store(1, std::memory_order_release);
  futex_wake(wake_word_);
  thread_.join();
}

void Sysmon::wake() noexcept {
  if (!deep_asleep_.exchange(false, std::memory_order_acq_rel)) return;  // someone else did
  wake_word_.store(1, std::memory_order_release);
  futex_wake(wake_word_);
}

Sysmon::WorkerView Sysmon::view(unsigned worker) const noexcept {
  WorkerView view;
  if (worker >= core_.config().workers + core_.config().spare_workers) return view;
  const Watch& watch = watches_[worker];
  const std::int64_t since = watch.running_since_ns.load(std::memory_order_relaxed);
  if (since != 0) view.running_ms = static_cast<double>(to_ns(Clock::now()) - since) / 1e6;
  view.stuck = watch.stuck.load(std::memory_order_relaxed);
  if (view.stuck) view.fiber_id = watch.stuck_fiber.load(std::memory_order_relaxed);
  return view;
}

void Sysmon::run() {
  const std::string thread_name = (core_.config().name + "/sysmon").substr(0, 15);
  pthread_setname_np(pthread_self(), thread_name.c_str());
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
    bool any_running = false;
    bool all_sleeping = true;
    const bool acted = scan(now, any_running, all_sleeping);
    // Workers busy with fibers that never idle never poll: do it for them
    // (Go's sysmon: "poll network if not polled for more than 10ms").
    core_.poller().poll_if_stale(kPollStaleAfter);
    // Likewise timers a slice overdue (sched/timers.h): their fibers go to
    // the global queue, and the busy workers' fibers are asked to yield to
    // them at the slice.
    core_.timers().run_due(slice_);
    if (acted)
      delay = kMinTick;
    else
      delay = std::min(delay * 2, any_running ? running_cap_ : kMaxTick);
    idle_rounds = all_sleeping ? idle_rounds + 1 : 0;
    if (idle_rounds >= kDeepSleepAfter) {
      deep_sleep();
      idle_rounds = 0;
      last_look = {};  // every worker slept: nothing was being watched
      continue;
    }
    // Awake at the next timer's deadline too, if it is still ahead (one
    // already due is a worker's to run, or the backstop's above): on an
    // overloaded machine that wake-up is what got the process's busy
    // workers back onto a CPU in time (sched/timers.h).
    const Clock::time_point woken_by_tick = Clock::now() + delay;
    const Clock::time_point next_timer = core_.timers().earliest();
    futex_wait(wake_word_, 0, next_timer > Clock::now() && next_timer < woken_by_tick ? next_timer : woken_by_tick);
  }
}

void Sysmon::deep_sleep() {
  wake_word_.store(0, std::memory_order_relaxed);
  deep_asleep_.store(true, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  bool all_sleeping = true;
  for (const auto& worker : core_.workers()) {
    const WorkerState state = worker->state();
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
  watch.cpu_start_ns = -1;
  watch.kernel_since = {};
  watch.running_since_ns.store(0, std::memory_order_relaxed);
  watch.stuck.store(false, std::memory_order_relaxed);
  watch.stuck_fiber.store(0, std::memory_order_relaxed);
}

void Sysmon::restart_observations(Clock::time_point now) noexcept {
  const std::size_t span = core_.steal_span();
  for (std::size_t i = 0; i < span; ++i) {
    Watch& watch = watches_[i];
    // A verdict already given rests on time sysmon did watch: it stands,
    // and is not given twice.
    if (!watch.watching || watch.reported) continue;
    watch.since = now;
    watch.asked = {};
    watch.cpu_start_ns = -1;
    watch.kernel_since = {};
    watch.running_since_ns.store(to_ns(now), std::memory_order_relaxed);
  }
}

bool Sysmon::scan(Clock::time_point now, bool& any_running, bool& all_sleeping) {
  const Config& config = core_.config();
  const bool preemption = config.preemption;
  bool acted = false;
  auto& workers = core_.workers();
  // For the spares (worker.h) and the hand-offs: threads blocked in the
  // kernel in one fiber, and threads idle.
  unsigned blocked = 0;
  unsigned idle = 0;
  const std::size_t span = core_.steal_span();
  for (std::size_t i = 0; i < span; ++i) {
    Worker& worker = *workers[i];
    Watch& watch = watches_[i];
    watch.holding_up = false;
    watch.in_kernel = false;
    watch.short_run = false;
    const WorkerState state = worker.state();
    if (state != WorkerState::sleeping && state != WorkerState::stopped && state != WorkerState::spare)
      all_sleeping = false;
    if (state == WorkerState::sleeping || state == WorkerState::searching) ++idle;
    const std::uint64_t tick = worker.switch_tick();
    if (state != WorkerState::running) {
      if (watch.watching) forget(worker, watch);
      continue;
    }
    any_running = true;
    if (!watch.watching || tick != watch.tick) {
      // A fiber switched in since the last look: it started no earlier than
      // that look, so counting from now never preempts one too soon.
      forget(worker, watch);
      watch.watching = true;
      watch.tick = tick;
      watch.since = now;
      watch.running_since_ns.store(to_ns(now), std::memory_order_relaxed);
      watch.short_run = true;
      continue;
    }
    const auto ran = now - watch.since;
    watch.short_run = ran < kHandOffAfter;
    const bool asked = watch.asked != Clock::time_point{};
    // Stuck: twice the slice, and a further full slice in which the fiber
    // ignored sysmon (ignored_request): with preemption, a request still
    // stands; without, the fiber just went on. A lone fiber that reaches
    // its checkpoints with nothing else to run clears the request: it
    // blocks nobody. This check comes before the request is renewed
    // below, which restarts its clock.
    const bool unanswered = asked && now - watch.asked >= slice_ && (!preemption || worker.preempt_requested()) &&
                            ignored_request(worker, watch, now);
    if (!watch.reported && ran >= 2 * slice_ && unanswered) {
      watch.reported = true;
      report_stuck(worker, watch, now);
    }
    if (ran >= slice_ && (!asked || now - watch.asked >= slice_)) {
      if (preemption) {
        worker.request_preempt(tick);
        acted = true;
      }
      watch.asked = now;
      watch.asked_cpu_ns = worker.cpu_time_ns();
    }
    // With one worker and no spares there is nobody to hand off to: the
    // global queue would only feed the same worker, in FIFO order.
    const bool someone_to_take = config.workers > 1 || config.spare_workers > 0;
    const bool holding_up = someone_to_take && ran >= kHandOffAfter / 2 && holding_up_fibers(worker, watch, now);
    if (holding_up && ran >= kHandOffAfter) {
      worker.set_stuck(true);
      watch.holding_up = true;
      // Blocked in the kernel: asleep there at every look for half the
      // hand-off delay. One look could catch a thread in a moment's wait
      // (a page fault, a sanitizer's internal lock) that needs no spare.
      if (!in_kernel_sleep(worker.thread_state()))
        watch.kernel_since = {};
      else if (watch.kernel_since == Clock::time_point{})
        watch.kernel_since = now;
      watch.in_kernel = watch.kernel_since != Clock::time_point{} && now - watch.kernel_since >= kHandOffAfter / 2;
      if (watch.in_kernel) {
        ++blocked;
        // Fibers woken for this worker that only a hook's park pins here
        // (their caller's errno lives on this thread) would wait for it as
        // long as it stays blocked: forever, if it waits in futex(2) for a
        // std::mutex one of them holds. Only then, and only after a long
        // wait, do they move (a spare or an idle worker runs them): the
        // hook then writes the caller's errno on this thread
        // (hooks/hook_support.h, ErrnoHome), safe only while it stays asleep.
        // A fiber preempted in a hooked call that did not park waits in
        // the ring, pinned likewise. The queues first: two loads, the
        // system call a /proc read.
        if (worker.pinned_may_wait() && now - watch.kernel_since >= kReleaseHookPinsAfter &&
            kernel_call(worker.os_thread_id()) == SYS_futex && worker.release_hook_pinned(scratch_) != 0) {
          core_.idle().notify_work();
          acted = true;
        }
      }
    }
  }
  const bool held_up_work = hand_off(blocked, idle, acted);
  if (config.spare_workers > 0 && manage_spares(blocked, idle, held_up_work)) acted = true;
  return acted;
}

bool Sysmon::hand_off(unsigned blocked, unsigned idle, bool& acted) noexcept {
  const Config& config = core_.config();
  auto& workers = core_.workers();
  const std::size_t span = core_.steal_span();
  // manage_spares' rule: a spare starts for fibers a blocked thread holds
  // up while fewer spares run than threads are blocked.
  const unsigned spare_target = std::min(blocked, config.spare_workers);
  const unsigned active = core_.active_spares();
  unsigned spares_to_start = active < spare_target ? spare_target - active : 0;
  int takers = -1;  // idle and free running threads not yet given a hand-off; -1: not counted yet
  bool held_up_work = false;
  for (std::size_t i = 0; i < span; ++i) {
    Watch& watch = watches_[i];
    Worker& worker = *workers[i];
    if (!watch.holding_up || !worker.has_work_to_hand_off()) continue;
    if (watch.in_kernel) held_up_work = true;
    // The global queue is a hand-off only if some thread will take from
    // it: an idle worker (woken below), a spare about to start, or a
    // worker that is running fibers one after another; one hand-off per
    // such thread and scan. With every thread blocked the fibers would
    // only go from one blocked worker's queue to the next's, each time one
    // of them came back for a moment (issue 15; docs/benchmarks.md). They
    // stay, and thieves take them once a thread is free.
    //
    // A CPU-bound worker's queue goes only to an idle worker: a busy peer
    // takes no more from the global queue's back than from the ring, and a
    // timer's sleeper queued behind the moved fibers waited several slices
    // there (tests/checkpoint_test.cpp).
    if (watch.in_kernel && spares_to_start > 0) {
      --spares_to_start;
    } else if (!watch.in_kernel && idle == 0) {
      continue;
    } else {
      if (takers < 0) takers = static_cast<int>(idle) + count_free_runners();
      if (takers == 0) continue;
      --takers;
    }
    if (worker.hand_off_queued(scratch_) != 0) acted = true;
    // For what moved, and for what thieves may now take (its spawns, which
    // stay): at every look while they wait, since a thief that searched
    // before the worker was marked stuck went back to sleep without them.
    core_.idle().notify_work();
  }
  return held_up_work;
}

int Sysmon::count_free_runners() noexcept {
  auto& workers = core_.workers();
  const std::size_t span = core_.steal_span();
  int free_runners = 0;
  for (std::size_t i = 0; i < span; ++i) {
    // Switched within the hand-off delay and not asleep in the kernel now
    // (a fiber that blocked at once is not running fibers).
    if (watches_[i].short_run && !in_kernel_sleep(workers[i]->thread_state())) ++free_runners;
  }
  return free_runners;
}

bool Sysmon::manage_spares(unsigned blocked, unsigned idle, bool held_up_work) noexcept {
  // One spare per thread blocked in the kernel: so the threads that run
  // fibers on a CPU stay at most Config::workers (the invariant of
  // worker.h). A surplus spare retires at its next switch.
  const unsigned target = std::min(blocked, core_.config().spare_workers);
  core_.set_spare_target(target);
  // Start one only for fibers that wait and that no idle worker will take.
  const bool waiting = held_up_work || core_.global_size() > 0;
  if (!waiting || idle != 0) return false;
  bool acted = false;
  while (core_.active_spares() < target && core_.activate_spare()) acted = true;
  return acted;
}

bool Sysmon::holding_up_fibers(Worker& worker, Watch& watch, Clock::time_point now) noexcept {
  const std::int64_t cpu = worker.cpu_time_ns();
  if (watch.cpu_start_ns < 0) {
    watch.cpu_start_ns = cpu;
    watch.cpu_since = now;
    return false;
  }
  if (2 * (cpu - watch.cpu_start_ns) >= to_ns(now) - to_ns(watch.cpu_since)) return true;
  return worker.thread_state() != 'R';  // not runnable: asleep in the kernel
}

bool Sysmon::ignored_request(Worker& worker, const Watch& watch, Clock::time_point now) noexcept {
  // A request is pending for a while even for a fiber that checkpoints
  // every few microseconds when its thread waits for a CPU on a loaded
  // machine, and a fiber without preemption runs long in wall time that
  // way: neither is stuck. Ignored means its thread ran on a CPU for at
  // least half the time since the request, or sleeps in the kernel (a
  // blocking call: it will not answer at all).
  const std::int64_t cpu = worker.cpu_time_ns();
  if (cpu == 0 || watch.asked_cpu_ns == 0) return true;  // no CPU clock: the wall clock decides alone
  if (2 * (cpu - watch.asked_cpu_ns) >= to_ns(now) - to_ns(watch.asked)) return true;
  return in_kernel_sleep(worker.thread_state());
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
  report.os_thread_id = worker.os_thread_id();
  report.fiber_id = fiber_id;
  report.fiber_name = fiber_name;
  report.running_for = std::chrono::duration_cast<std::chrono::milliseconds>(now - watch.since);
  const std::string blocked_in = describe_kernel_call(worker.os_thread_id());
  report.blocked_in = blocked_in;
  try {
    config.on_stuck_worker(report);
  } catch (...) {
    log_message(LogLevel::fatal, "weft: the on_stuck_worker handler of scheduler \"%s\" threw", config.name.c_str());
    std::terminate();
  }
}

}  // namespace weft::detail
