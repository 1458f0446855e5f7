// The lock hooks (hooks/locks.h, docs/locks.md): std::mutex,
// std::recursive_mutex, std::timed_mutex, std::condition_variable and
// std::shared_mutex (pthread mutexes, condition variables and rwlocks) park
// a fiber that must wait, keep glibc's semantics for fibers and plain
// threads alike, and work across both kinds at once.
//
// Tests that a fiber parked instead of blocking its thread run on ONE worker
// with no spare workers: a blocked thread would keep the fiber that holds
// the lock from ever running, and completes_within() ends the test with a
// message instead of a hang.
#include <dlfcn.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <threads.h>
#include <unistd.h>
#include <weft/detail/spin_lock.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "sync_support.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::Caller;
using test::completes_within;
using test::scaled;

// ThreadSanitizer reports a misuse (an unlock of a mutex the caller does not
// hold, a relock by its owner) in its own interceptor, before the call
// reaches the hooks: under it, the calls that misuse on purpose to see the
// error glibc gives are left out (the other builds make them).
#ifdef WEFT_UNDER_TSAN
constexpr bool kMisuseIsReported = true;
#else
constexpr bool kMisuseIsReported = false;
#endif

// ThreadSanitizer's runtime takes its own locks (its thread registry, its
// shadow of a fiber's switch) and sleeps in futex(2) for them, in a worker
// as anywhere: sysmon sees a worker asleep in the kernel and starts a spare,
// as it should for any raw system call (docs/sysmon.md). So under TSan a
// bound on the process's threads has that much more room.
#ifdef WEFT_UNDER_TSAN
constexpr int kSanitizerThreads = 8;
#else
constexpr int kSanitizerThreads = 0;
#endif

Config one_worker_config() {
  Config config = test::config_with(1);
  config.max_threads = config.workers;  // no spare threads
  return config;
}

pid_t thread_id() { return static_cast<pid_t>(::syscall(SYS_gettid)); }

int os_threads() {
  int n = 0;
  for ([[maybe_unused]] const auto& task : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// The most OS threads the process had while it lived (sampled every ms),
// its own sampling thread not counted.
class ThreadWatch {
 public:
  ThreadWatch()
      : start_(os_threads()), sampler_([this] {
          while (!done_.load()) {
            const int now = os_threads() - 1;
            if (now > most_.load()) most_ = now;
            std::this_thread::sleep_for(1ms);
          }
        }) {}
  ~ThreadWatch() { stop(); }
  int most() {
    stop();
    return most_.load();
  }
  // The most threads the process had, counting of those alive at the start
  // only the calling one: the others (a sanitizer's own thread, a blocking
  // helper of an earlier test's scheduler still winding down) are not the
  // test's.
  int most_of_ours() { return most() - start_ + 1; }
  std::string describe() const {
    return "threads at the start: " + std::to_string(start_) + ", at most: " + std::to_string(most_.load());
  }

 private:
  void stop() {
    done_ = true;
    if (sampler_.joinable()) sampler_.join();
  }
  const int start_;
  std::atomic<bool> done_{false};
  std::atomic<int> most_{0};
  std::thread sampler_;
};

// pthread_mutex_init() with attributes, as `set` sets them on an attr.
template <class Set>
int init_mutex(pthread_mutex_t* mutex, Set set) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  set(&attr);
  const int result = pthread_mutex_init(mutex, &attr);
  pthread_mutexattr_destroy(&attr);
  return result;
}

// A condition variable made by glibc's pthread_cond_init with the
// attributes `set` gives them.
template <class Set>
int init_cond(pthread_cond_t* cond, Set set) {
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  set(&attr);
  const int result = pthread_cond_init(cond, &attr);
  pthread_condattr_destroy(&attr);
  return result;
}

void shared_cond(pthread_condattr_t* attr) { pthread_condattr_setpshared(attr, PTHREAD_PROCESS_SHARED); }

int init_mutex_of_type(pthread_mutex_t* mutex, int type) {
  return init_mutex(mutex, [type](pthread_mutexattr_t* attr) { pthread_mutexattr_settype(attr, type); });
}

// Runs `body` once as a fiber of `sched` or as a plain thread, and waits.
void run_as(Scheduler& sched, Caller caller, const std::function<void()>& body) {
  if (caller == Caller::fiber)
    sched.spawn(body).join();
  else
    std::thread(body).join();
}

std::string caller_name(const ::testing::TestParamInfo<Caller>& info) {
  return info.param == Caller::fiber ? "fiber" : "thread";
}

timespec realtime_after(std::chrono::nanoseconds delta) {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  const auto total = std::chrono::seconds(now.tv_sec) + std::chrono::nanoseconds(now.tv_nsec) + delta;
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(total);
  return {static_cast<time_t>(seconds.count()), static_cast<long>((total - seconds).count())};
}

timespec monotonic_after(std::chrono::nanoseconds delta) {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  const auto total = std::chrono::seconds(now.tv_sec) + std::chrono::nanoseconds(now.tv_nsec) + delta;
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(total);
  return {static_cast<time_t>(seconds.count()), static_cast<long>((total - seconds).count())};
}

// Moves the calling fiber to another worker of `sched` (which has two or
// more): it sleeps in weft (which, unlike a hooked call, does not pin it)
// while a fiber it spawned spins on its worker without a checkpoint, so that
// sysmon runs the overdue timer and an idle worker the fiber. Returns the
// thread it ended on.
pid_t move_to_another_worker(Scheduler& sched) {
  const pid_t start = thread_id();
  for (int attempt = 0; attempt < 20 && thread_id() == start; ++attempt) {
    auto woke = std::make_shared<std::atomic<bool>>(false);
    // Detached, not joined: a join would park and might bring us back.
    sched
        .spawn([woke] {
          // Bounded: a pinned fiber (expected not to move) waits for it
          // whenever it spins on that fiber's worker.
          const auto end = std::chrono::steady_clock::now() + 50ms;
          while (!woke->load() && std::chrono::steady_clock::now() < end) {
          }
        })
        .detach();
    this_fiber::sleep_for(1ms);
    woke->store(true);
  }
  return thread_id();
}

// A fiber of `sched` that first calls `prepare` (and keeps what it returns
// while it locks) locks a std::mutex this thread holds: it must block its
// thread, not park (no fiber shows waiting on the mutex).
template <class Prepare>
void expect_lock_blocks_the_thread(Scheduler& sched, Prepare prepare) {
  std::mutex mu;
  std::unique_lock held(mu);
  std::atomic<bool> started{false};
  Fiber waiter = sched.spawn([&] {
    [[maybe_unused]] const auto kept = prepare();
    started = true;
    std::lock_guard guard(mu);
  });
  while (!started.load()) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(20ms);
  for (const FiberSnapshot& f : sched.snapshot().fibers) EXPECT_NE(f.wait_kind, "std::mutex");
  held.unlock();
  waiter.join();
}

// --- a contended lock parks the fiber --------------------------------------

TEST(LockHooks, AContendedStdMutexParksTheFiberNotTheWorker) {
  completes_within(
      60s,
      [] {
        Scheduler sched(one_worker_config());
        std::mutex mu;
        std::atomic<int> stage{0};
        std::atomic<bool> other_looked{false};
        std::atomic<bool> release{false};
        bool other_ran_while_parked = false;
        Fiber holder = sched.spawn([&] {
          std::lock_guard guard(mu);
          stage = 1;
          // The lock goes back once this thread has seen the waiter
          // parked and `other` has looked (a fixed sleep let a worker held
          // off its CPU fire both fibers' timers together, the holder's
          // first).
          for (int ms = 0; ms < 40'000 && !release.load(); ++ms) this_fiber::sleep_for(1ms);
        });
        Fiber waiter = sched.spawn([&] {
          while (stage.load() == 0) this_fiber::yield();
          std::lock_guard guard(mu);  // parks until the holder lets go
          stage = 2;
        });
        Fiber other = sched.spawn([&] {
          while (stage.load() == 0) this_fiber::yield();
          this_fiber::sleep_for(10ms);
          other_ran_while_parked = stage.load() == 1;
          other_looked = true;
        });
        const bool parked = test::wait_until_parked_on(sched, "std::mutex");
        test::wait_until([&] { return other_looked.load(); });
        release = true;
        holder.join();
        waiter.join();
        other.join();
        EXPECT_TRUE(parked) << "the waiter did not park on the mutex";
        EXPECT_EQ(stage.load(), 2);
        EXPECT_TRUE(other_ran_while_parked);
      },
      "a contended std::mutex on one worker");
}

// A lock that is the last statement of a fiber's body, or of a pool's
// task, is a sibling call: the compiler jumps into pthread_mutex_lock, and
// the return address the hook sees is the caller's, inside libweft, which
// the lock hooks took for libweft's own call (hooks/locks.h) and blocked
// the thread with: on one worker without spares, for good (here until
// completes_within's bound). weft's headers now return into the user's
// frame (weft/detail/user_call.h).
// Each variant's mutex stays locked by the fiber that ended holding it
// (unlocked by another, TSan would report the misuse).
pthread_mutex_t body_mutex = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t task_mutex = PTHREAD_MUTEX_INITIALIZER;
void lock_body_mutex_last() { pthread_mutex_lock(&body_mutex); }
void lock_task_mutex_last() { pthread_mutex_lock(&task_mutex); }

TEST(LockHooks, ALockThatEndsAFibersBodyOrAPoolsTaskParks) {
  for (const bool pool : {false, true}) {
    completes_within(
        20s,
        [pool] {
          pthread_mutex_t* const mutex = pool ? &task_mutex : &body_mutex;
          Scheduler sched(one_worker_config());
          std::atomic<bool> held{false};
          Fiber holder = sched.spawn([&] {
            pthread_mutex_lock(mutex);
            held = true;
            this_fiber::sleep_for(50ms);  // the waiter parks meanwhile
            pthread_mutex_unlock(mutex);
          });
          while (!held.load()) std::this_thread::sleep_for(1ms);
          if (pool) {
            PoolOptions options;
            options.name = "last-statement";
            options.threads = 1;
            options.mode = RunMode::fibers;
            options.scheduler = &sched;
            Pool tasks(options);
            tasks.post(&lock_task_mutex_last);
            tasks.wait();
          } else {
            sched.spawn(&lock_body_mutex_last).join();
          }
          holder.join();
        },
        pool ? "a pool's task ending with a contended lock" : "a fiber's body ending with a contended lock");
  }
}

TEST(LockHooks, TheDumpShowsWhatAParkedFiberWaitsOn) {
  Scheduler sched(test::config_with(2));
  std::mutex mu;
  std::unique_lock held(mu);
  Fiber waiter = sched.spawn([&] { std::lock_guard guard(mu); });
  ASSERT_TRUE(test::wait_until_parked_on(sched, "std::mutex"));
  bool found = false;
  for (const FiberSnapshot& f : sched.snapshot().fibers) {
    if (f.wait_kind != "std::mutex") continue;
    found = true;
    EXPECT_EQ(f.wait_object, static_cast<const void*>(mu.native_handle()));
    EXPECT_EQ(f.wait_operation, "lock");
    EXPECT_EQ(f.held_by_thread, thread_id());  // held by this plain thread
    EXPECT_EQ(f.held_by_fiber, 0u);
  }
  EXPECT_TRUE(found);
  held.unlock();
  waiter.join();

  // Held by a fiber, which parks holding it: the waiter's holder is that fiber.
  std::recursive_mutex recursive;
  std::atomic<bool> release{false};
  std::atomic<std::uint64_t> holder_id{0};
  Fiber holder = sched.spawn([&] {
    std::lock_guard guard(recursive);
    holder_id = this_fiber::id();
    while (!release.load()) this_fiber::sleep_for(1ms);
  });
  while (holder_id.load() == 0) std::this_thread::sleep_for(1ms);
  Fiber second = sched.spawn([&] { std::lock_guard guard(recursive); });
  EXPECT_TRUE(test::wait_until_parked_on(sched, "std::recursive_mutex"));
  for (const FiberSnapshot& f : sched.snapshot().fibers) {
    if (f.wait_kind != "std::recursive_mutex") continue;
    EXPECT_EQ(f.held_by_fiber, holder_id.load());
    EXPECT_EQ(f.held_by_thread, 0);
  }
  release = true;
  holder.join();
  second.join();

  std::condition_variable cv;
  bool ready = false;
  Fiber third = sched.spawn([&] {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return ready; });
  });
  EXPECT_TRUE(test::wait_until_parked_on(sched, "std::condition_variable"));
  {
    std::lock_guard guard(mu);
    ready = true;
  }
  cv.notify_one();
  third.join();

  std::shared_mutex shared;
  std::unique_lock writer(shared);
  Fiber reader = sched.spawn([&] { std::shared_lock lock(shared); });
  EXPECT_TRUE(test::wait_until_parked_on(sched, "std::shared_mutex"));
  for (const FiberSnapshot& f : sched.snapshot().fibers)
    if (f.wait_kind == "std::shared_mutex") {
      EXPECT_EQ(f.held_by_thread, thread_id());
    }
  writer.unlock();
  reader.join();
}

