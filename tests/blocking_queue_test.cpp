// weft::BlockingQueue: FIFO, timeouts, close, hand-off races, and a stress
// test in which every item put is taken exactly once.
#include <weft/weft.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "sync_support.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::Caller;
using test::completes_within;

class BlockingQueueTest : public test::SyncTest {};

TEST(BlockingQueue, RejectsZeroCapacity) { EXPECT_THROW(BlockingQueue<int>{0}, std::invalid_argument); }

TEST(BlockingQueue, NonBlockingCallsAndCapacity) {
  BlockingQueue<int> q{2};
  EXPECT_EQ(q.capacity(), 2u);
  EXPECT_TRUE(q.offer(1));
  EXPECT_TRUE(q.offer(2));
  EXPECT_FALSE(q.offer(3));  // full
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(q.poll(), 1);
  EXPECT_EQ(q.poll(), 2);
  EXPECT_EQ(q.poll(), std::nullopt);  // empty
  EXPECT_EQ(BlockingQueue<int>{}.capacity(), BlockingQueue<int>::unbounded);
}

TEST(BlockingQueue, MoveOnlyItemsAreNeverLost) {
  BlockingQueue<std::unique_ptr<int>> q{1};
  q.put(std::make_unique<int>(1));
  auto second = std::make_unique<int>(2);
  EXPECT_FALSE(q.offer(std::move(second)));
  ASSERT_NE(second, nullptr);  // refused: still ours
  EXPECT_FALSE(q.put_for(std::move(second), 1ms));
  ASSERT_NE(second, nullptr);
  q.close();
  EXPECT_THROW(q.put(std::move(second)), QueueClosed);
  ASSERT_NE(second, nullptr);  // closed: still ours
  EXPECT_EQ(*q.take(), 1);
}

TEST(BlockingQueue, DrainTo) {
  BlockingQueue<int> q;
  for (int i = 0; i < 10; ++i) q.put(i);
  std::vector<int> out;
  EXPECT_EQ(q.drain_to(std::back_inserter(out), 4), 4u);
  EXPECT_EQ(q.drain_to(std::back_inserter(out)), 6u);
  std::vector<int> expected(10);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(out, expected);
}

// An item whose copy and move throw while its value is the poisoned one.
struct Fragile {
  static inline std::atomic<int> poisoned{-1};
  int value = 0;
  explicit Fragile(int v) : value(v) {}
  Fragile(const Fragile& other) : value(other.value) { check(); }
  Fragile(Fragile&& other) : value(other.value) { check(); }
  Fragile& operator=(const Fragile& other) {
    value = other.value;
    check();
    return *this;
  }
  Fragile& operator=(Fragile&& other) {
    value = other.value;
    check();
    return *this;
  }
  void check() const {
    if (value == poisoned.load()) throw std::runtime_error("Fragile: copy or move throws");
  }
};

struct Unpoison {
  ~Unpoison() { Fragile::poisoned.store(-1); }
};

// Before every path held the queue's lock through RAII, each of these left
// the lock held and the next call hung (caught by completes_within).
TEST(BlockingQueue, AnItemThatThrowsOnTheWayInOrOutLeavesTheQueueUsable) {
  Unpoison unpoison;
  BlockingQueue<Fragile> q{4};
  q.put(Fragile{1});
  Fragile::poisoned.store(2);
  EXPECT_THROW(q.put(Fragile{2}), std::runtime_error);
  completes_within(
      30s,
      [&] {
        EXPECT_THROW((void)q.offer(Fragile{2}), std::runtime_error);
        EXPECT_EQ(q.size(), 1u);
        q.put(Fragile{3});
        Fragile::poisoned.store(1);
        EXPECT_THROW((void)q.poll(), std::runtime_error);  // moving 1 out throws
        Fragile::poisoned.store(-1);
        EXPECT_EQ(q.take().value, 1);  // still there
        EXPECT_EQ(q.take().value, 3);
        EXPECT_EQ(q.size(), 0u);
      },
      "a call after a throwing put");
}

