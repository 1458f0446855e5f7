// The hooked calls that nothing can park on announce themselves
// (hooks/announced.h, sched/blocking_call.h): while a fiber waits in one,
// its worker is marked "in a blocking call", which is what lets sysmon hand
// the worker's other fibers off at once. Each case blocks a fiber in one
// such call until a plain thread has seen the mark and then releases it:
// a call that did not announce itself is never released by the watcher
// (it gives up after a bound, and the test fails). Results are compared
// with the same call on a plain thread.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <mqueue.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <resolv.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <termios.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>
#include <weft/detail/raw_syscall.h>
#include <weft/weft.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "hooks_test_support.h"
#include "io/netpoller.h"
#include "sched/worker.h"
#include "socket_pair.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

bool in_call(const detail::Worker* worker) { return (worker->blocking_call() & 1) != 0; }

// Runs `call` in a fiber; once its worker is seen marked, runs `release`
// on this thread. Returns what `call` returned, and whether the mark was
// seen (false: released anyway after 10 s, so that the test ends).
struct Outcome {
  long result = -1;
  int error = 0;
  bool marked = false;
};
// Whether a fiber of `sched` is parked on a wait of `kind`.
bool parked_on(Scheduler& sched, const char* kind) {
  for (const FiberSnapshot& fiber : sched.snapshot().fibers)
    if (fiber.wait_kind == kind) return true;
  return false;
}

// With `armed`, a mark counts only once the fiber has set it: for a call
// made after other announced ones (an uncontended lock before a wait).
// With `parks_on`, what is watched for is the fiber parked on that wait
// kind instead (a call made on a helper while the fiber parks), which
// `marked` then says was seen.
Outcome blocked_fiber(const std::function<long()>& call, const std::function<void()>& release,
                      const std::atomic<bool>* armed = nullptr, const char* parks_on = nullptr) {
  Scheduler sched{test::config_with(1)};
  std::atomic<detail::Worker*> worker{nullptr};
  Outcome outcome;
  Fiber fiber = sched.spawn([&] {
    worker = detail::current_worker();
    outcome.result = call();
    outcome.error = errno;
  });
  const auto give_up = Clock::now() + 10s;
  while (Clock::now() < give_up) {
    const detail::Worker* w = worker.load();
    const bool seen = parks_on != nullptr ? parked_on(sched, parks_on) : w != nullptr && in_call(w);
    if (seen && (armed == nullptr || armed->load())) {
      outcome.marked = true;
      break;
    }
    std::this_thread::sleep_for(100us);
  }
  release();
  fiber.join();
  return outcome;
}

std::string temp_file() {
  char path[] = "/tmp/weft-announced-XXXXXX";
  ::close(::mkstemp(path));
  return path;
}

TEST(Announced, Flock) {
  const std::string path = temp_file();
  const int holder = ::open(path.c_str(), O_RDWR);
  ASSERT_EQ(::flock(holder, LOCK_EX), 0);
  const int waiter = ::open(path.c_str(), O_RDWR);
  const Outcome got = blocked_fiber([&] { return long(::flock(waiter, LOCK_EX)); }, [&] { ::flock(holder, LOCK_UN); });
  EXPECT_TRUE(got.marked);
  EXPECT_EQ(got.result, 0);
  ::close(waiter);
  ::close(holder);
  ::unlink(path.c_str());
}

// Record locks belong to a process: the holder is a child.
pid_t child_holding_lock(const std::string& path, const int ready[2]) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(path.c_str(), O_RDWR);
    struct flock lock {};
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;
    ::fcntl(fd, F_SETLK, &lock);
    const char byte = 1;
    [[maybe_unused]] const ssize_t n = ::write(ready[1], &byte, 1);
    ::pause();  // until killed: the lock goes with it
    ::_exit(0);
  }
  char byte;
  EXPECT_EQ(::read(ready[0], &byte, 1), 1);
  return pid;
}

TEST(Announced, FcntlSetlkwAndLockf) {
  const std::string path = temp_file();
  for (const bool use_lockf : {false, true}) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t holder = child_holding_lock(path, fds);
    const int fd = ::open(path.c_str(), O_RDWR);
    const Outcome got = blocked_fiber(
        [&] {
          if (use_lockf) return long(::lockf(fd, F_LOCK, 0));
          struct flock lock {};
          lock.l_type = F_WRLCK;
          lock.l_whence = SEEK_SET;
          return long(::fcntl(fd, F_SETLKW, &lock));
        },
        [&] {
          ::kill(holder, SIGKILL);
          ::waitpid(holder, nullptr, 0);
        });
    EXPECT_TRUE(got.marked) << (use_lockf ? "lockf" : "fcntl(F_SETLKW)");
    EXPECT_EQ(got.result, 0);
    ::close(fd);
    ::close(fds[0]);
    ::close(fds[1]);
  }
  ::unlink(path.c_str());
}

// wait3 too: glibc's is wait4(-1) inside libc, which no hook saw (it held
// the worker unannounced).
TEST(Announced, WaitForAnyChild) {
  for (const bool use_wait3 : {false, true}) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t child = ::fork();
    if (child == 0) {
      char byte;
      [[maybe_unused]] const ssize_t n = ::read(fds[0], &byte, 1);
      ::_exit(3);
    }
    int status = 0;
    rusage usage{};
    const Outcome got = blocked_fiber([&] { return long(use_wait3 ? ::wait3(&status, 0, &usage) : ::wait(&status)); },
                                      [&] { [[maybe_unused]] const ssize_t n = ::write(fds[1], "x", 1); });
    EXPECT_TRUE(got.marked) << (use_wait3 ? "wait3" : "wait");
    EXPECT_EQ(got.result, child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << status;
    ::close(fds[0]);
    ::close(fds[1]);
  }
}

// What `call` returns, and errno after it, on a fiber.
std::pair<long, int> on_a_fiber(const std::function<long()>& call) {
  Scheduler sched{test::config_with(1)};
  std::pair<long, int> got;
  sched
      .spawn([&] {
        errno = 0;
        got.first = call();
        got.second = errno;
      })
      .join();
  return got;
}

std::pair<long, int> on_this_thread(const std::function<long()>& call) {
  errno = 0;
  const long result = call();
  return {result, errno};
}

timespec seconds_from_now(clockid_t clock, int seconds) {
  timespec at{};
  ::clock_gettime(clock, &at);
  at.tv_sec += seconds;
  return at;
}

// POSIX semaphores: glibc's waits sleep on a futex no hook sees; any
// thread, or another process, may post.
TEST(Announced, SemaphoreWaits) {
  const std::vector<std::pair<const char*, std::function<int(sem_t*)>>> waits = {
      {"sem_wait", [](sem_t* s) { return ::sem_wait(s); }},
      {"sem_timedwait",
       [](sem_t* s) {
         const timespec at = seconds_from_now(CLOCK_REALTIME, 60);
         return ::sem_timedwait(s, &at);
       }},
      {"sem_clockwait",
       [](sem_t* s) {
         const timespec at = seconds_from_now(CLOCK_MONOTONIC, 60);
         return ::sem_clockwait(s, CLOCK_MONOTONIC, &at);
       }},
  };
  for (const auto& entry : waits) {
    // Not a structured binding: the lambdas below capture them.
    const char* name = entry.first;
    const auto& wait = entry.second;
    sem_t semaphore;
    ASSERT_EQ(::sem_init(&semaphore, 0, 0), 0);
    const Outcome got = blocked_fiber([&] { return long(wait(&semaphore)); }, [&] { ::sem_post(&semaphore); });
    EXPECT_TRUE(got.marked) << name;
    EXPECT_EQ(got.result, 0) << name;
    ::sem_destroy(&semaphore);
  }
  // A deadline already past: ETIMEDOUT, as on a thread.
  sem_t semaphore;
  ASSERT_EQ(::sem_init(&semaphore, 0, 0), 0);
  const timespec past{0, 0};
  const auto timed_out = [&] { return long(::sem_timedwait(&semaphore, &past)); };
  const std::pair<long, int> thread = on_this_thread(timed_out);
  EXPECT_EQ(on_a_fiber(timed_out), thread);
  EXPECT_EQ(thread, std::make_pair(-1L, ETIMEDOUT));
  ::sem_destroy(&semaphore);
}

