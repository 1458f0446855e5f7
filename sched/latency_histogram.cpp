#include "latency_histogram.h"

#include <algorithm>
#include <bit>

namespace weft::detail {

unsigned LatencyHistogram::bucket_of(std::uint64_t ns) noexcept {
  if (ns < 16) return static_cast<unsigned>(ns);
  const unsigned exponent = static_cast<unsigned>(std::bit_width(ns)) - 1;  // >= 4
  const unsigned sub = static_cast<unsigned>((ns >> (exponent - 3)) & 7);
  return 16 + (exponent - 4) * 8 + sub;
}

std::uint64_t LatencyHistogram::bucket_top(unsigned bucket) noexcept {
  if (bucket < 16) return bucket;
  const unsigned exponent = (bucket - 16) / 8 + 4;
  const std::uint64_t sub = (bucket - 16) % 8;
  const std::uint64_t width = std::uint64_t{1} << (exponent - 3);
  // The bucket holds [2^e + sub * width, 2^e + (sub + 1) * width).
  return (std::uint64_t{1} << exponent) + (sub + 1) * width - 1;
}

void LatencyHistogram::record(std::chrono::nanoseconds elapsed) noexcept {
  const std::uint64_t ns = elapsed.count() < 0 ? 0 : static_cast<std::uint64_t>(elapsed.count());
  buckets_[bucket_of(ns)].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(ns, std::memory_order_relaxed);
  std::uint64_t seen = max_.load(std::memory_order_relaxed);
  while (ns > seen && !max_.compare_exchange_weak(seen, ns, std::memory_order_relaxed)) {
  }
}

void LatencyHistogram::record_single_writer(std::uint64_t ns) noexcept {
  const auto bump = [](std::atomic<std::uint64_t>& counter) {
    counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  };
  bump(buckets_[bucket_of(ns)]);
  bump(count_);
  sum_.store(sum_.load(std::memory_order_relaxed) + ns, std::memory_order_relaxed);
  if (ns > max_.load(std::memory_order_relaxed)) max_.store(ns, std::memory_order_relaxed);
}

void LatencyHistogram::add_to(Counts& counts) const noexcept {
  for (unsigned i = 0; i < bucket_count; ++i) counts[i] += buckets_[i].load(std::memory_order_relaxed);
}

LatencySummary LatencyHistogram::summary() const noexcept {
  Counts counts{};
  add_to(counts);
  LatencySummary out = summarize(counts, max_.load(std::memory_order_relaxed));
  out.sum_us = static_cast<double>(sum_.load(std::memory_order_relaxed)) / 1000.0;
  return out;
}

LatencySummary LatencyHistogram::summarize(const Counts& counts, std::uint64_t max_ns) noexcept {
  std::uint64_t total = 0;
  for (unsigned i = 0; i < bucket_count; ++i) total += counts[i];
  if (max_ns == unknown_max) {
    max_ns = 0;
    for (unsigned i = bucket_count; i-- > 0;) {
      if (counts[i] != 0) {
        max_ns = bucket_top(i);
        break;
      }
    }
  }
  LatencySummary out;
  out.count = total;
  out.max_us = static_cast<double>(max_ns) / 1000.0;
  if (total == 0) return out;
  // The smallest bucket whose cumulative count reaches the rank; reported
  // as its top, but never above the exact max.
  const auto at = [&](double fraction) {
    const auto rank = static_cast<std::uint64_t>(fraction * static_cast<double>(total) + 0.999999);
    std::uint64_t seen = 0;
    for (unsigned i = 0; i < bucket_count; ++i) {
      seen += counts[i];
      if (seen >= std::max<std::uint64_t>(rank, 1))
        return static_cast<double>(std::min(bucket_top(i), max_ns)) / 1000.0;
    }
    return out.max_us;
  };
  out.p50_us = at(0.50);
  out.p99_us = at(0.99);
  return out;
}

}  // namespace weft::detail
