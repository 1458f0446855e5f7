#include "fast_clock.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <limits>

#include "system_calls.h"

namespace weft::detail {

constinit std::atomic<const FastClockScale*> fast_clock_scale{nullptr};
constinit const FastClockScale kNoFastClock{0, 0, 0, 0};

#if defined(__x86_64__)
namespace {

constexpr std::int64_t kFirstBaselineNs = 20'000'000;  // 20 ms
constexpr std::int64_t kPairingSlackNs = 20'000;       // 20 us: 0.1% of the first baseline

// The first reading: the start of every calibration's baseline.
struct Origin {
  std::uint64_t ticks;
  std::int64_t ns;
};
std::atomic<bool> origin_taken{false};
Origin origin;  // written once, before origin_taken (release)
std::atomic<bool> calibrating{false};
// The scales published so far, each written once before it is published
// and then left alone (a reader may hold it). Each lasts ten times as long
// as its baseline, so these last beyond any uptime.
FastClockScale scales[20];
unsigned scales_used = 0;  // under `calibrating`

// constant_tsc and nonstop_tsc: the TSC ticks at one rate on every CPU,
// also in deep sleep states, so that it can stand in for a clock.
bool invariant_tsc() noexcept {
  static char text[16384];  // the first CPU's lines are enough
  if (sys::read_small_file("/proc/cpuinfo", text, sizeof(text)) <= 0) return false;
  return std::strstr(text, " constant_tsc") != nullptr && std::strstr(text, " nonstop_tsc") != nullptr;
}

// The least gap seen between the two clock readings of a pair: what a
// reading costs here (a clock source the vDSO cannot read costs a system
// call or more, and may never give a pair within kPairingSlackNs).
std::atomic<std::int64_t> least_gap_ns{std::numeric_limits<std::int64_t>::max()};

bool tight_pair(std::int64_t gap_ns) noexcept {
  std::int64_t least = least_gap_ns.load(std::memory_order_relaxed);
  while (gap_ns < least && !least_gap_ns.compare_exchange_weak(least, gap_ns, std::memory_order_relaxed)) {
  }
  return gap_ns <= std::max(kPairingSlackNs, 4 * std::min(least, gap_ns));
}

}  // namespace

std::int64_t fast_clock_slow_ns() noexcept {
  // A pair of readings is a calibration point only if nothing came between
  // them: a thread descheduled there for a millisecond would skew the rate
  // by that much against the 20 ms first baseline, and every scale after
  // it. The tick is read between two clock readings, which bound the gap,
  // and paired with their midpoint.
  const std::int64_t before_ns = monotonic_clock_ns();
  const std::uint64_t now_ticks = __rdtsc();
  const std::int64_t after_ns = monotonic_clock_ns();
  const bool tight = tight_pair(after_ns - before_ns);
  const std::int64_t now_ns = before_ns + (after_ns - before_ns) / 2;
  if (!origin_taken.load(std::memory_order_acquire)) {
    if (!calibrating.exchange(true, std::memory_order_acquire)) {
      if (!origin_taken.load(std::memory_order_relaxed)) {
        if (!invariant_tsc()) {
          fast_clock_scale.store(&kNoFastClock, std::memory_order_release);
        } else if (tight) {
          origin = {now_ticks, now_ns};
          origin_taken.store(true, std::memory_order_release);
        }
      }
      calibrating.store(false, std::memory_order_release);
    }
    return after_ns;
  }
  if (!tight) return after_ns;
  const std::int64_t elapsed_ns = now_ns - origin.ns;
  if (elapsed_ns < kFirstBaselineNs || now_ticks <= origin.ticks) return after_ns;
  // One thread calibrates; the others read CLOCK_MONOTONIC meanwhile.
  if (calibrating.exchange(true, std::memory_order_acquire)) return after_ns;
  const FastClockScale* old = fast_clock_scale.load(std::memory_order_acquire);
  if ((old == nullptr || now_ticks - old->base_ticks >= old->refresh_ticks) && scales_used < std::size(scales)) {
    const std::uint64_t elapsed_ticks = now_ticks - origin.ticks;
    const auto mult =
        static_cast<std::uint64_t>((static_cast<unsigned __int128>(elapsed_ns) << kFastClockShift) / elapsed_ticks);
    FastClockScale& scale = scales[scales_used++];
    const bool last = scales_used == std::size(scales);
    scale = {now_ticks, now_ns, mult, last ? ~std::uint64_t{0} : elapsed_ticks * 10};
    fast_clock_scale.store(&scale, std::memory_order_release);
  }
  calibrating.store(false, std::memory_order_release);
  return after_ns;
}
#else
std::int64_t fast_clock_slow_ns() noexcept { return monotonic_clock_ns(); }
#endif

}  // namespace weft::detail
