// The spawn deque on its own: the owner pushes and pops newest first while
// thieves take the oldest. Every item must come out exactly once.
#include "sched/spawn_deque.h"

#include <atomic>
#include <thread>
#include <vector>

#include "test_support.h"

namespace weft::detail {
namespace {

using Deque = SpawnDeque<int*, 16>;

TEST(SpawnDeque, OwnerPopsNewestThiefStealsOldest) {
  Deque d;
  int items[4] = {};
  for (int& item : items) ASSERT_TRUE(d.push(&item));
  EXPECT_EQ(d.size(), 4);
  EXPECT_EQ(d.steal(), &items[0]);
  EXPECT_EQ(d.pop(), &items[3]);
  EXPECT_EQ(d.pop(), &items[2]);
  EXPECT_EQ(d.steal(), &items[1]);
  EXPECT_EQ(d.pop(), nullptr);
  EXPECT_EQ(d.steal(), nullptr);
  EXPECT_EQ(d.size(), 0);
}

TEST(SpawnDeque, ThiefLeavesTheNewestWhenAsked) {
  Deque d;
  int a = 0, b = 0;
  d.push(&a);
  EXPECT_EQ(d.steal(1), nullptr);  // only one: the owner's
  d.push(&b);
  EXPECT_EQ(d.steal(1), &a);
  EXPECT_EQ(d.steal(1), nullptr);
  EXPECT_EQ(d.steal(0), &b);
}

TEST(SpawnDeque, FullDequeRefusesUntilSomethingIsTaken) {
  Deque d;
  std::vector<int> items(Deque::capacity + 1);
  for (std::int64_t i = 0; i < Deque::capacity; ++i) ASSERT_TRUE(d.push(&items[i]));
  EXPECT_FALSE(d.push(&items[Deque::capacity]));
  EXPECT_EQ(d.steal(), &items[0]);
  EXPECT_TRUE(d.push(&items[Deque::capacity]));
  EXPECT_EQ(d.pop(), &items[Deque::capacity]);
}

// The owner pushes and pops (often down to the last item, where it races
// the thieves on the top); three thieves steal. Nothing lost, nothing
// taken twice.
TEST(SpawnDeque, ConcurrentStealsLoseAndDuplicateNothing) {
  const int total = static_cast<int>(test::scaled(2'000'000));
  std::vector<std::atomic<int>> seen(total);
  SpawnDeque<std::atomic<int>*, 64> d;
  std::atomic<bool> done{false};
  std::atomic<int> consumed{0};
  auto consume = [&](std::atomic<int>* item) {
    item->fetch_add(1, std::memory_order_relaxed);
    consumed.fetch_add(1, std::memory_order_relaxed);
  };
  std::vector<std::thread> thieves;
  for (int t = 0; t < 3; ++t) {
    thieves.emplace_back([&] {
      while (!done.load(std::memory_order_acquire) || d.size() > 0) {
        if (auto* item = d.steal())
          consume(item);
        else
          std::this_thread::yield();
      }
    });
  }
  int next = 0;
  while (next < total) {
    if (d.push(&seen[next])) ++next;
    if (next % 2 == 0) {
      if (auto* item = d.pop()) consume(item);
    }
  }
  while (auto* item = d.pop()) consume(item);
  done.store(true, std::memory_order_release);
  for (auto& thief : thieves) thief.join();

  EXPECT_EQ(consumed.load(), total);
  int wrong = 0;
  for (auto& s : seen) wrong += s.load() != 1;
  EXPECT_EQ(wrong, 0);
}

}  // namespace
}  // namespace weft::detail
