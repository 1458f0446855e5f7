#include "fork_generation.h"

#include <pthread.h>

#include <cerrno>
#include <system_error>

#include "scheduler_core.h"

namespace weft::detail {

std::atomic<unsigned> forks_behind_this_process{0};

bool left_by_the_parent(const Waiter& waiter) noexcept {
  return waiter.fiber != nullptr ? waiter.fiber->scheduler->in_forked_child() : stamped_before_the_fork(waiter);
}

unsigned ForkGeneration::now() {
  static const bool registered = ::pthread_atfork(nullptr, nullptr, [] {
                                   forks_behind_this_process.fetch_add(1, std::memory_order_relaxed);
                                 }) == 0;
  if (!registered) throw std::system_error(errno, std::generic_category(), "weft: pthread_atfork");
  return forks_behind_this_process.load(std::memory_order_relaxed);
}

}  // namespace weft::detail
