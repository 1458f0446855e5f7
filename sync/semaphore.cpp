#include <weft/semaphore.h>

#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>

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
    // Wrapping would lose every permit: refused, the count kept (as a
    // std::counting_semaphore's precondition, and Go's semaphore panics).
    if (n > std::numeric_limits<std::uint64_t>::max() - permits_)
      throw std::logic_error("weft::Semaphore::release(" + std::to_string(n) + ") with " + std::to_string(permits_) +
                             " available: the count would pass 2^64 - 1");
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
