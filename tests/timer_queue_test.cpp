// TimerQueue (sched/timers.h) against a model: after any mix of arms and
// cancels its earliest deadline is the model's, and run_due fires exactly
// the due nodes, earliest first.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "sched/timers.h"

namespace weft::detail {
namespace {

using namespace std::chrono_literals;

struct Recorded {
  TimerNode node;
  std::vector<const TimerNode*>* fired = nullptr;
};

void record_firing(TimerNode& node) {
  auto* recorded = static_cast<Recorded*>(node.context);
  recorded->fired->push_back(&node);
}

TEST(TimerQueue, RandomArmsAndCancelsKeepTheEarliestAndFireInOrder) {
  std::mt19937 random(20261201);
  for (int round = 0; round < 20; ++round) {
    TimerQueue queue;
    std::vector<const TimerNode*> fired;
    std::vector<Recorded> timers(600);
    // (deadline, index) of the armed ones; all deadlines are in the past,
    // so that run_due at the end fires every node still armed.
    std::set<std::pair<Clock::time_point, std::size_t>> armed;
    const Clock::time_point base = Clock::now() - 1h;
    std::uniform_int_distribution<int> offset_ms(0, 1000);  // repeats on purpose: equal deadlines
    for (int step = 0; step < 3000; ++step) {
      const std::size_t i = random() % timers.size();
      Recorded& t = timers[i];
      if (t.node.heap_index == TimerNode::npos) {
        t.node.deadline = base + std::chrono::milliseconds(offset_ms(random));
        t.node.fire = record_firing;
        t.node.context = &t;
        t.fired = &fired;
        (void)queue.arm(t.node);
        armed.insert({t.node.deadline, i});
      } else {
        ASSERT_TRUE(queue.cancel(t.node));
        armed.erase({t.node.deadline, i});
        EXPECT_EQ(t.node.heap_index, TimerNode::npos);
      }
      ASSERT_EQ(queue.size(), armed.size());
      if (armed.empty())
        ASSERT_FALSE(queue.armed());
      else
        ASSERT_EQ(queue.earliest(), armed.begin()->first) << "after step " << step;
    }
    EXPECT_EQ(queue.run_due(), armed.size());
    ASSERT_EQ(fired.size(), armed.size());
    for (std::size_t k = 1; k < fired.size(); ++k) EXPECT_LE(fired[k - 1]->deadline, fired[k]->deadline);
    for (const auto& [deadline, i] : armed) {
      EXPECT_NE(std::find(fired.begin(), fired.end(), &timers[i].node), fired.end());
      EXPECT_FALSE(queue.cancel(timers[i].node)) << "a fired node is not armed";
    }
    EXPECT_EQ(queue.size(), 0u);
  }
}

TEST(TimerQueue, RunDueLeavesTheFutureOnes) {
  TimerQueue queue;
  std::vector<const TimerNode*> fired;
  Recorded past, future;
  for (Recorded* t : {&past, &future}) {
    t->node.fire = record_firing;
    t->node.context = t;
    t->fired = &fired;
  }
  past.node.deadline = Clock::now() - 1s;
  future.node.deadline = Clock::now() + 1h;
  (void)queue.arm(future.node);
  (void)queue.arm(past.node);
  EXPECT_EQ(queue.run_due(), 1u);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0], &past.node);
  EXPECT_EQ(queue.earliest(), future.node.deadline);
  EXPECT_TRUE(queue.cancel(future.node));
}

}  // namespace
}  // namespace weft::detail
