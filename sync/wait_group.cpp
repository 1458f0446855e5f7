#include <weft/wait_group.h>

#include <mutex>
#include <stdexcept>
#include <string>

namespace weft {

void WaitGroup::add(std::int64_t delta) {
  {
    std::lock_guard guard(lock_);
    if (counter_ + delta < 0)
      throw std::logic_error("weft::WaitGroup: counter would go below zero (" + std::to_string(counter_) + " " +
                             (delta < 0 ? "- " + std::to_string(-delta) : "+ " + std::to_string(delta)) + ")");
    counter_ += delta;
    if (counter_ == 0) detail::wake_all(waiters_);
  }
  detail::checkpoint();  // with lock_ free
}

bool WaitGroup::wait_until_deadline(detail::Clock::time_point deadline) {
  return detail::wait_unless(
      waiters_, lock_, [&] { return counter_ == 0; }, {"weft::WaitGroup", this, "wait"}, deadline);
}

std::int64_t WaitGroup::count() const {
  std::lock_guard guard(lock_);
  return counter_;
}

}  // namespace weft
