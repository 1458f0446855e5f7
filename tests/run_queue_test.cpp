// The run queue on its own: the owner pushes and pops while thieves steal
// half at a time. Every item must come out exactly once.
#include "sched/run_queue.h"

#include <atomic>
#include <thread>
#include <vector>

#include "test_support.h"

namespace weft::detail {
namespace {

struct Item {
  std::atomic<int> seen{0};
  bool pinned = false;
};

using Queue = RunQueue<Item*>;

TEST(RunQueue, PushPopFifo) {
  Queue q;
  auto owner = q.owner();
  std::vector<Item> items(10);
  for (auto& item : items) ASSERT_TRUE(owner.push(&item));
  for (auto& item : items) EXPECT_EQ(owner.pop(), &item);
  EXPECT_EQ(owner.pop(), nullptr);
}

TEST(RunQueue, FullRingRefusesAndTakeHalfMakesRoom) {
  Queue q;
  auto owner = q.owner();
  std::vector<Item> items(Queue::capacity + 1);
  for (std::uint32_t i = 0; i < Queue::capacity; ++i) ASSERT_TRUE(owner.push(&items[i]));
  EXPECT_FALSE(owner.push(&items[Queue::capacity]));
  Item* half[Queue::capacity / 2];
  EXPECT_EQ(owner.take_half(half), Queue::capacity / 2);
  EXPECT_EQ(half[0], &items[0]);  // the older half
  EXPECT_TRUE(owner.push(&items[Queue::capacity]));
  EXPECT_EQ(q.size(), Queue::capacity / 2 + 1);
}

TEST(RunQueue, StealTakesHalfAndStopsAtPinned) {
  Queue victim, thief_queue;
  auto owner = victim.owner();
  auto dst = thief_queue.owner();
  std::vector<Item> items(8);
  items[3].pinned = true;
  for (auto& item : items) owner.push(&item);
  auto can_take = [](Item* item) { return !item->pinned; };
  auto first = victim.thief().steal_into(dst, can_take);
  EXPECT_EQ(first.taken, 3u);  // half would be 4, but item 3 is pinned
  EXPECT_EQ(first.blocked, nullptr);
  auto second = victim.thief().steal_into(dst, can_take);
  EXPECT_EQ(second.taken, 0u);
  EXPECT_EQ(second.blocked, &items[3]);
  EXPECT_EQ(owner.pop(), &items[3]);  // the owner still runs it
}

// 10 million operations: the owner pushes and pops, three thieves steal
// into their own queues and drain them. Nothing lost, nothing duplicated.
TEST(RunQueue, ConcurrentStealsLoseAndDuplicateNothing) {
  const std::uint64_t total = test::scaled(10'000'000) / 2;  // a push and a pop (or steal) each
  std::vector<Item> items(total);
  Queue q;
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> consumed{0};

  auto consume = [&](Item* item) {
    item->seen.fetch_add(1, std::memory_order_relaxed);
    consumed.fetch_add(1, std::memory_order_relaxed);
  };
  std::vector<std::thread> thieves;
  for (int t = 0; t < 3; ++t) {
    thieves.emplace_back([&] {
      Queue mine;
      auto dst = mine.owner();
      while (!done.load(std::memory_order_acquire) || q.size() > 0) {
        auto result = q.thief().steal_into(dst, [](Item*) { return true; });
        if (result.taken == 0) std::this_thread::yield();
        while (Item* item = dst.pop()) consume(item);
      }
    });
  }
  auto owner = q.owner();
  std::uint64_t next = 0;
  while (next < total) {
    if (owner.push(&items[next])) ++next;
    if (next % 3 == 0) {
      if (Item* item = owner.pop()) consume(item);
    }
  }
  while (Item* item = owner.pop()) consume(item);
  done.store(true, std::memory_order_release);
  for (auto& thief : thieves) thief.join();

  EXPECT_EQ(consumed.load(), total);
  std::uint64_t wrong = 0;
  for (auto& item : items) wrong += item.seen.load() != 1;
  EXPECT_EQ(wrong, 0u);
}

}  // namespace
}  // namespace weft::detail
