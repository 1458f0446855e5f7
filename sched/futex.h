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

// Whether a FUTEX_WAIT on `word` for `expected` would wait, asked without
// waiting or waking: 0 if the word holds `expected`; -EAGAIN if it does
// not, -EFAULT if the kernel cannot read it, -EINVAL if it is not aligned.
// A FUTEX_CMP_REQUEUE that moves and wakes nobody: a FUTEX_WAIT with a zero
// timeout is no such probe, since the kernel lets its timer run the
// thread's timer slack (50 us by default) before it times out.
long futex_compare(const void* word, std::uint32_t expected, bool shared) noexcept;

}  // namespace weft::detail
