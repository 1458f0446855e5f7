// WEFT_HOOKS_EXCLUDE (hooks/excluded_callers.h, docs/io.md): a hooked call
// made from a listed shared object is libc's call, in a fiber too; the
// same call from any other object parks as before.
//
// The library is tests/exclude_lib.cpp, built twice under two names: this
// binary lists one of them (and the default list) in WEFT_HOOKS_EXCLUDE
// before anything reads it, and loads both with dlopen. Each call runs on
// ONE worker with no spares, with a second fiber queued behind it: a call
// that parks lets that fiber run before it returns; a call that passes
// through keeps the thread until the test's plain thread releases it, and
// the fiber runs after. Only the order is checked, never a time.
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "hooks/excluded_callers.h"
#include "socket_pair.h"
#include "test_support.h"

namespace weft {
namespace {

using namespace std::chrono_literals;

// Before main, and so before any fiber's first hooked call, which is when
// the list is read.
const bool exclusion_set = setenv("WEFT_HOOKS_EXCLUDE", "default:libweft_test_excluded*", 1) == 0;
const bool lock_exclusion_set = setenv("WEFT_HOOK_LOCKS_EXCLUDE", "default:libweft_test_locks_excluded*", 1) == 0;

// --- the list itself ------------------------------------------------------------

TEST(ExcludeList, SplitsAtColonsAndCommasAndSkipsEmptyItems) {
  const auto list = detail::ExcludeList::parse("liba.so*::libb.so.1,,/opt/x/*.so:");
  EXPECT_EQ(list.patterns(), (std::vector<std::string>{"liba.so*", "libb.so.1", "/opt/x/*.so"}));
  EXPECT_TRUE(detail::ExcludeList::parse("").patterns().empty());
  EXPECT_TRUE(detail::ExcludeList::parse(":,").patterns().empty());
}

TEST(ExcludeList, DefaultStandsForTheBuiltInListOnce) {
  const auto defaults = detail::ExcludeList::parse(detail::kDefaultExclusions);
  ASSERT_FALSE(defaults.patterns().empty());
  auto expected = defaults.patterns();
  expected.push_back("libmine.so*");
  EXPECT_EQ(detail::ExcludeList::parse("default:libmine.so*,default").patterns(), expected);
}

TEST(ExcludeList, MatchesTheFileNameOrWithASlashTheWholePath) {
  const auto list = detail::ExcludeList::parse("libfoo.so*:/opt/vendor/*");
  EXPECT_TRUE(list.excludes("/usr/lib/x86_64-linux-gnu/libfoo.so.3"));
  EXPECT_TRUE(list.excludes("libfoo.so"));
  EXPECT_FALSE(list.excludes("/usr/lib/libfoobar.so.3"));
  EXPECT_FALSE(list.excludes("/usr/lib/libfoo.so.3/other.so"));  // a pattern without '/' names the file
  EXPECT_TRUE(list.excludes("/opt/vendor/libbar.so"));
  EXPECT_FALSE(list.excludes("/opt/vendor/sub/libbar.so"));  // '*' stops at '/'
  EXPECT_FALSE(list.excludes("/usr/lib/libbar.so"));
}

TEST(ExcludeList, DefaultCoversGrpcAndWhatItBlocksThrough) {
  const auto list = detail::ExcludeList::parse(detail::kDefaultExclusions);
  for (const char* path : {"/lib/x86_64-linux-gnu/libgrpc.so.29", "/lib/x86_64-linux-gnu/libgrpc++.so.1.51",
                           "/lib/x86_64-linux-gnu/libgrpc_unsecure.so.29", "/lib/x86_64-linux-gnu/libgpr.so.29",
                           "/lib/x86_64-linux-gnu/libaddress_sorting.so.29",
                           "/lib/x86_64-linux-gnu/libabsl_time.so.20220623", "/lib/x86_64-linux-gnu/libcares.so.2"})
    EXPECT_TRUE(list.excludes(path)) << path;
  for (const char* path : {"/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/libweft.so.0", "/usr/lib/libhiredis.so.0.14",
                           "/lib/x86_64-linux-gnu/libcurl.so.4"})
    EXPECT_FALSE(list.excludes(path)) << path;
}

TEST(ExcludeList, ReadFromTheEnvironment) {
  ASSERT_TRUE(exclusion_set);
  EXPECT_TRUE(detail::ExcludeList::from_environment().excludes("/build/tests/libweft_test_excluded.so"));
  EXPECT_TRUE(detail::ExcludeList::from_environment().excludes("/lib/x86_64-linux-gnu/libgrpc.so.29"));
  EXPECT_FALSE(detail::ExcludeList::from_environment().excludes("/build/tests/libweft_test_parked.so"));
}

// The objects whose locks wait as a thread's, while their other calls park.
TEST(ExcludeList, DefaultLockListCoversOpenSslsLibcrypto) {
  const auto list = detail::ExcludeList::parse(detail::kDefaultLockExclusions, {});
  EXPECT_TRUE(list.excludes("/lib/x86_64-linux-gnu/libcrypto.so.3"));
  for (const char* path : {"/lib/x86_64-linux-gnu/libssl.so.3", "/lib/x86_64-linux-gnu/libc.so.6",
                           "/usr/lib/libweft.so.0", "/lib/x86_64-linux-gnu/libcurl.so.4"})
    EXPECT_FALSE(list.excludes(path)) << path;
}

TEST(ExcludeList, LockListReadFromTheEnvironment) {
  ASSERT_TRUE(lock_exclusion_set);
  const auto& list = detail::ExcludeList::locks_from_environment();
  EXPECT_TRUE(list.excludes("/build/tests/libweft_test_locks_excluded.so"));
  EXPECT_TRUE(list.excludes("/lib/x86_64-linux-gnu/libcrypto.so.3"));  // `default`
  EXPECT_FALSE(list.excludes("/build/tests/libweft_test_parked.so"));
  EXPECT_FALSE(detail::ExcludeList::from_environment().excludes("/build/tests/libweft_test_locks_excluded.so"));
}

// --- calls from the library -----------------------------------------------------

// One build of tests/exclude_lib.cpp, loaded with dlopen. A library or a
// function that cannot be had throws, failing the test that wanted it.
class TestLibrary {
 public:
  explicit TestLibrary(const char* path) : handle_(dlopen(path, RTLD_NOW | RTLD_LOCAL)) {
    if (handle_ == nullptr) throw std::runtime_error(std::string("dlopen: ") + dlerror());
  }
  TestLibrary(const TestLibrary&) = delete;
  TestLibrary& operator=(const TestLibrary&) = delete;
  ~TestLibrary() { close(); }
  void close() {
    if (handle_ == nullptr) return;
    EXPECT_EQ(dlclose(handle_), 0);
    handle_ = nullptr;
  }

