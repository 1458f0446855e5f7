#include "futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <weft/detail/raw_syscall.h>

#include "../runtime/system_calls.h"

namespace weft::detail {

static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));

void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected, Clock::time_point deadline) noexcept {
  timespec ts;
  timespec* timeout = nullptr;
  if (deadline != Clock::time_point::max()) {
    // steady_clock is CLOCK_MONOTONIC on Linux; FUTEX_WAIT_BITSET takes an
    // absolute time on that clock.
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch()).count();
    if (ns <= 0) return;
    ts.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
    ts.tv_nsec = static_cast<long>(ns % 1'000'000'000);
    timeout = &ts;
  }
  sys::futex(&word, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, expected, timeout, FUTEX_BITSET_MATCH_ANY);
}

void futex_wake(std::atomic<std::uint32_t>& word, int count) noexcept {
  sys::futex(&word, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, static_cast<std::uint32_t>(count), nullptr, 0);
}

long futex_compare(const void* word, std::uint32_t expected, bool shared) noexcept {
  const int op = FUTEX_CMP_REQUEUE | (shared ? 0 : FUTEX_PRIVATE_FLAG);
  // Wake none, requeue none (in the timeout's place), onto the word itself.
  return raw_syscall(SYS_futex, word, op, 0, 0, word, expected);
}

}  // namespace weft::detail
