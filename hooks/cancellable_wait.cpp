#include "cancellable_wait.h"

#include <climits>
#include <cstdint>
#include <mutex>
#include <new>

#include "../sched/raw_lock.h"
#include "locks.h"
#include "real_calls.h"

namespace weft::detail::locks {
namespace {

// The registered waits, in buckets by thread: a wait takes only its own
// thread's bucket lock, so the condition-variable waits of different plain
// threads rarely meet there (one list under one lock made every such wait
// in the process take the same lock twice). Each bucket is a doubly linked
// list of the waiters' own objects, which live in their frames.
// Invariant: an object is linked in its thread's bucket exactly while its
// constructor has returned and its destructor has not, so wake() may touch
// any linked one under the bucket's lock.
struct alignas(64) Bucket {  // a cache line each: threads' waits meet in none
  RawMutex lock;
  CancellableWait* head = nullptr;  // guarded by lock
};
constexpr unsigned kBucketBits = 6;
Bucket buckets[1U << kBucketBits];

Bucket& bucket_of(pthread_t thread) noexcept {
  // Fibonacci hashing: pthread_t is the address of the thread's control
  // block, whose low bits are alike from thread to thread.
  const std::uint64_t key = static_cast<std::uint64_t>(thread) * 0x9E3779B97F4A7C15ULL;
  return buckets[key >> (64 - kBucketBits)];
}

// A forked child has only the forking thread: the others' waits, and a lock
// one of them may have held, are gone.
void forget_in_child() noexcept {
  for (Bucket& bucket : buckets) {
    new (&bucket.lock) RawMutex();
    bucket.head = nullptr;
  }
}
[[gnu::constructor]] void register_fork_handler() { pthread_atfork(nullptr, nullptr, &forget_in_child); }

}  // namespace

CancellableWait::CancellableWait(std::atomic<std::uint32_t>* word) noexcept : thread_(pthread_self()), word_(word) {
  Bucket& bucket = bucket_of(thread_);
  const std::lock_guard guard(bucket.lock);
  next_ = bucket.head;
  if (next_ != nullptr) next_->prev_ = this;
  bucket.head = this;
}

CancellableWait::~CancellableWait() {
  Bucket& bucket = bucket_of(thread_);
  const std::lock_guard guard(bucket.lock);
  (prev_ != nullptr ? prev_->next_ : bucket.head) = next_;
  if (next_ != nullptr) next_->prev_ = prev_;
}

void CancellableWait::wake(pthread_t thread) noexcept {
  Bucket& bucket = bucket_of(thread);
  const std::lock_guard guard(bucket.lock);
  for (CancellableWait* wait = bucket.head; wait != nullptr; wait = wait->next_) {
    if (pthread_equal(wait->thread_, thread) == 0) continue;
    wait->requested_.store(true, std::memory_order_release);
    futex_wake(wait->word_, INT_MAX);
  }
}

}  // namespace weft::detail::locks

// Exported: it interposes libc's (include/weft/detail/visibility.h).
#pragma GCC visibility push(default)
extern "C" {

int pthread_cancel(pthread_t thread) {
  const int result = weft::detail::real::pthread_cancel()(thread);
  if (result == 0) weft::detail::locks::CancellableWait::wake(thread);
  return result;
}

}  // extern "C"
#pragma GCC visibility pop
