// Fiber stacks: mmap'ed address space, committed lazily by the kernel as the
// fiber touches it, with an inaccessible guard region (kGuardBytes) below the
// usable range so an overflow faults instead of corrupting a neighbour.
//
// Example:
//   weft::detail::StackPool pool{256 * 1024, 64};
//   weft::detail::Stack s = pool.acquire();   // throws weft::StackError
//   ... run a fiber on [s.bottom(), s.top()) ...
//   pool.release(std::move(s));
#pragma once

#include <weft/detail/spin_lock.h>
#include <weft/stack_error.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

namespace weft {

namespace detail {

// One rule for every stack size weft is given (Config::stack_size, and
// SpawnOptions::stack_size unless 0): at least 16 KiB, below which libc's
// own calls (printf) overflow, and at most 1 TiB, so that rounding up to
// pages and adding the guard cannot wrap.
constexpr std::size_t kMinStackSize = std::size_t{16} * 1024;
constexpr std::size_t kMaxStackSize = std::size_t{1} << 40;
// The guard region below each stack (Stack::guard_size rounds it to pages).
constexpr std::size_t kGuardBytes = std::size_t{64} * 1024;
// How far below its stack a fiber's stack pointer may be found and still be
// taken for an overflow (a frame bigger than the guard) rather than for a
// fiber that switched to a stack of its own.
constexpr std::size_t kOvershootReach = std::size_t{1} << 30;
// Throws std::invalid_argument naming `what` ("weft::Config::stack_size")
// and the size when `size` breaks that rule.
void check_stack_size(std::size_t size, const char* what);

class Stack {
 public:
  Stack() = default;
  // Maps `usable_size` bytes (rounded up to pages) plus the guard region;
  // `usable_size` must obey check_stack_size.
  static Stack allocate(std::size_t usable_size);

  Stack(Stack&& other) noexcept
      : base_(std::exchange(other.base_, nullptr)),
        mapping_size_(std::exchange(other.mapping_size_, 0)),
        sanitizer_fiber_(std::exchange(other.sanitizer_fiber_, nullptr)),
        park_sanitizer_fiber_(std::exchange(other.park_sanitizer_fiber_, nullptr)) {}
  Stack& operator=(Stack&& other) noexcept {
    if (this != &other) {
      if (base_ != nullptr) unmap();
      base_ = std::exchange(other.base_, nullptr);
      mapping_size_ = std::exchange(other.mapping_size_, 0);
      sanitizer_fiber_ = std::exchange(other.sanitizer_fiber_, nullptr);
      park_sanitizer_fiber_ = std::exchange(other.park_sanitizer_fiber_, nullptr);
    }
    return *this;
  }
  ~Stack() {
    if (base_ != nullptr) unmap();
  }

  explicit operator bool() const noexcept { return base_ != nullptr; }
  // The usable range, growing down from top() to bottom().
  char* top() const noexcept { return base_ + mapping_size_; }
  char* bottom() const noexcept { return base_ + guard_size(); }
  std::size_t usable_size() const noexcept { return mapping_size_ - guard_size(); }
  // True when `address` lies in this stack's guard region.
  bool guard_contains(const void* address) const noexcept {
    auto* a = static_cast<const char*>(address);
    return base_ != nullptr && a >= base_ && a < bottom();
  }
  // True when a fault at `fault`, taken by a fiber on this stack with its
  // stack pointer at `sp`, is this stack overflowing: the fault lies in the
  // guard, or the stack pointer itself is below the usable range (a frame
  // bigger than the guard whose first access landed beyond it, in memory
  // that is unmapped or another mapping's guard).
  bool overflowed(const void* fault, const void* sp) const noexcept {
    if (guard_contains(fault)) return true;
    const auto s = reinterpret_cast<std::uintptr_t>(sp);
    const auto b = reinterpret_cast<std::uintptr_t>(bottom());
    return base_ != nullptr && s < b && b - s <= kOvershootReach;
  }
  static std::size_t guard_size() noexcept;
  // The sanitizer's state for fibers run on this stack, made on first use
  // and kept with the stack (see new_sanitizer_fiber in context.h).
  void* sanitizer_fiber();
  // A second one, for the libc hooks' parks (hooks/hook_support.h, ParkScope),
  // also kept: making and destroying one per park serialized every park
  // on ThreadSanitizer's thread registry.
  void* park_sanitizer_fiber();

 private:
  void unmap() noexcept;

  char* base_ = nullptr;  // lowest address: the guard page
  std::size_t mapping_size_ = 0;
  void* sanitizer_fiber_ = nullptr;
  void* park_sanitizer_fiber_ = nullptr;
};

// A bounded pool of stacks of one size, so that spawn rarely maps and a
// finished fiber's stack is reused at once. Each worker has a small cache of
// its own (no lock: only that worker's thread touches it) in front of a
// shared pool; stacks beyond the bound, and stacks of other sizes, are
// unmapped on release.
class StackPool {
 public:
  static constexpr unsigned no_cache = ~0u;  // the caller is not a worker

  StackPool(std::size_t stack_size, std::size_t capacity, unsigned worker_caches);
  StackPool(const StackPool&) = delete;
  StackPool& operator=(const StackPool&) = delete;

  std::size_t stack_size() const noexcept { return stack_size_; }
  // A stack of `size` usable bytes (0: the pool's size). `cache`: the
  // calling worker's index, or no_cache.
  Stack acquire(std::size_t size = 0, unsigned cache = no_cache);
  void release(Stack stack, unsigned cache = no_cache) noexcept;

 private:
  static constexpr std::size_t kWorkerCacheSize = 64;

  // How many stacks the shared pool keeps: capacity_, fewer where guards
  // are mappings of their own (runtime/stack.cpp).
  std::size_t kept_at_most() const noexcept;

  const std::size_t stack_size_;  // rounded up to pages
  const std::size_t capacity_;
  const std::size_t kept_with_mapped_guards_;  // kept_at_most() before Linux 6.13
  // A cache line each, so that workers do not share one.
  struct alignas(64) WorkerCache {
    std::vector<Stack> stacks;
  };
  std::unique_ptr<WorkerCache[]> worker_caches_;
  unsigned worker_cache_count_;
  SpinLock lock_;
  std::vector<Stack> shared_;
};

}  // namespace detail
}  // namespace weft
