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

// The newest is held for the owner from its push until a pop or release.
TEST(SpawnDeque, ThiefLeavesTheHeldNewestUntilReleased) {
  Deque d;
  int a = 0, b = 0;
  d.push(&a);
  EXPECT_TRUE(d.held());
  EXPECT_FALSE(d.stealable());
  EXPECT_EQ(d.steal(), nullptr);  // only one, held: the owner's
  d.push(&b);
  EXPECT_TRUE(d.stealable());
  EXPECT_EQ(d.steal(), &a);
  EXPECT_EQ(d.steal(), nullptr);  // b is held
  EXPECT_TRUE(d.stealable(/*take_held=*/true));
  d.release();
  EXPECT_FALSE(d.held());
  EXPECT_TRUE(d.stealable());
  EXPECT_EQ(d.steal(), &b);
  EXPECT_EQ(d.size(), 0);
}

TEST(SpawnDeque, StuckOwnersHeldNewestMayBeTaken) {
  Deque d;
  int a = 0;
  d.push(&a);
  EXPECT_EQ(d.steal(/*take_held=*/true), &a);
  EXPECT_EQ(d.pop(), nullptr);
}

// A pop takes the held newest; what is left below it is not held, or a
// thief would leave it to an owner that is about to run something else.
TEST(SpawnDeque, PopEndsTheHold) {
  Deque d;
  int a = 0, b = 0;
  d.push(&a);
  d.push(&b);
  EXPECT_EQ(d.pop(), &b);
  EXPECT_FALSE(d.held());
  EXPECT_TRUE(d.stealable());
  EXPECT_EQ(d.steal(), &a);
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
