// BlockingPool: the helper threads behind weft::blocking (include/weft/blocking.h),
// one pool per scheduler, an extension made with it (sched/extension.h) that
// starts its threads on first use.
//
// A call is the caller's own Waiter, linked into `calls_` with a Job as its
// payload, both in the parked fiber's frame: queueing allocates nothing,
// and the queue is bounded by the number of fibers, one entry each.
//
// Protocol (park/unpark, include/weft/detail/park.h, on both sides):
//   caller:  lock; link its waiter into calls_; wake one idle helper;
//            park(waiter, &lock) -- the lock is released once the fiber has
//            left its worker, so a helper that finds the call can resume it.
//   helper:  lock; pop a call; unlock; run it; unpark(caller's waiter).
//            With none queued: link its own waiter into idle_ and park (a
//            plain thread: it sleeps on the waiter's futex).
// A helper pops a call only under the lock, so never before the caller's
// park has published the fiber on its waiter.
//
// Threads: started one at a time when a call finds no helper idle, up to
// Config::blocking_threads, and kept until the scheduler is destroyed (the
// pool's destructor runs after every fiber has finished, so no call is
// queued then).
#pragma once

#include <weft/config.h>
#include <weft/detail/park.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../sched/extension.h"

namespace weft::detail {

class SchedulerCore;

class BlockingPool final : public Extension {
 public:
  // `name`: the scheduler's, for the threads' names.
  BlockingPool(std::string name, unsigned max_threads);
  ~BlockingPool() override;

  // A scheduler's pool (SchedulerParts::extensions).
  static std::unique_ptr<Extension> make(const Config& config);
  // The scheduler's pool; throws std::logic_error for a scheduler built
  // without one.
  static BlockingPool& of(SchedulerCore& core);
  // The scheduler's pool, else null.
  static BlockingPool* find(const SchedulerCore& core) noexcept;

  // From a fiber: runs call(arg) on a helper and parks until it returns.
  void run(void (*call)(void*), void* arg);

  struct Stats {
    unsigned threads = 0;      // started so far
    unsigned max_threads = 0;  // Config::blocking_threads
    unsigned busy = 0;         // running a call
    std::uint64_t queued = 0;  // calls waiting for a helper
    std::uint64_t calls = 0;   // calls completed
  };
  Stats stats() const noexcept;

  // "<scheduler>-blocking-N", the scheduler's name cut so that N survives
  // the 15-character limit of a thread's name.
  static std::string thread_name(const std::string& scheduler, unsigned index);

 private:
  struct Job {
    void (*call)(void*);
    void* arg;
  };

  void helper_main(unsigned index);
  // Starts another helper unless every one allowed is started; false if
  // none could be started.
  bool start_helper();

  const std::string name_;
  const unsigned max_threads_;

  SpinLock lock_;  // guards calls_, idle_ and stopping_
  WaitList calls_;
  WaitList idle_;
  bool stopping_ = false;
  // Written under lock_, read by stats() without it.
  std::atomic<unsigned> started_{0};
  std::atomic<unsigned> busy_{0};
  std::atomic<std::uint64_t> queued_{0};
  std::atomic<std::uint64_t> completed_{0};

  std::mutex threads_lock_;  // guards threads_: starting one is slow, not under lock_
  std::vector<std::thread> threads_;
};

}  // namespace weft::detail