// A fiber that pinned itself behaves as a thread: it blocks its worker.
// A mutex released while the fiber queued for it cannot run yet (its only
// worker is busy) is free at once: the fiber is woken to compete for it,
// and others take it meanwhile. Handing it to that fiber made everybody
// behind it wait until the fiber's turn to run came (a lock convoy: the
// bounded queue of issue 22 ran up to 10x slower in some runs).
TEST(LockHooks, AMutexReleasedToAFiberThatCannotRunYetIsFreeForOthers) {
  completes_within(
      60s,
      [] {
        Scheduler sched(one_worker_config());
        std::mutex mu;
        std::unique_lock held(mu);
        Fiber waiter = sched.spawn([&] { std::lock_guard guard(mu); });
        ASSERT_TRUE(test::wait_until_parked_on(sched, "std::mutex"));
        std::atomic<bool> spin{true};
        std::atomic<bool> spinning{false};
        Fiber hog = sched.spawn([&] {  // holds the only worker, without a checkpoint
          spinning = true;
          while (spin.load()) {
          }
        });
        while (!spinning.load()) std::this_thread::sleep_for(1ms);
        held.unlock();
        const bool taken = mu.try_lock();
        if (taken) mu.unlock();
        spin = false;
        hog.join();
        waiter.join();
        EXPECT_TRUE(taken) << "the released mutex was held for a fiber that could not run";
      },
      "a mutex released to a fiber that cannot run yet");
}

TEST(LockHooks, APinnedFiberBlocksItsThreadInsteadOfParking) {
  Scheduler sched(test::config_with(2));
  expect_lock_blocks_the_thread(sched, [] { return this_fiber::pin(); });
}

// --- fibers and threads on the same objects ---------------------------------

class MixedLocks : public ::testing::TestWithParam<unsigned> {};

