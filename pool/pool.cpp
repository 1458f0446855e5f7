#include <cxxabi.h>
#include <pthread.h>
#include <weft/fiber_local.h>
#include <weft/pool.h>
#include <weft/scheduler.h>
#include <weft/this_fiber.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <typeinfo>

#include "../runtime/log.h"
#include "../runtime/stack.h"
#include "pool_core.h"
#include "thread_registry.h"

namespace weft::detail {

namespace {

// Which pool's runner the caller is, so that a task cannot wait for itself
// (wait, shutdown, the destructor): a fiber slot for fiber runners, since a
// fiber moves between workers, and a thread_local for thread runners.
std::size_t runner_slot() {
  static const std::size_t slot = allocate_fiber_local_slot();
  return slot;
}
thread_local const PoolCore* thread_runner_of = nullptr;

const PoolCore* current_runner_pool() {
  if (this_fiber::is_fiber()) return static_cast<const PoolCore*>(fiber_local_get(runner_slot()));
  return thread_runner_of;
}

PoolOptions checked(PoolOptions options) {
  if (options.name.empty())
    throw std::invalid_argument(
        "weft::Pool: PoolOptions::name is empty; a pool needs a name (WEFT_FIBERS selects "
        "pools by it, and weft-dump shows it)");
  if (options.threads == 0)
    throw std::invalid_argument("weft::Pool '" + options.name + "': PoolOptions::threads is 0; at least 1 is needed");
  // In both modes: a pool listed in WEFT_FIBERS or not takes the same
  // options (before, a thread pool took any size, and a fiber pool failed
  // at its first post() naming SpawnOptions).
  if (options.stack_size != 0)
    check_stack_size(options.stack_size,
                     ("weft::Pool '" + options.name + "': PoolOptions::stack_size (0: the scheduler's)").c_str());
  return options;
}

Scheduler* scheduler_for(const PoolOptions& options, Scheduler& (*default_scheduler)()) {
  if (!runs_on_fibers(options.mode, options.name)) return nullptr;
  return options.scheduler != nullptr ? options.scheduler : &default_scheduler();
}

std::string describe(std::exception_ptr error) {
  try {
    std::rethrow_exception(std::move(error));
  } catch (const std::exception& e) {
    int status = 0;
    char* demangled = abi::__cxa_demangle(typeid(e).name(), nullptr, nullptr, &status);
    std::string type = status == 0 && demangled != nullptr ? demangled : typeid(e).name();
    std::free(demangled);
    return type + ": " + e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

}  // namespace

PoolCore::PoolCore(PoolOptions options, Scheduler& (*default_scheduler)(), PoolServices* services)
    : options_(checked(std::move(options))),
      scheduler_(scheduler_for(options_, default_scheduler)),
      registration_(*this, options_.name, services) {}

PoolCore::~PoolCore() {
  // The destructor cannot throw: misuse from the pool's own task ends here.
  try {
    shutdown();
  } catch (const std::exception& e) {
    log_message(LogLevel::fatal, "%s", e.what());
    std::terminate();
  }
}

bool PoolCore::claim_idle_runner() noexcept {
  std::int64_t idle = idle_runners_.load(std::memory_order_relaxed);
  while (idle > 0) {
    if (idle_runners_.compare_exchange_weak(idle, idle - 1, std::memory_order_relaxed)) return true;
  }
  return false;
}

void PoolCore::start_runner() {
  std::lock_guard guard(runners_lock_);
  start_runner_locked();
}

void PoolCore::start_runner_locked() {
  // After the close the runners there are drain the queue, and one started
  // now might come after shutdown's last join and never be joined; a task
  // that finds the queue closed is not queued (enqueue starts before it puts).
  if (started_ >= options_.threads || shut_down()) return;
  const std::string name = options_.name + "-" + std::to_string(started_);
  if (on_fibers()) {
    fibers_.push_back(scheduler_->spawn(SpawnOptions{.name = name, .stack_size = options_.stack_size}, [this] {
      fiber_local_set(runner_slot(), this, [](void*) {});
      run_tasks();
    }));
  } else {
    threads_.emplace_back([this, name] {
      const ThreadListing listed(name, options_.name, "pool");  // for weft-dump
      thread_runner_of = this;
      run_tasks();
    });
    // The kernel keeps 15 bytes of a thread's name: the pool's name first,
    // so that top and gdb show which pool a thread is from.
    pthread_setname_np(threads_.back().native_handle(), name.substr(0, 15).c_str());
  }
  ++started_;
}

void PoolCore::run_tasks() noexcept {
  std::unique_lock guard(lock_);
  for (;;) {
    // Paused, queued tasks wait; closed, the rest runs anyway, then the
    // runner ends.
    while (queue_.empty() || (paused_ && !shut_down())) {
      if (queue_.empty() && shut_down()) return;
      ++waiting_runners_;
      work_.wait(guard);
      --waiting_runners_;
    }
    Queued item = std::move(queue_.front());
    queue_.pop_front();
    running_.fetch_add(1, std::memory_order_relaxed);
    guard.unlock();
    run_one(item);
    // A task that forked, in the child: the queue there is a copy of the
    // parent's, whose tasks the parent runs, and no other runner is there
    // to share it. The runner ends, as its thread or fiber ends its
    // process there (the child's last thread; a fiber's end in a fork
    // child exits it with 0, sched/worker.cpp).
    if (in_forked_child()) return;
    guard.lock();
    // Idle from here: the next enqueue may count on this runner. Before the
    // task counts as done, so that a caller whose wait() has returned finds
    // it idle and starts no other.
    idle_runners_.fetch_add(1, std::memory_order_relaxed);
    running_.fetch_sub(1, std::memory_order_relaxed);
    completed_.fetch_add(1, std::memory_order_relaxed);
    --unfinished_;
    notify_if_settled_locked();
  }
}

void PoolCore::run_one(Queued& item) noexcept {
  ThreadListing* const listed = ThreadListing::current();  // a runner in thread mode
  if (listed != nullptr) listed->task_started();
  const auto started = Clock::now();
  wait_times_.record(started - item.submitted);
  try {
    item.task();
  } catch (...) {
    failed_.fetch_add(1, std::memory_order_relaxed);
    report(std::current_exception());
  }
  // Destroy the task's captures before counting it done: wait() returning
  // promises they are gone.
  item.task = Task();
  run_times_.record(Clock::now() - started);
  if (listed != nullptr) listed->task_finished();
}

bool PoolCore::settled_locked() const noexcept {
  return unfinished_ == 0 || (paused_ && running_.load(std::memory_order_relaxed) == 0);
}

void PoolCore::notify_if_settled_locked() noexcept {
  if (waiters_ > 0 && settled_locked()) settled_.notify_all();
}

void PoolCore::report(std::exception_ptr error) noexcept {
  if (options_.on_exception) {
    try {
      options_.on_exception(options_.name, error);
      return;
    } catch (...) {
      log_message(LogLevel::error, "weft::Pool '%s': the on_exception handler threw (%s)", options_.name.c_str(),
                  describe(std::current_exception()).c_str());
    }
  }
  log_message(LogLevel::error, "weft::Pool '%s': a posted task threw %s; the pool carries on", options_.name.c_str(),
              describe(error).c_str());
}

void PoolCore::require_this_process(const char* what) const {
  if (in_forked_child())
    throw std::logic_error("weft::Pool \"" + options_.name + "\": " + what +
                           " in a forked child: its runners are the parent process's; make a new weft::Pool in the "
                           "child (docs/usage.md)");
}

void PoolCore::enqueue(Task task) {
  require_this_process("a task queued");
  // A runner first, so that a failure to start one queues nothing.
  const bool claimed = claim_idle_runner();
  if (!claimed) start_runner();
  const auto submitted = Clock::now();
  std::unique_lock guard(lock_);
  try {
    if (shut_down()) throw_closed();
    queue_.push_back(Queued{std::move(task), submitted});
  } catch (...) {
    guard.unlock();
    if (claimed) idle_runners_.fetch_add(1, std::memory_order_relaxed);
    throw;
  }
  ++unfinished_;
  if (waiting_runners_ > 0 && !paused_) work_.notify_one();
}

void PoolCore::throw_closed() const {
  throw std::logic_error("weft::Pool '" + options_.name + "': post()/submit() after shutdown()");
}

void PoolCore::require_outside(const char* what) const {
  if (current_runner_pool() == this)
    throw std::logic_error("weft::Pool '" + options_.name + "': " + what +
                           " called from one of the pool's own tasks, which would wait for itself");
}

bool PoolCore::wait_until(Clock::time_point deadline) {
  require_this_process("wait()");
  require_outside("wait()");
  std::unique_lock guard(lock_);
  ++waiters_;
  bool settled = true;
  while (!settled_locked()) {
    if (deadline == no_deadline) {
      settled_.wait(guard);
    } else if (settled_.wait_until(guard, deadline) == std::cv_status::timeout) {
      settled = settled_locked();
      break;
    }
  }
  --waiters_;
  return settled;
}

std::size_t PoolCore::purge() {
  std::deque<Queued> dropped;
  {
    std::lock_guard guard(lock_);
    dropped.swap(queue_);
    unfinished_ -= dropped.size();
    // Each dropped task had claimed a runner (or started one) for itself.
    idle_runners_.fetch_add(static_cast<std::int64_t>(dropped.size()), std::memory_order_relaxed);
    notify_if_settled_locked();
  }
  // Outside the lock: a submit()'s Promise dies here (its Future gets
  // broken_promise), and the captures' destructors may use the pool.
  const std::size_t n = dropped.size();
  dropped.clear();
  return n;
}

void PoolCore::pause() {
  std::lock_guard guard(lock_);
  paused_ = true;
  notify_if_settled_locked();  // a wait() with nothing running is over
}

void PoolCore::unpause() {
  std::lock_guard guard(lock_);
  paused_ = false;
  if (waiting_runners_ > 0) work_.notify_all();
}

bool PoolCore::paused() const {
  std::lock_guard guard(lock_);
  return paused_;
}

std::uint64_t PoolCore::queued() const {
  std::lock_guard guard(lock_);
  return queue_.size();
}

void PoolCore::shutdown() {
  require_this_process("shutdown()");
  require_outside("shutdown() (or the destructor)");
  std::lock_guard guard(shutdown_lock_);
  {
    std::lock_guard queue_guard(lock_);
    closed_.store(true, std::memory_order_relaxed);
    if (waiting_runners_ > 0) work_.notify_all();
  }
  if (joined_) return;
  for (;;) {
    std::vector<std::thread> threads;
    std::vector<Fiber> fibers;
    {
      // enqueue starts a runner before it queues: a queued task has one.
      std::lock_guard runners(runners_lock_);
      threads.swap(threads_);
      fibers.swap(fibers_);
    }
    if (threads.empty() && fibers.empty()) break;
    // Not under runners_lock_: a task of the pool may be starting a runner.
    for (std::thread& t : threads) t.join();
    for (Fiber& f : fibers) f.join();
  }
  joined_ = true;
}

PoolSnapshot PoolCore::snapshot() const {
  PoolSnapshot s;
  s.name = options_.name;
  s.mode = on_fibers() ? "fibers" : "threads";
  if (on_fibers()) s.scheduler = scheduler_->config().name;
  s.size = options_.threads;
  s.queued = queued();
  s.running = running();
  s.completed = completed();
  s.failed = failed_.load(std::memory_order_relaxed);
  s.shut_down = shut_down();
  s.wait = wait_times_.summary();
  s.run = run_times_.summary();
  return s;
}

}  // namespace weft::detail

namespace weft {

Pool::~Pool() {
  // In a forked child the runners are not there to join: the parent's pool
  // is left to the child's exit, as a Scheduler's core is.
  if (core_->in_forked_child()) (void)core_.release();
}

void Pool::enqueue(detail::Task task) { core_->enqueue(std::move(task)); }
void Pool::wait() { core_->wait_until(detail::no_deadline); }
bool Pool::wait_until_deadline(detail::Clock::time_point deadline) { return core_->wait_until(deadline); }
std::size_t Pool::purge() { return core_->purge(); }
void Pool::pause() { core_->pause(); }
void Pool::unpause() { core_->unpause(); }
bool Pool::is_paused() const { return core_->paused(); }
void Pool::shutdown() { core_->shutdown(); }
bool Pool::is_shut_down() const noexcept { return core_->shut_down(); }
const std::string& Pool::name() const noexcept { return core_->options().name; }
unsigned Pool::size() const noexcept { return core_->options().threads; }
bool Pool::runs_on_fibers() const noexcept { return core_->on_fibers(); }
std::uint64_t Pool::queued() const { return core_->queued(); }
std::uint64_t Pool::running() const noexcept { return core_->running(); }
std::uint64_t Pool::completed() const noexcept { return core_->completed(); }
PoolSnapshot Pool::snapshot() const { return core_->snapshot(); }

}  // namespace weft
