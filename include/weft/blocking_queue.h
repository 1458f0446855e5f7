// weft::BlockingQueue<T>: a FIFO queue with java.util.concurrent's
// LinkedBlockingQueue semantics, usable from fibers and plain threads.
//
//   weft::BlockingQueue<Request> queue{64};      // bounded; default unbounded
//   queue.put(std::move(request));               // parks while full
//   Request r = queue.take();                    // parks while empty
//   std::optional<Request> maybe = queue.poll_for(10ms);
//   queue.close();                               // wakes every waiter
//
// Blocking: a fiber caller parks (its worker runs other fibers); a plain
// thread caller sleeps in the kernel. Neither spins.
//
// Timeouts and would-block: offer*/put_for return false, poll*/take_for
// return std::nullopt. The item given to a call that returns false, or that
// throws QueueClosed or std::bad_alloc, is left untouched in the caller's
// hands (it is only moved from on success), so a move-only item is never
// lost; if the item's own move throws, it is in whatever state that left.
//
// Exceptions: one from T's copy or move, or std::bad_alloc while the ring
// grows, reaches the caller and leaves the queue usable (see the private
// part). Destroying the queue while callers wait on it aborts, naming them.
//
// Closing: after close(), every put-side call throws weft::QueueClosed; the
// take side first drains what is left, then throws weft::QueueClosed. That
// exception is the only way closing is reported. The callers close() wakes
// never touch the queue again: it may be destroyed once close() returns.
//
// Hand-off: an item put while a taker waits goes straight to that taker
// (and a waiting putter's item straight into the queue when a take makes
// room), so a woken waiter never races a newcomer for it.
//
// Every put, offer, take, poll and drain_to is a checkpoint
// (detail/checkpoint.h), taken on entry, before the queue's lock: a
// consumer that always finds an item still yields when sysmon asks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "detail/misuse.h"
#include "detail/park.h"
#include "detail/require_cxx20.h"
#include "detail/ring_buffer.h"
#include "queue_closed.h"

namespace weft {

template <class T>
class BlockingQueue {
  // The ring's growth moves the items to new storage, or copies those whose
  // move may throw, so that a throw leaves every item where it was. An item
  // that can do neither safely would lose the items moved before a throw.
  static_assert(std::is_nothrow_move_constructible_v<T> || std::is_copy_constructible_v<T>,
                "weft::BlockingQueue<T>: T's move constructor may throw and T cannot be copied, so a growth of "
                "the queue could lose items; declare T's move constructor noexcept");

 public:
  static constexpr std::size_t unbounded = std::numeric_limits<std::size_t>::max();

  // A capacity of 0 is rejected: such a queue could never hold an item.
  explicit BlockingQueue(std::size_t capacity = unbounded) : capacity_(capacity) {
    if (capacity == 0) throw std::invalid_argument("weft::BlockingQueue: capacity must be at least 1");
  }
  BlockingQueue(const BlockingQueue&) = delete;
  BlockingQueue& operator=(const BlockingQueue&) = delete;
  // Aborts, naming this and its waiters, if anyone still waits on it
  // (detail/misuse.h): they would stay parked on freed memory.
  ~BlockingQueue() { detail::check_no_waiters("weft::BlockingQueue", this, lock_, takers_, &putters_); }

  void put(T&& item) { insert(item, detail::no_deadline, "put"); }
  void put(const T& item) { put(T(item)); }
  // Waits until `timeout` for room; false if there was none.
  template <class Rep, class Period>
  bool put_for(T&& item, const std::chrono::duration<Rep, Period>& timeout) {
    return insert(item, detail::deadline_after(timeout), "put");
  }
  // Never blocks: false when full.
  bool offer(T&& item) { return insert(item, detail::Clock::time_point::min(), "offer"); }
  bool offer(const T& item) {
    T copy(item);
    return offer(std::move(copy));
  }
  // offer_for is put_for under Java's name.
  template <class Rep, class Period>
  bool offer_for(T&& item, const std::chrono::duration<Rep, Period>& timeout) {
    return put_for(std::move(item), timeout);
  }

  // The item leaves the queue before it is returned: a move of T that
  // throws on the way out loses it, as any pop by value does.
  T take() { return *remove(detail::no_deadline, "take"); }
  template <class Rep, class Period>
  std::optional<T> take_for(const std::chrono::duration<Rep, Period>& timeout) {
    return remove(detail::deadline_after(timeout), "take");
  }
  // Never blocks: nullopt when empty (and QueueClosed once closed and empty).
  std::optional<T> poll() { return remove(detail::Clock::time_point::min(), "poll"); }
  // poll_for is take_for under Java's name.
  template <class Rep, class Period>
  std::optional<T> poll_for(const std::chrono::duration<Rep, Period>& timeout) {
    return take_for(timeout);
  }

  // Moves up to `max` items, oldest first, to `out` (an output iterator,
  // e.g. std::back_inserter(vec)); returns how many. Never blocks.
  template <class OutputIt>
  std::size_t drain_to(OutputIt out, std::size_t max = unbounded) {
    detail::checkpoint();
    std::lock_guard guard(lock_);
    std::size_t moved = 0;
    while (moved < max && !items_.empty()) {
      *out++ = std::move(items_.front());
      items_.pop_front();
      ++moved;
      admit_putter();
    }
    return moved;
  }