TEST_P(MixedLocks, AStdMutexContendedByThreadsAndFibersAtOnceCountsExactly) {
  Scheduler sched(test::config_with(GetParam()));
  std::mutex mu;
  long counter = 0;
  const int per_caller = static_cast<int>(scaled(20'000));
  constexpr int kThreads = 3;
  constexpr int kFibers = 8;
  std::vector<std::thread> threads;
  std::vector<Fiber> fibers;
  auto body = [&] {
    for (int i = 0; i < per_caller; ++i) {
      std::lock_guard guard(mu);
      ++counter;
      if (i % 1000 == 0) detail::yield_thread();  // the thread's yield: holds the lock a while
    }
  };
  for (int i = 0; i < kThreads; ++i) threads.emplace_back(body);
  for (int i = 0; i < kFibers; ++i) fibers.push_back(sched.spawn(body));
  for (auto& t : threads) t.join();
  for (auto& f : fibers) f.join();
  EXPECT_EQ(counter, static_cast<long>(per_caller) * (kThreads + kFibers));
}

// Timed locks that give up while others are woken to compete, hand the
// mutex over to a starving fiber, or take it back from a waiter that timed
// out: whatever the interleaving, one owner at a time and every lock
// counted. Callers hold it across a park now and then, so that fibers queue.
TEST_P(MixedLocks, TimedLocksGivingUpAmidWakesKeepOneOwnerAtATime) {
  Scheduler sched(test::config_with(GetParam()));
  std::timed_mutex mu;
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::atomic<long> taken{0};
  long counter = 0;
  const int per_caller = static_cast<int>(scaled(2'000));
  constexpr int kThreads = 3;
  constexpr int kFibers = 24;
  auto body = [&](int seed) {
    for (int i = 0; i < per_caller; ++i) {
      if ((i + seed) % 3 == 0) {
        if (!mu.try_lock_for(std::chrono::microseconds(10 + (i * 7 + seed) % 150))) continue;
      } else {
        mu.lock();
      }
      if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
      ++counter;
      if (i % 16 == 0) std::this_thread::sleep_for(20us);  // a fiber parks holding it
      inside.fetch_sub(1);
      taken.fetch_add(1);
      mu.unlock();
    }
  };
  std::vector<std::thread> threads;
  std::vector<Fiber> fibers;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back(body, i);
  for (int i = 0; i < kFibers; ++i) fibers.push_back(sched.spawn([&body, i] { body(kThreads + i); }));
  for (auto& t : threads) t.join();
  for (auto& f : fibers) f.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(counter, taken.load());
  EXPECT_GT(taken.load(), 0);
}

TEST_P(MixedLocks, ACondvarWaitedOnByFibersIsSignalledByAThreadAndTheReverse) {
  Scheduler sched(test::config_with(GetParam()));
  std::mutex mu;
  std::condition_variable cv;
  int tickets = 0;
  int served = 0;
  constexpr int kFiberWaiters = 20;
  constexpr int kThreadWaiters = 4;
  auto waiter = [&] {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return tickets > 0; });
    --tickets;
    ++served;
  };
  std::vector<Fiber> fibers;
  std::vector<std::thread> threads;
  for (int i = 0; i < kFiberWaiters; ++i) fibers.push_back(sched.spawn(waiter));
  for (int i = 0; i < kThreadWaiters; ++i) threads.emplace_back(waiter);
  // One ticket at a time, with notify_one: half from a plain thread, half
  // from a fiber.
  auto give = [&](int n) {
    for (int i = 0; i < n; ++i) {
      {
        std::lock_guard guard(mu);
        ++tickets;
      }
      cv.notify_one();
      std::this_thread::sleep_for(100us);
    }
  };
  std::thread giver([&] { give((kFiberWaiters + kThreadWaiters) / 2); });
  sched.spawn([&] { give((kFiberWaiters + kThreadWaiters) / 2); }).join();
  giver.join();
  for (auto& f : fibers) f.join();
  for (auto& t : threads) t.join();
  EXPECT_EQ(served, kFiberWaiters + kThreadWaiters);
  EXPECT_EQ(tickets, 0);
}

TEST_P(MixedLocks, NotifyAllWakesEveryWaiterOfBothKinds) {
  Scheduler sched(test::config_with(GetParam()));
  std::mutex mu;
  std::condition_variable cv;
  bool go = false;
  std::atomic<int> waiting{0};
  std::atomic<int> woken{0};
  auto waiter = [&] {
    std::unique_lock lock(mu);
    ++waiting;
    cv.wait(lock, [&] { return go; });
    ++woken;
  };
  std::vector<Fiber> fibers;
  std::vector<std::thread> threads;
  for (int i = 0; i < 50; ++i) fibers.push_back(sched.spawn(waiter));
  for (int i = 0; i < 3; ++i) threads.emplace_back(waiter);
  while (waiting.load() < 53) std::this_thread::sleep_for(1ms);
  {
    std::lock_guard guard(mu);
    go = true;
  }
  cv.notify_all();
  for (auto& f : fibers) f.join();
  for (auto& t : threads) t.join();
  EXPECT_EQ(woken.load(), 53);
}

// std::shared_mutex, readers and writers, fibers and threads: a writer is
// never beside anyone.
TEST_P(MixedLocks, SharedMutexNeverHasAWriterBesideAnyone) {
  Scheduler sched(test::config_with(GetParam()));
  std::shared_mutex shared;
  std::atomic<int> readers{0};
  std::atomic<int> writers{0};
  std::atomic<long> violations{0};
  std::atomic<long> reads{0};
  std::atomic<long> writes{0};
  const long per_caller = static_cast<long>(scaled(100'000) / 16);
  auto body = [&](int seed) {
    for (long i = 0; i < per_caller; ++i) {
      if ((i + seed) % 5 == 0) {
        std::unique_lock lock(shared);
        if (writers.fetch_add(1) != 0 || readers.load() != 0) ++violations;
        ++writes;
        if (i % 64 == 0) this_fiber::yield();  // a plain thread: nothing
        writers.fetch_sub(1);
      } else {
        std::shared_lock lock(shared);
        readers.fetch_add(1);
        if (writers.load() != 0) ++violations;
        ++reads;
        if (i % 64 == 0) this_fiber::yield();
        readers.fetch_sub(1);
      }
    }
  };
  std::vector<Fiber> fibers;
  std::vector<std::thread> threads;
  for (int i = 0; i < 12; ++i) fibers.push_back(sched.spawn([&, i] { body(i); }));
  for (int i = 0; i < 4; ++i) threads.emplace_back([&, i] { body(100 + i); });
  for (auto& f : fibers) f.join();
  for (auto& t : threads) t.join();
  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(reads.load() + writes.load(), per_caller * 16);
}

INSTANTIATE_TEST_SUITE_P(Workers, MixedLocks, ::testing::Values(1u, 2u, 4u), test::worker_count_name);

// --- ownership belongs to the fiber -----------------------------------------

TEST(LockOwnership, AMutexLockedInAFiberUnlocksOnAnotherWorker) {
  Scheduler sched(test::config_with(2));
  pthread_mutex_t mu;
  ASSERT_EQ(init_mutex_of_type(&mu, PTHREAD_MUTEX_ERRORCHECK), 0);
  std::mutex plain;
  pid_t before = 0;
  pid_t after = 0;
  int unlocked = -1;
  sched
      .spawn([&] {
        plain.lock();
        ASSERT_EQ(pthread_mutex_lock(&mu), 0);
        before = thread_id();
        after = move_to_another_worker(sched);
        unlocked = pthread_mutex_unlock(&mu);
        plain.unlock();
      })
      .join();
  EXPECT_NE(before, after) << "the fiber never moved";
  EXPECT_EQ(unlocked, 0);
  EXPECT_EQ(pthread_mutex_destroy(&mu), 0);
  EXPECT_TRUE(plain.try_lock());
  plain.unlock();
}

TEST(LockOwnership, ARecursiveMutexLockedTwiceAcrossAMigrationUnlocksTwice) {
  Scheduler sched(test::config_with(2));
  std::recursive_mutex mu;
  pid_t before = 0;
  pid_t after = 0;
  int first = -1;
  int second = -1;
  sched
      .spawn([&] {
        mu.lock();
        before = thread_id();
        mu.lock();
        after = move_to_another_worker(sched);
        first = pthread_mutex_unlock(mu.native_handle());
        second = pthread_mutex_unlock(mu.native_handle());
      })
      .join();
  EXPECT_NE(before, after) << "the fiber never moved";
  EXPECT_EQ(first, 0);
  EXPECT_EQ(second, 0);
  if (!kMisuseIsReported) {
    EXPECT_EQ(pthread_mutex_unlock(mu.native_handle()), EPERM);  // held by nobody now
  }
  EXPECT_TRUE(mu.try_lock());  // and free
  mu.unlock();
}

// Two fibers on one thread are two owners, where glibc sees one tid.
TEST(LockOwnership, TwoFibersOnOneThreadAreTwoOwners) {
  Scheduler sched(one_worker_config());
  pthread_mutex_t checked;
  ASSERT_EQ(init_mutex_of_type(&checked, PTHREAD_MUTEX_ERRORCHECK), 0);
  pthread_mutex_t recursive;
  ASSERT_EQ(init_mutex_of_type(&recursive, PTHREAD_MUTEX_RECURSIVE), 0);
  std::atomic<int> stage{0};
  int foreign_unlock = -1;
  int foreign_trylock = -1;
  int own_relock = -1;
  Fiber owner = sched.spawn([&] {
    EXPECT_EQ(pthread_mutex_lock(&checked), 0);
    EXPECT_EQ(pthread_mutex_lock(&recursive), 0);
    own_relock = kMisuseIsReported ? EDEADLK : pthread_mutex_lock(&checked);
    stage = 1;
    while (stage.load() != 2) this_fiber::yield();
    EXPECT_EQ(pthread_mutex_unlock(&recursive), 0);
    EXPECT_EQ(pthread_mutex_unlock(&checked), 0);
  });
  Fiber other = sched.spawn([&] {
    while (stage.load() != 1) this_fiber::yield();
    foreign_unlock = kMisuseIsReported ? EPERM : pthread_mutex_unlock(&checked);
    foreign_trylock = pthread_mutex_trylock(&recursive);
    stage = 2;
  });
  owner.join();
  other.join();
  EXPECT_EQ(own_relock, EDEADLK);
  EXPECT_EQ(foreign_unlock, EPERM);
  EXPECT_EQ(foreign_trylock, EBUSY);
  pthread_mutex_destroy(&checked);
  pthread_mutex_destroy(&recursive);
}

// C11's <threads.h> on the same hooks (glibc's mtx_* and cnd_* call its
// internal pthread functions, where no hook sees them): a recursive mtx_t
// that one fiber holds is busy to another fiber of the same worker, as to
// another thread; and a cnd_timedwait parks, so that the fiber that
// signals it, on the same worker without spares, runs. Before, glibc took
// the two fibers for one owner (thrd_success), and the wait blocked the
// worker until its 5 s were out (thrd_timedout).
TEST(LockOwnership, C11MutexesAndConditionVariablesKnowFibersApart) {
  Scheduler sched(one_worker_config());
  mtx_t recursive;
  ASSERT_EQ(mtx_init(&recursive, mtx_plain | mtx_recursive), thrd_success);
  std::atomic<int> stage{0};
  std::atomic<int> foreign_trylock{-1};
  Fiber owner = sched.spawn([&] {
    EXPECT_EQ(mtx_lock(&recursive), thrd_success);
    EXPECT_EQ(mtx_lock(&recursive), thrd_success);
    stage = 1;
    while (stage.load() != 2) this_fiber::yield();
    EXPECT_EQ(mtx_unlock(&recursive), thrd_success);
    EXPECT_EQ(mtx_unlock(&recursive), thrd_success);
  });
  Fiber other = sched.spawn([&] {
    while (stage.load() != 1) this_fiber::yield();
    foreign_trylock = mtx_trylock(&recursive);
    stage = 2;
  });
  owner.join();
  other.join();
  EXPECT_EQ(foreign_trylock.load(), thrd_busy);
  mtx_destroy(&recursive);

  mtx_t mutex;
  cnd_t cond;
  ASSERT_EQ(mtx_init(&mutex, mtx_timed), thrd_success);
  ASSERT_EQ(cnd_init(&cond), thrd_success);
  std::atomic<bool> ready{false};
  std::atomic<int> waited{-1};
  const auto start = std::chrono::steady_clock::now();
  Fiber waiter = sched.spawn([&] {
    timespec deadline{};
    timespec_get(&deadline, TIME_UTC);
    deadline.tv_sec += 5;
    EXPECT_EQ(mtx_lock(&mutex), thrd_success);
    int result = thrd_success;
    while (!ready.load() && result == thrd_success) result = cnd_timedwait(&cond, &mutex, &deadline);
    waited = result;
    EXPECT_EQ(mtx_unlock(&mutex), thrd_success);
  });
  Fiber signaller = sched.spawn([&] {
    EXPECT_EQ(mtx_lock(&mutex), thrd_success);
    ready = true;
    EXPECT_EQ(cnd_signal(&cond), thrd_success);
    EXPECT_EQ(mtx_unlock(&mutex), thrd_success);
  });
  waiter.join();
  signaller.join();
  EXPECT_EQ(waited.load(), thrd_success);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
  cnd_destroy(&cond);
  mtx_destroy(&mutex);
}

// --- glibc's semantics, fiber and plain thread ------------------------------

class LockSemantics : public ::testing::TestWithParam<Caller> {
 protected:
  Scheduler sched_{test::config_with(2)};
  void run(const std::function<void()>& body) { run_as(sched_, GetParam(), body); }
};

TEST_P(LockSemantics, EveryInitializerAndAttributeIsHonoured) {
  run([] {
    pthread_mutex_t normal = PTHREAD_MUTEX_INITIALIZER;
    EXPECT_EQ(pthread_mutex_lock(&normal), 0);
    EXPECT_EQ(pthread_mutex_trylock(&normal), EBUSY);
    if (!kMisuseIsReported) {
      EXPECT_EQ(pthread_mutex_destroy(&normal), EBUSY);  // glibc's own destroy sees the user count
    }
    EXPECT_EQ(pthread_mutex_unlock(&normal), 0);
    EXPECT_EQ(pthread_mutex_destroy(&normal), 0);

    pthread_mutex_t recursive = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
    EXPECT_EQ(pthread_mutex_lock(&recursive), 0);
    EXPECT_EQ(pthread_mutex_lock(&recursive), 0);
    EXPECT_EQ(pthread_mutex_trylock(&recursive), 0);
    EXPECT_EQ(pthread_mutex_unlock(&recursive), 0);
    EXPECT_EQ(pthread_mutex_unlock(&recursive), 0);
    EXPECT_EQ(pthread_mutex_unlock(&recursive), 0);
    if (!kMisuseIsReported) {
      EXPECT_EQ(pthread_mutex_unlock(&recursive), EPERM);
    }

    pthread_mutex_t checked = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
    if (!kMisuseIsReported) {
      EXPECT_EQ(pthread_mutex_unlock(&checked), EPERM);
    }
    EXPECT_EQ(pthread_mutex_lock(&checked), 0);
    if (!kMisuseIsReported) {
      EXPECT_EQ(pthread_mutex_lock(&checked), EDEADLK);
    }
    EXPECT_EQ(pthread_mutex_trylock(&checked), EBUSY);
    EXPECT_EQ(pthread_mutex_unlock(&checked), 0);

    pthread_mutex_t adaptive = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;
    EXPECT_EQ(pthread_mutex_lock(&adaptive), 0);
    EXPECT_EQ(pthread_mutex_trylock(&adaptive), EBUSY);
    EXPECT_EQ(pthread_mutex_unlock(&adaptive), 0);

    pthread_mutex_t initialized;
    EXPECT_EQ(init_mutex_of_type(&initialized, PTHREAD_MUTEX_RECURSIVE), 0);
    EXPECT_EQ(pthread_mutex_lock(&initialized), 0);
    EXPECT_EQ(pthread_mutex_lock(&initialized), 0);
    EXPECT_EQ(pthread_mutex_unlock(&initialized), 0);
    EXPECT_EQ(pthread_mutex_unlock(&initialized), 0);
    EXPECT_EQ(pthread_mutex_destroy(&initialized), 0);
  });
}

TEST_P(LockSemantics, ATimedLockTimesOutOnItsClockAndChecksItsTimeOnlyWhenItWaits) {
  std::timed_mutex mu;
  std::thread holder;
  std::atomic<bool> held{false};
  std::atomic<bool> release{false};
  holder = std::thread([&] {
    std::lock_guard guard(mu);
    held = true;
    while (!release.load()) std::this_thread::sleep_for(1ms);
  });
  while (!held.load()) std::this_thread::sleep_for(1ms);
  run([&] {
    pthread_mutex_t* m = mu.native_handle();
    const auto start = std::chrono::steady_clock::now();
    timespec at = realtime_after(30ms);
    EXPECT_EQ(pthread_mutex_timedlock(m, &at), ETIMEDOUT);
    EXPECT_GE(std::chrono::steady_clock::now() - start, 29ms);
    at = monotonic_after(20ms);
    EXPECT_EQ(pthread_mutex_clocklock(m, CLOCK_MONOTONIC, &at), ETIMEDOUT);
    EXPECT_EQ(pthread_mutex_clocklock(m, CLOCK_PROCESS_CPUTIME_ID, &at), EINVAL);
    timespec bad{0, 2'000'000'000};
    EXPECT_EQ(pthread_mutex_timedlock(m, &bad), EINVAL);  // it would wait: the time is looked at
    timespec negative{-1, 0};
    EXPECT_EQ(pthread_mutex_timedlock(m, &negative), ETIMEDOUT);
    // glibc's futex wait calls a negative tv_sec passed before the kernel
    // could refuse its tv_nsec (the rwlock and the condvar check tv_nsec
    // first: EINVAL there).
    timespec negative_bad{-1, -1};
    EXPECT_EQ(pthread_mutex_timedlock(m, &negative_bad), ETIMEDOUT);
    EXPECT_EQ(pthread_mutex_clocklock(m, CLOCK_MONOTONIC, &negative_bad), ETIMEDOUT);
    EXPECT_FALSE(mu.try_lock_for(10ms));  // std::timed_mutex: pthread_mutex_clocklock on steady_clock
  });
  release = true;
  holder.join();
  run([&] {
    timespec bad{0, -5};
    EXPECT_EQ(pthread_mutex_timedlock(mu.native_handle(), &bad), 0);  // free: not looked at, as glibc
    mu.unlock();
    EXPECT_TRUE(mu.try_lock_for(10ms));
    mu.unlock();
  });
}

// A call found by name, as a direct call finds it (the hooks, or a
// sanitizer's interceptor before them), through a type without the
// attributes of its declaration.
template <class Fn>
Fn* by_name(const char* name) {
  return reinterpret_cast<Fn*>(dlsym(RTLD_DEFAULT, name));
}

// A null time, outside glibc's contract but tolerated by it: glibc reads
// the time only once the call must wait (the rwlock also checks its clock
// only with a time), and waits without one, until the lock is free.
// Before, the hooks read it at once and died of SIGSEGV. The calls are
// made by name: glibc declares the time __nonnull, which UBSan checks at
// a direct call.
TEST_P(LockSemantics, ATimedLockWithANullTimeWaitsAsAnUntimedOne) {
  using MutexTimed = int(pthread_mutex_t*, const timespec*);
  using MutexClock = int(pthread_mutex_t*, clockid_t, const timespec*);
  using RwlockTimed = int(pthread_rwlock_t*, const timespec*);
  using RwlockClock = int(pthread_rwlock_t*, clockid_t, const timespec*);
  MutexTimed* const mutex_timedlock = by_name<MutexTimed>("pthread_mutex_timedlock");
  MutexClock* const mutex_clocklock = by_name<MutexClock>("pthread_mutex_clocklock");
  RwlockTimed* const timedrdlock = by_name<RwlockTimed>("pthread_rwlock_timedrdlock");
  RwlockClock* const clockrdlock = by_name<RwlockClock>("pthread_rwlock_clockrdlock");
  RwlockTimed* const timedwrlock = by_name<RwlockTimed>("pthread_rwlock_timedwrlock");
  RwlockClock* const clockwrlock = by_name<RwlockClock>("pthread_rwlock_clockwrlock");
  ASSERT_TRUE(mutex_timedlock && mutex_clocklock && timedrdlock && clockrdlock && timedwrlock && clockwrlock);
  run([&] {
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    EXPECT_EQ(mutex_timedlock(&mu, nullptr), 0);
    EXPECT_EQ(pthread_mutex_unlock(&mu), 0);
    EXPECT_EQ(mutex_clocklock(&mu, CLOCK_MONOTONIC, nullptr), 0);
    EXPECT_EQ(pthread_mutex_unlock(&mu), 0);
    EXPECT_EQ(mutex_clocklock(&mu, CLOCK_MONOTONIC_RAW, nullptr), EINVAL);  // the clock, before anything
    pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
    EXPECT_EQ(timedrdlock(&lock, nullptr), 0);
    EXPECT_EQ(clockrdlock(&lock, CLOCK_MONOTONIC_RAW, nullptr), 0);
    EXPECT_EQ(pthread_rwlock_unlock(&lock), 0);
    EXPECT_EQ(pthread_rwlock_unlock(&lock), 0);
    EXPECT_EQ(timedwrlock(&lock, nullptr), 0);
    EXPECT_EQ(pthread_rwlock_unlock(&lock), 0);
    EXPECT_EQ(clockwrlock(&lock, CLOCK_MONOTONIC_RAW, nullptr), 0);
    EXPECT_EQ(pthread_rwlock_unlock(&lock), 0);
  });
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
  std::atomic<bool> held{false};
  std::atomic<bool> released{false};
  std::thread holder([&] {
    pthread_mutex_lock(&mu);
    pthread_rwlock_wrlock(&lock);
    held = true;
    std::this_thread::sleep_for(20ms);  // the caller waits meanwhile (or comes late, and does not)
    released = true;
    pthread_mutex_unlock(&mu);
    pthread_rwlock_unlock(&lock);
  });
  while (!held.load()) std::this_thread::sleep_for(1ms);
  run([&] {
    EXPECT_EQ(mutex_timedlock(&mu, nullptr), 0);
    EXPECT_TRUE(released.load());
    EXPECT_EQ(pthread_mutex_unlock(&mu), 0);
    EXPECT_EQ(timedrdlock(&lock, nullptr), 0);
    EXPECT_EQ(pthread_rwlock_unlock(&lock), 0);
  });
  holder.join();
}

TEST_P(LockSemantics, ACondvarWaitTimesOutOnItsClockWithTheMutexHeld) {
  run([] {
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t realtime = PTHREAD_COND_INITIALIZER;
    pthread_cond_t monotonic;
    ASSERT_EQ(init_cond(&monotonic, [](pthread_condattr_t* attr) { pthread_condattr_setclock(attr, CLOCK_MONOTONIC); }),
              0);
    pthread_mutex_lock(&mu);
    const auto start = std::chrono::steady_clock::now();
    timespec at = realtime_after(20ms);
    EXPECT_EQ(pthread_cond_timedwait(&realtime, &mu, &at), ETIMEDOUT);
    EXPECT_GE(std::chrono::steady_clock::now() - start, 19ms);
    EXPECT_EQ(pthread_mutex_trylock(&mu), EBUSY);  // held again
    at = monotonic_after(20ms);
    EXPECT_EQ(pthread_cond_timedwait(&monotonic, &mu, &at), ETIMEDOUT);
    at = monotonic_after(10ms);
    EXPECT_EQ(pthread_cond_clockwait(&realtime, &mu, CLOCK_MONOTONIC, &at), ETIMEDOUT);
    EXPECT_EQ(pthread_cond_clockwait(&realtime, &mu, CLOCK_THREAD_CPUTIME_ID, &at), EINVAL);
    timespec bad{0, 1'000'000'000};
    EXPECT_EQ(pthread_cond_timedwait(&realtime, &mu, &bad), EINVAL);
    pthread_mutex_unlock(&mu);
    pthread_cond_destroy(&monotonic);
  });
  // std::condition_variable's timed waits: pthread_cond_clockwait.
  run([] {
    std::mutex mu;
    std::condition_variable cv;
    std::unique_lock lock(mu);
    EXPECT_EQ(cv.wait_for(lock, 10ms), std::cv_status::timeout);
    EXPECT_FALSE(cv.wait_until(lock, std::chrono::system_clock::now() + 10ms, [] { return false; }));
    EXPECT_TRUE(lock.owns_lock());
  });
}

TEST_P(LockSemantics, ACondvarWaitWithAMutexNotOwnedIsEPERM) {
  if (kMisuseIsReported) GTEST_SKIP() << "ThreadSanitizer reports the misuse itself";
  run([] {
    pthread_mutex_t checked = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
    pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
    EXPECT_EQ(pthread_cond_wait(&cond, &checked), EPERM);
    timespec at = realtime_after(1s);
    EXPECT_EQ(pthread_cond_timedwait(&cond, &checked, &at), EPERM);
    EXPECT_EQ(pthread_cond_signal(&cond), 0);
    EXPECT_EQ(pthread_cond_broadcast(&cond), 0);
  });
}

// glibc's wait releases a recursive mutex held more than once by one count
// only, so the mutex stays held throughout, and takes that count back after:
// the wait still ends, by its timeout (or a signal), never in a relock of a
// mutex the waiter itself holds.
TEST_P(LockSemantics, ACondvarWaitOnARecursiveMutexHeldTwiceKeepsItAndStillTimesOut) {
  completes_within(
      60s,
      [this] {
        run([] {
          pthread_mutex_t recursive = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
          pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
          EXPECT_EQ(pthread_mutex_lock(&recursive), 0);
          EXPECT_EQ(pthread_mutex_lock(&recursive), 0);
          timespec at = realtime_after(10ms);
          EXPECT_EQ(pthread_cond_timedwait(&cond, &recursive, &at), ETIMEDOUT);
          at = monotonic_after(10ms);
          EXPECT_EQ(pthread_cond_clockwait(&cond, &recursive, CLOCK_MONOTONIC, &at), ETIMEDOUT);
          EXPECT_EQ(pthread_mutex_unlock(&recursive), 0);
          EXPECT_EQ(pthread_mutex_unlock(&recursive), 0);  // held twice still
          if (!kMisuseIsReported) {
            EXPECT_EQ(pthread_mutex_unlock(&recursive), EPERM);
          }
          EXPECT_EQ(pthread_mutex_trylock(&recursive), 0);
          EXPECT_EQ(pthread_mutex_unlock(&recursive), 0);
        });
      },
      "a condvar wait on a recursive mutex held twice");
}

// glibc's timed waits check their time and clock before anything else, a
// process-shared condition variable's too: EINVAL, not the mutex's EPERM.
TEST_P(LockSemantics, AProcessSharedCondvarChecksItsTimeBeforeItsMutex) {
  if (kMisuseIsReported) GTEST_SKIP() << "ThreadSanitizer reports the misuse itself";
  run([] {
    pthread_cond_t shared;
    ASSERT_EQ(init_cond(&shared, shared_cond), 0);
    pthread_mutex_t checked = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
    timespec bad{0, -1};
    EXPECT_EQ(pthread_cond_timedwait(&shared, &checked, &bad), EINVAL);
    timespec at = monotonic_after(1s);
    EXPECT_EQ(pthread_cond_clockwait(&shared, &checked, CLOCK_BOOTTIME, &at), EINVAL);
    EXPECT_EQ(pthread_cond_clockwait(&shared, &checked, CLOCK_MONOTONIC, &bad), EINVAL);
    pthread_cond_destroy(&shared);
  });
}

// glibc's wait keeps its mutex's user count (__nusers) while it waits, so
// pthread_mutex_destroy() of the mutex a waiter will relock is EBUSY, as
// POSIX allows it to tell, though the mutex itself is free: a mutex the
// hooks take over, and one they pass through to glibc (priority-inheriting,
// process-shared) that waits on a condition variable of theirs.
TEST_P(LockSemantics, AMutexAWaiterWillRelockIsBusyToDestroy) {
  if (kMisuseIsReported) GTEST_SKIP() << "ThreadSanitizer reports the misuse itself";
  const std::function<void(pthread_mutexattr_t*)> kinds[] = {
      [](pthread_mutexattr_t*) {},
      [](pthread_mutexattr_t* attr) { pthread_mutexattr_setprotocol(attr, PTHREAD_PRIO_INHERIT); },
      [](pthread_mutexattr_t* attr) { pthread_mutexattr_setpshared(attr, PTHREAD_PROCESS_SHARED); },
  };
  for (const auto& kind : kinds) {
    SCOPED_TRACE(&kind - kinds);
    pthread_mutex_t mu;
    ASSERT_EQ(init_mutex(&mu, kind), 0);
    pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
    std::atomic<bool> waiting{false};
    int waited = -1;
    const auto waiter = [&] {
      pthread_mutex_lock(&mu);
      waiting = true;
      timespec at = realtime_after(60s);
      waited = pthread_cond_timedwait(&cond, &mu, &at);
      pthread_mutex_unlock(&mu);
    };
    std::optional<Fiber> fiber;
    std::thread thread;
    if (GetParam() == Caller::fiber)
      fiber.emplace(sched_.spawn(waiter));
    else
      thread = std::thread(waiter);
    while (!waiting.load()) std::this_thread::sleep_for(1ms);
    pthread_mutex_lock(&mu);  // once the waiter is queued and has released it
    pthread_mutex_unlock(&mu);
    EXPECT_EQ(pthread_mutex_destroy(&mu), EBUSY);
    pthread_mutex_lock(&mu);
    pthread_cond_signal(&cond);
    pthread_mutex_unlock(&mu);
    if (fiber) fiber->join();
    if (thread.joinable()) thread.join();
    EXPECT_EQ(waited, 0);
    EXPECT_EQ(pthread_mutex_destroy(&mu), 0);
  }
}

TEST_P(LockSemantics, RwlockErrorsAreGlibcs) {
  run([] {
    pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
    EXPECT_EQ(pthread_rwlock_wrlock(&lock), 0);
    if (!kMisuseIsReported) {
      EXPECT_EQ(pthread_rwlock_wrlock(&lock), EDEADLK);
      EXPECT_EQ(pthread_rwlock_rdlock(&lock), EDEADLK);
    }
    EXPECT_EQ(pthread_rwlock_trywrlock(&lock), EBUSY);
    EXPECT_EQ(pthread_rwlock_tryrdlock(&lock), EBUSY);
    EXPECT_EQ(pthread_rwlock_unlock(&lock), 0);
    EXPECT_EQ(pthread_rwlock_rdlock(&lock), 0);
    EXPECT_EQ(pthread_rwlock_rdlock(&lock), 0);  // recursive read locks: fine by default
    EXPECT_EQ(pthread_rwlock_trywrlock(&lock), EBUSY);
    timespec at = realtime_after(10ms);
    EXPECT_EQ(pthread_rwlock_timedwrlock(&lock, &at), ETIMEDOUT);
    at = monotonic_after(10ms);
    EXPECT_EQ(pthread_rwlock_clockwrlock(&lock, CLOCK_MONOTONIC, &at), ETIMEDOUT);
    EXPECT_EQ(pthread_rwlock_clockwrlock(&lock, CLOCK_BOOTTIME, &at), EINVAL);
    timespec bad{0, -1};
    EXPECT_EQ(pthread_rwlock_timedrdlock(&lock, &bad), EINVAL);  // checked always, as glibc
    EXPECT_EQ(pthread_rwlock_unlock(&lock), 0);
    EXPECT_EQ(pthread_rwlock_unlock(&lock), 0);
    EXPECT_EQ(pthread_rwlock_trywrlock(&lock), 0);
    EXPECT_EQ(pthread_rwlock_unlock(&lock), 0);
    EXPECT_EQ(pthread_rwlock_destroy(&lock), 0);
  });
}

// glibc's rwlock holds at most 2^28 - 1 readers (a reader that would make
// __readers reach 2^31 is refused): EAGAIN for the next, from every read
// form. The count is set directly (a reader is 8 in __readers, for glibc
// as for the hooks) rather than taken 2^28 times.
TEST_P(LockSemantics, AnRwlockRefusesAReaderPastGlibcsLimit) {
  run([] {
    constexpr unsigned kGlibcMaxReaders = (1u << 28) - 1;
    pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
    lock.__data.__readers = (kGlibcMaxReaders - 1) * 8;
    EXPECT_EQ(pthread_rwlock_tryrdlock(&lock), 0);  // the last one
    EXPECT_EQ(pthread_rwlock_tryrdlock(&lock), EAGAIN);
    EXPECT_EQ(pthread_rwlock_rdlock(&lock), EAGAIN);
    timespec at = realtime_after(1s);
    EXPECT_EQ(pthread_rwlock_timedrdlock(&lock, &at), EAGAIN);
    EXPECT_EQ(lock.__data.__readers / 8, kGlibcMaxReaders);
    EXPECT_EQ(pthread_rwlock_unlock(&lock), 0);
    EXPECT_EQ(pthread_rwlock_rdlock(&lock), 0);
    EXPECT_EQ(pthread_rwlock_unlock(&lock), 0);  // ThreadSanitizer's count of holders back to none
    lock.__data.__readers = 0;                   // and the readers that were set, not taken
    EXPECT_EQ(pthread_rwlock_trywrlock(&lock), 0);
    EXPECT_EQ(pthread_rwlock_unlock(&lock), 0);
  });
}

// A time far past what steady_clock counts in nanoseconds (some code's
// "never": the largest tv_sec) is waited for as glibc's futex waits for
// it, until woken, on either clock.
TEST_P(LockSemantics, AFarFutureTimeIsWaitedForUntilWoken) {
  for (const clockid_t clock : {CLOCK_MONOTONIC, CLOCK_REALTIME}) {
    SCOPED_TRACE(clock);
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
    std::atomic<int> stage{0};
    int waited = -1;
    int locked = -1;
    const auto waiter = [&] {
      const timespec never{std::numeric_limits<time_t>::max(), 0};
      pthread_mutex_lock(&mu);
      stage = 1;
      waited = pthread_cond_clockwait(&cond, &mu, clock, &never);
      pthread_mutex_unlock(&mu);
      stage = 2;
      while (stage.load() != 3) std::this_thread::yield();
      locked = pthread_mutex_clocklock(&mu, clock, &never);  // held by the main thread
      if (locked == 0) pthread_mutex_unlock(&mu);
    };
    std::optional<Fiber> fiber;
    std::thread thread;
    if (GetParam() == Caller::fiber)
      fiber.emplace(sched_.spawn(waiter));
    else
      thread = std::thread(waiter);
    while (stage.load() < 1) std::this_thread::sleep_for(1ms);
    pthread_mutex_lock(&mu);  // once the waiter is queued and has released it
    pthread_cond_signal(&cond);
    pthread_mutex_unlock(&mu);
    while (stage.load() < 2) std::this_thread::sleep_for(1ms);
    pthread_mutex_lock(&mu);
    stage = 3;
    std::this_thread::sleep_for(20ms);  // then the waiter waits for it (or has given up)
    pthread_mutex_unlock(&mu);
    if (fiber) fiber->join();
    if (thread.joinable()) thread.join();
    EXPECT_EQ(waited, 0);
    EXPECT_EQ(locked, 0);
  }
}

// A fiber that holds one of glibc's own mutexes (priority-inheriting,
// robust, process-shared) stays on its worker until it unlocks it
// (hooks/glibc_mutex_pins.h): glibc refuses an unlock from another thread
// (EPERM), so a fiber that moved at a sleep could never release it. Each
// lock that leaves the mutex held pins the fiber once, each unlock takes
// one pin back; a trylock that fails pins nothing.
// A process-shared rwlock (glibc's own) write-locked by a fiber stays its
// until it unlocks: the fiber stays on its worker meanwhile, and its
// unlock leaves the rwlock free. Before, a fiber that moved unlocked from
// another thread, which glibc took for a reader's unlock: 0, and the
// rwlock write-locked for good (another's trywrlock EBUSY).
TEST(GlibcMutexes, AFiberWritingASharedRwlockStaysOnItsWorkerUntilItUnlocks) {
  Scheduler sched{test::config_with(2)};
  pthread_rwlockattr_t attr;
  pthread_rwlockattr_init(&attr);
  pthread_rwlockattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  for (const bool timed : {false, true}) {
    SCOPED_TRACE(timed ? "timedwrlock" : "wrlock");
    pthread_rwlock_t lock;
    ASSERT_EQ(pthread_rwlock_init(&lock, &attr), 0);
    pid_t before = 0;
    pid_t after = 0;
    int unlocked = -1;
    sched
        .spawn([&] {
          const timespec at = realtime_after(5s);
          ASSERT_EQ(timed ? pthread_rwlock_timedwrlock(&lock, &at) : pthread_rwlock_wrlock(&lock), 0);
          before = thread_id();
          after = move_to_another_worker(sched);
          unlocked = pthread_rwlock_unlock(&lock);
        })
        .join();
    EXPECT_EQ(before, after) << "the writing fiber moved";
    EXPECT_EQ(unlocked, 0);
    EXPECT_EQ(pthread_rwlock_trywrlock(&lock), 0) << "the rwlock stayed write-locked";
    EXPECT_EQ(pthread_rwlock_unlock(&lock), 0);
    EXPECT_EQ(pthread_rwlock_destroy(&lock), 0);
  }
  pthread_rwlockattr_destroy(&attr);
  // Read locks do not pin: a reader moves freely.
  pthread_rwlock_t lock;
  ASSERT_EQ(pthread_rwlock_init(&lock, &attr), 0);
  sched
      .spawn([&] {
        ASSERT_EQ(pthread_rwlock_rdlock(&lock), 0);
        EXPECT_EQ(pthread_rwlock_unlock(&lock), 0);
        const pid_t start = thread_id();
        EXPECT_NE(move_to_another_worker(sched), start) << "a fiber that holds nothing stayed pinned";
      })
      .join();
  EXPECT_EQ(pthread_rwlock_destroy(&lock), 0);
}

TEST(GlibcMutexes, AFiberHoldingOneStaysOnItsWorkerUntilItUnlocks) {
  const std::function<void(pthread_mutexattr_t*)> kinds[] = {
      [](pthread_mutexattr_t* attr) { pthread_mutexattr_setprotocol(attr, PTHREAD_PRIO_INHERIT); },
      [](pthread_mutexattr_t* attr) { pthread_mutexattr_setrobust(attr, PTHREAD_MUTEX_ROBUST); },
      [](pthread_mutexattr_t* attr) {
        pthread_mutexattr_setpshared(attr, PTHREAD_PROCESS_SHARED);
        pthread_mutexattr_settype(attr, PTHREAD_MUTEX_RECURSIVE);
      },
  };
  Scheduler sched{test::config_with(2)};
  // A peer that keeps the other worker busy now and then, so that a fiber
  // free to move would.
  std::atomic<bool> done{false};
  Fiber peer = sched.spawn([&] {
    while (!done.load()) {
      const auto until = std::chrono::steady_clock::now() + 200us;
      while (std::chrono::steady_clock::now() < until) {
      }
      this_fiber::sleep_for(100us);
    }
  });
  for (const auto& kind : kinds) {
    SCOPED_TRACE(&kind - kinds);
    pthread_mutex_t mu;
    ASSERT_EQ(init_mutex(&mu, kind), 0);
    sched
        .spawn({.name = "holder"},
               [&] {
                 const auto pinned = [&] {
                   for (const FiberSnapshot& fiber : sched.snapshot().fibers)
                     if (fiber.name == "holder") return fiber.pinned;
                   ADD_FAILURE() << "no fiber named holder";
                   return false;
                 };
                 ASSERT_FALSE(pinned());
                 ASSERT_EQ(pthread_mutex_lock(&mu), 0);
                 EXPECT_TRUE(pinned());
                 const pid_t tid = ::gettid();
                 int moved = 0;
                 for (int i = 0; i < 20; ++i) {
                   this_fiber::sleep_for(1ms);
                   moved += ::gettid() != tid;
                 }
                 EXPECT_EQ(moved, 0);
                 EXPECT_EQ(pthread_mutex_unlock(&mu), 0);
                 EXPECT_FALSE(pinned());
                 ASSERT_EQ(pthread_mutex_trylock(&mu), 0);
                 EXPECT_TRUE(pinned());
                 std::thread([&] { EXPECT_EQ(pthread_mutex_trylock(&mu), EBUSY); }).join();
                 EXPECT_EQ(pthread_mutex_unlock(&mu), 0);
                 EXPECT_FALSE(pinned());
               })
        .join();
    EXPECT_EQ(pthread_mutex_destroy(&mu), 0);
  }
  done = true;
  peer.join();
  for (const WorkerSnapshot& worker : sched.snapshot().workers) EXPECT_EQ(worker.pinned_fibers, 0u);
}

// Two fibers of one thread: glibc sees one tid, so without the hooks'
// record of which fiber holds which of its mutexes the second fiber got a
// recursive one the first held, an error-checking one answered EDEADLK
// (and let it unlock the first's), and a normal one blocked the thread in
// futex(2), the holder pinned to it: a deadlock (here a 5 s timed lock
// that timed out).
// Two fibers of a one-worker scheduler: the first takes a lock (`take`),
// keeps it until the second has run `while_held()` (10 ms in), and gives
// it back (`give_back`); the second then runs `then(released)`,
// `released` saying whether the first has given it back. Both must have
// run on one thread, and none stays pinned. Before, the first kept the
// lock for 100 ms, and a worker held off its CPU that long let both
// fibers' timers fire together: the checks ran after the unlock.
void beside_a_holder(const std::function<int()>& take, const std::function<int()>& give_back,
                     const std::function<void()>& while_held,
                     const std::function<void(const std::atomic<bool>&)>& then) {
  Scheduler sched{test::config_with(1)};
  std::atomic<bool> checked{false};
  std::atomic<bool> released{false};
  pid_t holder_thread = 0;
  pid_t other_thread = 0;
  Fiber holder = sched.spawn([&] {
    ASSERT_EQ(take(), 0);
    holder_thread = thread_id();
    for (int ms = 0; ms < 20'000 && !checked.load(); ++ms) this_fiber::sleep_for(1ms);
    released = true;
    EXPECT_EQ(give_back(), 0);
  });
  Fiber other = sched.spawn([&] {
    this_fiber::sleep_for(10ms);
    other_thread = thread_id();
    while_held();
    checked = true;
    then(released);
  });
  holder.join();
  other.join();
  EXPECT_EQ(holder_thread, other_thread) << "the test wants both fibers on one thread";
  for (const WorkerSnapshot& worker : sched.snapshot().workers) EXPECT_EQ(worker.pinned_fibers, 0u);
}

struct GlibcKind {
  const char* name;
  int type;
  bool robust;  // else process-shared
};

int init_mutex(pthread_mutex_t* mutex, const GlibcKind& kind) {
  return init_mutex(mutex, [&](pthread_mutexattr_t* attr) {
    pthread_mutexattr_settype(attr, kind.type);
    if (kind.robust)
      pthread_mutexattr_setrobust(attr, PTHREAD_MUTEX_ROBUST);
    else
      pthread_mutexattr_setpshared(attr, PTHREAD_PROCESS_SHARED);
  });
}

class GlibcMutexFibers : public ::testing::TestWithParam<GlibcKind> {};

TEST_P(GlibcMutexFibers, AnotherFiberOfTheHoldersThreadWaitsForItsUnlock) {
  const GlibcKind kind = GetParam();
  pthread_mutex_t mu;
  ASSERT_EQ(init_mutex(&mu, kind), 0);
  // The unlock by a fiber that does not hold it: a misuse ThreadSanitizer
  // reports (kMisuseIsReported).
  const bool checks_owner = (kind.type != PTHREAD_MUTEX_NORMAL || kind.robust) && !kMisuseIsReported;
  beside_a_holder([&] { return pthread_mutex_lock(&mu); }, [&] { return pthread_mutex_unlock(&mu); },
                  [&] {
                    EXPECT_EQ(pthread_mutex_trylock(&mu), EBUSY);
                    if (checks_owner) {
                      EXPECT_EQ(pthread_mutex_unlock(&mu), EPERM);
                    }
                    const timespec soon = realtime_after(10ms);
                    EXPECT_EQ(pthread_mutex_timedlock(&mu, &soon), ETIMEDOUT);
                  },
                  [&](const std::atomic<bool>& released) {
                    const timespec later = realtime_after(5s);
                    EXPECT_EQ(pthread_mutex_timedlock(&mu, &later), 0);
                    EXPECT_TRUE(released.load()) << "both fibers held it at once";
                    EXPECT_EQ(pthread_mutex_unlock(&mu), 0);
                  });
  EXPECT_EQ(pthread_mutex_destroy(&mu), 0);
}

// A condition variable's wait lets the mutex go to another fiber of the
// thread meanwhile, and takes it back after it.
TEST_P(GlibcMutexFibers, AConditionWaitLetsAnotherFiberOfTheThreadHaveTheMutex) {
  const GlibcKind kind = GetParam();
  pthread_mutex_t mu;
  ASSERT_EQ(init_mutex(&mu, kind), 0);
  pthread_cond_t cond;
  ASSERT_EQ(init_cond(&cond, [](pthread_condattr_t*) {}), 0);
  Scheduler sched{test::config_with(1)};
  bool ready = false;
  bool waiting = false;
  pid_t waiter_thread = 0;
  pid_t signaller_thread = 0;
  Fiber waiter = sched.spawn([&] {
    ASSERT_EQ(pthread_mutex_lock(&mu), 0);
    this_fiber::sleep_for(20ms);  // the signaller waits for the mutex meanwhile
    waiting = true;
    waiter_thread = thread_id();
    while (!ready) ASSERT_EQ(pthread_cond_wait(&cond, &mu), 0);
    EXPECT_EQ(pthread_mutex_unlock(&mu), 0);
  });
  Fiber signaller = sched.spawn([&] {
    this_fiber::sleep_for(5ms);
    const timespec later = realtime_after(5s);
    ASSERT_EQ(pthread_mutex_timedlock(&mu, &later), 0);
    EXPECT_TRUE(waiting) << "got the mutex its waiter held";
    // On the waiter's thread: it did not wait for sysmon to move it, as it
    // does for a fiber whose thread sleeps in futex(2) for a second.
    signaller_thread = thread_id();
    ready = true;
    EXPECT_EQ(pthread_cond_signal(&cond), 0);
    EXPECT_EQ(pthread_mutex_unlock(&mu), 0);
  });
  waiter.join();
  signaller.join();
  EXPECT_TRUE(ready);
  EXPECT_EQ(signaller_thread, waiter_thread);
  EXPECT_EQ(pthread_mutex_destroy(&mu), 0);
  EXPECT_EQ(pthread_cond_destroy(&cond), 0);
}

// Two fibers of one thread that each hold one process-shared mutex and
// wait for the other's: weft-dump's edges name each one's holder, the
// other fiber, so its deadlock report sees the cycle. Before, a wait for a
// holder beside it had no holder (the record is its thread's). The waits
// are timed, so that the test ends.
TEST(GlibcMutexDump, NamesTheHolderBesideTheWaiter) {
  pthread_mutex_t first;
  pthread_mutex_t second;
  const GlibcKind shared{"SharedNormal", PTHREAD_MUTEX_NORMAL, false};
  ASSERT_EQ(init_mutex(&first, shared), 0);
  ASSERT_EQ(init_mutex(&second, shared), 0);
  Scheduler sched{test::config_with(1)};
  std::atomic<std::uint64_t> ids[2] = {0, 0};
  std::atomic<int> holding{0};
  const auto cross = [&](int me, pthread_mutex_t* mine, pthread_mutex_t* theirs) {
    return [&, me, mine, theirs] {
      ids[me] = this_fiber::id();
      ASSERT_EQ(pthread_mutex_lock(mine), 0);
      ++holding;
      while (holding.load() < 2) this_fiber::sleep_for(1ms);
      // The first to time out lets its own go, which the other then takes.
      const timespec later = realtime_after(1s);
      const int taken = pthread_mutex_timedlock(theirs, &later);
      EXPECT_TRUE(taken == ETIMEDOUT || taken == 0) << taken;
      if (taken == 0) {
        EXPECT_EQ(pthread_mutex_unlock(theirs), 0);
      }
      EXPECT_EQ(pthread_mutex_unlock(mine), 0);
    };
  };
  Fiber a = sched.spawn(cross(0, &first, &second));
  Fiber b = sched.spawn(cross(1, &second, &first));
  std::map<std::uint64_t, std::uint64_t> held_by;
  const auto until = std::chrono::steady_clock::now() + 800ms;
  while (held_by.size() < 2 && std::chrono::steady_clock::now() < until) {
    held_by.clear();
    for (const FiberSnapshot& f : sched.snapshot().fibers)
      if (f.wait_kind == "glibc mutex") held_by[f.id] = f.held_by_fiber;
    std::this_thread::sleep_for(5ms);
  }
  a.join();
  b.join();
  ASSERT_EQ(held_by.size(), 2u) << "both fibers waited for the other";
  EXPECT_EQ(held_by[ids[0].load()], ids[1].load());
  EXPECT_EQ(held_by[ids[1].load()], ids[0].load());
  EXPECT_EQ(pthread_mutex_destroy(&first), 0);
  EXPECT_EQ(pthread_mutex_destroy(&second), 0);
}

INSTANTIATE_TEST_SUITE_P(Kinds, GlibcMutexFibers,
                         ::testing::Values(GlibcKind{"SharedNormal", PTHREAD_MUTEX_NORMAL, false},
                                           GlibcKind{"SharedRecursive", PTHREAD_MUTEX_RECURSIVE, false},
                                           GlibcKind{"SharedErrorCheck", PTHREAD_MUTEX_ERRORCHECK, false},
                                           GlibcKind{"RobustNormal", PTHREAD_MUTEX_NORMAL, true}),
                         [](const ::testing::TestParamInfo<GlibcKind>& info) { return info.param.name; });

// A fiber's unlock of a normal process-shared mutex another fiber holds
// (glibc does not check the owner of a normal one) takes no pin of its
// own: before, the fiber holding a robust mutex lost that mutex's pin
// with it, moved, and its unlock failed (EPERM: another thread's tid).
TEST(GlibcMutexes, AnUnlockOfAnothersMutexTakesNoPinOfTheCallers) {
  if (kMisuseIsReported) GTEST_SKIP() << "ThreadSanitizer reports the misuse itself";
  pthread_mutex_t others;
  ASSERT_EQ(init_mutex(&others, GlibcKind{"SharedNormal", PTHREAD_MUTEX_NORMAL, false}), 0);
  pthread_mutex_t mine;
  ASSERT_EQ(init_mutex(&mine, GlibcKind{"RobustNormal", PTHREAD_MUTEX_NORMAL, true}), 0);
  Scheduler sched{test::config_with(2)};
  sched.spawn([&] { ASSERT_EQ(pthread_mutex_lock(&others), 0); }).join();
  pid_t before = 0;
  pid_t after = 0;
  int unlocked = -1;
  sched
      .spawn([&] {
        ASSERT_EQ(pthread_mutex_lock(&mine), 0);
        EXPECT_EQ(pthread_mutex_unlock(&others), 0);
        before = thread_id();
        after = move_to_another_worker(sched);
        unlocked = pthread_mutex_unlock(&mine);
      })
      .join();
  EXPECT_EQ(before, after) << "the fiber holding the robust mutex moved";
  EXPECT_EQ(unlocked, 0);
  EXPECT_EQ(pthread_mutex_destroy(&mine), 0);
  EXPECT_EQ(pthread_mutex_destroy(&others), 0);
}

// A signal handler's lock of such a mutex is glibc's call as it is, as
// every lock hook's there (docs/io.md, "Signal handlers"), even where
// another fiber of the thread holds it: here glibc's timed lock of a
// normal mutex whose owner is the thread's tid times out (the holder,
// pinned to the thread, cannot run meanwhile). Before, the handler parked
// the fiber it interrupted, and had the mutex once the holder unlocked.
std::atomic<int> handler_lock_result{-1};
pthread_mutex_t* handler_mutex = nullptr;

void lock_in_handler(int) {
  const timespec later = realtime_after(500ms);  // past the holder's unlock
  handler_lock_result = pthread_mutex_timedlock(handler_mutex, &later);
}

TEST(GlibcMutexes, ASignalHandlersLockIsGlibcsAsItIs) {
  if (kMisuseIsReported) GTEST_SKIP() << "ThreadSanitizer reports a lock in a signal handler";
  pthread_mutex_t mu;
  ASSERT_EQ(init_mutex(&mu, GlibcKind{"SharedNormal", PTHREAD_MUTEX_NORMAL, false}), 0);
  handler_mutex = &mu;
  handler_lock_result = -1;
  struct sigaction action {};
  action.sa_handler = &lock_in_handler;
  struct sigaction before {};
  ASSERT_EQ(sigaction(SIGUSR1, &action, &before), 0);
  {
    Scheduler sched{test::config_with(1)};
    std::atomic<bool> held{false};
    std::atomic<pthread_t> spinner_thread{};
    std::atomic<bool> spinning{false};
    Fiber holder = sched.spawn([&] {
      ASSERT_EQ(pthread_mutex_lock(&mu), 0);
      held = true;
      this_fiber::sleep_for(300ms);
      EXPECT_EQ(pthread_mutex_unlock(&mu), 0);
    });
    Fiber spinner = sched.spawn([&] {
      while (!held.load()) this_fiber::sleep_for(1ms);
      spinner_thread = pthread_self();
      spinning = true;
      const auto until = std::chrono::steady_clock::now() + 2s;  // no checkpoint: the thread stays its
      while (handler_lock_result.load() == -1 && std::chrono::steady_clock::now() < until) {
      }
    });
    while (!spinning.load()) std::this_thread::sleep_for(1ms);
    ASSERT_EQ(pthread_kill(spinner_thread.load(), SIGUSR1), 0);
    spinner.join();
    holder.join();
  }
  ASSERT_EQ(sigaction(SIGUSR1, &before, nullptr), 0);
  EXPECT_EQ(handler_lock_result.load(), ETIMEDOUT);
  EXPECT_EQ(pthread_mutex_destroy(&mu), 0);
}

// The same for a process-shared rwlock's write lock.
TEST(GlibcMutexes, AnotherFiberOfASharedRwlockWritersThreadWaitsForItsUnlock) {
  pthread_rwlockattr_t attr;
  pthread_rwlockattr_init(&attr);
  pthread_rwlockattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_rwlock_t lock;
  ASSERT_EQ(pthread_rwlock_init(&lock, &attr), 0);
  pthread_rwlockattr_destroy(&attr);
  beside_a_holder([&] { return pthread_rwlock_wrlock(&lock); }, [&] { return pthread_rwlock_unlock(&lock); },
                  [&] {
                    EXPECT_EQ(pthread_rwlock_tryrdlock(&lock), EBUSY);
                    EXPECT_EQ(pthread_rwlock_trywrlock(&lock), EBUSY);
                    if (!kMisuseIsReported) {  // as above
                      EXPECT_EQ(pthread_rwlock_unlock(&lock), EPERM);
                    }
                    const timespec soon = realtime_after(10ms);
                    EXPECT_EQ(pthread_rwlock_timedwrlock(&lock, &soon), ETIMEDOUT);
                  },
                  [&](const std::atomic<bool>& released) {
                    EXPECT_EQ(pthread_rwlock_rdlock(&lock), 0);
                    EXPECT_TRUE(released.load()) << "a reader got in beside the writer";
                    EXPECT_EQ(pthread_rwlock_unlock(&lock), 0);
                  });
  EXPECT_EQ(pthread_rwlock_trywrlock(&lock), 0) << "left locked";
  EXPECT_EQ(pthread_rwlock_unlock(&lock), 0);
  EXPECT_EQ(pthread_rwlock_destroy(&lock), 0);
}

INSTANTIATE_TEST_SUITE_P(Callers, LockSemantics, ::testing::Values(Caller::fiber, Caller::thread), caller_name);

// PREFER_WRITER_NONRECURSIVE: a reader waits behind a waiting writer.
TEST(RwlockPreference, AWriterPreferringRwlockQueuesReadersBehindAWaitingWriter) {
  Scheduler sched(test::config_with(2));
  pthread_rwlockattr_t attr;
  pthread_rwlockattr_init(&attr);
  pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  pthread_rwlock_t lock;
  pthread_rwlock_init(&lock, &attr);
  pthread_rwlockattr_destroy(&attr);
  ASSERT_EQ(pthread_rwlock_rdlock(&lock), 0);
  std::atomic<int> order{0};
  int writer_at = 0;
  int reader_at = 0;
  Fiber writer = sched.spawn([&] {
    EXPECT_EQ(pthread_rwlock_wrlock(&lock), 0);
    writer_at = ++order;
    EXPECT_EQ(pthread_rwlock_unlock(&lock), 0);
  });
  ASSERT_TRUE(test::wait_until_parked_on(sched, "std::shared_mutex"));
  EXPECT_EQ(pthread_rwlock_tryrdlock(&lock), EBUSY);
  Fiber reader = sched.spawn([&] {
    EXPECT_EQ(pthread_rwlock_rdlock(&lock), 0);
    reader_at = ++order;
    EXPECT_EQ(pthread_rwlock_unlock(&lock), 0);
  });
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(order.load(), 0);
  EXPECT_EQ(pthread_rwlock_unlock(&lock), 0);
  writer.join();
  reader.join();
  EXPECT_EQ(writer_at, 1);
  EXPECT_EQ(reader_at, 2);
  pthread_rwlock_destroy(&lock);
}

// --- what passes through to glibc ------------------------------------------

TEST(LockPassThrough, RobustPriorityAndSharedMutexesAreGlibcs) {
  Scheduler sched(test::config_with(2));
  pthread_mutex_t robust;
  ASSERT_EQ(
      init_mutex(&robust, [](pthread_mutexattr_t* attr) { pthread_mutexattr_setrobust(attr, PTHREAD_MUTEX_ROBUST); }),
      0);
  // A thread that ends holding it: the next locker learns it, from glibc.
  std::thread([&] { EXPECT_EQ(pthread_mutex_lock(&robust), 0); }).join();
  sched
      .spawn([&] {
        EXPECT_EQ(pthread_mutex_lock(&robust), EOWNERDEAD);
        EXPECT_EQ(pthread_mutex_consistent(&robust), 0);
        EXPECT_EQ(pthread_mutex_unlock(&robust), 0);
      })
      .join();
  pthread_mutex_destroy(&robust);

  pthread_mutex_t inheriting;
  ASSERT_EQ(init_mutex(&inheriting,
                       [](pthread_mutexattr_t* attr) { pthread_mutexattr_setprotocol(attr, PTHREAD_PRIO_INHERIT); }),
            0);
  pthread_mutex_t shared;
  ASSERT_EQ(init_mutex(&shared,
                       [](pthread_mutexattr_t* attr) { pthread_mutexattr_setpshared(attr, PTHREAD_PROCESS_SHARED); }),
            0);
  long counter = 0;
  std::vector<Fiber> fibers;
  for (int i = 0; i < 4; ++i)
    fibers.push_back(sched.spawn([&] {
      for (int j = 0; j < 200; ++j) {
        ASSERT_EQ(pthread_mutex_lock(&inheriting), 0);
        ASSERT_EQ(pthread_mutex_lock(&shared), 0);
        ++counter;
        ASSERT_EQ(pthread_mutex_unlock(&shared), 0);
        ASSERT_EQ(pthread_mutex_unlock(&inheriting), 0);
      }
    }));
  for (auto& f : fibers) f.join();
  EXPECT_EQ(counter, 800);
  pthread_mutex_destroy(&inheriting);
  pthread_mutex_destroy(&shared);
}

// A process-shared condition variable is glibc's; with a process-private
// mutex the hooks take over, its wait is bridged so that glibc never
// releases that mutex itself, and a signal still finds the waiter.
TEST(LockPassThrough, ASharedCondvarWithATakenOverMutexStillWakesItsWaiter) {
  Scheduler sched(test::config_with(2));
  pthread_cond_t cond;
  ASSERT_EQ(init_cond(&cond, shared_cond), 0);
  std::mutex mu;  // taken over
  int rounds_seen = 0;
  bool ready = false;
  constexpr int kRounds = 200;
  // A fiber and a thread contend for the mutex while one waits.
  Fiber contender = sched.spawn([&] {
    for (int i = 0; i < 2000; ++i) {
      std::lock_guard guard(mu);
    }
  });
  std::thread waiter([&] {
    for (int i = 0; i < kRounds; ++i) {
      std::unique_lock lock(mu);
      while (!ready) EXPECT_EQ(pthread_cond_wait(&cond, mu.native_handle()), 0);
      ready = false;
      ++rounds_seen;
    }
  });
  sched
      .spawn([&] {
        for (int i = 0; i < kRounds; ++i) {
          for (;;) {
            {
              std::lock_guard guard(mu);
              if (!ready) break;
            }
            this_fiber::yield();
          }
          {
            std::lock_guard guard(mu);
            ready = true;
            EXPECT_EQ(pthread_cond_signal(&cond), 0);
          }
        }
      })
      .join();
  waiter.join();
  contender.join();
  EXPECT_EQ(rounds_seen, kRounds);
  pthread_cond_destroy(&cond);
}

// A fiber woken from a park on the mutex is pinned to its worker (its
// caller's errno); the worker's thread is the one a process-shared wait
// blocks in glibc. The waiter's loop of short timed waits must leave that
// thread to it between two waits, not only once the loop ends.
TEST(LockPassThrough, ALoopOfSharedCondvarTimedWaitsLetsAFiberParkedOnItsMutexIn) {
  Scheduler sched(test::config_with(1));
  pthread_cond_t cond;
  ASSERT_EQ(init_cond(&cond,
                      [](pthread_condattr_t* attr) {
                        shared_cond(attr);
                        pthread_condattr_setclock(attr, CLOCK_MONOTONIC);
                      }),
            0);
  std::mutex mu;  // taken over
  bool flag = false;
  int waits = 0;
  constexpr int kWaitMs = 50;
  Fiber waiter = sched.spawn([&] {
    std::unique_lock lock(mu);
    this_fiber::sleep_for(std::chrono::milliseconds(20));  // the setter parks on mu meanwhile
    // Bounded: before the fix the setter got in after about a second.
    for (; !flag && waits < 60; ++waits) {
      timespec at{};
      clock_gettime(CLOCK_MONOTONIC, &at);
      at.tv_nsec += kWaitMs * 1'000'000L;
      if (at.tv_nsec >= 1'000'000'000L) {
        ++at.tv_sec;
        at.tv_nsec -= 1'000'000'000L;
      }
      const int result = pthread_cond_timedwait(&cond, mu.native_handle(), &at);
      EXPECT_TRUE(result == 0 || result == ETIMEDOUT) << result;
    }
  });
  Fiber setter = sched.spawn([&] {
    this_fiber::sleep_for(std::chrono::milliseconds(5));
    std::lock_guard guard(mu);
    flag = true;
    EXPECT_EQ(pthread_cond_signal(&cond), 0);
  });
  waiter.join();
  setter.join();
  EXPECT_TRUE(flag);
  // One wait with a thread (the setter signals it); here the setter runs
  // when the first wait ends. A few more are a loaded machine's sysmon.
  EXPECT_LE(waits, 4) << "the setter waited through " << waits << " waits of " << kWaitMs << " ms";
  pthread_cond_destroy(&cond);
}

// What a program's own lock calls reach: libweft's definitions, found
// before glibc's (a sanitizer's runtime, loaded first, intercepts them and
// calls the next definition, libweft's). The condition variable's carry
// glibc's default version, GLIBC_2.3.2, because a lookup by version
// (dlvsym, as ThreadSanitizer's interceptors make) accepts nothing else
// (libweft.map).
TEST(LockSymbols, TheLockCallsResolveToLibweft) {
  Dl_info weft_info{};
  ASSERT_NE(dladdr(reinterpret_cast<void*>(&this_fiber::yield), &weft_info), 0);
  void* weft = dlopen(weft_info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  ASSERT_NE(weft, nullptr) << dlerror();
  auto object_of = [](void* address) {
    Dl_info info{};
    return address != nullptr && dladdr(address, &info) != 0 ? std::string(info.dli_fname) : std::string("nothing");
  };
  for (const char* name :
       {"pthread_mutex_lock", "pthread_mutex_unlock", "pthread_cond_wait", "pthread_cond_timedwait",
        "pthread_cond_signal", "pthread_cond_broadcast", "pthread_rwlock_rdlock", "mtx_lock", "mtx_trylock",
        "mtx_timedlock", "mtx_unlock", "cnd_wait", "cnd_timedwait", "cnd_signal", "cnd_broadcast", "call_once"}) {
    const std::string found = object_of(dlsym(RTLD_DEFAULT, name));
    const bool sanitizer = found.find("asan") != std::string::npos || found.find("tsan") != std::string::npos;
    if (!sanitizer) {
      EXPECT_EQ(found, weft_info.dli_fname) << name;
    }
    EXPECT_EQ(object_of(dlsym(weft, name)), weft_info.dli_fname) << name;
  }
  for (const char* name :
       {"pthread_cond_wait", "pthread_cond_timedwait", "pthread_cond_signal", "pthread_cond_broadcast"})
    EXPECT_EQ(object_of(dlvsym(weft, name, "GLIBC_2.3.2")), weft_info.dli_fname) << name << "@GLIBC_2.3.2";
  dlclose(weft);
}

// --- after fork ---------------------------------------------------------------

TEST(LockFork, AChildLocksWhatItsParentsFibersWereParkedOn) {
  Scheduler sched(test::config_with(2));
  std::mutex mu;
  std::condition_variable cv;
  std::unique_lock held(mu);
  Fiber waiter = sched.spawn([&] { std::lock_guard guard(mu); });
  ASSERT_TRUE(test::wait_until_parked_on(sched, "std::mutex"));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The parent's waiter did not come along; the lock is still ours.
    held.unlock();
    const bool relocked = mu.try_lock();
    if (relocked) mu.unlock();
    std::mutex other;
    std::unique_lock lock(other);
    cv.notify_all();
    const bool timed_out = cv.wait_for(lock, 5ms) == std::cv_status::timeout;
    _exit(relocked && timed_out ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  held.unlock();
  waiter.join();
}

// A condition variable may be destroyed as soon as its waiters are woken:
// a woken waiter never touches it again (ASan sees any access).
// --- thread cancellation ------------------------------------------------

// A plain thread that waits on a condition variable until `done`, its
// cancellation cleanup recording whether it held the mutex.
struct CancelledWaiter {
  pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
  bool disable_cancellation = false;
  std::atomic<bool> waiting{false};
  std::atomic<int> held_in_cleanup{-1};
  bool done = false;  // under mutex
};

void record_cleanup(void* arg) {
  auto* waiter = static_cast<CancelledWaiter*>(arg);
  // A normal mutex the caller holds answers EBUSY; a free one is taken.
  waiter->held_in_cleanup = pthread_mutex_trylock(&waiter->mutex) == EBUSY ? 1 : 0;
  pthread_mutex_unlock(&waiter->mutex);
}

void* wait_until_done(void* arg) {
  auto* waiter = static_cast<CancelledWaiter*>(arg);
  if (waiter->disable_cancellation) pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, nullptr);
  pthread_mutex_lock(&waiter->mutex);
  pthread_cleanup_push(record_cleanup, waiter);
  waiter->waiting = true;
  while (!waiter->done) pthread_cond_wait(&waiter->cond, &waiter->mutex);
  pthread_cleanup_pop(1);
  return nullptr;
}

// pthread_cond_wait is a cancellation point (POSIX), as glibc's: a thread
// cancelled while it sleeps there ends, its cleanup run with the mutex held.
TEST(LockCancellation, ACancelledThreadLeavesItsConditionWaitHoldingTheMutex) {
  CancelledWaiter waiter;
  pthread_t thread;
  ASSERT_EQ(pthread_create(&thread, nullptr, &wait_until_done, &waiter), 0);
  while (!waiter.waiting.load()) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(20ms);  // asleep in the wait by now
  ASSERT_EQ(pthread_cancel(thread), 0);
  void* result = nullptr;
  completes_within(
      30s, [&] { pthread_join(thread, &result); }, "pthread_join of the cancelled waiter");
  EXPECT_EQ(result, PTHREAD_CANCELED);
  EXPECT_EQ(waiter.held_in_cleanup.load(), 1);
}

// With cancellation disabled the wait goes on (at most a spurious wake-up,
// which the caller's loop absorbs) and ends when signalled.
TEST(LockCancellation, AThreadWithCancellationDisabledKeepsWaiting) {
  CancelledWaiter waiter;
  waiter.disable_cancellation = true;
  pthread_t thread;
  ASSERT_EQ(pthread_create(&thread, nullptr, &wait_until_done, &waiter), 0);
  while (!waiter.waiting.load()) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(20ms);
  ASSERT_EQ(pthread_cancel(thread), 0);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(waiter.held_in_cleanup.load(), -1) << "the waiter ended though cancellation was disabled";
  pthread_mutex_lock(&waiter.mutex);
  waiter.done = true;
  pthread_cond_signal(&waiter.cond);
  pthread_mutex_unlock(&waiter.mutex);
  void* result = nullptr;
  completes_within(
      30s, [&] { pthread_join(thread, &result); }, "pthread_join of the signalled waiter");
  EXPECT_EQ(result, nullptr);
  EXPECT_EQ(waiter.held_in_cleanup.load(), 1);  // the normal exit's cleanup, with the mutex held
}

TEST(LockLifetime, ACondvarDestroyedRightAfterNotifyAllIsNotTouchedAgain) {
  Scheduler sched(test::config_with(2));
  for (int round = 0; round < 20; ++round) {
    std::mutex mu;
    auto* cv = new std::condition_variable;
    bool go = false;
    std::atomic<int> waiting{0};
    std::vector<Fiber> fibers;
    for (int i = 0; i < 8; ++i)
      fibers.push_back(sched.spawn([&, cv] {
        std::unique_lock lock(mu);
        ++waiting;
        while (!go) cv->wait(lock);
      }));
    while (waiting.load() < 8) std::this_thread::sleep_for(100us);
    {
      std::lock_guard guard(mu);
      go = true;
      cv->notify_all();
      delete cv;
    }
    for (auto& f : fibers) f.join();
  }
}

// --- the targets, as tests (the benchmarks measure time) -----------

// 1,000 fibers on 2 workers hold one std::mutex each across a 1 ms park,
// then wait on a std::condition_variable that a plain thread signals: all
// finish, and the process never has more than workers + 8 OS threads.
TEST(LockTargets, AThousandFibersHoldAMutexAcrossAParkThenWaitOnACondvar) {
  ThreadWatch watch;  // before the scheduler: its threads are the test's
  Config config = test::config_with(2);
  Scheduler sched(config);
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  int released = 0;
  int consumed = 0;
  constexpr int kFibers = 1000;
  std::vector<Fiber> fibers;
  fibers.reserve(kFibers);
  for (int i = 0; i < kFibers; ++i)
    fibers.push_back(sched.spawn([&] {
      std::unique_lock lock(mu);
      std::this_thread::sleep_for(1ms);  // nanosleep: the hook parks the fiber, the mutex held
      ++arrived;
      cv.wait(lock, [&] { return released > consumed; });
      ++consumed;
    }));
  std::thread signaller([&] {
    for (;;) {
      {
        std::lock_guard guard(mu);
        if (arrived == kFibers) break;
      }
      std::this_thread::sleep_for(1ms);
    }
    for (int i = 0; i < kFibers; ++i) {
      {
        std::lock_guard guard(mu);
        ++released;
      }
      cv.notify_one();
    }
  });
  signaller.join();
  for (auto& f : fibers) f.join();
  EXPECT_EQ(consumed, kFibers);
  EXPECT_LE(watch.most_of_ours(), static_cast<int>(config.workers) + 8 + kSanitizerThreads) << watch.describe();
}

// A std::mutex + std::condition_variable bounded queue between 4 plain-thread
// producers and 100 fiber consumers: every item exactly once, with at most
// workers + 8 OS threads.
TEST(LockTargets, ABoundedQueueFeedsAHundredFiberConsumersFromFourThreads) {
  ThreadWatch watch;  // before the scheduler: its threads are the test's
  Config config = test::config_with(2);
  Scheduler sched(config);
  std::mutex mu;
  std::condition_variable not_empty;
  std::condition_variable not_full;
  std::deque<int> queue;
  constexpr std::size_t kCapacity = 64;
  const int items = static_cast<int>(scaled(200'000));
  constexpr int kProducers = 4;
  constexpr int kConsumers = 100;
  bool closed = false;
  std::vector<std::atomic<int>> seen(static_cast<std::size_t>(items));
  std::vector<Fiber> consumers;
  for (int i = 0; i < kConsumers; ++i)
    consumers.push_back(sched.spawn([&] {
      for (;;) {
        std::unique_lock lock(mu);
        not_empty.wait(lock, [&] { return !queue.empty() || closed; });
        if (queue.empty()) return;
        const int item = queue.front();
        queue.pop_front();
        lock.unlock();
        not_full.notify_one();
        seen[static_cast<std::size_t>(item)].fetch_add(1);
      }
    }));
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p)
    producers.emplace_back([&, p] {
      for (int item = p; item < items; item += kProducers) {
        std::unique_lock lock(mu);
        not_full.wait(lock, [&] { return queue.size() < kCapacity; });
        queue.push_back(item);
        lock.unlock();
        not_empty.notify_one();
      }
    });
  for (auto& t : producers) t.join();
  {
    std::lock_guard guard(mu);
    closed = true;
  }
  not_empty.notify_all();
  for (auto& f : consumers) f.join();
  int wrong = 0;
  for (const auto& count : seen) wrong += count.load() != 1;
  EXPECT_EQ(wrong, 0);
  EXPECT_LE(watch.most_of_ours(), static_cast<int>(config.workers) + 8 + kSanitizerThreads) << watch.describe();
}

// --- WEFT_HOOK_LOCKS=0 --------------------------------------------------------

// With `variable`=0 a contended std::mutex blocks the fiber's thread, as
// glibc's. The environment is read once, so the test re-runs this binary
// with it set, on the test that `filter` names.
void expect_lock_hooks_off_with(const char* variable, const char* filter) {
  const char* value = std::getenv(variable);
  if (value != nullptr && std::strcmp(value, "0") == 0) {
    Scheduler sched(test::config_with(1));
    expect_lock_blocks_the_thread(sched, [] { return 0; });
    return;
  }
  test::expect_pass_in_child_with(variable, "0", filter);
}

TEST(LockHooksOff, WeftHookLocks0MakesEveryLockCallGlibcs) {
  expect_lock_hooks_off_with("WEFT_HOOK_LOCKS", "LockHooksOff.WeftHookLocks0*");
}

// WEFT_HOOKS=0 turns the lock hooks off with the rest.
TEST(LockHooksOff, WeftHooks0TurnsTheLockHooksOffToo) {
  expect_lock_hooks_off_with("WEFT_HOOKS", "LockHooksOff.WeftHooks0*");
}

}  // namespace
}  // namespace weft
