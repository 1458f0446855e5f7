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
// Threads (tokio's spawn_blocking pool): a call that finds no helper idle
// starts one, up to Config::max_blocking_threads; a helper idle for
// Config::blocking_keep_alive retires. Invariants, kept under lock_:
//   - a call is queued only with a helper committed to it: one woken from
//     idle_ (wake_first pops it, so two calls never count the same idle
//     helper), one started for it under the lock (so it cannot go idle
//     and be claimed by another call first), or, at the limit, every
//     helper busy and bound to look at calls_ when it is done;
//   - a helper retires only with lock_ held and calls_ empty. One whose
//     idle wait timed out while a call was queued (the caller's wake_first
//     skipped it) finds the call when it takes the lock, and runs it.
// Helpers are detached; the destructor (after every fiber has finished, so
// no call is queued) wakes the idle ones and waits until `running_` is 0.
#pragma once

#include <weft/config.h>
#include <weft/detail/park.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "../sched/extension.h"
#include "../sched/raw_lock.h"

namespace weft::detail {

class SchedulerCore;

class BlockingPool final : public Extension {
 public:
  // `name`: the scheduler's, for the threads' names.
  BlockingPool(std::string name, unsigned max_threads, std::chrono::milliseconds keep_alive);
  ~BlockingPool() override;

  // A scheduler's pool (SchedulerParts::extensions).
  static std::unique_ptr<Extension> make(const Config& config);
  // The scheduler's pool; throws std::logic_error for a scheduler built
  // without one.
  static BlockingPool& of(SchedulerCore& core);
  // The scheduler's pool, else null.
  static BlockingPool* find(const SchedulerCore& core) noexcept;

  // From a fiber: runs call(arg) on a helper and parks until it returns.
  // Throws std::system_error if the pool has no helper and none can start
  // (pthread_create's EAGAIN: a thread limit).
  void run(void (*call)(void*), void* arg);
  // run() that, instead of throwing, returns the error (pthread_create's)
  // having run nothing, errno untouched; 0 once it ran (the hooks', which
  // must not throw: hooks/offload.h).
  int run_if_helper(void (*call)(void*), void* arg);
  // run() for a wait that only another fiber's act can end (a futex wait,
  // hooks/hooks_futex.cpp), never queued: it runs only if a helper is free
  // at once (an idle one, or a new one within the limit) and fewer than
  // half the limit are held by such waits; else it returns false, having
  // run nothing. Queued, or holding every helper, such waits could keep
  // the call that would end them (the waker's getaddrinfo) from a helper.
  // The fiber parks at `site` (weft-dump's wait).
  bool run_wait_if_free(void (*call)(void*), void* arg, const WaitSite& site);

  struct Stats {
    unsigned threads = 0;       // alive now (started, not yet retired)
    unsigned max_threads = 0;   // Config::max_blocking_threads
    unsigned busy = 0;          // running a call
    std::uint64_t queued = 0;   // calls waiting for a helper
    std::uint64_t calls = 0;    // calls completed
    std::uint64_t retired = 0;  // helpers that retired after keep_alive idle
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

  // With lock_ held: links `waiter` into calls_ with a helper committed to
  // it (an idle one woken, else a new one started, within the limit).
  // 0 once linked; else, with nothing linked, the error that kept a helper
  // from starting when none is there to take the call at all, or, for
  // `at_once`, EAGAIN if none is free now. errno untouched.
  int queue_locked(Waiter& waiter, bool at_once);
  void helper_main(unsigned index);
  // Waits in idle_ for a call; false when the helper should retire (its
  // keep-alive passed with nothing queued, or the pool is stopping). Called
  // and returns with lock_ held.
  bool wait_for_call();
  // Starts helper number `index`, with lock_ held: 0, else the error that
  // kept the thread from being made, errno untouched.
  int start_helper(unsigned index);
  void helper_exited() noexcept;

  const std::string name_;
  const unsigned max_threads_;
  const std::chrono::milliseconds keep_alive_;

  SpinLock lock_;  // guards calls_, idle_, stopping_, next_index_, and threads_'s writes
  WaitList calls_;
  WaitList idle_;
  bool stopping_ = false;
  unsigned next_index_ = 0;  // the name's N for the next helper
  // Written under lock_, read by stats() without it. threads_ counts the
  // helpers reserved or alive, busy_ those running a call.
  std::atomic<unsigned> threads_{0};
  std::atomic<unsigned> busy_{0};
  std::atomic<std::uint64_t> queued_{0};
  std::atomic<std::uint64_t> completed_{0};
  std::atomic<std::uint64_t> retired_{0};
  std::atomic<unsigned> held_by_waits_{0};  // helpers running run_wait_if_free's calls

  // The helper threads that exist, for the destructor to wait for: a
  // helper's last act is to count itself out under running_lock_.
  RawMutex running_lock_;
  RawCondition running_changed_;
  unsigned running_ = 0;
};

}  // namespace weft::detail
