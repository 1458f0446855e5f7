// What a weft::Pool is inside: one FIFO of tasks and `threads` runners that
// take from it, the same loop whether the runners are std::threads or
// fibers. The queue, the wait and the shutdown lock are weft primitives,
// which park a fiber and block a plain thread, so the two modes share every
// line except the one that starts a runner: that is how they keep the same
// semantics.
//
// Invariants
//   - pending_ counts tasks submitted and not yet finished (or purged): it
//     is raised before a task is queued and lowered after the task and its
//     captures are destroyed, so wait() returning means they are gone.
//   - running_ + queued <= submitted; at most runner-count tasks run at
//     once, because each runner runs one task at a time.
//   - Runners start on demand, as Java's ThreadPoolExecutor starts its core
//     threads: a fiber pool of 4,096 costs 4,096 stacks only once 4,096
//     tasks have run at once. Every enqueue either claims an idle runner
//     (idle_runners_ counts runners between tasks that no enqueue has
//     claimed yet) or starts one, until size() have started; so a queued
//     task never waits while fewer than size() tasks run, as with runners
//     started up front (the 32 tasks of RunsSizeBlockedTasksAtOnce must
//     meet). A runner is never retired.
//   - The runners are joined exactly once, by the first shutdown(); later
//     callers wait on shutdown_lock_ until that join is over. Runners may
//     still start while it joins (a task queued just before the close), so
//     it joins until none is left unjoined, without holding runners_lock_.
#pragma once

#include <weft/blocking_queue.h>
#include <weft/fiber.h>
#include <weft/mutex.h>
#include <weft/pool.h>
#include <weft/wait_group.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "../sched/latency_histogram.h"
#include "pool_registry.h"

namespace weft::detail {

class PoolCore {
 public:
  explicit PoolCore(PoolOptions options);
  ~PoolCore();
  PoolCore(const PoolCore&) = delete;
  PoolCore& operator=(const PoolCore&) = delete;

  void enqueue(Task task);
  bool wait_until(Clock::time_point deadline);
  std::size_t purge();
  void shutdown();
  bool shut_down() const { return queue_.closed(); }

  const PoolOptions& options() const noexcept { return options_; }
  bool on_fibers() const noexcept { return scheduler_ != nullptr; }
  std::uint64_t queued() const { return queue_.size(); }
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
  void report(std::exception_ptr error) noexcept;
  [[noreturn]] void throw_closed() const;
  // Throws std::logic_error when called from one of this pool's tasks.
  void require_outside(const char* what) const;

  const PoolOptions options_;
  Scheduler* const scheduler_;  // null: thread mode
  BlockingQueue<Queued> queue_;
  WaitGroup pending_;
  std::atomic<std::uint64_t> running_{0};
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
  PoolRegistration registration_{*this, options_.name};
};

}  // namespace weft::detail
