#include <weft/semaphore.h>

#include <mutex>

namespace weft {

bool Semaphore::try_acquire() {
  detail::checkpoint();
  std::lock_guard guard(lock_);
  if (permits_ == 0) return false;
  --permits_;
  return true;
}

bool Semaphore::acquire_until(detail::Clock::time_point deadline) {
  // A woken waiter was handed its permit by release().
  return detail::wait_unless(
      waiters_, lock_,
      [&] {
        if (permits_ == 0) return false;  // > 0 only with nobody waiting: release() hands permits over
        --permits_;
        return true;
      },
      {"weft::Semaphore", this, "acquire"}, deadline);
}

void Semaphore::release(std::uint64_t n) {
  {
    std::lock_guard guard(lock_);
    permits_ += n;
    while (permits_ > 0 && !waiters_.empty()) {
      --permits_;  // handed to the woken waiter
      if (!detail::wake_first(waiters_)) ++permits_;
    }
  }
  detail::checkpoint();  // with lock_ free
}

std::uint64_t Semaphore::available() const {
  std::lock_guard guard(lock_);
  return permits_;
}

}  // namespace weft