// A process-shared condition variable with its mutex (process-shared, or
// private: the hooks take that over) and the flag it guards.
struct ProcessSharedCondition {
  pthread_cond_t cond;
  pthread_mutex_t mutex;
  bool ready = false;  // under `mutex`
  explicit ProcessSharedCondition(bool shared_mutex) {
    pthread_condattr_t cond_attributes;
    pthread_condattr_init(&cond_attributes);
    EXPECT_EQ(pthread_condattr_setpshared(&cond_attributes, PTHREAD_PROCESS_SHARED), 0);
    EXPECT_EQ(pthread_cond_init(&cond, &cond_attributes), 0);
    pthread_condattr_destroy(&cond_attributes);
    pthread_mutexattr_t mutex_attributes;
    pthread_mutexattr_init(&mutex_attributes);
    EXPECT_EQ(pthread_mutexattr_setpshared(&mutex_attributes,
                                           shared_mutex ? PTHREAD_PROCESS_SHARED : PTHREAD_PROCESS_PRIVATE),
              0);
    EXPECT_EQ(pthread_mutex_init(&mutex, &mutex_attributes), 0);
    pthread_mutexattr_destroy(&mutex_attributes);
  }
  ProcessSharedCondition(const ProcessSharedCondition&) = delete;
  ProcessSharedCondition& operator=(const ProcessSharedCondition&) = delete;
  ~ProcessSharedCondition() {
    pthread_mutex_destroy(&mutex);
    pthread_cond_destroy(&cond);
  }
  // The other side of a wait loop on `ready`.
  void set_and_signal() {
    pthread_mutex_lock(&mutex);
    ready = true;
    pthread_cond_signal(&cond);
    pthread_mutex_unlock(&mutex);
  }
};

// A fiber waits for what another fiber of its worker will do once its own
// park ends: the other fiber sleeps in a hook (usleep), whose park resumes
// only on the thread the call was made on. Before, the wait blocked that
// thread, announced, and the sleeper's wake waited for the thread, which
// waited for it: for good (here until the waiter's 5 s deadline). Now,
// with a fiber pinned to its worker, a semaphore's wait is made on a
// helper while the fiber parks (hooks_announced.cpp, waited_for_another):
// the sleeper, back from its sleep, finds the waiter parked on it
// (`parks_on`). A call that stays announced (a message queue's receive)
// ends once sysmon releases the sleeper's pin, after the call has lasted
// kReleaseHookPinsAfter, as for a futex wait.
void expect_the_wait_for_a_sleeper_beside_it_ends(const std::function<long(const timespec&)>& wait,
                                                  const std::function<void()>& give, const char* parks_on = nullptr,
                                                  const Config& config = test::config_with(1)) {
  Scheduler sched{config};
  std::atomic<bool> sleeping{false};
  bool parked = false;
  Fiber giver = sched.spawn([&] {
    sleeping = true;
    ::usleep(50'000);
    parked = parks_on != nullptr && parked_on(sched, parks_on);
    give();
  });
  long waited = -1;
  int error = 0;
  Fiber waiter = sched.spawn([&] {
    while (!sleeping.load()) this_fiber::yield();
    waited = wait(seconds_from_now(CLOCK_REALTIME, 5));
    error = errno;
  });
  giver.join();
  waiter.join();
  EXPECT_GE(waited, 0) << "the wait ended with " << std::strerror(error);
  if (parks_on != nullptr) {
    EXPECT_TRUE(parked) << "the wait blocked the sleeper's thread";
  }
}

TEST(Announced, AWaitForAFiberParkedInAHookOfItsWorkerEnds) {
  sem_t semaphore;
  ASSERT_EQ(::sem_init(&semaphore, 0, 0), 0);
  expect_the_wait_for_a_sleeper_beside_it_ends([&](const timespec& at) { return ::sem_timedwait(&semaphore, &at); },
                                               [&] { ::sem_post(&semaphore); }, "sem_t");
  ::sem_destroy(&semaphore);

  const std::string name = "/weft-announced-sleeper-" + std::to_string(::getpid());
  mq_attr attributes{};
  attributes.mq_maxmsg = 2;
  attributes.mq_msgsize = 16;
  const mqd_t queue = ::mq_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600, &attributes);
  if (queue == mqd_t(-1)) GTEST_SKIP() << "mq_open: " << std::strerror(errno);
  ::mq_unlink(name.c_str());
  char buffer[16];
  expect_the_wait_for_a_sleeper_beside_it_ends(
      [&](const timespec& at) { return ::mq_timedreceive(queue, buffer, sizeof(buffer), nullptr, &at); },
      [&] { ::mq_send(queue, "x", 1, 0); });
  ::mq_close(queue);
}

// Two fibers parked in hooks on one worker, woken together: the worker
// takes both from its inbox, runs the first, which blocks in an announced
// call that waits for another party, and the second waits behind it,
// pinned. Sysmon releases it after kReleaseHookPinsAfter, as it would
// release it from the inbox. Before, the worker kept the rest of what it
// took from the inbox in a private list that sysmon did not see: the
// second ran only when the first's call ended.
TEST(Announced, AFiberWokenTogetherWithTheBlockedOneIsReleasedToo) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  std::atomic<int> parked{0};
  std::atomic<bool> first_taken{false};
  std::atomic<bool> first_in_call{false};
  bool second_ran_during_the_call = false;
  {
    Scheduler sched{test::config_with(1)};
    auto reader = [&] {
      char byte;
      ++parked;
      ASSERT_EQ(::read(pipe_fds[0], &byte, 1), 1);  // hooked: parks, pinned
      if (!first_taken.exchange(true)) {
        first_in_call = true;
        sigset_t none;
        sigemptyset(&none);
        const timespec two_s{2, 0};
        ::sigtimedwait(&none, nullptr, &two_s);  // announced, waits for another party
        first_in_call = false;
      } else {
        second_ran_during_the_call = first_in_call.load();
      }
    };
    Fiber a = sched.spawn(reader);
    Fiber b = sched.spawn(reader);
    while (parked.load() < 2) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(50ms);            // both in read's park
    ASSERT_EQ(::write(pipe_fds[1], "xy", 2), 2);  // one readiness wakes both
    a.join();
    b.join();
  }
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  EXPECT_TRUE(second_ran_during_the_call) << "the second fiber waited for the first's call to end";
}