  template <class Fn>
  Fn* function(const char* name) const {
    void* fn = handle_ != nullptr ? dlsym(handle_, name) : nullptr;
    if (fn == nullptr) throw std::runtime_error(std::string("no function ") + name + " in the test library");
    return reinterpret_cast<Fn*>(fn);
  }

 private:
  void* handle_;
};

using ReadFn = ssize_t(int, void*, size_t);
using AcceptFn = int(int);
using WaitFn = int(int, int);
using LockFn = int(pthread_mutex_t*);

enum class Outcome { parked, blocked_the_thread };

std::ostream& operator<<(std::ostream& out, Outcome outcome) {
  return out << (outcome == Outcome::parked ? "parked" : "blocked the thread");
}

// Runs `call` in a fiber on one worker with no spares, and a second fiber
// once the call has begun; `release` (from this plain thread) makes the
// call return, once the second fiber has run, or 300 ms have gone by and
// the worker's thread sleeps (in the call, or idle): a worker held off
// its CPU on a loaded machine may yet run the second fiber, and a parked
// call released first would be woken into the worker's next slot, ahead
// of it.
// Whether the second fiber ran before the call returned says whether the
// call parked.
Outcome run_call(const std::function<void()>& call, const std::function<void()>& release) {
  Config config = test::config_with(1);
  config.max_threads = config.workers;  // no spares
  Scheduler sched(config);
  std::atomic<int> events{0};
  std::atomic<bool> calling{false};
  std::atomic<bool> other_ran{false};
  int call_returned_as = 0;
  int other_ran_as = 0;
  std::atomic<int> worker_thread{0};
  Fiber caller = sched.spawn([&] {
    worker_thread.store(gettid());
    // Nothing between the store and the call switches: the other fiber,
    // spawned once this is seen, can run only if the call parks.
    calling.store(true);
    call();
    call_returned_as = ++events;
  });
  const auto started = std::chrono::steady_clock::now();
  while (!calling.load() && std::chrono::steady_clock::now() - started < 30s) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(calling.load());
  Fiber other = sched.spawn([&] {
    other_ran_as = ++events;
    other_ran.store(true);
  });
  const auto spawned = std::chrono::steady_clock::now();
  while (!other_ran.load() && std::chrono::steady_clock::now() - spawned < 300ms) std::this_thread::sleep_for(1ms);
  if (!other_ran.load()) test::await_asleep(worker_thread.load());
  release();
  caller.join();
  other.join();
  return other_ran_as < call_returned_as ? Outcome::parked : Outcome::blocked_the_thread;
}

// A connected AF_UNIX stream pair, blocking, closed at the end of the scope.
struct UnixPair {
  int fds[2] = {-1, -1};
  UnixPair() { EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0) << std::strerror(errno); }
  UnixPair(const UnixPair&) = delete;
  UnixPair& operator=(const UnixPair&) = delete;
  ~UnixPair() {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
};

Outcome read_outcome(ReadFn* read_fn) {
  UnixPair pair;
  char byte = 0;
  ssize_t got = -1;
  const Outcome outcome =
      run_call([&] { got = read_fn(pair.fds[0], &byte, 1); }, [&] { EXPECT_EQ(::write(pair.fds[1], "x", 1), 1); });
  EXPECT_EQ(got, 1);
  EXPECT_EQ(byte, 'x');
  return outcome;
}

Outcome accept_outcome(AcceptFn* accept_fn) {
  test::LoopbackListener listener;
  int accepted = -1;
  int client = -1;
  const Outcome outcome = run_call(
      [&] { accepted = accept_fn(listener.fd); },
      [&] {
        client = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        EXPECT_EQ(::connect(client, reinterpret_cast<const sockaddr*>(&listener.addr), sizeof(listener.addr)), 0)
            << std::strerror(errno);
      });
  EXPECT_GE(accepted, 0) << std::strerror(errno);
  if (accepted >= 0) ::close(accepted);
  if (client >= 0) ::close(client);
  return outcome;
}

Outcome poll_outcome(WaitFn* wait_fn) {
  UnixPair pair;
  int ready = -1;
  const Outcome outcome =
      run_call([&] { ready = wait_fn(pair.fds[0], 60'000); }, [&] { EXPECT_EQ(::write(pair.fds[1], "x", 1), 1); });
  EXPECT_EQ(ready, 1);
  return outcome;
}

// A mutex this plain thread holds, locked by the call: a contended lock.
Outcome lock_outcome(LockFn* lock_fn) {
  pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  EXPECT_EQ(pthread_mutex_lock(&mutex), 0);
  int locked = -1;
  const Outcome outcome = run_call(
      [&] {
        locked = lock_fn(&mutex);
        if (locked == 0) pthread_mutex_unlock(&mutex);
      },
      [&] { EXPECT_EQ(pthread_mutex_unlock(&mutex), 0); });
  EXPECT_EQ(locked, 0);
  return outcome;
}

class FromTheLibrary : public ::testing::TestWithParam<bool> {
 protected:
  bool excluded() const { return GetParam(); }
  const char* path() const { return excluded() ? WEFT_TEST_EXCLUDED_LIB : WEFT_TEST_PARKED_LIB; }
  Outcome expected() const { return excluded() ? Outcome::blocked_the_thread : Outcome::parked; }
};

TEST_P(FromTheLibrary, Read) {
  TestLibrary library(path());
  EXPECT_EQ(read_outcome(library.function<ReadFn>("library_read")), expected());
}

// __read_chk forwards to the read hook: the caller must still be the library.
TEST_P(FromTheLibrary, FortifiedRead) {
  TestLibrary library(path());
  EXPECT_EQ(read_outcome(library.function<ReadFn>("fortified_read")), expected());
}

// accept's gate is in a helper of weft's, asked with weft's own return
// address: the caller is found up the frame-pointer chain.
TEST_P(FromTheLibrary, Accept) {
  TestLibrary library(path());
  EXPECT_EQ(accept_outcome(library.function<AcceptFn>("library_accept")), expected());
}

TEST_P(FromTheLibrary, Poll) {
  TestLibrary library(path());
  EXPECT_EQ(poll_outcome(library.function<WaitFn>("wait_readable")), expected());
}

// The lock hooks honour the list too: a contended mutex waits as a
// thread's (before, it parked whatever the list said).
TEST_P(FromTheLibrary, ContendedLock) {
  TestLibrary library(path());
  EXPECT_EQ(lock_outcome(library.function<LockFn>("library_lock")), expected());
}

INSTANTIATE_TEST_SUITE_P(Library, FromTheLibrary, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "Excluded" : "NotExcluded");
                         });

// A library listed in WEFT_HOOK_LOCKS_EXCLUDE alone: its contended locks
// wait as a thread's, and its other calls park (OpenSSL's libcrypto, in
// the default list, reads its sockets parked).
TEST(LocksExcludedLibrary, ItsReadParksAndItsContendedLockBlocksTheThread) {
  TestLibrary library(WEFT_TEST_LOCKS_EXCLUDED_LIB);
  EXPECT_EQ(read_outcome(library.function<ReadFn>("library_read")), Outcome::parked);
  EXPECT_EQ(lock_outcome(library.function<LockFn>("library_lock")), Outcome::blocked_the_thread);
}

// The test's own calls (from the executable) park as ever.
TEST(FromTheExecutable, ReadParks) { EXPECT_EQ(read_outcome(&::read), Outcome::parked); }

// Until a listed object is loaded the hooks do not look at callers at all;
// a dlopen of one makes them look.
TEST(OpenedLater, ALibraryOpenedAfterTheFirstCallsIsExcluded) {
  ASSERT_EQ(read_outcome(&::read), Outcome::parked);  // no listed object loaded yet: nothing looked at
  TestLibrary excluded(WEFT_TEST_EXCLUDED_LIB);
  EXPECT_EQ(read_outcome(excluded.function<ReadFn>("library_read")), Outcome::blocked_the_thread);
}

// After a dlclose, an object loaded where the closed one was is classified
// afresh: the same return addresses, now in a library that is not listed.
TEST(AfterDlclose, TheSameAddressesInAnotherLibraryPark) {
  TestLibrary excluded(WEFT_TEST_EXCLUDED_LIB);
  ReadFn* excluded_read = excluded.function<ReadFn>("library_read");
  ASSERT_EQ(read_outcome(excluded_read), Outcome::blocked_the_thread);
  excluded.close();
  TestLibrary parked(WEFT_TEST_PARKED_LIB);
  ReadFn* parked_read = parked.function<ReadFn>("library_read");
  if (reinterpret_cast<void*>(parked_read) == reinterpret_cast<void*>(excluded_read))
    std::printf("[ note     ] loaded at the same address: the cache's old verdict would apply\n");
  EXPECT_EQ(read_outcome(parked_read), Outcome::parked);
}

}  // namespace
}  // namespace weft
