#include "sysmon.h"

#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>

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
  while (!stopping_.load(std::memory_order_acquire)) {
    const Clock::time_point now = Clock::now();
    bool any_running = false;
    bool all_sleeping = true;
    const bool acted = scan(now, any_running, all_sleeping);
    // Workers busy with fibers that never idle never poll: do it for them
    // (Go's sysmon: "poll network if not polled for more than 10ms").
    core_.poller().poll_if_stale(kPollStaleAfter);
    if (acted)
      delay = kMinTick;
    else
      delay = std::min(delay * 2, any_running ? running_cap_ : kMaxTick);
    idle_rounds = all_sleeping ? idle_rounds + 1 : 0;
    if (idle_rounds >= kDeepSleepAfter) {
      deep_sleep();
      idle_rounds = 0;
      continue;
    }
    futex_wait(wake_word_, 0, Clock::now() + delay);
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
  watch.cpu_start_ns = -1;
  watch.kernel_since = {};
  watch.running_since_ns.store(0, std::memory_order_relaxed);
  watch.stuck.store(false, std::memory_order_relaxed);
  watch.stuck_fiber.store(0, std::memory_order_relaxed);
}

bool Sysmon::scan(Clock::time_point now, bool& any_running, bool& all_sleeping) {
  const Config& config = core_.config();
  const bool preemption = config.preemption;
  bool acted = false;
  auto& workers = core_.workers();
  // For the spares (worker.h): threads blocked in the kernel in one fiber,
  // threads idle, and whether fibers wait that such a thread holds up.
  unsigned blocked = 0;
  unsigned idle = 0;
  bool held_up_work = false;
  const std::size_t span = core_.steal_span();
  // Whether any worker could take a hand-off now. Without one, handing
  // off a CPU-bound worker's queue only moved it to the global queue's
  // back, behind which a timer's sleeper then waited several slices
  // (tests/checkpoint_test.cpp); a busy peer takes no more from there than
  // from the ring.
  bool any_idle = false;
  for (std::size_t i = 0; i < span; ++i) {
    const WorkerState state = workers[i]->state();
    if (state == WorkerState::sleeping || state == WorkerState::searching) any_idle = true;
  }
  for (std::size_t i = 0; i < span; ++i) {
    Worker& worker = *workers[i];
    Watch& watch = watches_[i];
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
      continue;
    }
    const auto ran = now - watch.since;
    const bool asked = watch.asked != Clock::time_point{};
    // Stuck: twice the slice, and (with preemption) a request that the
    // fiber has not answered. A lone fiber that reaches its checkpoints
    // with nothing else to run clears the request: it blocks nobody.
    if (!watch.reported && ran >= 2 * slice_ && (!preemption || (asked && worker.preempt_requested()))) {
      watch.reported = true;
      report_stuck(worker, watch, now);
    }
    if (preemption && ran >= slice_ && (!asked || now - watch.asked >= slice_)) {
      worker.request_preempt(tick);
      watch.asked = now;
      acted = true;
    }
    // With one worker and no spares there is nobody to hand off to: the
    // global queue would only feed the same worker, in FIFO order.
    const bool someone_to_take = config.workers > 1 || config.spare_workers > 0;
    const bool holding_up = someone_to_take && ran >= kHandOffAfter / 2 && holding_up_fibers(worker, watch, now);
    if (holding_up && ran >= kHandOffAfter) {
      worker.set_stuck(true);
      // Blocked in the kernel: asleep there at every look for half the
      // hand-off delay. One look could catch a thread in a moment's wait
      // (a page fault, a sanitizer's internal lock) that needs no spare.
      if (!in_kernel_sleep(worker.thread_state()))
        watch.kernel_since = {};
      else if (watch.kernel_since == Clock::time_point{})
        watch.kernel_since = now;
      const bool in_kernel = watch.kernel_since != Clock::time_point{} && now - watch.kernel_since >= kHandOffAfter / 2;
      if (in_kernel) ++blocked;
      if (worker.has_stealable_work()) {
        if ((config.workers > 1 && any_idle) || in_kernel) {
          if (worker.hand_off_queued(scratch_) != 0) acted = true;
          core_.idle().notify_work();  // for what moved, and for what thieves may now take
        }
        if (in_kernel) held_up_work = true;
      }
    }
  }
  if (config.spare_workers > 0 && manage_spares(blocked, idle, held_up_work)) acted = true;
  return acted;
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
    std::fprintf(stderr, "weft: the on_stuck_worker handler of scheduler \"%s\" threw\n", config.name.c_str());
    std::terminate();
  }
}

}  // namespace weft::detail