// The same with no helper for the wait (max_blocking_threads 1: waits may
// hold none of them): glibc's wait is announced and blocks the worker's
// thread, and the sleeper pinned there resumes elsewhere once sysmon
// releases its pin, after kReleaseHookPinsAfter. Before, such waits were
// announced as `maybe`, whose pins sysmon never releases: each wait below
// ran to its 5 s deadline (a pthread_barrier_wait or an untimed wait hung
// for good).
TEST(Announced, AGlibcWaitWithNoHelperForAFiberParkedInAHookOfItsWorkerEnds) {
  Config config = test::config_with(1);
  config.max_blocking_threads = 1;
  // pthread's results are errors, not -1 and errno.
  const auto as_call = [](int error) {
    errno = error;
    return error == 0 ? 0L : -1L;
  };
  sem_t semaphore;
  ASSERT_EQ(::sem_init(&semaphore, 0, 0), 0);
  {
    SCOPED_TRACE("sem_timedwait");
    expect_the_wait_for_a_sleeper_beside_it_ends([&](const timespec& at) { return ::sem_timedwait(&semaphore, &at); },
                                                 [&] { ::sem_post(&semaphore); }, nullptr, config);
  }
  ::sem_destroy(&semaphore);

  {
    SCOPED_TRACE("a process-shared pthread_cond_timedwait");
    ProcessSharedCondition shared(true);
    expect_the_wait_for_a_sleeper_beside_it_ends(
        [&](const timespec& at) {
          int error = pthread_mutex_lock(&shared.mutex);
          while (error == 0 && !shared.ready) error = pthread_cond_timedwait(&shared.cond, &shared.mutex, &at);
          pthread_mutex_unlock(&shared.mutex);
          return as_call(error);
        },
        [&] { shared.set_and_signal(); }, nullptr, config);
  }

  // A robust mutex that a plain thread holds until the sleeper says.
  pthread_mutexattr_t robust_attributes;
  pthread_mutexattr_init(&robust_attributes);
  ASSERT_EQ(pthread_mutexattr_setrobust(&robust_attributes, PTHREAD_MUTEX_ROBUST), 0);
  pthread_mutex_t robust;
  ASSERT_EQ(pthread_mutex_init(&robust, &robust_attributes), 0);
  std::atomic<bool> held{false};
  sem_t release;
  ASSERT_EQ(::sem_init(&release, 0, 0), 0);
  std::thread holder([&] {
    pthread_mutex_lock(&robust);
    held = true;
    const timespec at = seconds_from_now(CLOCK_REALTIME, 20);
    ::sem_timedwait(&release, &at);
    pthread_mutex_unlock(&robust);
  });
  while (!held.load()) std::this_thread::sleep_for(1ms);
  {
    SCOPED_TRACE("a robust pthread_mutex_timedlock");
    expect_the_wait_for_a_sleeper_beside_it_ends(
        [&](const timespec& at) {
          const int error = pthread_mutex_timedlock(&robust, &at);
          if (error == 0) pthread_mutex_unlock(&robust);
          return as_call(error);
        },
        [&] { ::sem_post(&release); }, nullptr, config);
  }
  ::sem_post(&release);  // if the giver never ran
  holder.join();
  ::sem_destroy(&release);
  pthread_mutex_destroy(&robust);
  pthread_mutexattr_destroy(&robust_attributes);
}

// A fiber parked in a hook (a read) is pinned to its worker, whose thread
// another fiber blocks in a raw futex wait; woken there, it is released
// after kReleaseHookPinsAfter and resumes on the other worker. Its hook's
// ErrnoHome writes its errno to the first thread too, where its caller
// may hold errno's address: safe while that thread sleeps. Here the wait
// ends first, and the thread runs its fiber on; the released fiber's
// write then overwrote that fiber's errno (before: 777 -> 4242 under the
// waiter's eyes). Now it is left out once the call has ended.
TEST(Announced, AReleasedHookLeavesTheErrnoOfItsThreadsNextFiberAlone) {
  Config config = test::config_with(2);
  config.max_threads = 2;  // no spare: the released fiber waits for the other worker
  Scheduler sched{config};
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
  std::atomic<bool> spinner_started{false}, waiter_blocking{false}, waiter_running{false}, reader_done{false};
  std::atomic<int> word{0};
  std::atomic<int> seen_by_waiter{0};
  std::atomic<pid_t> waiter_tid{0}, reader_tid_before{0}, reader_tid_after{0};
  // Holds the other worker until the waiter runs again.
  Fiber spinner = sched.spawn([&] {
    spinner_started = true;
    while (!waiter_running.load()) {
    }
  });
  while (!spinner_started.load()) std::this_thread::sleep_for(1ms);
  Fiber waiter = sched.spawn([&] {
    waiter_tid = static_cast<pid_t>(::gettid());
    Fiber reader = spawn([&] {
      reader_tid_before = static_cast<pid_t>(::gettid());
      errno = 4242;
      char c;
      (void)!::read(pair[0], &c, 1);  // parks, pinned here
      reader_tid_after = static_cast<pid_t>(::gettid());
      reader_done = true;
    });
    while (reader_tid_before.load() == 0 || !test::io_waiters_reach(sched, 1)) this_fiber::yield();
    {
      const auto pin = this_fiber::pin();
      waiter_blocking = true;
      const timespec limit{20, 0};
      // The instruction itself: libc's syscall() would park a futex wait.
      while (word.load() == 0) detail::raw_syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, &limit, nullptr, 0);
    }
    errno = 777;
    int* const mine = &errno;
    waiter_running = true;
    const auto until = Clock::now() + 5s;
    while (!reader_done.load() && Clock::now() < until) {
      const int now = *static_cast<volatile int*>(mine);
      if (now != 777) seen_by_waiter = now;
    }
    const int now = *static_cast<volatile int*>(mine);
    if (now != 777) seen_by_waiter = now;
    reader.join();
  });
  while (!waiter_blocking.load()) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(50ms);
  ASSERT_EQ(::write(pair[1], "x", 1), 1);  // the reader wakes, pinned to the blocked thread
  const auto handed_off = [&] {
    std::uint64_t moved = 0;
    for (const WorkerSnapshot& w : sched.snapshot().workers) moved += w.handoffs;
    return moved;
  };
  const auto give_up = Clock::now() + 10s;
  while (handed_off() == 0 && Clock::now() < give_up) std::this_thread::sleep_for(5ms);
  word = 1;
  detail::raw_syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
  waiter.join();
  spinner.join();
  ::close(pair[0]);
  ::close(pair[1]);
  if (reader_tid_before.load() != waiter_tid.load() || reader_tid_after.load() == reader_tid_before.load())
    GTEST_SKIP() << "the reader was not released from the waiter's thread";
  EXPECT_EQ(seen_by_waiter.load(), 0) << "the waiter's errno changed from 777 while it ran";
}

// A semaphore wait's deadline is checked before the count, as glibc checks
// it: a clock it does not take, or a tv_nsec past a second, is EINVAL and
// leaves the count alone, also when the count would have let the wait
// through. Before, a fiber's wait took the count first (sem_trywait).
TEST(Announced, SemaphoreDeadlinesAreCheckedBeforeTheCount) {
  const auto refused = [](bool clocked) {
    return [clocked] {
      sem_t semaphore;
      ::sem_init(&semaphore, 0, 1);
      timespec at = seconds_from_now(CLOCK_REALTIME, 1);
      if (!clocked) at.tv_nsec = 2'000'000'000;
      const long result =
          clocked ? ::sem_clockwait(&semaphore, CLOCK_PROCESS_CPUTIME_ID, &at) : ::sem_timedwait(&semaphore, &at);
      const int error = errno;
      int value = -1;
      ::sem_getvalue(&semaphore, &value);
      ::sem_destroy(&semaphore);
      errno = error;
      return result * 10 + value;  // -10 + 1: EINVAL, the count kept
    };
  };
  for (const bool clocked : {true, false}) {
    const std::pair<long, int> thread = on_this_thread(refused(clocked));
    EXPECT_EQ(on_a_fiber(refused(clocked)), thread) << (clocked ? "sem_clockwait" : "sem_timedwait");
    EXPECT_EQ(thread, std::make_pair(-9L, EINVAL));
  }
}

// A fiber's join of its own thread (pthread_self() is its worker's) is
// EDEADLK, as a thread's, also with a fiber pinned to the worker. A join
// made on a helper (for a while this session) waited there for the
// worker's thread to end: here until its 2 s deadline.
TEST(Announced, AJoinOfItsOwnThreadIsRefused) {
#ifdef WEFT_UNDER_TSAN
  GTEST_SKIP() << "ThreadSanitizer's join interceptor fails its own check on a join of the calling thread";
#endif
  const auto join_self = [] {
    const timespec at = seconds_from_now(CLOCK_REALTIME, 2);
    return long(::pthread_timedjoin_np(::pthread_self(), nullptr, &at));
  };
  EXPECT_EQ(on_this_thread(join_self).first, EDEADLK);
  EXPECT_EQ(on_a_fiber(join_self).first, EDEADLK);
  EXPECT_EQ(on_a_fiber([&] {
              const auto pin = this_fiber::pin();
              return join_self();
            }).first,
            EDEADLK);
}

