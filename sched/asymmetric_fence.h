// An asymmetric Dekker fence: a fast side that pays only a compiler barrier,
// and a rare slow side that pays a membarrier(2) system call, which runs a
// full memory barrier on every CPU running a thread of this process
// (folly's asymmetricHeavyBarrier, liburcu's membarrier flavour).
//
// The handshake it makes possible, for two flags that start false:
//   fast:  a = true; light_fence(); if (b) ...   (no locked instruction)
//   slow:  b = true; heavy_fence(); if (a) ...
// At least one side sees the other's flag, as with two seq_cst fences.
#pragma once

#include <atomic>

namespace weft::detail {

// The fast side's half: stops the compiler, not the CPU.
inline void light_fence() noexcept { std::atomic_signal_fence(std::memory_order_seq_cst); }

// Registers the process for expedited membarriers, once. False when the
// kernel (or a tool such as valgrind) does not offer them: then
// heavy_fence() must not be relied on, and the caller does without.
bool heavy_fence_available() noexcept;

// The slow side's half: a few microseconds. Only after
// heavy_fence_available() returned true.
void heavy_fence() noexcept;

}  // namespace weft::detail
