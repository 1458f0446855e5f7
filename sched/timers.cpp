#include "timers.h"

namespace weft::detail {

TimerQueue::ArmWake TimerQueue::arm(TimerNode& node) {
  std::lock_guard guard(lock_);
  node.heap_index = heap_.size();
  heap_.push_back(&node);
  sift_up(node.heap_index);
  if (node.heap_index != 0) return ArmWake::none;  // an earlier one is watched already
  publish_earliest();
  if (!blocking_) return ArmWake::idle_worker;
  if (node.deadline >= blocking_until_) return ArmWake::none;
  // One wake per earlier deadline: the blocker recomputes its timeout when
  // it wakes; a later arm that is not earlier still needs none.
  blocking_until_ = node.deadline;
  return ArmWake::blocker;
}

bool TimerQueue::cancel(TimerNode& node) {
  std::lock_guard guard(lock_);
  if (node.heap_index == TimerNode::npos) return false;
  remove_at(node.heap_index);
  publish_earliest();
  return true;
}

std::size_t TimerQueue::size() const {
  std::lock_guard guard(lock_);
  return heap_.size();
}

std::size_t TimerQueue::run_due_slow() noexcept {
  std::unique_lock guard(lock_, std::try_to_lock);
  if (!guard.owns_lock()) return 0;
  const Clock::time_point now = Clock::now();
  std::size_t fired = 0;
  while (!heap_.empty() && heap_.front()->deadline <= now) {
    TimerNode* first = heap_.front();
    remove_at(0);
    first->fire(*first);
    ++fired;
  }
  publish_earliest();
  return fired;
}

Clock::time_point TimerQueue::begin_blocking() noexcept {
  std::lock_guard guard(lock_);
  blocking_ = true;
  blocking_until_ = heap_.empty() ? Clock::time_point::max() : heap_.front()->deadline;
  return blocking_until_;
}

void TimerQueue::end_blocking() noexcept {
  std::lock_guard guard(lock_);
  blocking_ = false;
}

void TimerQueue::publish_earliest() noexcept {
  earliest_.store(heap_.empty() ? kNone : heap_.front()->deadline.time_since_epoch().count(),
                  std::memory_order_relaxed);
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
