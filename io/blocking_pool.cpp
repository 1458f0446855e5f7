#include "blocking_pool.h"

#include <pthread.h>
#include <weft/blocking.h>

#include <cerrno>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "../runtime/log.h"
#include "../sched/child_parent.h"
#include "../sched/current.h"
#include "../sched/scheduler_core.h"

namespace weft::detail {

void run_blocking(void (*call)(void*), void* arg) {
  FiberControl* fiber = current_fiber();
  if (fiber == nullptr) {
    call(arg);  // a plain thread may block itself
    return;
  }
  BlockingPool::of(*fiber->scheduler).run(call, arg);
}

BlockingPool::BlockingPool(std::string name, unsigned max_threads, std::chrono::milliseconds keep_alive)
    : name_(std::move(name)), max_threads_(max_threads), keep_alive_(keep_alive) {}

BlockingPool::~BlockingPool() {
  lock_.lock();
  stopping_ = true;
  wake_all(idle_);
  lock_.unlock();
  std::unique_lock guard(running_lock_);
  running_changed_.wait(guard, [this] { return running_ == 0; });
}

std::unique_ptr<Extension> BlockingPool::make(const Config& config) {
  return std::make_unique<BlockingPool>(config.name, blocking_thread_limit(config), config.blocking_keep_alive);
}

BlockingPool& BlockingPool::of(SchedulerCore& core) {
  BlockingPool* pool = core.find_extension<BlockingPool>();
  if (pool == nullptr)
    throw std::logic_error("weft::blocking: scheduler \"" + core.config().name + "\" has no blocking pool");
  return *pool;
}

BlockingPool* BlockingPool::find(const SchedulerCore& core) noexcept { return core.find_extension<BlockingPool>(); }

std::string BlockingPool::thread_name(const std::string& scheduler, unsigned index) {
  const std::string suffix = "-blocking-" + std::to_string(index);
  constexpr std::size_t kMax = 15;  // pthread_setname_np's limit, without the NUL
  if (suffix.size() >= kMax) return suffix.substr(suffix.size() - kMax);
  return scheduler.substr(0, kMax - suffix.size()) + suffix;
}

void BlockingPool::run(void (*call)(void*), void* arg) {
  // With no helper at all the call would wait forever: say so instead.
  if (const int error = run_if_helper(call, arg); error != 0)
    throw std::system_error(error, std::generic_category(), "weft::blocking: no helper thread");
}

int BlockingPool::run_if_helper(void (*call)(void*), void* arg) {
  Job job{call, arg};
  Waiter waiter;
  waiter.payload = &job;
  lock_.lock();
  if (const int error = queue_locked(waiter, /*at_once=*/false); error != 0) {
    lock_.unlock();
    return error;
  }
  park(waiter, &lock_, {"weft::blocking", this, "call"});
  return 0;
}

bool BlockingPool::run_wait_if_free(void (*call)(void*), void* arg, const WaitSite& site) {
  Job job{call, arg};
  Waiter waiter;
  waiter.payload = &job;
  lock_.lock();
  if (held_by_waits_.load(std::memory_order_relaxed) >= max_threads_ / 2 ||
      queue_locked(waiter, /*at_once=*/true) != 0) {
    lock_.unlock();
    return false;
  }
  held_by_waits_.fetch_add(1, std::memory_order_relaxed);
  park(waiter, &lock_, site);
  held_by_waits_.fetch_sub(1, std::memory_order_relaxed);
  return true;
}

int BlockingPool::queue_locked(Waiter& waiter, bool at_once) {
  const unsigned threads = threads_.load(std::memory_order_relaxed);
  if (at_once && idle_.empty() && threads >= max_threads_) return EAGAIN;
  calls_.push_back(waiter);
  queued_.fetch_add(1, std::memory_order_relaxed);
  // A helper for this call: an idle one, else a new one. Started with the
  // lock held (tens of microseconds, and only while the pool grows), so
  // that it cannot look for work before this call is queued and parked:
  // started outside it, a new helper could go idle first and be claimed
  // by another caller, leaving this call waiting for a busy one.
  if (!wake_first(idle_) && threads < max_threads_) {
    threads_.store(threads + 1, std::memory_order_relaxed);
    if (const int error = start_helper(next_index_++); error != 0) {
      threads_.store(threads, std::memory_order_relaxed);
      if (threads == 0 || at_once) {
        calls_.remove(waiter);
        queued_.fetch_sub(1, std::memory_order_relaxed);
        return error;
      }
    }
  }
  return 0;
}

int BlockingPool::start_helper(unsigned index) {
  {
    const std::lock_guard guard(running_lock_);
    ++running_;
  }
  const int caller_errno = errno;  // a failed pthread_create may leave its mmap's
  try {
    std::thread([this, index] { helper_main(index); }).detach();
  } catch (const std::system_error& e) {
    helper_exited();
    errno = caller_errno;
    return e.code().value();
  }
  return 0;
}

void BlockingPool::helper_exited() noexcept {
  // Notified under the lock: once it is released the destructor may free
  // the pool, and this thread touches nothing of it after that.
  const std::lock_guard guard(running_lock_);
  --running_;
  running_changed_.notify_all();
}

bool BlockingPool::wait_for_call() {
  while (calls_.empty()) {
    if (stopping_) return false;
    Waiter self;
    idle_.push_back(self);
    // A helper that made a child process stays: its end would send the
    // child its PR_SET_PDEATHSIG (sched/child_parent.h).
    const Clock::time_point deadline = made_a_child() ? no_deadline : Clock::now() + keep_alive_;
    const WakeReason woke = park(self, &lock_, {"weft::BlockingPool", this, "idle"}, deadline);
    lock_.lock();
    if (woke == WakeReason::timed_out) {
      idle_.remove(self);
      // A call queued meanwhile skipped this helper (it had timed out):
      // run it rather than strand it.
      if (calls_.empty() && !stopping_) {
        retired_.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
    }
  }
  return true;
}

void BlockingPool::helper_main(unsigned index) {
  pthread_setname_np(pthread_self(), thread_name(name_, index).c_str());
  lock_.lock();
  while (wait_for_call()) {
    Waiter* caller = calls_.pop_front();
    queued_.fetch_sub(1, std::memory_order_relaxed);
    busy_.fetch_add(1, std::memory_order_relaxed);
    lock_.unlock();
    const Job& job = *static_cast<const Job*>(caller->payload);
    try {
      job.call(job.arg);
    } catch (...) {
      // Nobody could receive it: weft::blocking catches for its callers.
      log_message(LogLevel::fatal, "weft: a call run by %s's blocking pool threw; run_blocking's calls must not throw",
                  name_.c_str());
      std::terminate();
    }
    busy_.fetch_sub(1, std::memory_order_relaxed);
    completed_.fetch_add(1, std::memory_order_relaxed);
    // The caller's frame, which holds `job` and the waiter, may be gone
    // the moment this returns.
    unpark(*caller);
    lock_.lock();
  }
  threads_.store(threads_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
  lock_.unlock();
  helper_exited();
}

BlockingPool::Stats BlockingPool::stats() const noexcept {
  Stats stats;
  stats.threads = threads_.load(std::memory_order_relaxed);
  stats.max_threads = max_threads_;
  stats.busy = busy_.load(std::memory_order_relaxed);
  stats.queued = queued_.load(std::memory_order_relaxed);
  stats.calls = completed_.load(std::memory_order_relaxed);
  stats.retired = retired_.load(std::memory_order_relaxed);
  return stats;
}

}  // namespace weft::detail