  // Wakes every waiter; see "Closing" above. Idempotent. The callers it
  // wakes throw QueueClosed without touching the queue again, so that it
  // may be destroyed once close() has returned (they re-locked it, and its
  // destructor, which found no waiter left, freed it under them).
  void close() {
    std::lock_guard guard(lock_);
    closed_ = true;
    for (detail::WaitList* list : {&takers_, &putters_}) {
      while (detail::Waiter* waiter = list->pop_front()) {
        waiter->amount = kWokenByClose;
        detail::unpark(*waiter);
      }
    }
  }

  bool closed() const {
    std::lock_guard guard(lock_);
    return closed_;
  }
  std::size_t size() const {
    std::lock_guard guard(lock_);
    return items_.size();
  }
  std::size_t capacity() const noexcept { return capacity_; }

 private:
  // Waiter::payload: a waiting taker's std::optional<T> slot, or a waiting
  // putter's PutSlot. Waiter::amount, for a putter: 1 once its item was
  // moved in, 2 when moving it in threw (PutSlot::error, rethrown by the
  // putter itself); for either, kWokenByClose when close() woke it.
  static constexpr std::uint64_t kWokenByClose = 3;
  struct PutSlot {
    T* item;
    std::exception_ptr error;
  };

  // Exceptions: every path holds lock_ through a unique_lock, so an
  // exception from T's copy or move or from the ring's allocation leaves
  // the queue unlocked and usable; a waiter being handed an item when that
  // throws stays queued (detail::wake_first).

  // Adds `item` (moved from only on success). Deadline min(): do not wait.
  bool insert(T& item, detail::Clock::time_point deadline, const char* operation) {
    detail::checkpoint();
    std::unique_lock guard(lock_);
    if (closed_) throw QueueClosed();
    const bool handed = detail::wake_first(
        takers_, [&](detail::Waiter& w) { slot_of(w).emplace(std::move(item)); },
        [&](detail::Waiter& w) {
          item = std::move(*slot_of(w));
          slot_of(w).reset();
        });
    if (handed) return true;
    if (items_.size() < capacity_) {
      items_.push_back(std::move(item));
      return true;
    }
    if (deadline == detail::Clock::time_point::min()) return false;
    PutSlot put{&item, nullptr};
    detail::Waiter waiter;
    waiter.payload = &put;
    guard.release();  // wait_in releases lock_ once we are parked
    if (!detail::wait_in(putters_, lock_, waiter, {"weft::BlockingQueue", this, operation}, deadline)) return false;
    if (waiter.amount == 1) return true;  // a taker moved our item in
    if (waiter.amount == 2) std::rethrow_exception(put.error);
    throw QueueClosed();  // kWokenByClose
  }

  std::optional<T> remove(detail::Clock::time_point deadline, const char* operation) {
    detail::checkpoint();
    std::unique_lock guard(lock_);
    if (!items_.empty()) {
      std::optional<T> item(std::move(items_.front()));
      items_.pop_front();
      admit_putter();
      return item;
    }
    if (closed_) throw QueueClosed();
    if (deadline == detail::Clock::time_point::min()) return std::nullopt;
    std::optional<T> slot;
    detail::Waiter waiter;
    waiter.payload = &slot;
    guard.release();  // wait_in releases lock_ once we are parked
    if (!detail::wait_in(takers_, lock_, waiter, {"weft::BlockingQueue", this, operation}, deadline))
      return std::nullopt;
    if (slot) return slot;  // handed over by a putter
    // kWokenByClose. Nothing to drain: a taker waits only while the ring is
    // empty (a put meanwhile hands its item over instead), and nothing
    // comes in after close().
    throw QueueClosed();
  }

  // After a take made room: move the first waiting putter's item in. A
  // putter whose item throws on the way in is woken with that exception
  // (it is its put that failed, not this take), and the next one tried.
  void admit_putter() {
    while (!putters_.empty() && items_.size() < capacity_) {
      detail::wake_first(
          putters_,
          [&](detail::Waiter& w) {
            try {
              items_.push_back(std::move(*put_of(w).item));
              w.amount = 1;
            } catch (...) {
              put_of(w).error = std::current_exception();
              w.amount = 2;
            }
          },
          [&](detail::Waiter& w) {
            if (w.amount == 1) {
              *put_of(w).item = std::move(items_.back());
              items_.pop_back();
            }
            put_of(w).error = nullptr;
            w.amount = 0;
          });
    }
  }

  static PutSlot& put_of(detail::Waiter& w) { return *static_cast<PutSlot*>(w.payload); }
  static std::optional<T>& slot_of(detail::Waiter& w) { return *static_cast<std::optional<T>*>(w.payload); }

  const std::size_t capacity_;
  mutable detail::SpinLock lock_;
  detail::RingBuffer<T> items_;
  detail::WaitList takers_;
  detail::WaitList putters_;
  bool closed_ = false;
};

}  // namespace weft
