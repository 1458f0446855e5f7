// The next slot: its owner puts and takes with plain stores while another
// thread seizes (sysmon's hand-off). Each fiber comes out exactly once.
#include "sched/next_slot.h"

#include <atomic>
#include <thread>
#include <vector>

#include "test_support.h"

namespace weft::detail {
namespace {

FiberControl* fake(std::uintptr_t n) { return reinterpret_cast<FiberControl*>(n * 16); }

TEST(NextSlot, PutDisplacesAndTakeEmpties) {
  NextSlot slot;
  EXPECT_TRUE(slot.empty());
  EXPECT_EQ(slot.put(fake(1)), nullptr);
  EXPECT_EQ(slot.put(fake(2)), fake(1));
  EXPECT_FALSE(slot.empty());
  EXPECT_EQ(slot.take(), fake(2));
  EXPECT_EQ(slot.take(), nullptr);
}

TEST(NextSlot, SeizeTakesWhatTheOwnerLeft) {
  if (!heavy_fence_available()) GTEST_SKIP() << "no expedited membarrier here: sysmon does without seizing";
  NextSlot slot;
  EXPECT_EQ(slot.seize(), nullptr);
  slot.put(fake(7));
  EXPECT_EQ(slot.seize(), fake(7));
  EXPECT_TRUE(slot.empty());
}

// The owner cycles values through the slot; a seizer takes what it can.
// Every value ends up with exactly one of them.
TEST(NextSlot, ConcurrentSeizesLoseAndDuplicateNothing) {
  if (!heavy_fence_available()) GTEST_SKIP() << "no expedited membarrier here";
  const std::uintptr_t total = test::scaled(200'000);
  std::vector<std::atomic<int>> seen(total + 1);
  NextSlot slot;
  std::atomic<bool> done{false};
  std::thread seizer([&] {
    while (!done.load(std::memory_order_acquire)) {
      if (FiberControl* f = slot.seize()) seen[reinterpret_cast<std::uintptr_t>(f) / 16].fetch_add(1);
      std::this_thread::yield();
    }
  });
  for (std::uintptr_t i = 1; i <= total; ++i) {
    if (FiberControl* displaced = slot.put(fake(i)))
      seen[reinterpret_cast<std::uintptr_t>(displaced) / 16].fetch_add(1);
    if (i % 3 == 0) {
      if (FiberControl* f = slot.take()) seen[reinterpret_cast<std::uintptr_t>(f) / 16].fetch_add(1);
    }
  }
  done.store(true, std::memory_order_release);
  seizer.join();
  if (FiberControl* f = slot.take()) seen[reinterpret_cast<std::uintptr_t>(f) / 16].fetch_add(1);
  int wrong = 0;
  for (std::uintptr_t i = 1; i <= total; ++i) wrong += seen[i].load() != 1;
  EXPECT_EQ(wrong, 0);
}

}  // namespace
}  // namespace weft::detail
