#include "scheduler_core.h"

#include <pthread.h>
#include <weft/detail/park.h>
#include <weft/scheduler.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

#include "../runtime/log.h"
#include "../runtime/overflow_handler.h"
#include "run_latency.h"
#include "trace.h"
#include "worker.h"

namespace weft::detail {
namespace {

std::atomic<std::uint64_t> next_fiber_id{1};

// Fiber ids are unique across the process; each thread takes them from the
// shared counter in blocks (Go's goidcache), one locked add per block
// rather than per spawn.
std::uint64_t new_fiber_id() noexcept {
  constexpr std::uint64_t kBlock = 64;
  [[gnu::tls_model("initial-exec")]] thread_local std::uint64_t next = 0;
  [[gnu::tls_model("initial-exec")]] thread_local std::uint64_t end = 0;
  if (next == end) {
    next = next_fiber_id.fetch_add(kBlock, std::memory_order_relaxed);
    end = next + kBlock;
  }
  return next++;
}

const Config& validated(const Config& config) {
  // The bounds WEFT_WORKERS and WEFT_MAX_THREADS take (compose/
  // default_scheduler.cpp): beyond them a scheduler's tables (a slot per
  // thread it may start) would take gigabytes, or fail with a bare
  // std::bad_alloc.
  if (config.workers == 0 || config.workers > 1024)
    throw std::invalid_argument("weft::Config::workers must be 1 to 1024, got " + std::to_string(config.workers));
  if (config.max_threads > 1'000'000)
    throw std::invalid_argument("weft::Config::max_threads must be at most 1000000, got " +
                                std::to_string(config.max_threads));
  // At most an hour: sysmon compares twice the slice in nanoseconds, and a
  // fiber that must never be preempted asks for Config::preemption = false.
  if (config.time_slice.count() <= 0 || config.time_slice > std::chrono::hours(1))
    throw std::invalid_argument("weft::Config::time_slice must be positive and at most an hour, got " +
                                std::to_string(config.time_slice.count()) + " us");
  if (config.shutdown_grace.count() <= 0)
    throw std::invalid_argument("weft::Config::shutdown_grace must be positive, got " +
                                std::to_string(config.shutdown_grace.count()) + " ms");
  check_stack_size(config.stack_size, "weft::Config::stack_size");
  if (config.max_blocking_threads == 0 || config.max_blocking_threads > 65536)
    throw std::invalid_argument("weft::Config::max_blocking_threads must be 1 to 65536, got " +
                                std::to_string(config.max_blocking_threads));
  if (config.blocking_threads > 1024)
    throw std::invalid_argument(
        "weft::Config::blocking_threads (deprecated: set max_blocking_threads) must be 0 "
        "(unset) or 1 to 1024, got " +
        std::to_string(config.blocking_threads));
  if (config.blocking_keep_alive.count() <= 0)
    throw std::invalid_argument("weft::Config::blocking_keep_alive must be positive");
  if (config.max_threads < config.workers)
    throw std::invalid_argument("weft::Config::max_threads (" + std::to_string(config.max_threads) +
                                ") must be at least Config::workers (" + std::to_string(config.workers) +
                                "); equal to it turns spare threads off");
  if (config.spare_keep_alive.count() < 0)
    throw std::invalid_argument("weft::Config::spare_keep_alive must not be negative");
  return config;
}

// Passes over the fiber's locals at its end, as pthread's
// PTHREAD_DESTRUCTOR_ITERATIONS: a value a destructor makes in the last
// one is left undestroyed, as pthread leaves it.
constexpr int kLocalDestructionPasses = 4;

void destroy_fiber_locals(FiberControl* fiber) noexcept {
  // In reverse slot order. A destructor may touch other locals: read one,
  // made anew if this fiber had none or it was destroyed already (a slot
  // past the array's end grows it), or set one. So no iterator or
  // reference into the array is held across a destructor (they were, and
  // a growth left the loop in freed memory: SIGSEGV), each value is taken
  // out of its slot before it is destroyed, and a value made meanwhile is
  // destroyed by the next pass (it was dropped undestroyed).
  for (int pass = 0; pass < kLocalDestructionPasses; ++pass) {
    bool destroyed = false;
    for (std::size_t slot = fiber->locals.size(); slot-- > 0;) {
      const FiberLocalValue taken = std::exchange(fiber->locals[slot], FiberLocalValue{});
      if (taken.value == nullptr) continue;
      taken.destroy(taken.value);
      destroyed = true;
    }
    if (!destroyed) break;
  }
  fiber->locals.clear();
  fiber->locals.shrink_to_fit();
}

// A weft::Mutex is unlocked by the fiber that locked it (sync/mutex.cpp
// aborts on any other caller's unlock), so one that a fiber still holds at
// its end would stay locked for good, its waiters parked forever, and a
// fiber later given the same control block would pass for its owner. As
// with an unlock by a non-owner, the process stops here, naming the fiber.
void abort_if_ends_holding_mutexes(const FiberControl& self) noexcept {
  if (self.weft_mutexes_held == 0) [[likely]]
    return;
  char name[48];
  self.copy_name(name, sizeof name);
  log_message(LogLevel::fatal,
              "weft: fiber \"%s\" #%llu ended holding %u weft::Mutex lock(s), which no other caller may unlock "
              "(docs/locks.md)",
              name, static_cast<unsigned long long>(self.id), self.weft_mutexes_held);
  std::abort();
}

// In the child of a fork() the fiber made, whose thread is no worker
// (worker.cpp), the fiber's end is the end of the child's only thread: the
// process exits with 0, as after its last thread's end, or an exception
// that ended it terminates the child, as a std::thread's.
[[noreturn]] void end_forked_childs_fiber(FiberControl* self) noexcept {
  if (self->exception) std::rethrow_exception(self->exception);
  std::exit(0);
}

// pthread_exit() or a thread's cancellation reached a fiber's base: the
// unwinding of its thread, which glibc aborts the process for if caught
// and not thrown on ("FATAL: exception not rethrown"). In the child of a
// fork() the fiber made, its thread is the child's only one: the unwinding
// goes on and ends it, and the process exits as after its last thread's
// end. A worker's thread may not end under its scheduler: the process
// stops, saying why.
[[noreturn]] void thread_unwinding_reached(const FiberControl& self) {
  if (current_worker() == nullptr) throw;
  char name[48];
  self.copy_name(name, sizeof name);
  log_message(LogLevel::fatal,
              "weft: pthread_exit() or a cancellation of the thread in fiber \"%s\" #%llu: a fiber cannot end its "
              "worker's thread; return from the fiber's function instead",
              name, static_cast<unsigned long long>(self.id));
  std::abort();
}

// Every fiber starts here, on its own stack.
transfer_t fiber_main(transfer_t transfer) {
  FiberControl* self = current_worker()->current();
  complete_switch(self->context, transfer);
  try {
    self->body(self->callable, true);
  } catch (...) {
    // Not a C++ exception (no exception_ptr for it): glibc's unwinding of
    // the thread. (A handler of abi::__forced_unwind& binds a reference to
    // a null object, which UBSan reports.)
    self->exception = std::current_exception();
    if (!self->exception) thread_unwinding_reached(*self);
  }
  destroy_fiber_locals(self);
  abort_if_ends_holding_mutexes(*self);
  if (current_worker() == nullptr) [[unlikely]]
    end_forked_childs_fiber(self);
  return self->scheduler->finish_fiber(self);
}

}  // namespace

SchedulerCore::SchedulerCore(Config config, const SchedulerParts& parts)
    : config_(validated(config)),
      stacks_(config_.stack_size, config_.stack_pool_size, config_.workers),
      registry_(config_.workers + 1),
      idle_(config_.workers, config_.workers),
      spares_(*this, config_.max_threads - config_.workers),
      live_(std::make_unique<LiveCount[]>(config_.workers + 1)) {
  if (parts.make_poller == nullptr) throw std::invalid_argument("weft: SchedulerParts::make_poller is null");
  install_overflow_handler();
  poller_ = parts.make_poller(*this);
  idle_.set_poller(poller_.get());
  extensions_.reserve(parts.extensions.size());
  for (auto make : parts.extensions) extensions_.push_back(make(config_));
  workers_.reserve(config_.workers);
  for (unsigned i = 0; i < config_.workers; ++i) workers_.push_back(std::make_unique<Worker>(*this, i));
  // Returns once every thread has set itself up: a fork() right after
  // construction then finds none of them in the middle of its start-up
  // (allocating, under ASan, whose allocator GCC 12 does not lock for fork:
  // the child would hang in its first malloc).
  RawLatch started(config_.workers + 1);
  try {
    for (unsigned i = 0; i < config_.workers; ++i) workers_[i]->start(&started);
    sysmon_.start(started);
  } catch (...) {
    // Out of threads (RLIMIT_NPROC, a cgroup's pids.max), or of memory
    // for one: the threads started so far end before the members they use
    // go, instead of std::terminate at a joinable std::thread's
    // destruction.
    stopping_.store(true, std::memory_order_seq_cst);
    idle_.wake_all();
    for (auto& worker : workers_) worker->join();
    try {
      throw;
    } catch (const std::system_error& error) {
      throw std::system_error(error.code(), "weft::Scheduler \"" + config_.name + "\": cannot start its " +
                                                std::to_string(config_.workers) +
                                                " worker threads and sysmon's (RLIMIT_NPROC, or a cgroup's "
                                                "pids.max, may be reached)");
    }
  }
  started.wait();
  services_.attach(parts.services, *this);
}

// The services (services_, the last member) let go of it after shutdown():
// a core of a shutdown that hangs still shows gdb the fibers it waits for.
SchedulerCore::~SchedulerCore() { shutdown(); }

bool SchedulerCore::in_forked_child() const noexcept { return made_in_.in_forked_child(); }

FiberControl* SchedulerCore::prepare_fiber(const SpawnOptions& options, std::size_t callable_size,
                                           std::size_t callable_align) {
  if (in_forked_child())
    throw std::logic_error("weft: spawn on scheduler \"" + config_.name +
                           "\" in a forked child: its workers are threads of the parent process; create a new "
                           "weft::Scheduler in the child (docs/usage.md)");
  Worker* const own = own_worker();
  live_count(own).fetch_add(1, std::memory_order_seq_cst);
  // Once shutdown has begun only the scheduler's own fibers may spawn (the
  // work they are finishing may need helpers); a plain thread's spawn is
  // refused, so a steady stream of them cannot keep shutdown waiting.
  if (stopping_.load(std::memory_order_seq_cst) || (own == nullptr && shutting_down_.load(std::memory_order_seq_cst))) {
    fiber_exited();
    throw std::logic_error("weft: spawn on scheduler \"" + config_.name + "\" after its shutdown began");
  }
  FiberControl* fiber = nullptr;
  try {
    if (options.stack_size != 0)
      check_stack_size(options.stack_size, "weft: SpawnOptions::stack_size (0: Config::stack_size)");
    const bool pool_size = options.stack_size == 0 || options.stack_size == config_.stack_size;
    if (pool_size && callable_size <= FiberControl::kInlineCallableSize &&
        callable_align <= FiberControl::kInlineCallableAlign) {
      // Its stack comes when it first runs (start_fiber): a fiber that
      // waits to start holds only this block, and takes a stack that a
      // finished fiber has just given back, hot.
      fiber = new FiberControl(*this, new_fiber_id());
      fiber->callable = fiber->callable_storage;
    } else {
      Stack stack = stacks_.acquire(options.stack_size, stack_cache(own));
      // The callable lives at the top of the stack; at least a page must be
      // left below it for the fiber to run on.
      if (callable_size + callable_align + 4096 > stack.usable_size())
        throw std::invalid_argument("weft: the fiber's callable (" + std::to_string(callable_size) +
                                    " bytes) does not fit on its stack of " +
                                    std::to_string(stack.usable_size() / 1024) + " KiB; capture less by value");
      fiber = new FiberControl(*this, new_fiber_id());
      fiber->stack = std::move(stack);
      unpoison_stack(fiber->stack.bottom(), fiber->stack.usable_size());
      auto top = reinterpret_cast<std::uintptr_t>(fiber->stack.top());
      const std::size_t align = callable_align < 16 ? 16 : callable_align;
      fiber->callable = reinterpret_cast<void*>((top - callable_size) & ~(align - 1));
    }
  } catch (...) {
    delete fiber;
    fiber_exited();
    throw;
  }
  if (!options.name.empty()) fiber->set_name(options.name);
  return fiber;
}

void SchedulerCore::abandon_fiber(FiberControl* fiber) noexcept {
  stacks_.release(std::move(fiber->stack));
  delete fiber;
  fiber_exited();
}

void SchedulerCore::launch_fiber(FiberControl* fiber, FiberBody body) noexcept {
  fiber->body = body;
  mark_runnable(*fiber);
  if (fiber->stack) {  // its callable is at the top of its stack
    char* bottom = fiber->stack.bottom();
    make_context(fiber->context, bottom, static_cast<std::size_t>(static_cast<char*>(fiber->callable) - bottom),
                 &fiber_main, fiber->stack.sanitizer_fiber());
  }
  Worker* const own = own_worker();
  registry_.add(fiber, local_slot(own));
  if (own != nullptr) {
    own->push_spawned(fiber);
  } else {
    push_global(fiber);
    idle_.notify_work();
  }
}

bool SchedulerCore::start_fiber(FiberControl& fiber, const Worker& worker) noexcept {
  try {
    fiber.stack = stacks_.acquire(0, stack_cache(&worker));
  } catch (...) {
    fiber.exception = std::current_exception();
    return false;
  }
  unpoison_stack(fiber.stack.bottom(), fiber.stack.usable_size());
  make_context(fiber.context, fiber.stack.bottom(), fiber.stack.usable_size(), &fiber_main,
               fiber.stack.sanitizer_fiber());
  return true;
}

void SchedulerCore::end_unstarted(FiberControl* fiber) noexcept {
  fiber->body(fiber->callable, false);
  end_fiber(fiber);
  fiber->release_reference();
  fiber_exited();
}

void SchedulerCore::ready(FiberControl* fiber) noexcept {
  fiber->state.store(FiberState::runnable, std::memory_order_relaxed);
  mark_runnable(*fiber);
  if (tracing()) [[unlikely]]
    trace_wake(*fiber);
  if (fiber->pin_count.load(std::memory_order_relaxed) != 0) {
    fiber->worker.load(std::memory_order_relaxed)->push_inbox(fiber);
    return;
  }
  if (Worker* own = own_worker()) {
    own->push_next(fiber);
    return;
  }
  push_global(fiber);
  idle_.notify_work();
}

LatencySummary SchedulerCore::sched_latency_since_last() {
  LatencyHistogram::Counts now{};
  for (std::size_t i = 0, span = steal_span(); i < span; ++i) worker(i).run_latency().add_to(now);
  std::lock_guard guard(sched_latency_lock_);
  LatencyHistogram::Counts interval;
  for (unsigned i = 0; i < LatencyHistogram::bucket_count; ++i) {
    // A bucket read a moment before its worker's store is at worst one
    // record behind: the next interval counts it.
    interval[i] = now[i] >= sched_latency_seen_[i] ? now[i] - sched_latency_seen_[i] : 0;
    if (now[i] > sched_latency_seen_[i]) sched_latency_seen_[i] = now[i];
  }
  return LatencyHistogram::summarize(interval, LatencyHistogram::unknown_max);
}

void SchedulerCore::push_global(FiberControl* fiber) noexcept { push_global_bulk(&fiber, 1); }

void SchedulerCore::push_global_bulk(FiberControl* const* fibers, std::size_t count) noexcept {
  const Worker* const own = own_worker();
  global_.push(fibers, count, own != nullptr && !own->is_spare() ? own->index() : GlobalQueue::kAnyThread);
}

std::size_t SchedulerCore::pop_global_bulk(FiberControl** out, std::size_t max) noexcept {
  return global_.pop(out, max);
}

transfer_t SchedulerCore::finish_fiber(FiberControl* fiber) noexcept {
  end_fiber(fiber);
  return current_worker()->exit_current(SwitchAction{&release_finished, fiber});
}

void SchedulerCore::end_fiber(FiberControl* fiber) noexcept {
  registry_.remove(fiber);
  std::uint32_t flags;
  {
    std::lock_guard guard(fiber->join_lock);
    flags = fiber->end_flags.fetch_or(FiberControl::finished, std::memory_order_acq_rel);
    fiber->state.store(FiberState::done, std::memory_order_release);
    while (Waiter* joiner = fiber->joiners.pop_front()) unpark(*joiner);
  }
  if ((flags & FiberControl::detached) != 0 && fiber->exception) report_unhandled(fiber);
}

// After the fiber's last switch, on whatever runs next on its worker: its
// stack goes back to the pool at once; only the control block waits for
// the handle.
void SchedulerCore::release_finished(void* arg) noexcept {
  auto* fiber = static_cast<FiberControl*>(arg);
  SchedulerCore* core = fiber->scheduler;
  // This runs on one of the fiber's scheduler's workers.
  core->stacks_.release(std::move(fiber->stack), core->stack_cache(current_worker()));
  fiber->release_reference();
  core->fiber_exited();
}

Worker* SchedulerCore::own_worker() const noexcept {
  Worker* worker = current_worker();
  return worker != nullptr && &worker->core() == this ? worker : nullptr;
}

unsigned SchedulerCore::local_slot(const Worker* own) const noexcept {
  return own != nullptr && !own->is_spare() ? own->index() + 1 : 0;
}

unsigned SchedulerCore::stack_cache(const Worker* own) const noexcept {
  return own != nullptr && !own->is_spare() ? own->index() : StackPool::no_cache;
}

std::atomic<std::int64_t>& SchedulerCore::live_count(Worker* own) noexcept { return live_[local_slot(own)].n; }

std::int64_t SchedulerCore::live_sum() const noexcept {
  std::int64_t sum = 0;
  for (unsigned i = 0; i <= config_.workers; ++i) sum += live_[i].n.load(std::memory_order_seq_cst);
  return sum;
}

std::uint64_t SchedulerCore::live_fibers() const noexcept {
  const std::int64_t sum = live_sum();
  return sum > 0 ? static_cast<std::uint64_t>(sum) : 0;
}

// Shutdown reads the slots one at a time, so it may see a sum that never
// existed. It can be too high, never a false zero once stopping_ is set:
// after that only exits happen (and spawns that back out again in the same
// slot), and a missed exit only raises the sum. Hence the re-check in
// shutdown() after setting stopping_.
void SchedulerCore::fiber_exited() noexcept {
  live_count(own_worker()).fetch_sub(1, std::memory_order_seq_cst);
  if (shutting_down_.load(std::memory_order_seq_cst)) {
    std::lock_guard guard(shutdown_lock_);
    all_exited_.notify_all();
  }
}

void SchedulerCore::report_unhandled(FiberControl* fiber) noexcept {
  const std::string name = fiber->name();
  if (config_.on_unhandled_exception) {
    try {
      config_.on_unhandled_exception(name, fiber->id, fiber->exception);
      return;
    } catch (...) {
      log_message(LogLevel::fatal, "weft: the unhandled-exception handler threw");
      std::terminate();
    }
  }
  std::string what = "an exception not derived from std::exception";
  try {
    std::rethrow_exception(fiber->exception);
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  log_message(LogLevel::fatal, "weft: uncaught exception in detached fiber \"%s\" #%llu: %s", name.c_str(),
              static_cast<unsigned long long>(fiber->id), what.c_str());
  std::terminate();
}

// Bounded whatever the number of stuck fibers: the first kListed by name,
// then how many wait where (a site is a primitive's kind and operation, not
// its address, so there are few of them).
void SchedulerCore::report_stuck_fibers() {
  constexpr std::size_t kListed = 32;
  std::string report = "weft: scheduler \"" + config_.name + "\" is shutting down but " +
                       std::to_string(live_fibers()) + " fiber(s) are still alive after " +
                       std::to_string(config_.shutdown_grace.count()) + " ms:\n";
  std::size_t seen = 0;
  std::map<std::string, std::size_t> by_site;
  registry_.for_each([&](FiberControl& fiber) {
    const FiberSnapshot snap = take_snapshot(fiber);
    ++by_site[snap.wait_kind.empty() ? snap.state : snap.wait_kind + " (" + snap.wait_operation + ")"];
    if (seen++ >= kListed) return;
    report += "  \"" + snap.name + "\" #" + std::to_string(snap.id) + " " + snap.state;
    if (snap.wait_kind == kFdWaitKind) {
      // The site's object is the fd's number (io/netpoller.cpp).
      report += ", waiting on fd " + std::to_string(reinterpret_cast<std::uintptr_t>(snap.wait_object)) + " (" +
                snap.wait_operation + ") for " + std::to_string(static_cast<long long>(snap.waiting_ms)) + " ms";
    } else if (!snap.wait_kind.empty()) {
      char address[32];
      std::snprintf(address, sizeof(address), "%p", snap.wait_object);
      report += ", waiting on " + snap.wait_kind + "@" + address + " (" + snap.wait_operation + ") for " +
                std::to_string(static_cast<long long>(snap.waiting_ms)) + " ms";
    }
    report += "\n";
  });
  if (seen > kListed) report += "  ... and " + std::to_string(seen - kListed) + " more\n";
  report += "weft: by wait site:\n";
  for (const auto& [site, count] : by_site) report += "  " + std::to_string(count) + " " + site + "\n";
  report += config_.shutdown_policy == ShutdownPolicy::abort ? "weft: aborting (ShutdownPolicy::abort)\n"
                                                             : "weft: still waiting (ShutdownPolicy::wait)\n";
  report.pop_back();  // the last newline: a message has none
  log_message(config_.shutdown_policy == ShutdownPolicy::abort ? LogLevel::fatal : LogLevel::error, "%s",
              report.c_str());
}

// Any number of threads may call this at once, and again later: the first
// caller (the leader) does the work, the others wait until it is done. Only
// the leader joins sysmon, the timers and the workers, so each thread is
// joined exactly once.
void SchedulerCore::shutdown() {
  if (in_forked_child()) return;  // the workers are the parent's threads
  if (own_worker() != nullptr) {
    log_message(LogLevel::fatal,
                "weft: scheduler \"%s\" shut down from one of its own fibers: it would wait for itself",
                config_.name.c_str());
    std::terminate();
  }
  {
    std::unique_lock guard(shutdown_lock_);
    if (shutdown_claimed_) {
      all_exited_.wait(guard, [this] { return stopped_; });
      return;
    }
    shutdown_claimed_ = true;
  }
  // From here on, spawns from outside the scheduler are refused
  // (prepare_fiber), so a thread that keeps spawning cannot hold shutdown
  // off; the scheduler's own fibers may still spawn the work they need to
  // finish.
  shutting_down_.store(true, std::memory_order_seq_cst);
  for (;;) {
    std::unique_lock guard(shutdown_lock_);
    const auto deadline = deadline_after(config_.shutdown_grace);  // saturated: a grace of years waits for good
    all_exited_.wait_until(guard, deadline, [this] { return live_sum() == 0; });
    if (live_sum() == 0) {
      stopping_.store(true, std::memory_order_seq_cst);
      if (live_sum() == 0) break;
      stopping_.store(false, std::memory_order_seq_cst);  // a spawn raced with us
      continue;
    }
    guard.unlock();
    report_stuck_fibers();
    if (config_.shutdown_policy == ShutdownPolicy::abort) std::abort();
  }
  sysmon_.stop();  // no spare is started after this
  idle_.wake_all();
  spares_.stop();
  for (auto& worker : workers_) worker->join();
  std::lock_guard guard(shutdown_lock_);
  stopped_ = true;
  all_exited_.notify_all();  // the callers waiting for the leader
}

void SchedulerCore::arm_timer(TimerNode& node) {
  switch (timers_.arm(node)) {
    case TimerQueue::ArmWake::none:
      break;
    case TimerQueue::ArmWake::blocker:
      poller_->wake();
      break;
    case TimerQueue::ArmWake::idle_worker:
      // It becomes the blocker with this deadline (sched/worker.cpp); if
      // a worker searches, it will instead (it blocks before it sleeps).
      idle_.notify_work();
      break;
  }
}

SchedulerCore& current_scheduler(const char* what) {
  Worker* worker = current_worker();
  if (worker == nullptr)
    throw std::logic_error(std::string(what) + " must be called from a weft fiber, not from a plain thread");
  return worker->core();
}

}  // namespace weft::detail