TEST(BlockingQueue, AGrowthThatThrowsKeepsEveryItem) {
  Unpoison unpoison;
  BlockingQueue<Fragile> q;
  for (int i = 0; i < 8; ++i) q.put(Fragile{i});  // the ring's first 8 slots
  // The 9th grows the ring, which copies each item (their move may throw):
  // copying item 5 throws.
  Fragile::poisoned.store(5);
  EXPECT_THROW(q.put(Fragile{8}), std::runtime_error);
  Fragile::poisoned.store(-1);
  completes_within(
      30s,
      [&] {
        EXPECT_EQ(q.size(), 8u);
        q.put(Fragile{8});
        for (int i = 0; i <= 8; ++i) EXPECT_EQ(q.take().value, i);
      },
      "a call after a growth that threw");
}

// The ring's buffer comes from the aligned operator new; this binary's
// replacement fails it on demand.
std::atomic<bool> fail_aligned_new{false};

TEST(BlockingQueue, BadAllocWhileGrowingLeavesTheQueueUsable) {
  BlockingQueue<int> q;
  for (int i = 0; i < 8; ++i) q.put(i);
  fail_aligned_new.store(true);
  EXPECT_THROW(q.put(8), std::bad_alloc);
  fail_aligned_new.store(false);
  completes_within(
      30s,
      [&] {
        EXPECT_EQ(q.size(), 8u);
        q.put(8);
        for (int i = 0; i <= 8; ++i) EXPECT_EQ(q.take(), i);
      },
      "a call after std::bad_alloc");
}

// A taker that was to be handed an item whose move threw keeps waiting and
// gets the next item; the put that threw reports it.
TEST_P(BlockingQueueTest, AHandOffThatThrowsKeepsTheTakerWaiting) {
  Unpoison unpoison;
  BlockingQueue<Fragile> q;
  std::atomic<int> got{0};
  completes_within(
      60s,
      [&] {
        run_callers({[&] { got.store(q.take().value); },
                     [&] {
                       this_fiber::sleep_for(10ms);  // the taker waits, most likely
                       Fragile::poisoned.store(1);
                       EXPECT_THROW(q.put(Fragile{1}), std::runtime_error);
                       Fragile::poisoned.store(-1);
                       q.put(Fragile{2});
                     }});
      },
      "the taker after a throwing hand-off");
  EXPECT_EQ(got.load(), 2);
  EXPECT_EQ(q.size(), 0u);
}

// A putter waiting for room whose item throws as a take moves it in: that
// putter's put throws, the take gets its item, and the queue goes on.
TEST_P(BlockingQueueTest, AWaitingPutterWhoseItemThrowsFailsItsOwnPut) {
  Unpoison unpoison;
  BlockingQueue<Fragile> q{1};
  q.put(Fragile{1});
  Fragile::poisoned.store(2);
  std::atomic<int> taken{0};
  completes_within(
      60s,
      [&] {
        run_callers({[&] { EXPECT_THROW(q.put(Fragile{2}), std::runtime_error); },
                     [&] {
                       this_fiber::sleep_for(10ms);  // the putter waits, most likely
                       taken.store(q.take().value);
                     }});
        Fragile::poisoned.store(-1);
        q.put(Fragile{3});
        EXPECT_EQ(q.take().value, 3);
      },
      "the queue after a putter's item threw");
  EXPECT_EQ(taken.load(), 1);
  EXPECT_EQ(q.size(), 0u);
}

