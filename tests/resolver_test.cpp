// Name resolution from fibers (hooks/hooks_resolver.cpp) against a
// nameserver of the test's own: tests/dns_responder.py on 127.0.0.1, in a
// private mount and network namespace (tests/dns_sandbox.h), answering
// after a delay. Each lookup gets its own answer, the same as on a plain
// thread; and they run at once, not a fixed few at a time (the blocking
// pool grows: io/blocking_pool.h).
#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <linux/futex.h>
#include <locale.h>
#include <netdb.h>
#include <pthread.h>
#include <resolv.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <weft/detail/raw_syscall.h>
#include <weft/weft.h>

#include <atomic>
#include <cerrno>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dns_sandbox.h"
#include "pool_support.h"
#include "test_support.h"

namespace weft {
namespace {

// What getaddrinfo said for `name`: "127.1.0.7", or "error <EAI_...>".
std::string lookup(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int rc = ::getaddrinfo(name.c_str(), nullptr, &hints, &result);
  if (rc != 0) return "error " + std::to_string(rc);
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(result->ai_addr)->sin_addr, text, sizeof text);
  ::freeaddrinfo(result);
  return text;
}

// "h<n>.weft.test", built by appending (GCC 12's -Wrestrict misfires on
// "h" + std::to_string(n) + ...).
std::string host_name(int n) {
  std::string name = "h";
  name += std::to_string(n);
  name += ".weft.test";
  return name;
}

std::string expected_address(int n) { return "127.1." + std::to_string(n / 256) + "." + std::to_string(n % 256); }

// The most lookups the responder had waiting at one moment (its
// stats.weft.test answer, 127.2.<hi>.<lo>).
int most_waiting() {
  const std::string stats = lookup("stats.weft.test");
  unsigned char bytes[4] = {};
  if (::inet_pton(AF_INET, stats.c_str(), bytes) != 1) return -1;
  return bytes[2] * 256 + bytes[3];
}

// What `ask` answers on a plain thread, and in a fiber of a 2-worker
// scheduler.
std::pair<std::vector<std::string>, std::vector<std::string>> on_thread_and_fiber(
    const std::function<std::vector<std::string>()>& ask) {
  std::vector<std::string> on_thread;
  std::thread([&] { on_thread = ask(); }).join();
  std::vector<std::string> on_fiber;
  Scheduler sched{test::config_with(2)};
  sched.spawn([&] { on_fiber = ask(); }).join();
  return {on_thread, on_fiber};
}

void expect_child_passed(const char* mode, const char* test) {
  int status = -1;
  const std::string out = test::run_child(mode, "", test, status);
  if (out.find("[  SKIPPED ]") != std::string::npos) GTEST_SKIP() << out;
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("[  PASSED  ] 1 test"), std::string::npos) << out;
}

TEST(Resolver, ManyFibersResolveAtOnceAndEachGetsItsAnswer) {
  expect_child_passed("many", "ResolverChild.ManyFibersResolveAtOnce");
}

TEST(ResolverChild, ManyFibersResolveAtOnce) {
  if (!test::child_mode("many")) GTEST_SKIP() << "runs in the child of Resolver.ManyFibersResolveAtOnce...";
  // A long delay, so that every lookup is in flight at once even on a
  // loaded machine.
  const std::string why = test::DnsSandbox::enter(WEFT_DNS_RESPONDER, 1000);
  if (!why.empty()) GTEST_SKIP() << "no private nameserver: " << why;
  constexpr int kLookups = 100;
  std::vector<std::string> got(kLookups);
  {
    Scheduler sched{test::config_with(2)};
    std::vector<Fiber> fibers;
    for (int i = 0; i < kLookups; ++i) fibers.push_back(sched.spawn([&, i] { got[i] = lookup(host_name(i)); }));
    for (auto& fiber : fibers) fiber.join();
  }
  for (int i = 0; i < kLookups; ++i) EXPECT_EQ(got[i], expected_address(i)) << "lookup " << i;
  // A pool capped at 16 helpers had at most 16 waiting.
  EXPECT_GE(most_waiting(), kLookups / 2);
  test::DnsSandbox::stop();
}

