#include "global_queue.h"

#include <cstdlib>
#include <mutex>

#include "../runtime/log.h"

namespace weft::detail {

GlobalQueue::GlobalQueue(unsigned workers) {
  worker_producers_.reserve(workers);
  for (unsigned i = 0; i < workers; ++i) worker_producers_.emplace_back(queue_);
}

void GlobalQueue::push(FiberControl* const* fibers, std::size_t count, unsigned worker) noexcept {
  if (count == 0) return;
  bool queued;
  if (worker < worker_producers_.size()) {
    queued = queue_.enqueue_bulk(worker_producers_[worker], fibers, count);
  } else {
    const std::lock_guard guard(shared_lock_);
    queued = queue_.enqueue_bulk(shared_producer_, fibers, count);
  }
  if (!queued) {
    log_message(LogLevel::fatal, "weft: out of memory queueing %zu runnable fiber(s) on the global queue", count);
    std::abort();
  }
  size_.fetch_add(static_cast<std::int64_t>(count), std::memory_order_relaxed);
}

std::size_t GlobalQueue::pop(FiberControl** out, std::size_t max) noexcept {
  const std::size_t n = queue_.try_dequeue_bulk(out, max);
  if (n > 0) size_.fetch_sub(static_cast<std::int64_t>(n), std::memory_order_relaxed);
  return n;
}

}  // namespace weft::detail
