// CLOCK_MONOTONIC, read cheaply enough for every park and every wake: the
// times weft-dump shows (how long a fiber has waited, how long it has been
// runnable) to the microsecond, where CLOCK_MONOTONIC_COARSE's kernel tick
// (4 ms here) made them jump in steps.
//
// The kernel's vDSO reads the TSC too, but behind a seqlock and an ordered
// read; on every park and wake of a PingPong that cost about a third of a
// round trip. Here: one rdtsc, scaled by a multiplier and a base that a
// calibration against CLOCK_MONOTONIC publishes (immutable, read through
// one atomic pointer). The first calibration is taken 20 ms after the
// first reading; until then, and on CPUs whose TSC is not invariant
// (constant and nonstop; /proc/cpuinfo) or that have none, readings are
// CLOCK_MONOTONIC itself. It is recalibrated over ever longer baselines
// (10x each time), so that it keeps within a few parts per million of
// CLOCK_MONOTONIC: gdb's extension compares it with that clock.
#pragma once

#include <time.h>

#include <atomic>
#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace weft::detail {

struct FastClockScale {
  std::uint64_t base_ticks;
  std::int64_t base_ns;
  std::uint64_t mult;           // ns per tick, << kFastClockShift
  std::uint64_t refresh_ticks;  // recalibrate once ticks - base_ticks pass this
};
inline constexpr unsigned kFastClockShift = 32;
// Null until calibrated; the scale of a TSC that cannot be used is
// `&kNoFastClock` (readings are CLOCK_MONOTONIC).
extern std::atomic<const FastClockScale*> fast_clock_scale;
extern const FastClockScale kNoFastClock;

inline std::int64_t monotonic_clock_ns() noexcept {
  timespec now;
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

// Calibrates (or recalibrates) and returns a reading; out of line.
std::int64_t fast_clock_slow_ns() noexcept;

inline std::int64_t fast_now_ns() noexcept {
#if defined(__x86_64__)
  const FastClockScale* scale = fast_clock_scale.load(std::memory_order_acquire);
  if (scale != nullptr && scale != &kNoFastClock) [[likely]] {
    const std::uint64_t ticks = __rdtsc() - scale->base_ticks;
    if (ticks < scale->refresh_ticks) [[likely]]
      return scale->base_ns +
             static_cast<std::int64_t>((static_cast<unsigned __int128>(ticks) * scale->mult) >> kFastClockShift);
  }
  if (scale == &kNoFastClock) return monotonic_clock_ns();
  return fast_clock_slow_ns();
#else
  return monotonic_clock_ns();
#endif
}

}  // namespace weft::detail