TEST(Resolver, FibersGetWhatAPlainThreadGets) {
  expect_child_passed("same", "ResolverChild.FibersGetWhatAPlainThreadGets");
}

TEST(ResolverChild, FibersGetWhatAPlainThreadGets) {
  if (!test::child_mode("same")) GTEST_SKIP() << "runs in the child of Resolver.FibersGetWhatAPlainThreadGets";
  const std::string why = test::DnsSandbox::enter(WEFT_DNS_RESPONDER, 20);
  if (!why.empty()) GTEST_SKIP() << "no private nameserver: " << why;
  const std::vector<std::string> names = {"h5.weft.test", "h300.weft.test", "missing.weft.test", "localhost"};
  auto ask_all = [&] {
    std::vector<std::string> answers;
    for (const auto& name : names) answers.push_back(lookup(name));
    hostent* host = ::gethostbyname("h9.weft.test");
    answers.push_back(host != nullptr && host->h_addr_list[0] != nullptr
                          ? inet_ntoa(*reinterpret_cast<in_addr*>(host->h_addr_list[0]))
                          : "h_errno " + std::to_string(h_errno));
    hostent storage{};
    hostent* found = nullptr;
    char buf[1024];
    int error = 0;
    const int rc = ::gethostbyname_r("nowhere.weft.test", &storage, buf, sizeof buf, &found, &error);
    answers.push_back(std::to_string(rc) + " " + (found ? "found" : "none") + " " + std::to_string(error));
    return answers;
  };
  const auto [on_thread, on_fiber] = on_thread_and_fiber(ask_all);
  EXPECT_EQ(on_fiber, on_thread);
  EXPECT_EQ(on_thread[0], "127.1.0.5");
  EXPECT_EQ(on_thread[1], "127.1.1.44");
  EXPECT_EQ(on_thread[2], "error " + std::to_string(EAI_NONAME));
  EXPECT_EQ(on_thread[4], "127.1.0.9");
  test::DnsSandbox::stop();
}

TEST(Resolver, ErrnoAndHErrnoAreWhatAPlainThreadLeaves) {
  expect_child_passed("errno", "ResolverChild.ErrnoAndHErrnoAreWhatAPlainThreadLeaves");
}

// errno and h_errno after each call, set to values no call sets before it:
// a call that leaves one alone leaves the caller's, on a fiber too, not
// what a helper thread's earlier lookup left on it.
TEST(ResolverChild, ErrnoAndHErrnoAreWhatAPlainThreadLeaves) {
  if (!test::child_mode("errno"))
    GTEST_SKIP() << "runs in the child of Resolver.ErrnoAndHErrnoAreWhatAPlainThreadLeaves";
  const std::string why = test::DnsSandbox::enter(WEFT_DNS_RESPONDER, 0);
  if (!why.empty()) GTEST_SKIP() << "no private nameserver: " << why;
  constexpr int kUnsetHErrno = 12345;
  auto ask_all = [] {
    std::vector<std::string> answers;
    auto note = [&](const std::string& what, long result) {
      answers.push_back(what + ": " + std::to_string(result) + " errno " + std::to_string(errno) + " h_errno " +
                        std::to_string(h_errno));
      errno = EDOM;
      h_errno = kUnsetHErrno;
    };
    errno = EDOM;
    h_errno = kUnsetHErrno;
    note("gethostbyname missing", ::gethostbyname("missing.weft.test") != nullptr);
    note("gethostbyname found", ::gethostbyname("h9.weft.test") != nullptr);
    addrinfo hints{};
    hints.ai_family = AF_INET;
    addrinfo* result = nullptr;
    const int found = ::getaddrinfo("h5.weft.test", "80", &hints, &result);
    if (found == 0) ::freeaddrinfo(result);
    note("getaddrinfo found", found);
    note("getaddrinfo missing", ::getaddrinfo("missing.weft.test", nullptr, &hints, &result));
    hints.ai_family = 12345;
    note("getaddrinfo bad family", ::getaddrinfo("h5.weft.test", nullptr, &hints, &result));
    hostent storage{};
    hostent* host = nullptr;
    char buf[1024];
    int error = -1;
    const int whole = ::gethostbyname_r("h7.weft.test", &storage, buf, sizeof buf, &host, &error);
    note("gethostbyname_r found " + std::to_string(error), whole);
    error = -1;
    const int small = ::gethostbyname_r("h7.weft.test", &storage, buf, 8, &host, &error);
    note("gethostbyname_r small buffer " + std::to_string(error) + (host != nullptr ? " found" : " none"), small);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    ::inet_pton(AF_INET, "127.1.0.9", &address.sin_addr);
    char name[NI_MAXHOST];
    note("getnameinfo NI_NAMEREQD", ::getnameinfo(reinterpret_cast<sockaddr*>(&address), sizeof address, name,
                                                  sizeof name, nullptr, 0, NI_NAMEREQD));
    return answers;
  };
  const auto [on_thread, on_fiber] = on_thread_and_fiber(ask_all);
  EXPECT_EQ(on_fiber, on_thread);
  test::DnsSandbox::stop();
}

