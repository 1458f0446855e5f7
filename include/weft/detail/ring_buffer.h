// RingBuffer<T>: the FIFO storage behind weft::BlockingQueue. A growable
// circular buffer that allocates nothing until the first push: a queue that
// is mostly empty (a fiber parked on it, items handed straight to takers)
// costs its 32 bytes and no heap. std::deque allocates ~600 bytes up front,
// which showed in the memory per parked fiber (docs/benchmarks.md).
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <utility>

namespace weft::detail {

template <class T>
class RingBuffer {
 public:
  RingBuffer() = default;
  RingBuffer(const RingBuffer&) = delete;
  RingBuffer& operator=(const RingBuffer&) = delete;
  ~RingBuffer() {
    while (!empty()) pop_front();
    ::operator delete (slots_, std::align_val_t{alignof(T)});
  }

  bool empty() const noexcept { return size_ == 0; }
  std::size_t size() const noexcept { return size_; }

  T& front() noexcept { return slot(head_); }
  T& back() noexcept { return slot(head_ + size_ - 1); }

  template <class U>
  void push_back(U&& item) {
    if (size_ == capacity_) grow();
    ::new (static_cast<void*>(&slot(head_ + size_))) T(std::forward<U>(item));
    ++size_;
  }
  void pop_front() noexcept {
    front().~T();
    head_ = (head_ + 1) & (capacity_ - 1);
    --size_;
  }
  void pop_back() noexcept {
    back().~T();
    --size_;
  }

 private:
  T& slot(std::size_t index) noexcept { return slots_[index & (capacity_ - 1)]; }

  // Strong guarantee: if the allocation or an element's copy throws, the
  // buffer is as it was (move_if_noexcept copies an element whose move may
  // throw, so the originals stay intact until every copy is made).
  void grow() {
    const std::size_t capacity = capacity_ == 0 ? 8 : capacity_ * 2;
    T* slots = static_cast<T*>(::operator new (capacity * sizeof(T), std::align_val_t{alignof(T)}));
    std::size_t made = 0;
    try {
      for (; made < size_; ++made)
        ::new (static_cast<void*>(&slots[made])) T(std::move_if_noexcept(slot(head_ + made)));
    } catch (...) {
      while (made > 0) slots[--made].~T();
      ::operator delete (slots, std::align_val_t{alignof(T)});
      throw;
    }
    for (std::size_t i = 0; i < size_; ++i) slot(head_ + i).~T();
    ::operator delete (slots_, std::align_val_t{alignof(T)});
    slots_ = slots;
    capacity_ = capacity;
    head_ = 0;
  }

  T* slots_ = nullptr;
  std::size_t capacity_ = 0;  // a power of two, or 0
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

}  // namespace weft::detail
