#include <weft/condition_variable.h>

#include <stdexcept>

namespace weft {

void ConditionVariable::notify_one() noexcept {
  std::lock_guard guard(lock_);
  detail::wake_first(waiters_);
}

void ConditionVariable::notify_all() noexcept {
  std::lock_guard guard(lock_);
  detail::wake_all(waiters_);
}

std::cv_status ConditionVariable::wait_until_deadline(std::unique_lock<Mutex>& lock,
                                                      detail::Clock::time_point deadline) {
  if (!lock.owns_lock()) throw std::logic_error("weft::ConditionVariable::wait: the lock is not held");
  detail::Waiter waiter;
  lock_.lock();
  // Registered before the mutex is released: a notify that follows the
  // caller's unlock cannot miss us.
  lock.unlock();
  const bool notified = detail::wait_in(waiters_, lock_, waiter, {"weft::ConditionVariable", this, "wait"}, deadline);
  lock.lock();
  return notified ? std::cv_status::no_timeout : std::cv_status::timeout;
}

}  // namespace weft
