#include <weft/latch.h>

#include <mutex>
#include <stdexcept>
#include <string>

namespace weft {

Latch::Latch(std::int64_t expected) : count_(expected) {
  if (expected < 0) throw std::invalid_argument("weft::Latch: expected count must not be negative");
}

void Latch::count_down(std::int64_t n) {
  {
    std::lock_guard guard(lock_);
    if (n < 0 || n > count_)
      throw std::logic_error("weft::Latch::count_down(" + std::to_string(n) + ") with " + std::to_string(count_) +
                             " left");
    count_ -= n;
    if (count_ == 0) detail::wake_all(waiters_);
  }
  detail::checkpoint();  // with lock_ free
}

bool Latch::try_wait() const noexcept {
  detail::checkpoint();
  std::lock_guard guard(lock_);
  return count_ == 0;
}

bool Latch::wait_until_deadline(detail::Clock::time_point deadline) const {
  return detail::wait_unless(
      waiters_, lock_, [&] { return count_ == 0; }, {"weft::Latch", this, "wait"}, deadline);
}

}  // namespace weft
