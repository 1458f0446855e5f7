#include "spares.h"

#include <new>

#include "../runtime/log.h"
#include "child_parent.h"
#include "futex.h"
#include "scheduler_core.h"
#include "worker.h"

namespace weft::detail {

// A spare's activations word (Worker::spare_activations_): bumped by
// kActivation for each activation (and at shutdown, to end the thread);
// bit kNoThread set while the spare has no thread (never started, or ended
// after its keep-alive). The thread sets that bit itself, by a CAS from the
// value it last saw, so an activation that comes as it gives up is never
// lost: either the CAS fails and the thread runs, or activate() sees the
// bit and starts a new thread.
constexpr std::uint32_t kNoThread = 1;
constexpr std::uint32_t kActivation = 2;

Spares::Spares(SchedulerCore& core, unsigned capacity)
    : core_(core),
      capacity_(capacity),
      keep_alive_(core.config().spare_keep_alive),
      slots_(std::make_unique<std::atomic<Worker*>[]>(capacity)) {}

Spares::~Spares() {
  for (unsigned i = 0, n = created(); i < n; ++i) delete &at(i);
}

bool Spares::activate() noexcept {
  const unsigned made = created();
  for (unsigned i = 0; i < made; ++i) {
    Worker& spare = at(i);
    if (!spare.spare_running_.load(std::memory_order_acquire)) return start(spare, i);
  }
  if (made == capacity_) return false;  // at the limit: set_short_of_threads says so
  const unsigned workers = core_.config().workers;
  Worker* fresh = nullptr;
  try {
    // Room for it in the sleepers' list, so that going to sleep never allocates.
    core_.idle().reserve_sleepers(workers + made + 1);
    fresh = new Worker(core_, workers + made, true);
  } catch (...) {  // std::bad_alloc: sysmon tries again at its next look
    return false;
  }
  slots_[made].store(fresh, std::memory_order_relaxed);
  created_.store(made + 1, std::memory_order_release);
  return start(*fresh, made);
}

bool Spares::start(Worker& spare, unsigned slot) noexcept {
  active_.fetch_add(1, std::memory_order_relaxed);
  // Before its thread can run: thieves must see its queues.
  if (span_.load(std::memory_order_relaxed) < slot + 1) span_.store(slot + 1, std::memory_order_release);
  spare.spare_running_.store(true, std::memory_order_relaxed);
  // Release: the thread sees the queues sysmon handed off before.
  const std::uint32_t before = spare.spare_activations_.fetch_add(kActivation, std::memory_order_release);
  if ((before & kNoThread) == 0) {
    futex_wake(spare.spare_activations_);
    return true;
  }
  // No thread: start one, after joining the one that ended (at once: it set
  // the bit on its way out).
  spare.join();
  spare.spare_activations_.fetch_and(~kNoThread, std::memory_order_relaxed);
  try {
    spare.start();
  } catch (const std::exception& error) {  // std::system_error: no thread to be had; sysmon tries again later
    spare.spare_activations_.fetch_or(kNoThread, std::memory_order_relaxed);
    spare.spare_running_.store(false, std::memory_order_relaxed);
    active_.fetch_sub(1, std::memory_order_relaxed);
    report_start_failure(error);
    return false;
  }
  return true;
}

void Spares::report_start_failure(const std::exception& error) noexcept {
  if (start_failure_reported_) return;
  start_failure_reported_ = true;
  log_message(LogLevel::warning,
              "weft: scheduler \"%s\" could not start a spare thread (%s): fibers queued behind threads blocked in "
              "the kernel wait for one of them to return, and sysmon tries again at its next look. RLIMIT_NPROC, "
              "or a cgroup's pids.max, may be reached; docs/sysmon.md",
              core_.config().name.c_str(), error.what());
}

void Spares::set_short_of_threads(bool short_of_threads) noexcept {
  limit_reached_.store(short_of_threads, std::memory_order_relaxed);
  if (!short_of_threads || limit_reported_) return;
  limit_reported_ = true;
  // The one place that says it, so that a log sink can take it over.
  const Config& config = core_.config();
  log_message(LogLevel::warning,
              "weft: scheduler \"%s\" reached its thread limit, Config::max_threads = %u (%u workers and %u spare "
              "threads): fibers queued behind threads blocked in the kernel now wait for one of them to return. "
              "Raise Config::max_threads (WEFT_MAX_THREADS for the default scheduler); docs/sysmon.md",
              config.name.c_str(), config.max_threads, config.workers, capacity_);
}

void Spares::tidy() noexcept {
  const unsigned span = span_.load(std::memory_order_relaxed);
  if (surplus()) {
    for (unsigned i = 0; i < span; ++i) {
      Worker& spare = at(i);
      // Asleep idle: woken, it finds itself surplus and retires
      // (Worker::wait_for_work); running, it retires at its next switch.
      if (spare.spare_running_.load(std::memory_order_relaxed) && spare.state() == WorkerState::sleeping)
        core_.idle().notify_worker(spare.idle_slot());
    }
  }
  // Acquire: a spare no longer running has flushed its queues.
  unsigned narrowed = span;
  while (narrowed > 0 && !at(narrowed - 1).spare_running_.load(std::memory_order_acquire)) --narrowed;
  if (narrowed != span) span_.store(narrowed, std::memory_order_release);
}

unsigned Spares::running() const noexcept {
  unsigned n = 0;
  for (unsigned i = 0, span = this->span(); i < span; ++i)
    if (at(i).spare_running_.load(std::memory_order_relaxed)) ++n;
  return n;
}

unsigned Spares::threads() const noexcept {
  unsigned n = 0;
  for (unsigned i = 0, made = created(); i < made; ++i)
    if ((at(i).spare_activations_.load(std::memory_order_relaxed) & kNoThread) == 0) ++n;
  return n;
}

void Spares::serve(Worker& spare) {
  // Started by an activation: the one counted in the word now.
  std::uint32_t seen = spare.spare_activations_.load(std::memory_order_acquire);
  for (;;) {
    if (core_.stopping()) return;
    spare.state_.store(WorkerState::running, std::memory_order_relaxed);
    spare.run_fibers();
    if (core_.stopping()) return;
    spare.flush_to_global();
    spare.state_.store(WorkerState::spare, std::memory_order_relaxed);
    spare.current_.store(nullptr, std::memory_order_relaxed);
    // Release: a sysmon that activates it again sees the queues flushed.
    spare.spare_running_.store(false, std::memory_order_release);
    if (!wait_for_activation(spare, seen)) return;
  }
}

bool Spares::wait_for_activation(Worker& spare, std::uint32_t& seen) noexcept {
  // A thread that made a child process stays: its end would send the
  // child its PR_SET_PDEATHSIG (sched/child_parent.h).
  const Clock::time_point deadline = made_a_child() ? Clock::time_point::max() : Clock::now() + keep_alive_;
  for (;;) {
    const std::uint32_t now = spare.spare_activations_.load(std::memory_order_acquire);
    if (now != seen) {
      seen = now;
      return true;
    }
    if (Clock::now() >= deadline) {
      // Gives up the thread unless an activation came meanwhile.
      std::uint32_t expected = seen;
      if (spare.spare_activations_.compare_exchange_strong(expected, seen | kNoThread, std::memory_order_acq_rel))
        return false;
      continue;
    }
    futex_wait(spare.spare_activations_, seen, deadline);
  }
}

bool Spares::retire_if_surplus() noexcept {
  unsigned active = active_.load(std::memory_order_relaxed);
  while (active > target_.load(std::memory_order_relaxed)) {
    if (active_.compare_exchange_weak(active, active - 1, std::memory_order_relaxed)) return true;
  }
  return false;
}

void Spares::stop() noexcept {
  const unsigned made = created();
  for (unsigned i = 0; i < made; ++i) {
    Worker& spare = at(i);
    if ((spare.spare_activations_.fetch_add(kActivation, std::memory_order_release) & kNoThread) == 0)
      futex_wake(spare.spare_activations_);
  }
  for (unsigned i = 0; i < made; ++i) at(i).join();
}

}  // namespace weft::detail
