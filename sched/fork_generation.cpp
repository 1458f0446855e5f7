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

namespace {

bool count_forks() noexcept {
  static const bool registered = ::pthread_atfork(nullptr, nullptr, [] {
                                   forks_behind_this_process.fetch_add(1, std::memory_order_relaxed);
                                 }) == 0;
  return registered;
}

// At load, not at the first scheduler: a process whose plain threads alone
// wait on weft's primitives counts its forks too (else a fork child's
// release handed the permit to a parent's thread), and a child handler a
// user registers later runs after this one (handlers run in the order they
// were registered), so it sees the count moved.
[[maybe_unused]] const bool forks_counted_from_load = count_forks();

}  // namespace

unsigned ForkGeneration::now() {
  if (!count_forks()) throw std::system_error(ENOMEM, std::generic_category(), "weft: pthread_atfork");
  return forks_behind_this_process.load(std::memory_order_relaxed);
}

}  // namespace weft::detail