// A fiber joining a thread waits for the thread: pthread's joins and C11's.
TEST(Announced, JoiningAThread) {
  static std::atomic<bool> finish{false};
  const auto body = [](void*) -> void* {
    while (!finish.load()) ::usleep(1000);
    return reinterpret_cast<void*>(7);
  };
  std::vector<std::pair<const char*, std::function<int(pthread_t, void**)>>> joins = {
      {"pthread_join", [](pthread_t t, void** value) { return ::pthread_join(t, value); }},
      {"pthread_timedjoin_np",
       [](pthread_t t, void** value) {
         const timespec at = seconds_from_now(CLOCK_REALTIME, 60);
         return ::pthread_timedjoin_np(t, value, &at);
       }},
      {"pthread_clockjoin_np",
       [](pthread_t t, void** value) {
         const timespec at = seconds_from_now(CLOCK_MONOTONIC, 60);
         return ::pthread_clockjoin_np(t, value, CLOCK_MONOTONIC, &at);
       }},
  };
#ifdef WEFT_UNDER_TSAN
  // TSan does not intercept pthread_clockjoin_np: the thread it joins
  // would be reported as leaked at exit.
  joins.pop_back();
#endif
  for (const auto& entry : joins) {
    const char* name = entry.first;
    const auto& join = entry.second;
    finish = false;
    pthread_t thread;
    ASSERT_EQ(::pthread_create(&thread, nullptr, body, nullptr), 0);
    void* value = nullptr;
    const Outcome got = blocked_fiber([&] { return long(join(thread, &value)); }, [] { finish = true; });
    EXPECT_TRUE(got.marked) << name;
    EXPECT_EQ(got.result, 0) << name;
    EXPECT_EQ(value, reinterpret_cast<void*>(7)) << name;
  }
}

TEST(Announced, JoiningAC11Thread) {
#ifdef WEFT_UNDER_TSAN
  // glibc's thrd_create starts its thread past TSan's pthread_create
  // interceptor: the thread has no TSan state and dies in its first
  // instrumented call.
  GTEST_SKIP() << "ThreadSanitizer does not intercept C11 threads";
#endif
  static std::atomic<bool> finish{false};
  thrd_t thread;
  ASSERT_EQ(::thrd_create(
                &thread,
                [](void*) {
                  while (!finish.load()) ::usleep(1000);
                  return 9;
                },
                nullptr),
            thrd_success);
  int value = 0;
  const Outcome got = blocked_fiber([&] { return long(::thrd_join(thread, &value)); }, [] { finish = true; });
  EXPECT_TRUE(got.marked) << "thrd_join";
  EXPECT_EQ(got.result, thrd_success);
  EXPECT_EQ(value, 9);
}

TEST(Announced, BarrierWait) {
  pthread_barrier_t barrier;
  ASSERT_EQ(::pthread_barrier_init(&barrier, nullptr, 2), 0);
  int on_thread = -1;
  const Outcome got = blocked_fiber([&] { return long(::pthread_barrier_wait(&barrier)); },
                                    [&] { on_thread = ::pthread_barrier_wait(&barrier); });
  EXPECT_TRUE(got.marked);
  // One of the two is the serial thread, the other gets 0.
  EXPECT_EQ(std::min<long>(got.result, on_thread), PTHREAD_BARRIER_SERIAL_THREAD) << got.result << " " << on_thread;
  EXPECT_EQ(std::max<long>(got.result, on_thread), 0);
  ::pthread_barrier_destroy(&barrier);
}

TEST(Announced, PosixMessageQueues) {
  const std::string name = "/weft-announced-" + std::to_string(::getpid());
  mq_attr attributes{};
  attributes.mq_maxmsg = 2;
  attributes.mq_msgsize = 16;
  const mqd_t queue = ::mq_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600, &attributes);
  if (queue == mqd_t(-1)) GTEST_SKIP() << "mq_open: " << std::strerror(errno);
  ::mq_unlink(name.c_str());  // the queue lives on while it is open
  char buffer[16];
  unsigned int priority = 0;
  for (const bool timed : {false, true}) {
    const timespec at = seconds_from_now(CLOCK_REALTIME, 60);
    const Outcome got = blocked_fiber(
        [&] {
          return long(timed ? ::mq_timedreceive(queue, buffer, sizeof buffer, &priority, &at)
                            : ::mq_receive(queue, buffer, sizeof buffer, &priority));
        },
        [&] { ::mq_send(queue, "hi", 2, 5); });
    EXPECT_TRUE(got.marked) << (timed ? "mq_timedreceive" : "mq_receive");
    EXPECT_EQ(got.result, 2);
    EXPECT_EQ(priority, 5u);
  }
  for (const bool timed : {false, true}) {
    ASSERT_EQ(::mq_send(queue, "a", 1, 0), 0);
    ASSERT_EQ(::mq_send(queue, "b", 1, 0), 0);  // full
    const timespec at = seconds_from_now(CLOCK_REALTIME, 60);
    const Outcome got =
        blocked_fiber([&] { return long(timed ? ::mq_timedsend(queue, "c", 1, 0, &at) : ::mq_send(queue, "c", 1, 0)); },
                      [&] { ::mq_receive(queue, buffer, sizeof buffer, nullptr); });
    EXPECT_TRUE(got.marked) << (timed ? "mq_timedsend" : "mq_send");
    EXPECT_EQ(got.result, 0);
    for (int i = 0; i < 2; ++i) ASSERT_EQ(::mq_receive(queue, buffer, sizeof buffer, nullptr), 1);
  }
  // An empty queue and a deadline already past: ETIMEDOUT, as on a thread.
  const timespec past{0, 0};
  const auto timed_out = [&] { return long(::mq_timedreceive(queue, buffer, sizeof buffer, nullptr, &past)); };
  const std::pair<long, int> thread = on_this_thread(timed_out);
  EXPECT_EQ(on_a_fiber(timed_out), thread);
  EXPECT_EQ(thread, std::make_pair(-1L, ETIMEDOUT));
  ::mq_close(queue);
}

TEST(Announced, OpenOfAFifo) {
  const std::string path = temp_file();
  ::unlink(path.c_str());
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  int writer = -1;
  const Outcome got = blocked_fiber([&] { return long(::open(path.c_str(), O_RDONLY)); },
                                    [&] { writer = ::open(path.c_str(), O_WRONLY); });
  EXPECT_TRUE(got.marked);
  EXPECT_GE(got.result, 0);
  ::close(int(got.result));
  ::close(writer);
  ::unlink(path.c_str());
}

