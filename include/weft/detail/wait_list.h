// Waiter and WaitList: the record a blocked caller publishes, and the FIFO
// list a primitive keeps them in. The primitive's own lock guards the list;
// the waiter's `state` word is what decides, once, between a wake and a
// timeout (include/weft/detail/park.h).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace weft::detail {

using Clock = std::chrono::steady_clock;

// What a parked fiber waits on: the primitive's kind, its address and the
// operation, all static strings or addresses, for the dump.
struct WaitSite {
  const char* kind = nullptr;  // "weft::BlockingQueue"
  const void* object = nullptr;
  const char* operation = nullptr;  // "take"
};

struct FiberControl;

struct Waiter {
  enum State : std::uint32_t { waiting = 0, notified = 1, timed_out = 2 };

  std::atomic<std::uint32_t> state{waiting};
  // Set by park() before any waker can see the waiter: without a deadline
  // only a waker changes `state`, and it needs no compare-and-swap.
  bool may_time_out = false;
  // The parked fiber; null when the waiter is a plain thread, which then
  // sleeps in the kernel on `state` (a futex).
  FiberControl* fiber = nullptr;
  // For the primitive: what the waiter brings or expects (a handed-off
  // item, a count of permits). Guarded by the primitive's lock.
  void* payload = nullptr;
  std::uint64_t amount = 0;
  std::uint32_t events = 0;  // an fd waiter's: the epoll events that woke it
  // A plain thread's stamp, the process's forks when it began to wait plus
  // one, by which unpark tells a waiter the parent left in the list of a
  // fork child's copy of a primitive (sched/fork_generation.h); 0: not
  // stamped, never taken for one.
  std::uint32_t forks_at_park = 0;

  Waiter* prev = nullptr;
  Waiter* next = nullptr;
  bool linked = false;
};

// An intrusive FIFO of waiters: no allocation, O(1) removal of a waiter that
// timed out from the middle.
class WaitList {
 public:
  bool empty() const noexcept { return head_ == nullptr; }
  Waiter* front() const noexcept { return head_; }

  void push_back(Waiter& w) noexcept {
    w.prev = tail_;
    w.next = nullptr;
    w.linked = true;
    if (tail_ != nullptr)
      tail_->next = &w;
    else
      head_ = &w;
    tail_ = &w;
  }

  void push_front(Waiter& w) noexcept {
    w.prev = nullptr;
    w.next = head_;
    w.linked = true;
    if (head_ != nullptr)
      head_->prev = &w;
    else
      tail_ = &w;
    head_ = &w;
  }

  Waiter* pop_front() noexcept {
    Waiter* w = head_;
    if (w != nullptr) remove(*w);
    return w;
  }

  // Unlinks `w` if it is still in the list (a waiter that timed out).
  void remove(Waiter& w) noexcept {
    if (!w.linked) return;
    if (w.prev != nullptr)
      w.prev->next = w.next;
    else
      head_ = w.next;
    if (w.next != nullptr)
      w.next->prev = w.prev;
    else
      tail_ = w.prev;
    w.prev = w.next = nullptr;
    w.linked = false;
  }

 private:
  Waiter* head_ = nullptr;
  Waiter* tail_ = nullptr;
};

}  // namespace weft::detail
