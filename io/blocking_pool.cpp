#include "blocking_pool.h"

#include <pthread.h>
#include <weft/blocking.h>

#include <cerrno>
#include <cstdio>
#include <exception>
#include <system_error>

#include "../runtime/log.h"
#include "../sched/scheduler_core.h"
#include "../sched/worker.h"

namespace weft::detail {

void run_blocking(void (*call)(void*), void* arg) {
  Worker* worker = current_worker();
  if (worker == nullptr || worker->current() == nullptr) {
    call(arg);  // a plain thread may block itself
    return;
  }
  BlockingPool::of(worker->core()).run(call, arg);
}

BlockingPool::BlockingPool(std::string name, unsigned max_threads) : name_(std::move(name)), max_threads_(max_threads) {
  threads_.reserve(max_threads_);
}

BlockingPool::~BlockingPool() {
  lock_.lock();
  stopping_ = true;
  wake_all(idle_);
  lock_.unlock();
  std::lock_guard guard(threads_lock_);
  for (auto& thread : threads_) thread.join();
}

BlockingPool& BlockingPool::of(SchedulerCore& core) {
  return static_cast<BlockingPool&>(core.extension(ExtensionKind::blocking_pool, [](SchedulerCore& c) {
    return std::unique_ptr<Extension>(new BlockingPool(c.config().name, c.config().blocking_threads));
  }));
}

BlockingPool* BlockingPool::find(const SchedulerCore& core) noexcept {
  return static_cast<BlockingPool*>(core.find_extension(ExtensionKind::blocking_pool));
}

std::string BlockingPool::thread_name(const std::string& scheduler, unsigned index) {
  const std::string suffix = "-blocking-" + std::to_string(index);
  constexpr std::size_t kMax = 15;  // pthread_setname_np's limit, without the NUL
  if (suffix.size() >= kMax) return suffix.substr(suffix.size() - kMax);
  return scheduler.substr(0, kMax - suffix.size()) + suffix;
}

void BlockingPool::run(void (*call)(void*), void* arg) {
  Job job{call, arg};
  Waiter waiter;
  waiter.payload = &job;
  lock_.lock();
  // Reserve a helper for this call if none is idle: started outside the
  // lock, since creating a thread takes tens of microseconds.
  bool start = false;
  if (idle_.empty() && started_.load(std::memory_order_relaxed) < max_threads_) {
    started_.store(started_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    start = true;
  }
  lock_.unlock();
  if (start && !start_helper()) {
    lock_.lock();
    const unsigned started = started_.load(std::memory_order_relaxed) - 1;
    started_.store(started, std::memory_order_relaxed);
    lock_.unlock();
    // With no helper at all the call would wait forever: say so instead.
    if (started == 0) throw std::system_error(errno, std::generic_category(), "weft::blocking: no helper thread");
  }
  lock_.lock();
  calls_.push_back(waiter);
  queued_.fetch_add(1, std::memory_order_relaxed);
  wake_first(idle_);
  park(waiter, &lock_, {"weft::blocking", this, "call"});
}

bool BlockingPool::start_helper() {
  std::lock_guard guard(threads_lock_);
  const auto index = static_cast<unsigned>(threads_.size());
  try {
    threads_.emplace_back([this, index] { helper_main(index); });
  } catch (const std::system_error& e) {
    errno = e.code().value();
    return false;
  }
  return true;
}

void BlockingPool::helper_main(unsigned index) {
  pthread_setname_np(pthread_self(), thread_name(name_, index).c_str());
  for (;;) {
    lock_.lock();
    Waiter* caller = calls_.pop_front();
    if (caller == nullptr) {
      if (stopping_) {
        lock_.unlock();
        return;
      }
      Waiter self;
      idle_.push_back(self);
      park(self, &lock_, {"weft::BlockingPool", this, "idle"});
      continue;
    }
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
  }
}

BlockingPool::Stats BlockingPool::stats() const noexcept {
  Stats stats;
  stats.threads = started_.load(std::memory_order_relaxed);
  stats.max_threads = max_threads_;
  stats.busy = busy_.load(std::memory_order_relaxed);
  stats.queued = queued_.load(std::memory_order_relaxed);
  stats.calls = completed_.load(std::memory_order_relaxed);
  return stats;
}

}  // namespace weft::detail