// Destroying a queue that callers wait on left them parked on freed
// memory, silently; now it aborts naming the queue, the caller and them.
TEST(BlockingQueueDeathTest, DestroyedWhileWaitedOnAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Scheduler s{test::config_with(2)};
        auto* q = new BlockingQueue<int>;
        s.spawn({.name = "taker"}, [q] { (void)q->take(); }).detach();
        if (!test::wait_until_parked_on(s, "weft::BlockingQueue")) std::_Exit(2);
        delete q;
      },
      "weft::BlockingQueue@0x[0-9a-f]+ destroyed by thread [0-9]+ while 1 caller\\(s\\) wait on it: fiber "
      "\"taker\" #[0-9]+");
}

TEST_P(BlockingQueueTest, FifoAcrossAProducerAndAConsumer) {
  BlockingQueue<int> q{8};
  std::vector<int> got;
  run_callers({[&] {
                 for (int i = 0; i < 10'000; ++i) q.put(i);
               },
               [&] {
                 for (int i = 0; i < 10'000; ++i) got.push_back(q.take());
               }});
  ASSERT_EQ(got.size(), 10'000u);
  for (int i = 0; i < 10'000; ++i) ASSERT_EQ(got[i], i);
}

TEST_P(BlockingQueueTest, TimeoutsFailWhenNothingArrivesAndSucceedWhenSomethingDoes) {
  BlockingQueue<int> q{1};
  run_one([&] {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(q.poll_for(3ms), std::nullopt);
    EXPECT_GE(std::chrono::steady_clock::now() - start, 3ms);
    EXPECT_TRUE(q.offer_for(1, 1ms));
    EXPECT_FALSE(q.put_for(2, 2ms));  // full
  });
  EXPECT_EQ(q.take(), 1);
  std::atomic<bool> waiting{false};
  run_callers({[&] {
                 waiting.store(true);
                 EXPECT_EQ(q.take_for(10s), 42);
               },
               [&] {
                 while (!waiting.load()) this_fiber::yield();
                 this_fiber::sleep_for(1ms);
                 q.put(42);
               }});
}

TEST_P(BlockingQueueTest, CloseWakesWaitersAndDrainsFirst) {
  BlockingQueue<int> q{2};
  std::atomic<int> closed_takers{0};
  std::vector<std::function<void()>> takers(3, [&] {
    try {
      q.take();
    } catch (const QueueClosed&) {
      closed_takers.fetch_add(1);
    }
  });
  takers.push_back([&] {
    this_fiber::sleep_for(2ms);
    q.close();
  });
  run_callers(takers);
  EXPECT_EQ(closed_takers.load(), 3);

  BlockingQueue<int> full{1};
  full.put(7);
  std::atomic<int> closed_putters{0};
  run_callers({[&] {
                 try {
                   full.put(8);  // parks: full
                 } catch (const QueueClosed&) {
                   closed_putters.fetch_add(1);
                 }
               },
               [&] {
                 this_fiber::sleep_for(2ms);
                 full.close();
               }});
  EXPECT_EQ(closed_putters.load(), 1);
  EXPECT_EQ(full.take(), 7);               // drains what is left...
  EXPECT_THROW(full.take(), QueueClosed);  // ...then reports closed
  EXPECT_THROW(full.poll(), QueueClosed);
  EXPECT_THROW(full.offer(1), QueueClosed);
}

// close() wakes every waiter, and the queue may be destroyed once it has
// returned: a woken taker or putter throws QueueClosed without touching
// it again. Before, each re-locked the freed queue to find it closed (a
// use after free, which AddressSanitizer reports here).
TEST(BlockingQueue, MayBeDestroyedOnceCloseHasReturned) {
  Scheduler sched{test::config_with(2)};
  for (const bool putter : {false, true}) {
    SCOPED_TRACE(putter ? "a waiting putter" : "a waiting taker");
    auto* queue = new BlockingQueue<int>(1);
    if (putter) queue->put(1);
    std::atomic<bool> closed{false};
    Fiber waiter = sched.spawn([&, queue, putter] {
      try {
        if (putter)
          queue->put(2);
        else
          (void)queue->take();
      } catch (const QueueClosed&) {
        closed = true;
      }
    });
    ASSERT_TRUE(test::wait_until_parked_on(sched, "weft::BlockingQueue"));
    queue->close();
    delete queue;
    waiter.join();
    EXPECT_TRUE(closed.load());
  }
}

// poll_for's timeout against a put in a tight loop: each item is taken
// exactly once, whether the taker timed out first or not.
TEST_P(BlockingQueueTest, TimeoutRacesPutWithoutLostOrDuplicatedItems) {
  const int rounds = static_cast<int>(test::scaled(100'000));
  BlockingQueue<int> q;
  std::atomic<int> started{-1};
  std::vector<int> seen(rounds, 0);
  run_callers({[&] {
                 int next = 0;
                 for (int i = 0; i < rounds; ++i) {
                   started.store(i);
                   if (auto v = q.poll_for(std::chrono::microseconds(i % 20))) ++seen[*v], ++next;
                 }
                 while (next < rounds) ++seen[q.take()], ++next;
               },
               [&] {
                 for (int i = 0; i < rounds; ++i) {
                   while (started.load() < i) this_fiber::yield();
                   q.put(i);
                 }
               }});
  for (int i = 0; i < rounds; ++i) ASSERT_EQ(seen[i], 1) << "item " << i;
}

// 4 producers and 4 consumers, half fibers and half threads, through a
// bounded queue of 64: the count and the sum taken equal what was put.
TEST_P(BlockingQueueTest, StressMixedFibersAndThreads) {
  if (caller() == Caller::thread) GTEST_SKIP() << "mixes both kinds itself";
  const std::uint64_t total = test::scaled(10'000'000);
  const std::uint64_t per_producer = total / 4;
  BlockingQueue<std::uint64_t> q{64};
  std::atomic<std::uint64_t> taken{0}, sum{0};
  auto producer = [&](std::uint64_t first) {
    return [&, first] {
      for (std::uint64_t i = 0; i < per_producer; ++i) q.put(first + i);
    };
  };
  auto consumer = [&] {
    std::uint64_t local_count = 0, local_sum = 0;
    try {
      for (;;) {
        local_sum += q.take();
        ++local_count;
      }
    } catch (const QueueClosed&) {
    }
    taken.fetch_add(local_count);
    sum.fetch_add(local_sum);
  };
  std::vector<Fiber> fibers;
  std::vector<std::thread> threads;
  for (int p = 0; p < 4; ++p) {
    if (p % 2 == 0)
      fibers.push_back(sched().spawn(producer(p * per_producer)));
    else
      threads.emplace_back(producer(p * per_producer));
  }
  std::vector<Fiber> consumer_fibers;
  std::vector<std::thread> consumer_threads;
  for (int c = 0; c < 4; ++c) {
    if (c % 2 == 0)
      consumer_fibers.push_back(sched().spawn(consumer));
    else
      consumer_threads.emplace_back(consumer);
  }
  for (auto& f : fibers) f.join();
  for (auto& t : threads) t.join();
  q.close();
  for (auto& f : consumer_fibers) f.join();
  for (auto& t : consumer_threads) t.join();
  const std::uint64_t n = per_producer * 4;
  EXPECT_EQ(taken.load(), n);
  EXPECT_EQ(sum.load(), n * (n - 1) / 2);
}

WEFT_SYNC_PARAMS(BlockingQueueTest);

}  // namespace
}  // namespace weft

// The replacement behind BadAllocWhileGrowingLeavesTheQueueUsable. GCC
// takes free() of what operator new returned for a mismatch; here both are
// ours, and both use the malloc family.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t size, std::align_val_t align) {
  if (weft::fail_aligned_new.load()) throw std::bad_alloc();
  const std::size_t a =
      static_cast<std::size_t>(align) < sizeof(void*) ? sizeof(void*) : static_cast<std::size_t>(align);
  void* p = std::aligned_alloc(a, (size + a - 1) / a * a);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