// Whether `call` ends when the party it waits for is a fiber of the same
// worker that sleeps in a hook (usleep) first, so is pinned there, and
// then runs `give`: a call that held the worker without announcing a wait
// for another party would wait for good for a peer that cannot run. A call
// still waiting after 10 s is let out by `rescue`, run on a plain thread
// (and `give` then not run), and the test fails instead of hanging.
void expect_a_call_ends_beside_a_pinned_peer(const std::function<bool()>& call, const std::function<void()>& give,
                                             const std::function<void()>& rescue) {
  std::atomic<bool> done{false};
  std::atomic<bool> rescued{false};
  bool succeeded = false;
  std::thread rescuer([&] {
    const auto deadline = Clock::now() + 10s;
    while (!done.load() && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
    if (done.load()) return;
    rescued = true;
    rescue();
  });
  {
    Scheduler sched{test::config_with(1)};
    std::atomic<bool> sleeping{false};
    Fiber peer = sched.spawn([&] {
      sleeping = true;
      ::usleep(50'000);
      if (!rescued.load()) give();
    });
    Fiber waiter = sched.spawn([&] {
      while (!sleeping.load()) this_fiber::yield();
      succeeded = call();
      done = true;
    });
    peer.join();
    waiter.join();
  }
  rescuer.join();
  EXPECT_FALSE(rescued.load()) << "the call waited for the sleeper, which waited for it";
  EXPECT_TRUE(succeeded);
}

// A FIFO's open waits for the other end, which a fiber of the same worker
// opens once its hook's sleep (whose park resumes only on this thread)
// ends. Before, the open blocked that thread, announced as a call that
// ends by itself, and the sleeper waited for the thread: for good (here
// until this test's own writer, a plain thread, opened the other end after
// 10 s). Now sysmon moves the sleeper once the open has lasted
// kReleaseHookPinsAfter, as behind a semaphore's wait.
// `open_for_reading` opens the FIFO at its path for reading and closes it.
void expect_a_fifos_open_ends_beside_a_pinned_writer(const std::function<bool(const char*)>& open_for_reading) {
  const std::string path = temp_file();
  ::unlink(path.c_str());
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  int writer = -1;
  expect_a_call_ends_beside_a_pinned_peer([&] { return open_for_reading(path.c_str()); },
                                          // Non-blocking: a reader waiting in its open is there.
                                          [&] { writer = ::open(path.c_str(), O_WRONLY | O_NONBLOCK); },
                                          [&] { ::close(::open(path.c_str(), O_WRONLY | O_NONBLOCK)); });
  EXPECT_GE(writer, 0);
  ::close(writer);
  ::unlink(path.c_str());
}

bool close_if_open(int fd) { return fd >= 0 && ::close(fd) == 0; }

TEST(Announced, AFifosOpenForAFiberParkedInAHookOfItsWorkerEnds) {
  expect_a_fifos_open_ends_beside_a_pinned_writer(
      [](const char* path) { return close_if_open(::open(path, O_RDONLY)); });
}

}  // namespace
}  // namespace weft

// What _FORTIFY_SOURCE builds call for flags not known at compile time.
extern "C" int __open_2(const char* path, int flags);
extern "C" int __openat_2(int dir, const char* path, int flags);

namespace weft {
namespace {

TEST(Announced, AFifosFortifiedOpenForAFiberParkedInAHookOfItsWorkerEnds) {
  expect_a_fifos_open_ends_beside_a_pinned_writer(
      [](const char* path) { return close_if_open(::__open_2(path, O_RDONLY)); });
  expect_a_fifos_open_ends_beside_a_pinned_writer(
      [](const char* path) { return close_if_open(::__openat_2(AT_FDCWD, path, O_RDONLY)); });
}

TEST(Announced, AFifosStreamOpenForAFiberParkedInAHookOfItsWorkerEnds) {
  expect_a_fifos_open_ends_beside_a_pinned_writer([](const char* path) {
    FILE* stream = std::fopen(path, "r");
    return stream != nullptr && std::fclose(stream) == 0;
  });
  // libstdc++'s file streams open through fopen.
  expect_a_fifos_open_ends_beside_a_pinned_writer([](const char* path) { return std::ifstream(path).is_open(); });
}

// Calls on a pipe or terminal that wait in the kernel for their other
// party, here a fiber pinned to the same worker by its hook's sleep:
// splice from an empty pipe, sendfile into a full one, preadv2 with a flag
// (RWF_HIPRI) from an empty one, and a write to a terminal larger than its
// buffer, made after a wait for room (a terminal refuses RWF_NOWAIT). Each
// was announced as a call that ends by itself, whose pins sysmon keeps,
// and each hung for good (until the rescue here); now each is a wait for
// another party, and the sleeper moves once it has lasted
// kReleaseHookPinsAfter.
TEST(Announced, ACallOnAPipeOrTerminalForAFiberParkedInAHookOfItsWorkerEnds) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const std::string path = temp_file();
  const int file = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(file, 0);
  ::unlink(path.c_str());
  const auto fill = [&] { return ::write(pipe_fds[1], "hello", 5) == 5; };
  {
    SCOPED_TRACE("splice");
    expect_a_call_ends_beside_a_pinned_peer([&] { return ::splice(pipe_fds[0], nullptr, file, nullptr, 5, 0) == 5; },
                                            [&] { fill(); }, [&] { fill(); });
  }
  {
    SCOPED_TRACE("preadv2 with RWF_HIPRI");
    char buffer[5];
    iovec part{buffer, sizeof buffer};
    expect_a_call_ends_beside_a_pinned_peer([&] { return ::preadv2(pipe_fds[0], &part, 1, -1, RWF_HIPRI) == 5; },
                                            [&] { fill(); }, [&] { fill(); });
  }
  {
    SCOPED_TRACE("sendfile");
    std::vector<char> block(65536, 'x');
    ASSERT_EQ(::pwrite(file, block.data(), 4096, 0), 4096);
    ASSERT_EQ(::fcntl(pipe_fds[1], F_SETFL, O_NONBLOCK), 0);
    while (::write(pipe_fds[1], block.data(), block.size()) > 0) {
    }
    ASSERT_EQ(::fcntl(pipe_fds[1], F_SETFL, 0), 0);
    const auto drain = [&] { return ::read(pipe_fds[0], block.data(), block.size()) > 0; };
    off_t offset = 0;
    expect_a_call_ends_beside_a_pinned_peer([&] { return ::sendfile(pipe_fds[1], file, &offset, 4096) == 4096; },
                                            [&] { drain(); }, [&] { drain(); });
  }
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  ::close(file);

  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0 || ::grantpt(master) != 0 || ::unlockpt(master) != 0)
    GTEST_SKIP() << "no terminal: " << std::strerror(errno);
  const int terminal = ::open(::ptsname(master), O_RDWR | O_NOCTTY);
  ASSERT_GE(terminal, 0);
  termios modes{};
  ASSERT_EQ(::tcgetattr(terminal, &modes), 0);
  ::cfmakeraw(&modes);
  ASSERT_EQ(::tcsetattr(terminal, TCSANOW, &modes), 0);
  constexpr std::size_t kWritten = 65536;
  const auto read_all = [&] {
    std::vector<char> got(kWritten);
    for (std::size_t n = 0; n < kWritten;) {
      const ssize_t part = ::read(terminal, got.data() + n, kWritten - n);
      if (part <= 0) return;
      n += std::size_t(part);
    }
  };
  {
    SCOPED_TRACE("a terminal's write");
    const std::vector<char> written(kWritten, 'y');
    expect_a_call_ends_beside_a_pinned_peer(
        [&] { return ::write(master, written.data(), written.size()) == ssize_t(kWritten); }, read_all, read_all);
  }
  {
    // VMIN 0 with a VTIME: the read returns what comes within VTIME, which
    // the sleeper writes. It waited out VTIME (15 s here), announced as a
    // call that ends by itself, which sysmon leaves pinned fibers behind.
    SCOPED_TRACE("a terminal's read with VMIN 0 and a VTIME");
    modes.c_cc[VMIN] = 0;
    modes.c_cc[VTIME] = 150;
    ASSERT_EQ(::tcsetattr(terminal, TCSANOW, &modes), 0);
    const auto give = [&] { EXPECT_EQ(::write(master, "v", 1), 1); };
    char got = 0;
    expect_a_call_ends_beside_a_pinned_peer([&] { return ::read(terminal, &got, 1) == 1 && got == 'v'; }, give, give);
  }
  ::close(terminal);
  ::close(master);
}

// freopen closes the stream's fd inside libc, where no close hook sees it
// (after the new open, or by a dup3 onto it). A fiber parked on that fd is
// woken as by close (EBADF, docs/io.md), also when the new open fails;
// before, a failed freopen left the fiber parked on a number nothing
// watched.
TEST(Announced, AFailedFreopenWakesAFiberParkedOnTheStreamsFd) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  FILE* stream = ::fdopen(fds[0], "r");
  ASSERT_NE(stream, nullptr);
  std::atomic<bool> done{false};
  bool rescued = false;
  ssize_t got = -2;
  int error = 0;
  {
    Scheduler sched{test::config_with(2)};
    Fiber reader = sched.spawn([&] {
      char c;
      got = ::read(fds[0], &c, 1);
      error = errno;
      done = true;
    });
    ASSERT_TRUE(test::io_waiters_reach(sched, 1));
    EXPECT_EQ(std::freopen("/nonexistent-weft-dir/file", "r", stream), nullptr);
    std::fclose(stream);  // glibc frees the FILE its failed freopen closed
    for (const auto until = Clock::now() + 5s; !done.load() && Clock::now() < until;) std::this_thread::sleep_for(1ms);
    if (!done.load()) {
      rescued = true;
      detail::fd_closing(fds[0]);  // the close no hook saw
    }
    reader.join();
  }
  EXPECT_FALSE(rescued) << "the fiber stayed parked on the stream's closed fd";
  EXPECT_EQ(got, -1);
  EXPECT_EQ(error, EBADF);
  ::close(fds[1]);
}

