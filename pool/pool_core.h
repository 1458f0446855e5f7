// What a weft::Pool is inside: one FIFO of tasks and `threads` runners that
// take from it, the same loop whether the runners are std::threads or
// fibers. The lock and the condition variables are weft primitives, which
// park a fiber and block a plain thread, so the two modes share every line
// except the one that starts a runner: that is how they keep the same
// semantics.
//
// Invariants
//   - unfinished_ counts tasks submitted and not yet finished (or purged):
//     it is raised as a task is queued and lowered, under lock_, after the
//     task and its captures are destroyed, so wait() returning means they
//     are gone. wait() returns when it is 0, or when paused_ and no task
//     runs (BS::thread_pool's rule: the queued ones would never finish).
//   - running_ + queue_.size() == unfinished_; at most runner-count tasks
//     run at once, because each runner runs one task at a time. No queued
//     task starts while paused_, unless closed_ (shutdown drains).
//   - Runners start on demand, as Java's ThreadPoolExecutor starts its core
//     threads: a fiber pool of 4,096 costs 4,096 stacks only once 4,096
//     tasks have run at once. Every enqueue either claims an idle runner
//     (idle_runners_ counts runners between tasks that no enqueue has
//     claimed yet) or starts one, until size() have started; so a queued
//     task never waits while fewer than size() tasks run, as with runners
//     started up front (the 32 tasks of RunsSizeBlockedTasksAtOnce must
//     meet). A purge hands the claims of the tasks it drops back. A runner
//     is never retired.
//   - The runners are joined exactly once, by the first shutdown(); later
//     callers wait on shutdown_lock_ until that join is over. Runners may
//     still start while it joins (a task queued just before the close), so
//     it joins until none is left unjoined, without holding runners_lock_.
#pragma once

#include <weft/condition_variable.h>
#include <weft/fiber.h>
#include <weft/mutex.h>
#include <weft/pool.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <thread>
#include <vector>

#include "../sched/fork_generation.h"
#include "../sched/latency_histogram.h"
#include "pool_registry.h"

namespace weft::detail {

class PoolCore {
 public:
  // `default_scheduler`: the scheduler of a pool on fibers that names none;
  // `services`: told of the pool (null: none). Both are the composition
  // root's (compose/pool.cpp).
  PoolCore(PoolOptions options, Scheduler& (*default_scheduler)(), PoolServices* services);
  ~PoolCore();
  PoolCore(const PoolCore&) = delete;
  PoolCore& operator=(const PoolCore&) = delete;

  void enqueue(Task task);
  bool wait_until(Clock::time_point deadline);
  std::size_t purge();
  void pause();
  void unpause();
  bool paused() const;
  void shutdown();
  bool shut_down() const noexcept { return closed_.load(std::memory_order_relaxed); }
  // In the child of a fork(): the runners are the parent's threads (or
  // fibers of its scheduler), so nothing would run a task; enqueue, wait
  // and shutdown throw std::logic_error, and Pool leaks this core instead
  // of joining them (docs/usage.md, "fork()").
  bool in_forked_child() const noexcept { return made_in_.in_forked_child(); }

  const PoolOptions& options() const noexcept { return options_; }
  bool on_fibers() const noexcept { return scheduler_ != nullptr; }
  std::uint64_t queued() const;
  std::uint64_t running() const noexcept { return running_.load(std::memory_order_relaxed); }
  std::uint64_t completed() const noexcept { return completed_.load(std::memory_order_relaxed); }
  PoolSnapshot snapshot() const;

 private:
  struct Queued {
    Task task;
    Clock::time_point submitted;
  };

  // An idle runner for a task about to be queued, if there is one.
  bool claim_idle_runner() noexcept;
  // Starts another runner unless size() have started; throws what starting
  // a thread or a fiber throws.
  void start_runner();
  void start_runner_locked();  // runners_lock_ held
  void run_tasks() noexcept;
  void run_one(Queued& item) noexcept;
  // wait()'s condition (see the invariants); lock_ held.
  bool settled_locked() const noexcept;
  // Wakes the callers of wait() if their condition holds; lock_ held.
  void notify_if_settled_locked() noexcept;
  void report(std::exception_ptr error) noexcept;
  [[noreturn]] void throw_closed() const;
  // Throws std::logic_error when called from one of this pool's tasks.
  void require_outside(const char* what) const;
  // Throws std::logic_error in a forked child (in_forked_child).
  void require_this_process(const char* what) const;

  const PoolOptions options_;
  const ForkGeneration made_in_;  // in_forked_child()
  Scheduler* const scheduler_;    // null: thread mode
  mutable Mutex lock_;            // for the queue and the counts below it
  ConditionVariable work_;        // runners: a task, an unpause or the close
  ConditionVariable settled_;     // callers of wait(): settled_locked()
  std::deque<Queued> queue_;
  std::uint64_t unfinished_ = 0;
  unsigned waiting_runners_ = 0;  // in work_.wait
  unsigned waiters_ = 0;          // in settled_.wait
  bool paused_ = false;
  std::atomic<bool> closed_{false};        // written under lock_
  std::atomic<std::uint64_t> running_{0};  // written under lock_
  std::atomic<std::uint64_t> completed_{0};
  std::atomic<std::uint64_t> failed_{0};
  LatencyHistogram wait_times_;
  LatencyHistogram run_times_;
  std::atomic<std::int64_t> idle_runners_{0};
  Mutex runners_lock_;                // for started_, threads_, fibers_
  unsigned started_ = 0;              // runners started, at most options_.threads
  std::vector<std::thread> threads_;  // started and not yet joined
  std::vector<Fiber> fibers_;         // started and not yet joined
  Mutex shutdown_lock_;
  bool joined_ = false;  // under shutdown_lock_
  // Last: the pool leaves weft-dump's list before anything else dies.
  PoolRegistration registration_;
};

}  // namespace weft::detail