TEST(Resolver, ErrnoAndHErrnoGoHomeWhenAFiberResumesElsewhere) {
  expect_child_passed("home", "ResolverChild.ErrnoAndHErrnoGoHomeWhenAFiberResumesElsewhere");
}

// What a lookup leaves in errno and h_errno, read through the addresses the
// caller took before it (compiled code keeps them: __errno_location and
// __h_errno_location are declared const), and whether the call returned on
// another thread than it was made on.
struct HomeRead {
  std::string values;
  bool moved = false;
};

HomeRead lookup_read_from_home() {
  int* const home_errno = &errno;
  int* const home_h_errno = &h_errno;
  *home_errno = EDOM;
  *home_h_errno = 12345;
  const pid_t before = ::gettid();
  hostent* host = ::gethostbyname("missing.weft.test");
  HomeRead read;
  read.moved = ::gettid() != before;
  read.values = std::string(host != nullptr ? "found" : "none") + " errno " + std::to_string(*home_errno) +
                " h_errno " + std::to_string(*home_h_errno);
  return read;
}

// A fiber parked in a lookup while another fiber blocks the only worker's
// thread in futex(2), by a raw system call no hook sees: sysmon releases
// the lookup's pin once it is answered, and the fiber resumes on another
// thread (hooks/hook_support.h, ParkScope: as when the thread waits for a
// std::mutex the fiber holds). The errno and h_errno the lookup left must
// reach the thread the call was made on, where the caller reads them, as
// every other hook's errno does (ErrnoHome).
TEST(ResolverChild, ErrnoAndHErrnoGoHomeWhenAFiberResumesElsewhere) {
  if (!test::child_mode("home"))
    GTEST_SKIP() << "runs in the child of Resolver.ErrnoAndHErrnoGoHomeWhenAFiberResumesElsewhere";
  // Long enough for the blocker to block the worker before the answer.
  const std::string why = test::DnsSandbox::enter(WEFT_DNS_RESPONDER, 1500);
  if (!why.empty()) GTEST_SKIP() << "no private nameserver: " << why;
  HomeRead on_thread;
  std::thread([&] { on_thread = lookup_read_from_home(); }).join();
  HomeRead on_fiber;
  {
    Scheduler sched{test::config_with(1)};
    std::atomic<bool> parked{false};
    std::atomic<bool> done{false};
    Fiber holder = sched.spawn([&] {
      parked = true;
      on_fiber = lookup_read_from_home();
      done = true;
    });
    ASSERT_TRUE(test::wait_until([&] { return parked.load(); }));
    std::atomic<int> word{0};
    Fiber blocker = sched.spawn([&] {
      const timespec limit{20, 0};
      // The instruction itself: libc's syscall() would park a futex wait.
      while (word.load() == 0 && !done.load())
        detail::raw_syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, &limit, nullptr, 0);
    });
    EXPECT_TRUE(test::wait_until([&] { return done.load(); }, std::chrono::seconds(30)));
    word = 1;
    detail::raw_syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
    holder.join();
    blocker.join();
  }
  test::DnsSandbox::stop();
  EXPECT_FALSE(on_thread.moved);
  if (!on_fiber.moved) GTEST_SKIP() << "the lookup was answered before the blocker blocked the worker";
  EXPECT_EQ(on_fiber.values, on_thread.values);
}