TEST(AnnouncedDeathTest, AFortifiedOpenThatTakesAModeAndHasNoneAbortsAsGlibcs) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string path = temp_file();
  EXPECT_DEATH(::__open_2(path.c_str(), O_RDWR | O_CREAT), "invalid open call: O_CREAT or O_TMPFILE without mode");
  EXPECT_DEATH(
      {
        Scheduler sched{test::config_with(1)};
        sched.spawn([&] { ::__openat_2(AT_FDCWD, path.c_str(), O_RDWR | O_CREAT); }).join();
      },
      "invalid openat call: O_CREAT or O_TMPFILE without mode");
  ::unlink(path.c_str());
}

TEST(Announced, SigtimedwaitGivesWhatAPlainThreadGets) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  // Blocked in this thread, and in every thread it starts (the workers).
  sigset_t old;
  pthread_sigmask(SIG_BLOCK, &set, &old);
  const timespec ten_ms{0, 10'000'000};
  errno = 0;
  const int on_thread = ::sigtimedwait(&set, nullptr, &ten_ms);
  const int thread_error = errno;
  int on_fiber = 0;
  int fiber_error = 0;
  {
    Scheduler sched{test::config_with(1)};
    sched
        .spawn([&] {
          errno = 0;
          on_fiber = ::sigtimedwait(&set, nullptr, &ten_ms);
          fiber_error = errno;
        })
        .join();
  }
  EXPECT_EQ(on_fiber, on_thread);
  EXPECT_EQ(fiber_error, thread_error);
  EXPECT_EQ(thread_error, EAGAIN);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

// Each of `waits` in turn, in a fiber on one worker, while a plain thread
// sends SIGUSR2 to that fiber's thread alone
// (pthread_kill) after 50 ms; SIGUSR2 is blocked everywhere and read from
// `signals`, a signalfd for it. Returns each wait's result and the signal
// read after it, and counts the worker's announced calls into `calls`.
std::string waits_for_a_signal_to_its_thread(int signals, const std::vector<std::function<int()>>& waits,
                                             std::uint32_t& calls) {
  std::string outcome;
  Scheduler sched{test::config_with(1)};
  sched
      .spawn([&] {
        const detail::Worker* worker = detail::current_worker();
        const pthread_t own = ::pthread_self();
        for (const auto& wait : waits) {
          const std::uint32_t before = worker->blocking_call();
          std::thread sender([&] {
            std::this_thread::sleep_for(50ms);
            ::pthread_kill(own, SIGUSR2);  // to the fiber's thread alone
          });
          const int ready = wait();
          calls += worker->blocking_call() - before;
          sender.join();
          signalfd_siginfo info{};
          outcome += std::to_string(ready) + " " +
                     std::to_string(::read(signals, &info, sizeof info) == ssize_t(sizeof info) ? info.ssi_signo : 0) +
                     "; ";
        }
      })
      .join();
  return outcome;
}

// SIGUSR2 blocked for the scope, here and in the workers started in it.
struct Sigusr2Blocked {
  sigset_t set{};
  sigset_t old{};
  Sigusr2Blocked() {
    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &set, &old);
  }
  ~Sigusr2Blocked() { pthread_sigmask(SIG_SETMASK, &old, nullptr); }
};

// A signalfd is readable for the signals pending on the thread that polls
// it, beside the process's: a fiber's poll or select on one is the call
// itself, on the fiber's own thread, announced, and sees a signal sent to
// that thread alone. Before, it parked on the netpoller, whose thread
// (another worker's, when the fiber's own was busy) never saw the signal:
// the wait lasted its timeout.
TEST(Announced, AWaitOnASignalfdIsTheCallOnItsOwnThread) {
  const Sigusr2Blocked blocked;
  const int fd = ::signalfd(-1, &blocked.set, SFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  std::uint32_t calls = 0;
  const std::string outcome = waits_for_a_signal_to_its_thread(fd,
                                                               {[&] {
                                                                  pollfd one{fd, POLLIN, 0};
                                                                  return ::poll(&one, 1, 5000);
                                                                },
                                                                [&] {
                                                                  fd_set r;
                                                                  FD_ZERO(&r);
                                                                  FD_SET(fd, &r);
                                                                  timeval tv{5, 0};
                                                                  return ::select(fd + 1, &r, nullptr, nullptr, &tv);
                                                                }},
                                                               calls);
  ::close(fd);
  EXPECT_EQ(outcome, "1 " + std::to_string(SIGUSR2) + "; 1 " + std::to_string(SIGUSR2) + "; ");
  EXPECT_EQ(calls, 4u) << "poll and select on a signalfd were not announced";
}

// The same for a user's epoll that holds a signalfd, or holds an epoll
// that does: the epoll_ctl hook marks it, and a fiber's epoll_wait,
// epoll_pwait or poll on it is the call on its own thread, announced.
// Before, the wait parked on the netpoller, whose epoll polled the user's
// from another thread (where the fiber's own worker was busy), and a
// signal sent to the fiber's thread alone was missed for the timeout.
TEST(Announced, AWaitOnAnEpollHoldingASignalfdIsTheCallOnItsOwnThread) {
  const Sigusr2Blocked blocked;
  const int signals = ::signalfd(-1, &blocked.set, SFD_CLOEXEC);
  const int inner = ::epoll_create1(EPOLL_CLOEXEC);
  const int outer = ::epoll_create1(EPOLL_CLOEXEC);
  ASSERT_GE(signals, 0);
  ASSERT_GE(inner, 0);
  ASSERT_GE(outer, 0);
  epoll_event event{};
  event.events = EPOLLIN;
  ASSERT_EQ(::epoll_ctl(inner, EPOLL_CTL_ADD, signals, &event), 0);
  ASSERT_EQ(::epoll_ctl(outer, EPOLL_CTL_ADD, inner, &event), 0);  // nested
  std::uint32_t calls = 0;
  epoll_event got{};
  const std::string outcome = waits_for_a_signal_to_its_thread(
      signals,
      {[&] { return ::epoll_wait(inner, &got, 1, 5000); }, [&] { return ::epoll_pwait(outer, &got, 1, 5000, nullptr); },
       [&] {
         pollfd one{outer, POLLIN, 0};
         return ::poll(&one, 1, 5000);
       }},
      calls);
  ::close(outer);
  ::close(inner);
  ::close(signals);
  const std::string one = "1 " + std::to_string(SIGUSR2) + "; ";
  EXPECT_EQ(outcome, one + one + one);
  EXPECT_EQ(calls, 6u) << "waits on an epoll holding a signalfd were not announced";
}

// A call on an fd the user made non-blocking cannot sleep, so it is not
// announced: when write, writev and accept were, fibers writing to their
// own non-blocking sockets (an event loop, weft::io, libcurl's multi
// interface) kept sysmon looking every 100 us, and a worker the machine
// preempted inside such a write looked blocked and had spares started for
// it. A regular file's write is still announced, O_NONBLOCK or not. The
// worker's call counter grows by 2 per announcement.
TEST(Announced, ACallOnANonBlockingFdIsNotButAFilesWriteIs) {
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
  ASSERT_EQ(::fcntl(pair[0], F_SETFL, ::fcntl(pair[0], F_GETFL) | O_NONBLOCK), 0);
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::listen(listener, 1), 0);
  const std::string path = temp_file();
  // O_NONBLOCK does not keep a regular file's write from waiting for the
  // disk: still announced.
  const int file = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
  ASSERT_GE(file, 0);
  std::uint32_t socket_calls = 0;
  std::uint32_t file_calls = 0;
  int accept_error = 0;
  {
    Scheduler sched{test::config_with(1)};
    sched
        .spawn([&] {
          const detail::Worker* worker = detail::current_worker();
          const char byte = 'x';
          const iovec one{const_cast<char*>(&byte), 1};
          std::uint32_t before = worker->blocking_call();
          EXPECT_EQ(::write(pair[0], &byte, 1), 1);
          EXPECT_EQ(::writev(pair[0], &one, 1), 1);
          EXPECT_EQ(::accept(listener, nullptr, nullptr), -1);  // nobody connects
          accept_error = errno;
          socket_calls = worker->blocking_call() - before;
          before = worker->blocking_call();
          EXPECT_EQ(::write(file, &byte, 1), 1);
          EXPECT_EQ(::writev(file, &one, 1), 1);
          file_calls = worker->blocking_call() - before;
        })
        .join();
  }
  EXPECT_EQ(accept_error, EAGAIN);
  EXPECT_EQ(socket_calls, 0u);
  EXPECT_EQ(file_calls, 4u);
  ::close(file);
  ::unlink(path.c_str());
  ::close(listener);
  ::close(pair[0]);
  ::close(pair[1]);
}

