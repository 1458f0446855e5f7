// Who holds what a fiber waits on (FiberSnapshot::held_by_fiber and
// held_by_thread, sched/wait_owner.h), and weft-dump's deadlock report
// built from those edges.
#include <unistd.h>
#include <weft/weft.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "dump_support.h"
#include "dump_text.h"
#include "test_support.h"

namespace weft {
namespace {

using namespace dump_test;

const FiberSnapshot* named(const SchedulerSnapshot& snap, const std::string& name) {
  for (const FiberSnapshot& f : snap.fibers)
    if (f.name == name) return &f;
  return nullptr;
}

// Until every fiber named in `names` is parked with a wait; bounded.
template <class... Names>
SchedulerSnapshot parked_snapshot(Scheduler& sched, Names... names) {
  const auto give_up = std::chrono::steady_clock::now() + 30s;
  for (;;) {
    SchedulerSnapshot snap = sched.snapshot();
    const bool all = ((named(snap, names) != nullptr && named(snap, names)->park_state == -1 &&
                       !named(snap, names)->wait_kind.empty()) &&
                      ...);
    if (all || std::chrono::steady_clock::now() > give_up) return snap;
    std::this_thread::sleep_for(1ms);
  }
}

// A weft::Mutex held by a fiber and one held by a plain thread; a join.
TEST(DumpOwners, NamesTheHolderOfAMutexAndTheFiberAJoinWaitsFor) {
  Scheduler sched{test::config_with(2)};
  Mutex by_fiber, by_thread;
  Latch locked(1), release(1);
  by_thread.lock();  // this plain thread holds it
  Fiber holder = sched.spawn({.name = "holder"}, [&] {
    std::lock_guard guard(by_fiber);
    locked.count_down();
    release.wait();
  });
  locked.wait();
  Fiber waiter = sched.spawn({.name = "waiter"}, [&] { std::lock_guard guard(by_fiber); });
  Fiber thread_waiter = sched.spawn({.name = "thread-waiter"}, [&] { std::lock_guard guard(by_thread); });
  Fiber joiner = sched.spawn({.name = "joiner"}, [&] { holder.join(); });
  const SchedulerSnapshot snap = parked_snapshot(sched, "waiter", "thread-waiter", "joiner");
  const auto answer = tools::request_dump(::getpid(), "dump", 30s);
  release.count_down();
  by_thread.unlock();
  joiner.join();
  waiter.join();
  thread_waiter.join();

  const FiberSnapshot* h = named(snap, "holder");
  ASSERT_NE(h, nullptr);
  ASSERT_NE(named(snap, "waiter"), nullptr);
  EXPECT_EQ(named(snap, "waiter")->wait_kind, "weft::Mutex");
  EXPECT_EQ(named(snap, "waiter")->held_by_fiber, h->id);
  EXPECT_EQ(named(snap, "waiter")->held_by_thread, 0);
  EXPECT_EQ(named(snap, "thread-waiter")->held_by_fiber, 0u);
  EXPECT_EQ(named(snap, "thread-waiter")->held_by_thread, static_cast<int>(::gettid()));
  EXPECT_EQ(named(snap, "joiner")->wait_kind, "weft::Fiber");
  EXPECT_EQ(named(snap, "joiner")->held_by_fiber, h->id);
  // Nobody holds a latch: no owner.
  EXPECT_EQ(h->held_by_fiber, 0u);
  EXPECT_EQ(h->held_by_thread, 0);

  // The same through weft-dump's JSON and text.
  const Json json = Json::parse(answer.text);
  const Json* waiter_json = find_fiber(json, "waiter");
  ASSERT_NE(waiter_json, nullptr);
  EXPECT_EQ((*waiter_json)["wait"]["held_by_fiber"].get<std::uint64_t>(), h->id);
  const std::string text = tools::render_dump_text(answer.snapshot);
  const std::string by_holder = " (held by fiber #" + std::to_string(h->id) + " \"holder\") for ";
  EXPECT_NE(fiber_block(text, "waiter").find("(lock)" + by_holder), std::string::npos) << text;
  EXPECT_NE(fiber_block(text, "joiner").find("(join)" + by_holder), std::string::npos) << text;
  EXPECT_NE(fiber_block(text, "thread-waiter").find("(lock) (held by thread " + std::to_string(::gettid()) + ") for "),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace weft
