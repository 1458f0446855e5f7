#include <weft/condition_variable.h>

#include <stdexcept>

namespace weft {

// Both notifies are checkpoints, once lock_ is free.
void ConditionVariable::notify_one() noexcept {
  {
    std::lock_guard guard(lock_);
    detail::wake_first(waiters_);
  }
  detail::checkpoint();
}

void ConditionVariable::notify_all() noexcept {
  {
    std::lock_guard guard(lock_);
    detail::wake_all(waiters_);
  }
  detail::checkpoint();
}

std::cv_status ConditionVariable::wait_until_deadline(std::unique_lock<Mutex>& lock,
                                                      detail::Clock::time_point deadline) {
  if (!lock.owns_lock()) throw std::logic_error("weft::ConditionVariable::wait: the lock is not held");
  detail::Waiter waiter;
  Mutex& mutex = *lock.release();  // relocked and given back below
  lock_.lock();
  // Registered before the mutex is released: a notify that follows the
  // caller's unlock cannot miss us. No checkpoint there: lock_ is held.
  mutex.unlock_holding_spin_lock();
  const bool notified = detail::wait_in(waiters_, lock_, waiter, {"weft::ConditionVariable", this, "wait"}, deadline);
  mutex.lock();
  lock = std::unique_lock<Mutex>(mutex, std::adopt_lock);
  return notified ? std::cv_status::no_timeout : std::cv_status::timeout;
}

}  // namespace weft