// A socket's close with SO_LINGER waits for the peer to take what is
// queued: here until the test drains it. Before, close() was not
// announced, and its worker's other fibers waited for sysmon's slow path.
TEST(Announced, ALingeringCloseOfASocket) {
  test::LoopbackTcpPair pair;
  char block[64 << 10] = {};
  for (int i = 0; i < 1024 && ::send(pair.client, block, sizeof block, MSG_DONTWAIT) > 0; ++i) {
  }
  const linger wait_for_the_peer{1, 30};
  ASSERT_EQ(::setsockopt(pair.client, SOL_SOCKET, SO_LINGER, &wait_for_the_peer, sizeof wait_for_the_peer), 0);
  const int client = std::exchange(pair.client, -1);
  const Outcome got = blocked_fiber([&] { return long(::close(client)); },
                                    [&] {
                                      const auto until = Clock::now() + 20s;
                                      while (Clock::now() < until && ::recv(pair.server, block, sizeof block, 0) > 0) {
                                      }
                                    });
  EXPECT_TRUE(got.marked);
  EXPECT_EQ(got.result, 0);
}

// A send of TCP's urgent data (MSG_OOB) waits for room as any send does:
// here until the test drains the peer. It is the plain call (the kernel
// marks the last byte of what one call sent), announced. Before, the
// flag, which makes a receive return at once, passed the send through
// unannounced.
TEST(Announced, AnUrgentSendOnAFullSocket) {
  test::LoopbackTcpPair pair;
  char block[64 << 10] = {};
  for (int i = 0; i < 1024 && ::send(pair.client, block, sizeof block, MSG_DONTWAIT) > 0; ++i) {
  }
  const Outcome got = blocked_fiber([&] { return long(::send(pair.client, "u", 1, MSG_OOB)); },
                                    [&] {
                                      // Until nothing more comes for 100 ms: the client stays open.
                                      for (int quiet = 0; quiet < 100;) {
                                        if (::recv(pair.server, block, sizeof block, MSG_DONTWAIT) > 0) {
                                          quiet = 0;
                                        } else {
                                          std::this_thread::sleep_for(1ms);
                                          ++quiet;
                                        }
                                      }
                                    });
  EXPECT_TRUE(got.marked);
  EXPECT_EQ(got.result, 1);
}

// msync with MS_SYNC waits for the range's writeback, as fsync does, and
// says so (Sleeps::always: sysmon judges it blocked at its first look, and
// it wakes sysmon when fibers wait behind it); MS_ASYNC does not wait. The
// worker keeps its last call's flag. Before, both were Sleeps::maybe.
TEST(Announced, MsyncWithMsSyncSleepsAlways) {
  const std::string path = temp_file();
  const int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_EQ(::ftruncate(fd, 4096), 0);
  void* map = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED);
  bool sync_always = false;
  bool async_always = true;
  std::uint32_t calls = 0;
  {
    Scheduler sched{test::config_with(1)};
    sched
        .spawn([&] {
          const detail::Worker* worker = detail::current_worker();
          const std::uint32_t before = worker->blocking_call();
          static_cast<char*>(map)[0] = 'x';
          EXPECT_EQ(::msync(map, 4096, MS_SYNC), 0);
          sync_always = worker->call_sleeps_always();
          EXPECT_EQ(::msync(map, 4096, MS_ASYNC), 0);
          async_always = worker->call_sleeps_always();
          calls = worker->blocking_call() - before;
        })
        .join();
  }
  EXPECT_EQ(calls, 4u) << "both announced";
  EXPECT_TRUE(sync_always);
  EXPECT_FALSE(async_always);
  ::munmap(map, 4096);
  ::close(fd);
  ::unlink(path.c_str());
}

// The locks the hooks leave to glibc (docs/locks.md, "What passes
// through"): a robust mutex, a process-shared rwlock and a process-shared
// condition variable block their thread in glibc's futex wait, announced.
//
// A lock this thread holds, taken in a fiber (`acquire`, then `release`
// if it got it) and released here (`release`) once the fiber's worker is
// seen marked.
Outcome acquire_behind_this_thread(const std::function<int()>& acquire, const std::function<void()>& release) {
  return blocked_fiber(
      [&] {
        const int acquired = acquire();
        if (acquired == 0) release();
        return long(acquired);
      },
      release);
}

TEST(Announced, ARobustMutexsWait) {
  pthread_mutexattr_t attributes;
  pthread_mutexattr_init(&attributes);
  ASSERT_EQ(pthread_mutexattr_setrobust(&attributes, PTHREAD_MUTEX_ROBUST), 0);
  pthread_mutex_t mutex;
  ASSERT_EQ(pthread_mutex_init(&mutex, &attributes), 0);
  ASSERT_EQ(pthread_mutex_lock(&mutex), 0);
  const Outcome got =
      acquire_behind_this_thread([&] { return pthread_mutex_lock(&mutex); }, [&] { pthread_mutex_unlock(&mutex); });
  EXPECT_TRUE(got.marked) << "a robust mutex's lock held its worker unannounced";
  EXPECT_EQ(got.result, 0);
  pthread_mutex_destroy(&mutex);
  pthread_mutexattr_destroy(&attributes);
}

TEST(Announced, AProcessSharedRwlocksWait) {
  pthread_rwlockattr_t attributes;
  pthread_rwlockattr_init(&attributes);
  ASSERT_EQ(pthread_rwlockattr_setpshared(&attributes, PTHREAD_PROCESS_SHARED), 0);
  pthread_rwlock_t lock;
  ASSERT_EQ(pthread_rwlock_init(&lock, &attributes), 0);
  ASSERT_EQ(pthread_rwlock_wrlock(&lock), 0);
  const Outcome got =
      acquire_behind_this_thread([&] { return pthread_rwlock_rdlock(&lock); }, [&] { pthread_rwlock_unlock(&lock); });
  EXPECT_TRUE(got.marked) << "a process-shared rwlock's wait held its worker unannounced";
  EXPECT_EQ(got.result, 0);
  pthread_rwlock_destroy(&lock);
  pthread_rwlockattr_destroy(&attributes);
}