// What `call` returned in a fiber of a 1-worker scheduler, and how often a
// fiber of the same worker parked in a hook (a 1 ms usleep, which resumes
// only on its own thread) ticked meanwhile.
std::pair<std::string, int> beside_a_ticker(const std::function<std::string()>& call) {
  std::string said;
  std::atomic<int> ticks{0};
  std::atomic<bool> done{false};
  int ticks_during = -1;
  Scheduler sched{test::config_with(1)};
  Fiber ticker = sched.spawn([&] {
    while (!done.load()) {
      ::usleep(1000);
      ticks.fetch_add(1);
    }
  });
  sched
      .spawn([&] {
        const int before = ticks.load();
        said = call();
        ticks_during = ticks.load() - before;
      })
      .join();
  done = true;
  ticker.join();
  return {said, ticks_during};
}

TEST(Resolver, AQueryWithItsOwnStateLetsTheWorkersOtherFibersRun) {
  expect_child_passed("query", "ResolverChild.AQueryWithItsOwnStateLetsTheWorkersOtherFibersRun");
}

// res_nquery (its state an argument) runs on a helper while the fiber
// parks, as getaddrinfo: a fiber of the same worker parked in a hook (a
// 1 ms usleep, which resumes only on its own thread) ticks meanwhile.
// Before, the query was made on the worker, announced, and the ticker
// waited the whole 200 ms answer for the thread: 0 ticks. Its answer,
// errno and h_errno are a plain thread's.
TEST(ResolverChild, AQueryWithItsOwnStateLetsTheWorkersOtherFibersRun) {
  if (!test::child_mode("query"))
    GTEST_SKIP() << "runs in the child of Resolver.AQueryWithItsOwnStateLetsTheWorkersOtherFibersRun";
  const std::string why = test::DnsSandbox::enter(WEFT_DNS_RESPONDER, 200);
  if (!why.empty()) GTEST_SKIP() << "no private nameserver: " << why;
  const auto query = [] {
    struct __res_state state {};
    if (::res_ninit(&state) != 0) return std::string("res_ninit failed");
    unsigned char answer[512];
    errno = EDOM;
    h_errno = 12345;
    const int length = ::res_nquery(&state, "h5.weft.test", C_IN, T_A, answer, sizeof answer);
    const std::string said =
        std::to_string(length) + " errno " + std::to_string(errno) + " h_errno " + std::to_string(h_errno);
    ::res_nclose(&state);
    return said;
  };
  std::string on_thread;
  std::thread([&] { on_thread = query(); }).join();
  const auto [on_fiber, ticks_during] = beside_a_ticker(query);
  EXPECT_EQ(on_fiber, on_thread);
  EXPECT_GT(std::stoi(on_thread), 0) << on_thread;
  EXPECT_GE(ticks_during, 5) << "the ticker's sleeps waited for the query's 200 ms";
  test::DnsSandbox::stop();
}

TEST(Resolver, QueriesOnTheThreadsOwnStateFromManyFibersEachGetTheirAnswer) {
  expect_child_passed("own-state", "ResolverChild.QueriesOnTheThreadsOwnStateFromManyFibersEachGetTheirAnswer");
}

