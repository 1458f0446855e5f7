// A lock-free latency histogram for a pool's per-task timings: recording is
// two relaxed fetch_adds and a CAS loop on the max, from any runner at
// once; reading (for weft-dump) walks the buckets without stopping anyone.
//
// Buckets are log-linear, as HdrHistogram's: values below 16 ns each have
// their own; above, every power of two is split into 8 equal buckets, so a
// percentile read back is within 12.5 % of the true value. 496 buckets
// cover every 64-bit nanosecond count.
#pragma once

#include <weft/snapshot.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace weft::detail {

class LatencyHistogram {
 public:
  void record(std::chrono::nanoseconds elapsed) noexcept;
  // Count, p50, p99 and max. Concurrent records may or may not be counted.
  LatencySummary summary() const noexcept;

  // The bucket a value falls in, and the largest value of a bucket (tests).
  static unsigned bucket_of(std::uint64_t ns) noexcept;
  static std::uint64_t bucket_top(unsigned bucket) noexcept;
  static constexpr unsigned bucket_count = 16 + 60 * 8;

 private:
  std::array<std::atomic<std::uint64_t>, bucket_count> buckets_{};
  std::atomic<std::uint64_t> count_{0};
  std::atomic<std::uint64_t> max_{0};
};

}  // namespace weft::detail