// With a process-shared mutex, and with a private one (which the hooks
// take over: the wait goes through their bridge to glibc's).
TEST(Announced, AProcessSharedConditionVariablesWait) {
  for (const bool shared_mutex : {true, false}) {
    ProcessSharedCondition shared(shared_mutex);
    // Set just before the wait: a process-shared mutex's own lock is
    // announced too, and its mark must not count for the wait's.
    std::atomic<bool> waiting{false};
    const Outcome got = blocked_fiber(
        [&] {
          int waited = pthread_mutex_lock(&shared.mutex);
          waiting = true;
          while (waited == 0 && !shared.ready) waited = pthread_cond_wait(&shared.cond, &shared.mutex);
          pthread_mutex_unlock(&shared.mutex);
          return long(waited);
        },
        [&] { shared.set_and_signal(); }, &waiting);
    EXPECT_TRUE(got.marked) << "a process-shared condition variable's wait held its worker unannounced"
                            << (shared_mutex ? " (process-shared mutex)" : " (private mutex)");
    EXPECT_EQ(got.result, 0);
  }
}

// A nameserver on loopback, for the resolver's queries below: it answers
// one query when asked to (answer_one), with "no such name", so that a
// query waits for it as long as the test wants. Its socket gives up after
// 10 s, as the queries do.
class LoopbackNameserver {
 public:
  LoopbackNameserver() : fd_(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in any{};
    any.sin_family = AF_INET;
    any.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<const sockaddr*>(&any), sizeof any), 0);
    socklen_t length = sizeof address_;
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&address_), &length), 0);
    const timeval bound{10, 0};
    EXPECT_EQ(::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof bound), 0);
  }
  ~LoopbackNameserver() { ::close(fd_); }
  LoopbackNameserver(const LoopbackNameserver&) = delete;
  LoopbackNameserver& operator=(const LoopbackNameserver&) = delete;

  // Makes `state` ask this server only, over UDP, one try of up to 10 s
  // (whatever the machine's resolv.conf, which res_init read, says).
  void serve(struct __res_state& state) const {
    state.options &= ~static_cast<unsigned long>(RES_USEVC);
    state.nscount = 1;
    state.nsaddr_list[0] = address_;
    state.retrans = 10;
    state.retry = 1;
  }

  // Receives one query and answers it: NXDOMAIN, the question echoed.
  void answer_one() const {
    unsigned char message[512];
    sockaddr_in from{};
    socklen_t from_length = sizeof from;
    const ssize_t n = ::recvfrom(fd_, message, sizeof message, 0, reinterpret_cast<sockaddr*>(&from), &from_length);
    ASSERT_GT(n, 12) << "no query came";
    // The question follows the 12-byte header: the name's labels up to
    // the root's empty one, then its type and class.
    std::size_t end = 12;
    while (end < std::size_t(n) && message[end] != 0) end += message[end] + 1u;
    end += 1 + 4;
    ASSERT_LE(end, std::size_t(n));
    message[2] |= 0x80;              // a response (QR)
    message[3] = 0x80 | 3;           // recursion available, NXDOMAIN
    std::memset(message + 6, 0, 6);  // no answers, authorities or additional records (EDNS's dropped)
    ASSERT_EQ(::sendto(fd_, message, end, 0, reinterpret_cast<const sockaddr*>(&from), from_length), ssize_t(end));
  }

 private:
  int fd_;
  sockaddr_in address_{};
};

struct DnsOutcome {
  long result = 0;
  int host_error = 0;
  bool marked = false;
};

// `query` (given the server, returning the call's result) made in a fiber
// that the server answers once its worker is seen marked (or, with
// `parks_on`, the fiber parked on that kind), and on a plain thread that
// the server answers at once.
std::pair<DnsOutcome, DnsOutcome> query_both_ways(const std::function<long(const LoopbackNameserver&)>& query,
                                                  const char* parks_on = nullptr) {
  const LoopbackNameserver server;
  DnsOutcome fiber;
  const Outcome got = blocked_fiber(
      [&] {
        const long result = query(server);
        fiber.host_error = h_errno;
        return result;
      },
      [&] { server.answer_one(); }, nullptr, parks_on);
  fiber.result = got.result;
  fiber.marked = got.marked;
  DnsOutcome thread;
  std::thread answering([&] { server.answer_one(); });
  thread.result = query(server);
  thread.host_error = h_errno;
  answering.join();
  return {fiber, thread};
}

// res_query and the other calls of glibc's stub resolver wait in a poll
// made inside libc, where no hook sees it: they announce themselves.
// res_query uses the calling thread's own state, _res.
TEST(Announced, ResQueryOnTheThreadsOwnState) {
  const auto [fiber, thread] = query_both_ways([](const LoopbackNameserver& server) {
    EXPECT_EQ(res_init(), 0);
    server.serve(_res);
    unsigned char answer[512];
    return long(res_query("weft-test.invalid", C_IN, T_A, answer, sizeof answer));
  });
  EXPECT_TRUE(fiber.marked) << "res_query held its worker unannounced";
  EXPECT_EQ(thread.result, -1);
  EXPECT_EQ(thread.host_error, HOST_NOT_FOUND);
  EXPECT_EQ(fiber.result, thread.result);
  EXPECT_EQ(fiber.host_error, thread.host_error);
}

// A state of the caller's own, and a message it made itself: res_nquery
// and res_nsend, made on a helper of the blocking pool while the fiber
// parks (weft::blocking's wait), as getaddrinfo.
TEST(Announced, ResNqueryAndResNsend) {
  auto with_state = [](const LoopbackNameserver& server, auto&& call) {
    struct __res_state state {};
    EXPECT_EQ(res_ninit(&state), 0);
    server.serve(state);
    const long result = call(&state);
    res_nclose(&state);
    return result;
  };
  const auto [fiber, thread] = query_both_ways(
      [&](const LoopbackNameserver& server) {
        return with_state(server, [](res_state state) {
          unsigned char answer[512];
          return long(res_nquery(state, "weft-test.invalid", C_IN, T_AAAA, answer, sizeof answer));
        });
      },
      "weft::blocking");
  EXPECT_TRUE(fiber.marked) << "res_nquery did not park on the blocking pool";
  EXPECT_EQ(thread.result, -1);
  EXPECT_EQ(fiber.result, thread.result);
  EXPECT_EQ(fiber.host_error, thread.host_error);

  const auto [sent_by_fiber, sent_by_thread] = query_both_ways(
      [&](const LoopbackNameserver& server) {
        return with_state(server, [](res_state state) {
          unsigned char query[512];
          unsigned char answer[512];
          const int length =
              res_nmkquery(state, QUERY, "weft-test.invalid", C_IN, T_A, nullptr, 0, nullptr, query, sizeof query);
          EXPECT_GT(length, 0);
          return long(res_nsend(state, query, length, answer, sizeof answer));
        });
      },
      "weft::blocking");
  EXPECT_TRUE(sent_by_fiber.marked) << "res_nsend did not park on the blocking pool";
  EXPECT_GT(sent_by_thread.result, 12) << "the whole response, whatever its code";
  EXPECT_EQ(sent_by_fiber.result, sent_by_thread.result);
}

// What a binary built against glibc's headers before 2.34 calls: there,
// <resolv.h> renamed res_nquery to __res_nquery.
TEST(Announced, ResNqueryByItsOldName) {
  using Query = int (*)(res_state, const char*, int, int, unsigned char*, int);
  const auto old_name = reinterpret_cast<Query>(dlsym(RTLD_DEFAULT, "__res_nquery"));
  ASSERT_NE(old_name, nullptr) << "no __res_nquery to call";
  const auto [fiber, thread] = query_both_ways(
      [&](const LoopbackNameserver& server) {
        struct __res_state state {};
        EXPECT_EQ(res_ninit(&state), 0);
        server.serve(state);
        unsigned char answer[512];
        const long result = old_name(&state, "weft-test.invalid", C_IN, T_A, answer, sizeof answer);
        res_nclose(&state);
        return result;
      },
      "weft::blocking");
  EXPECT_TRUE(fiber.marked) << "__res_nquery did not park on the blocking pool";
  EXPECT_EQ(fiber.result, thread.result);
  EXPECT_EQ(fiber.host_error, thread.host_error);
}

}  // namespace
}  // namespace weft