// res_nquery(&_res, ...), as Firefox and PowerDNS call it: in a fiber,
// _res is its worker thread's, which all the worker's fibers share, and
// glibc's resolver state serves one query at a time. Before, each query
// went to a helper while its fiber parked, so the worker's next fiber
// queried on the same state meanwhile: they took each other's replies and
// closed each other's sockets, and 1 or 2 of 20 got their answer (on
// threads, each with its own _res, all 20 do). Now a query on the calling
// thread's own state stays on that thread, as res_query does.
TEST(ResolverChild, QueriesOnTheThreadsOwnStateFromManyFibersEachGetTheirAnswer) {
  if (!test::child_mode("own-state"))
    GTEST_SKIP() << "runs in the child of Resolver.QueriesOnTheThreadsOwnStateFromManyFibersEachGetTheirAnswer";
  const std::string why = test::DnsSandbox::enter(WEFT_DNS_RESPONDER, 200);
  if (!why.empty()) GTEST_SKIP() << "no private nameserver: " << why;
  constexpr int kQueries = 20;
  std::vector<std::string> got(kQueries);
  {
    Scheduler sched{test::config_with(1)};
    std::vector<Fiber> fibers;
    for (int i = 0; i < kQueries; ++i) {
      fibers.push_back(sched.spawn([&, i] {
        if ((_res.options & RES_INIT) == 0 && ::res_init() != 0) {
          got[i] = "res_init failed";
          return;
        }
        unsigned char answer[512];
        const int length = ::res_nquery(&_res, host_name(i).c_str(), C_IN, T_A, answer, sizeof answer);
        if (length < 4) {
          got[i] = "res_nquery: " + std::to_string(length) + " h_errno " + std::to_string(h_errno);
          return;
        }
        // The responder's one A record ends the answer.
        char text[INET_ADDRSTRLEN] = {};
        ::inet_ntop(AF_INET, answer + length - 4, text, sizeof text);
        got[i] = text;
      }));
    }
    for (Fiber& fiber : fibers) fiber.join();
  }
  for (int i = 0; i < kQueries; ++i) EXPECT_EQ(got[i], expected_address(i)) << "query " << i;
  test::DnsSandbox::stop();
}

TEST(Resolver, AnIdnLookupUsesTheCallersLocale) {
  expect_child_passed("idn", "ResolverChild.AnIdnLookupUsesTheCallersLocale");
}

// getaddrinfo with AI_IDN converts the name from the calling thread's
// locale (uselocale) to ASCII before it asks. The lookup runs on a helper,
// which took only errno and h_errno from the caller: in its global "C"
// locale the UTF-8 name failed to convert (EAI_IDN_ENCODE) where a plain
// thread's went to the nameserver (which knows no such name: EAI_NONAME).
TEST(ResolverChild, AnIdnLookupUsesTheCallersLocale) {
  if (!test::child_mode("idn")) GTEST_SKIP() << "runs in the child of Resolver.AnIdnLookupUsesTheCallersLocale";
  const std::string why = test::DnsSandbox::enter(WEFT_DNS_RESPONDER, 20);
  if (!why.empty()) GTEST_SKIP() << "no private nameserver: " << why;
  const locale_t utf8 = ::newlocale(LC_ALL_MASK, "C.UTF-8", locale_t(0));
  if (utf8 == locale_t(0)) GTEST_SKIP() << "no C.UTF-8 locale";
  const auto look_up = [utf8] {
    const locale_t before = ::uselocale(utf8);
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_flags = AI_IDN;
    addrinfo* result = nullptr;
    const int rc = ::getaddrinfo("b\u00fccher.weft.test", nullptr, &hints, &result);  // UTF-8
    if (result != nullptr) ::freeaddrinfo(result);
    ::uselocale(before);
    return rc;
  };
  int on_thread = 0;
  std::thread([&] { on_thread = look_up(); }).join();
  EXPECT_EQ(on_thread, EAI_NONAME);
  int on_fiber = 0;
  {
    Scheduler sched{test::config_with(1)};
    sched.spawn([&] { on_fiber = look_up(); }).join();
  }
  EXPECT_EQ(on_fiber, on_thread);
  ::freelocale(utf8);
  test::DnsSandbox::stop();
}

