// Futex wait and wake on a 32-bit atomic: how plain threads and idle workers
// sleep in the kernel without spinning.
#pragma once

#include <weft/detail/wait_list.h>  // Clock

#include <atomic>
#include <chrono>
#include <cstdint>

namespace weft::detail {

// Sleeps while `*word == expected`, until woken or `deadline` (steady_clock,
// absolute; max(): no deadline). May return spuriously: callers re-check.
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                Clock::time_point deadline = Clock::time_point::max()) noexcept;
void futex_wake(std::atomic<std::uint32_t>& word, int count = 1) noexcept;

}  // namespace weft::detail
