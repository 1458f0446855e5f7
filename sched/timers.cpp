#include "timers.h"

#include <pthread.h>

namespace weft::detail {

void TimerQueue::start() {
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "weft-timers");
    run();
  });
}

void TimerQueue::stop() {
  {
    std::lock_guard guard(lock_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void TimerQueue::arm(TimerNode& node) {
  bool earliest;
  {
    std::lock_guard guard(lock_);
    node.heap_index = heap_.size();
    heap_.push_back(&node);
    sift_up(node.heap_index);
    earliest = node.heap_index == 0;
  }
  if (earliest) changed_.notify_one();
}

bool TimerQueue::cancel(TimerNode& node) {
  std::lock_guard guard(lock_);
  if (node.heap_index == TimerNode::npos) return false;
  remove_at(node.heap_index);
  return true;
}

std::size_t TimerQueue::size() const {
  std::lock_guard guard(lock_);
  return heap_.size();
}

void TimerQueue::run() {
  std::unique_lock guard(lock_);
  while (!stopping_) {
    if (heap_.empty()) {
      changed_.wait(guard);
      continue;
    }
    TimerNode* first = heap_.front();
    // A copy: while we wait the lock is released, and the node may be
    // cancelled and its owner's frame gone.
    const Clock::time_point deadline = first->deadline;
    if (deadline > Clock::now()) {
      changed_.wait_until(guard, deadline);
      continue;
    }
    remove_at(0);
    first->fire(*first);
  }
}

void TimerQueue::swap_nodes(std::size_t a, std::size_t b) {
  std::swap(heap_[a], heap_[b]);
  heap_[a]->heap_index = a;
  heap_[b]->heap_index = b;
}

void TimerQueue::sift_up(std::size_t index) {
  while (index > 0) {
    const std::size_t parent = (index - 1) / 2;
    if (!(heap_[index]->deadline < heap_[parent]->deadline)) break;
    swap_nodes(index, parent);
    index = parent;
  }
}

void TimerQueue::sift_down(std::size_t index) {
  for (;;) {
    const std::size_t left = 2 * index + 1;
    if (left >= heap_.size()) break;
    std::size_t smallest = left;
    if (left + 1 < heap_.size() && heap_[left + 1]->deadline < heap_[left]->deadline) smallest = left + 1;
    if (!(heap_[smallest]->deadline < heap_[index]->deadline)) break;
    swap_nodes(index, smallest);
    index = smallest;
  }
}

void TimerQueue::remove_at(std::size_t index) {
  TimerNode* node = heap_[index];
  const std::size_t last = heap_.size() - 1;
  if (index != last) {
    swap_nodes(index, last);
    heap_.pop_back();
    sift_down(index);
    sift_up(index);
  } else {
    heap_.pop_back();
  }
  node->heap_index = TimerNode::npos;
}

}  // namespace weft::detail