TEST(Resolver, AsyncLookupsWaitOnAHelper) {
#ifdef WEFT_UNDER_TSAN
  // glibc starts getaddrinfo_a's threads where ThreadSanitizer does not see
  // them, and its interceptors then crash there: a plain program's
  // getaddrinfo_a of "localhost" segfaults under TSan too.
  GTEST_SKIP() << "getaddrinfo_a crashes under ThreadSanitizer";
#endif
  expect_child_passed("async", "ResolverChild.AsyncLookupsWaitOnAHelper");
}

// One getaddrinfo_a request for an IPv4 address of `name`, started in
// `mode`. Stays where it is: glibc keeps its address until it is done.
struct AsyncRequest {
  addrinfo hints{};
  gaicb request{};
  int started;  // getaddrinfo_a's result
  AsyncRequest(const char* name, int mode, int flags) {
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = flags;
    request.ar_name = name;
    request.ar_request = &hints;
    gaicb* list[] = {&request};
    started = ::getaddrinfo_a(mode, list, 1, nullptr);
  }
  AsyncRequest(const AsyncRequest&) = delete;
  AsyncRequest& operator=(const AsyncRequest&) = delete;
};

// What an async lookup of h6.weft.test said: getaddrinfo_a's result (with
// GAI_NOWAIT, then gai_suspend's), gai_error's, and the address.
std::string async_lookup(int mode) {
  AsyncRequest lookup("h6.weft.test", mode, 0);
  gaicb& request = lookup.request;
  std::string said = "started " + std::to_string(lookup.started);
  if (mode == GAI_NOWAIT) {
    const gaicb* const waiting[] = {&request};
    int rc;
    while ((rc = ::gai_suspend(waiting, 1, nullptr)) == EAI_INTR) {
    }
    said += " suspended " + std::to_string(rc);
    // Done: a wait, and a poll with a zero timeout, return at once.
    const timespec zero{0, 0};
    said += " again " + std::to_string(::gai_suspend(waiting, 1, nullptr));
    said += " polled " + std::to_string(::gai_suspend(waiting, 1, &zero));
  }
  said += " error " + std::to_string(::gai_error(&request));
  if (request.ar_result != nullptr) {
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(request.ar_result->ai_addr)->sin_addr, text, sizeof text);
    said += std::string(" ") + text;
    ::freeaddrinfo(request.ar_result);
  }
  return said;
}

// gai_suspend, and getaddrinfo_a with GAI_WAIT, wait on a condition
// variable inside libc for glibc's own lookup threads: made on a helper
// while the fiber parks, as res_nquery. Before, they held the worker's
// thread, and a fiber pinned there by its hook (a 1 ms usleep) did not
// tick for the 200 ms answer. Their results are a plain thread's.
TEST(ResolverChild, AsyncLookupsWaitOnAHelper) {
  if (!test::child_mode("async")) GTEST_SKIP() << "runs in the child of Resolver.AsyncLookupsWaitOnAHelper";
  const std::string why = test::DnsSandbox::enter(WEFT_DNS_RESPONDER, 200);
  if (!why.empty()) GTEST_SKIP() << "no private nameserver: " << why;
  for (const int mode : {GAI_NOWAIT, GAI_WAIT}) {
    SCOPED_TRACE(mode == GAI_WAIT ? "GAI_WAIT" : "GAI_NOWAIT, gai_suspend");
    const auto lookup = [mode] { return async_lookup(mode); };
    std::string on_thread;
    std::thread([&] { on_thread = lookup(); }).join();
    EXPECT_NE(on_thread.find(" error 0 127.1.0.6"), std::string::npos) << on_thread;
    const auto [on_fiber, ticks_during] = beside_a_ticker(lookup);
    EXPECT_EQ(on_fiber, on_thread);
    EXPECT_GE(ticks_during, 5) << "the ticker's sleeps waited for the lookup's 200 ms";
  }
  test::DnsSandbox::stop();
}

