// TimerQueue: deadlines for sleeping fibers and for the timeouts of every
// sync primitive, fired by one thread per scheduler that sleeps until the
// earliest deadline (no busy waiting, no polling).
//
// Nodes are intrusive and owned by the caller (they live in the parked
// fiber's frame). The fire callback runs under the queue's lock, which is
// what lets cancel() promise: once it returns, the node is not touched.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <thread>
#include <vector>

#include "futex.h"

namespace weft::detail {

struct TimerNode {
  Clock::time_point deadline;
  // Runs on the timer thread, under the queue's lock, at or after deadline.
  // It must not arm or cancel timers.
  void (*fire)(TimerNode& node) = nullptr;
  void* context = nullptr;
  std::size_t heap_index = npos;
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
};

class TimerQueue {
 public:
  TimerQueue() = default;
  TimerQueue(const TimerQueue&) = delete;
  TimerQueue& operator=(const TimerQueue&) = delete;
  ~TimerQueue() { stop(); }

  void start();
  void stop();

  void arm(TimerNode& node);
  // True if the node was removed before it fired.
  bool cancel(TimerNode& node);
  std::size_t size() const;

 private:
  void run();
  void sift_up(std::size_t index);
  void sift_down(std::size_t index);
  void swap_nodes(std::size_t a, std::size_t b);
  void remove_at(std::size_t index);

  mutable std::mutex lock_;
  std::condition_variable changed_;
  std::vector<TimerNode*> heap_;  // min-heap on deadline
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace weft::detail
