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
// throws, is left untouched in the caller's hands (it is only moved from on
// success), so a move-only item is never lost.
//
// Closing: after close(), every put-side call throws weft::QueueClosed; the
// take side first drains what is left, then throws weft::QueueClosed. That
// exception is the only way closing is reported.
//
// Hand-off: an item put while a taker waits goes straight to that taker
// (and a waiting putter's item straight into the queue when a take makes
// room), so a woken waiter never races a newcomer for it.
#pragma once

#include <cstddef>
#include <limits>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <utility>

#include "detail/park.h"
#include "detail/require_cxx20.h"
#include "detail/ring_buffer.h"
#include "queue_closed.h"

namespace weft {

template <class T>
class BlockingQueue {
 public:
  static constexpr std::size_t unbounded = std::numeric_limits<std::size_t>::max();

  // A capacity of 0 is rejected: such a queue could never hold an item.
  explicit BlockingQueue(std::size_t capacity = unbounded) : capacity_(capacity) {
    if (capacity == 0) throw std::invalid_argument("weft::BlockingQueue: capacity must be at least 1");
  }
  BlockingQueue(const BlockingQueue&) = delete;
  BlockingQueue& operator=(const BlockingQueue&) = delete;

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

  // Wakes every waiter; see "Closing" above. Idempotent.
  void close() {
    std::lock_guard guard(lock_);
    closed_ = true;
    detail::wake_all(takers_);
    detail::wake_all(putters_);
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
  // putter's T. Waiter::amount: 1 once a putter's item was moved in.

  // Adds `item` (moved from only on success). Deadline min(): do not wait.
  bool insert(T& item, detail::Clock::time_point deadline, const char* operation) {
    lock_.lock();
    for (;;) {
      if (closed_) {
        lock_.unlock();
        throw QueueClosed();
      }
      const bool handed = detail::wake_first(
          takers_, [&](detail::Waiter& w) { slot_of(w).emplace(std::move(item)); },
          [&](detail::Waiter& w) {
            item = std::move(*slot_of(w));
            slot_of(w).reset();
          });
      if (handed || items_.size() < capacity_) {
        if (!handed) items_.push_back(std::move(item));
        lock_.unlock();
        return true;
      }
      if (deadline == detail::Clock::time_point::min()) {
        lock_.unlock();
        return false;
      }
      detail::Waiter waiter;
      waiter.payload = &item;
      if (!detail::wait_in(putters_, lock_, waiter, {"weft::BlockingQueue", this, operation}, deadline)) return false;
      if (waiter.amount == 1) return true;  // a taker moved our item in
      lock_.lock();                         // woken by close(): report it
    }
  }

  std::optional<T> remove(detail::Clock::time_point deadline, const char* operation) {
    lock_.lock();
    for (;;) {
      if (!items_.empty()) {
        std::optional<T> item(std::move(items_.front()));
        items_.pop_front();
        admit_putter();
        lock_.unlock();
        return item;
      }
      if (closed_) {
        lock_.unlock();
        throw QueueClosed();
      }
      if (deadline == detail::Clock::time_point::min()) {
        lock_.unlock();
        return std::nullopt;
      }
      std::optional<T> slot;
      detail::Waiter waiter;
      waiter.payload = &slot;
      if (!detail::wait_in(takers_, lock_, waiter, {"weft::BlockingQueue", this, operation}, deadline))
        return std::nullopt;
      if (slot) return slot;  // handed over by a putter
      lock_.lock();           // woken by close(): drain, then report it
    }
  }

  // After a take made room: move the first waiting putter's item in.
  void admit_putter() {
    if (putters_.empty() || items_.size() >= capacity_) return;
    detail::wake_first(
        putters_,
        [&](detail::Waiter& w) {
          items_.push_back(std::move(*static_cast<T*>(w.payload)));
          w.amount = 1;
        },
        [&](detail::Waiter& w) {
          *static_cast<T*>(w.payload) = std::move(items_.back());
          items_.pop_back();
          w.amount = 0;
        });
  }

  static std::optional<T>& slot_of(detail::Waiter& w) { return *static_cast<std::optional<T>*>(w.payload); }

  const std::size_t capacity_;
  mutable detail::SpinLock lock_;
  detail::RingBuffer<T> items_;
  detail::WaitList takers_;
  detail::WaitList putters_;
  bool closed_ = false;
};

}  // namespace weft
