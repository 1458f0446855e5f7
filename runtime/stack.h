// Fiber stacks: mmap'ed address space, committed lazily by the kernel as the
// fiber touches it, with an inaccessible guard page below the usable range so
// an overflow faults instead of corrupting a neighbour.
//
// Example:
//   weft::detail::StackPool pool{256 * 1024, 64};
//   weft::detail::Stack s = pool.acquire();   // throws weft::StackError
//   ... run a fiber on [s.bottom(), s.top()) ...
//   pool.release(std::move(s));
#pragma once

#include <cstddef>
#include <stdexcept>
#include <vector>

#include "spin_lock.h"

namespace weft {

// Thrown by spawn when the stack cannot be mapped: out of memory, or out of
// mappings (vm.max_map_count). The message says which and what to tune.
class StackError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

class Stack {
 public:
  Stack() = default;
  // Maps `usable_size` bytes (rounded up to pages) plus one guard page.
  static Stack allocate(std::size_t usable_size);

  Stack(Stack&& other) noexcept { *this = std::move(other); }
  Stack& operator=(Stack&& other) noexcept;
  ~Stack();

  explicit operator bool() const noexcept { return base_ != nullptr; }
  // The usable range, growing down from top() to bottom().
  char* top() const noexcept { return base_ + mapping_size_; }
  char* bottom() const noexcept { return base_ + guard_size(); }
  std::size_t usable_size() const noexcept { return mapping_size_ - guard_size(); }
  // True when `address` lies in this stack's guard page.
  bool guard_contains(const void* address) const noexcept {
    auto* a = static_cast<const char*>(address);
    return base_ != nullptr && a >= base_ && a < bottom();
  }
  static std::size_t guard_size() noexcept;
  // The sanitizer's state for fibers run on this stack, made on first use
  // and kept with the stack (see new_sanitizer_fiber in context.h).
  void* sanitizer_fiber();

 private:
  void unmap() noexcept;

  char* base_ = nullptr;  // lowest address: the guard page
  std::size_t mapping_size_ = 0;
  void* sanitizer_fiber_ = nullptr;
};

// A bounded pool of stacks of one size, so that spawn rarely maps and a
// finished fiber's stack is reused at once. Stacks beyond the bound, and
// stacks of other sizes, are unmapped on release.
class StackPool {
 public:
  StackPool(std::size_t stack_size, std::size_t capacity) : stack_size_(stack_size), capacity_(capacity) {}
  StackPool(const StackPool&) = delete;
  StackPool& operator=(const StackPool&) = delete;

  std::size_t stack_size() const noexcept { return stack_size_; }
  // A stack of `size` usable bytes (0: the pool's size).
  Stack acquire(std::size_t size = 0);
  void release(Stack stack) noexcept;

 private:
  const std::size_t stack_size_;
  const std::size_t capacity_;
  SpinLock lock_;
  std::vector<Stack> free_;
};

}  // namespace detail
}  // namespace weft
