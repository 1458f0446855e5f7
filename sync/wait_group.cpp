#include <weft/wait_group.h>

#include <mutex>
#include <stdexcept>
#include <string>

namespace weft {

void WaitGroup::add(std::int64_t delta) {
  {
    std::lock_guard guard(lock_);
    // Summed without overflowing: past INT64_MAX the sum is undefined, and
    // it was taken for a count below zero.
    std::int64_t counter;
    const bool overflows = __builtin_add_overflow(counter_, delta, &counter);
    if (overflows || counter < 0) {
      // The magnitude as unsigned: -INT64_MIN is not an int64_t.
      const std::uint64_t magnitude = delta < 0 ? 0 - static_cast<std::uint64_t>(delta) : std::uint64_t(delta);
      throw std::logic_error(std::string("weft::WaitGroup: counter would ") +
                             (overflows ? "overflow" : "go below zero") + " (" + std::to_string(counter_) +
                             (delta < 0 ? " - " : " + ") + std::to_string(magnitude) + ")");
    }
    counter_ = counter;
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
