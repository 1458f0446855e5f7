#include "timers.h"

namespace weft::detail {

TimerQueue::ArmWake TimerQueue::arm(TimerNode& node) {
  std::lock_guard guard(lock_);
  heap_.push_back({});
  sift_up(heap_.size() - 1, {node.deadline.time_since_epoch().count(), &node});
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
  while (!heap_.empty() && heap_.front().deadline <= now.time_since_epoch().count()) {
    TimerNode* first = heap_.front().node;
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
  blocking_until_ = heap_.empty() ? Clock::time_point::max() : heap_.front().node->deadline;
  return blocking_until_;
}

void TimerQueue::end_blocking() noexcept {
  std::lock_guard guard(lock_);
  blocking_ = false;
}

void TimerQueue::publish_earliest() noexcept {
  earliest_.store(heap_.empty() ? kNone : heap_.front().deadline, std::memory_order_relaxed);
}

void TimerQueue::place(std::size_t index, const Entry& entry) noexcept {
  heap_[index] = entry;
  entry.node->heap_index = index;
}

// Both sifts move a hole instead of swapping: each entry passed is written
// once, and `moving` once, where it ends.
void TimerQueue::sift_up(std::size_t index, Entry moving) noexcept {
  while (index > 0) {
    const std::size_t parent = (index - 1) / kArity;
    if (!(moving.deadline < heap_[parent].deadline)) break;
    place(index, heap_[parent]);
    index = parent;
  }
  place(index, moving);
}

void TimerQueue::sift_down(std::size_t index, Entry moving) noexcept {
  const std::size_t size = heap_.size();
  for (;;) {
    const std::size_t first = kArity * index + 1;
    if (first >= size) break;
    const std::size_t end = first + kArity < size ? first + kArity : size;
    std::size_t smallest = first;
    for (std::size_t child = first + 1; child < end; ++child)
      if (heap_[child].deadline < heap_[smallest].deadline) smallest = child;
    if (!(heap_[smallest].deadline < moving.deadline)) break;
    place(index, heap_[smallest]);
    index = smallest;
  }
  place(index, moving);
}

void TimerQueue::remove_at(std::size_t index) noexcept {
  TimerNode* node = heap_[index].node;
  const Entry last = heap_.back();
  heap_.pop_back();
  if (index < heap_.size()) {
    // The last entry fills the hole, then moves whichever way it must.
    if (index > 0 && last.deadline < heap_[(index - 1) / kArity].deadline)
      sift_up(index, last);
    else
      sift_down(index, last);
  }
  node->heap_index = TimerNode::npos;
}

}  // namespace weft::detail
