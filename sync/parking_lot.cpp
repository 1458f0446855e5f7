#include "parking_lot.h"

#include <pthread.h>

#include <new>

namespace weft::detail {
namespace {

// 1024 buckets, a cache line each (64 KiB of zeroed memory, touched only
// where keys land): a bucket is shared by the keys that hash to it, and a
// waker scans its waiters for its key, so the table is sized for thousands
// of objects with waiters at once, not for the number of threads.
constexpr unsigned kBucketBits = 10;

struct alignas(64) PaddedBucket {
  LotBucket bucket;
};

// Constant-initialized: a lock hook may run before any constructor.
constinit PaddedBucket buckets[std::size_t{1} << kBucketBits];

void reset_buckets_in_child() noexcept {
  for (PaddedBucket& padded : buckets) padded.bucket.reset_after_fork();
}

[[gnu::constructor]] void register_fork_handler() { pthread_atfork(nullptr, nullptr, &reset_buckets_in_child); }

}  // namespace

LotBucket& lot_bucket(const void* key) noexcept {
  // Fibonacci hashing: the multiply spreads the address's middle bits (the
  // ones that differ between neighbouring objects) into the top ones.
  const auto address = reinterpret_cast<std::uintptr_t>(key);
  return buckets[(address * 0x9E3779B97F4A7C15u) >> (64 - kBucketBits)].bucket;
}

void LotBucket::reset_after_fork() noexcept {
  // In the child only the forking thread is left: the waiters linked here
  // belonged to threads and fibers that did not come along, and a thread
  // that held the lock at the fork will never release it. An object whose
  // bit still says "parked" finds no waiter and clears it.
  new (&lock) SpinLock;
  new (&waiters_) WaitList;
}

}  // namespace weft::detail
