// A lock-free latency histogram: a pool's per-task timings (recorded by any
// runner at once: two relaxed fetch_adds and a CAS loop on the max) and a
// worker's scheduling latency (sched/run_latency.h; recorded by its owner
// alone: plain loads and stores). Reading (for weft-dump) walks the
// buckets without stopping anyone.
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
  static constexpr unsigned bucket_count = 16 + 60 * 8;

  void record(std::chrono::nanoseconds elapsed) noexcept;
  // record() for a histogram that only one thread ever records into: no
  // locked instruction (a worker's, on its switch path).
  void record_single_writer(std::uint64_t ns) noexcept;
  // Count, p50, p99, max and sum. Concurrent records may or may not be
  // counted.
  LatencySummary summary() const noexcept;

  // Bucket counts, to be summed over histograms and differenced over time
  // (a scheduler's latency since the previous dump).
  using Counts = std::array<std::uint64_t, bucket_count>;
  void add_to(Counts& counts) const noexcept;
  // The summary of `counts`; the max is `max_ns` when known, else the top
  // of the highest bucket that holds a value (within 12.5 %).
  static constexpr std::uint64_t unknown_max = ~std::uint64_t{0};
  static LatencySummary summarize(const Counts& counts, std::uint64_t max_ns) noexcept;

  // The bucket a value falls in, and the largest value of a bucket (tests).
  static unsigned bucket_of(std::uint64_t ns) noexcept;
  static std::uint64_t bucket_top(unsigned bucket) noexcept;

 private:
  std::array<std::atomic<std::uint64_t>, bucket_count> buckets_{};
  std::atomic<std::uint64_t> count_{0};
  std::atomic<std::uint64_t> max_{0};
  std::atomic<std::uint64_t> sum_{0};  // of every value, ns: a summary's _sum (weft-dump --metrics)
};

}  // namespace weft::detail