// With no helper thread and none able to start (a thread limit:
// pthread_create's EAGAIN), a lookup is made on the fiber's own thread, as
// libc's: before, the hook threw std::system_error out of a C function
// (a C caller without unwind tables terminated). "127.0.0.1" is a name
// gethostbyname_r answers without NSS or DNS, on the helper as inline.
TEST(Resolver, ALookupWithNoHelperThreadToBeHadIsMadeInline) {
  const auto look_up = [] {
    hostent storage{};
    hostent* host = nullptr;
    char buf[512];
    int error = -1;
    errno = EDOM;
    const int rc = ::gethostbyname_r("127.0.0.1", &storage, buf, sizeof buf, &host, &error);
    std::string said = std::to_string(rc) + " errno " + std::to_string(errno);
    if (host != nullptr && host->h_addr_list[0] != nullptr) {
      char text[INET_ADDRSTRLEN] = {};
      ::inet_ntop(AF_INET, host->h_addr_list[0], text, sizeof text);
      said += std::string(" ") + text;
    }
    return said;
  };
  const std::string on_thread = look_up();
  Scheduler sched{test::config_with(1)};  // its blocking pool starts no helper before its first call
  // Every thread started from now on fails: its default stack cannot be
  // mapped.
  pthread_attr_t usual;
  ASSERT_EQ(::pthread_getattr_default_np(&usual), 0);
  pthread_attr_t unstartable;
  ASSERT_EQ(::pthread_attr_init(&unstartable), 0);
  ASSERT_EQ(::pthread_attr_setstacksize(&unstartable, std::size_t{1} << 46), 0);
  ASSERT_EQ(::pthread_setattr_default_np(&unstartable), 0);
  std::string on_fiber;
  std::string thrown;
  sched
      .spawn([&] {
        try {
          on_fiber = look_up();
        } catch (const std::exception& e) {
          thrown = e.what();
        }
      })
      .join();
  ::pthread_setattr_default_np(&usual);
  ::pthread_attr_destroy(&unstartable);
  ::pthread_attr_destroy(&usual);
  EXPECT_EQ(thrown, "");
  EXPECT_EQ(on_fiber, on_thread);
  EXPECT_EQ(sched.snapshot().blocking.threads, 0u) << "a helper started after all";
}

// A gai_suspend that cannot wait, a poll with a zero timeout or a wait for
// requests none of which is in progress, returns at once in libc: the hook
// makes it inline, on the fiber's thread, and starts no helper for it
// (before, each went to the blocking pool). "127.0.0.1" with
// AI_NUMERICHOST is answered without NSS or DNS.
TEST(Resolver, AGaiSuspendThatCannotWaitIsMadeOnTheFibersThread) {
#ifdef WEFT_UNDER_TSAN
  GTEST_SKIP() << "getaddrinfo_a crashes under ThreadSanitizer";
#endif
  Scheduler sched{test::config_with(1)};  // its blocking pool starts no helper before its first call
  int error = -1;
  bool done_in_time = false;
  sched
      .spawn([&] {
        AsyncRequest lookup("127.0.0.1", GAI_NOWAIT, AI_NUMERICHOST);
        ASSERT_EQ(lookup.started, 0);
        gaicb& request = lookup.request;
        const gaicb* const waiting[] = {&request};
        // Polls until done. What each returns is libc's (glibc's answers
        // EAI_SYSTEM, errno 0, while the lookup runs, on a thread too).
        const timespec zero{0, 0};
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        do {
          ::gai_suspend(waiting, 1, &zero);
        } while (::gai_error(&request) == EAI_INPROGRESS && std::chrono::steady_clock::now() < until);
        done_in_time = ::gai_error(&request) != EAI_INPROGRESS;
        ::gai_suspend(waiting, 1, nullptr);  // done: returns at once
        error = ::gai_error(&request);
        ::freeaddrinfo(request.ar_result);
      })
      .join();
  ASSERT_TRUE(done_in_time) << "the lookup was not done in 5 s (the last wait could wait, on a helper)";
  EXPECT_EQ(error, 0);
  EXPECT_EQ(sched.snapshot().blocking.calls, 0u) << "a gai_suspend that cannot wait went to a helper";
}

}  // namespace
}  // namespace weft
