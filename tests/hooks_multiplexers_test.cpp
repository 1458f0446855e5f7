// The multiplexer hooks (hooks/hooks_multiplexers.cpp) in their corners:
// each case runs the same calls on a plain thread and in a fiber and
// compares what they return, their errno and their output arguments as
// text.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "hooks_test_support.h"
#include "pool_support.h"
#include "private_namespaces.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using test::outcome;

void expect_same_on_thread_and_fiber(const std::function<std::string()>& body) {
  const test::ThreadAndFiber got = test::on_thread_and_fiber(body);
  EXPECT_EQ(got.fiber, got.thread);
}

// A pipe, closed when it goes.
struct Pipe {
  int reader = -1;
  int writer = -1;
  Pipe() {
    int fds[2];
    EXPECT_EQ(::pipe2(fds, O_CLOEXEC | O_NONBLOCK), 0);
    reader = fds[0];
    writer = fds[1];
  }
  ~Pipe() {
    if (reader >= 0) ::close(reader);
    if (writer >= 0) ::close(writer);
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
};

std::atomic<int> handled{0};
void count_signal(int) { handled.fetch_add(1); }

// SIGUSR1 caught by count_signal (no SA_RESTART), blocked on the calling
// thread and pending on it, as long as this lives; then unblocked (the
// handler takes it if the call under test did not) and the old action back.
class PendingSignal {
 public:
  PendingSignal() {
    struct sigaction action {};
    action.sa_handler = count_signal;
    sigemptyset(&action.sa_mask);
    EXPECT_EQ(sigaction(SIGUSR1, &action, &old_action_), 0);
    sigset_t blocked;
    sigemptyset(&blocked);
    sigaddset(&blocked, SIGUSR1);
    EXPECT_EQ(pthread_sigmask(SIG_BLOCK, &blocked, &old_mask_), 0);
    handled = 0;
    EXPECT_EQ(raise(SIGUSR1), 0);  // to this thread
  }
  ~PendingSignal() {
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
    sigaction(SIGUSR1, &old_action_, nullptr);
  }
  PendingSignal(const PendingSignal&) = delete;
  PendingSignal& operator=(const PendingSignal&) = delete;

 private:
  struct sigaction old_action_ {};
  sigset_t old_mask_{};
};

// select of a pipe with a byte in it, with `tv` as its timeout: its
// outcome, and what it left in `tv`.
std::string select_a_ready_pipe(timeval& tv) {
  const Pipe pipe;
  EXPECT_EQ(::write(pipe.writer, "x", 1), 1);
  fd_set r;
  FD_ZERO(&r);
  FD_SET(pipe.reader, &r);
  return outcome(select(pipe.reader + 1, &r, nullptr, nullptr, &tv));
}

// Linux's select leaves the time not slept in *timeout, also for a timeout
// too long to be a deadline (a program's "forever"): 2e9 s less what went.
TEST(HooksMultiplexers, SelectLeavesTheTimeNotSleptOfAHugeTimeout) {
  expect_same_on_thread_and_fiber([] {
    timeval tv{2'000'000'000, 0};
    const std::string out = select_a_ready_pipe(tv);
    return out + " left " + std::to_string(tv.tv_sec) + " s";
  });
}

// glibc reads select's tv_usec as an int32_t, refuses a negative one
// (EINVAL) and carries whole seconds into tv_sec (1.5e6 us: 1.5 s).
TEST(HooksMultiplexers, SelectReadsItsTimeoutAsGlibcDoes) {
  expect_same_on_thread_and_fiber([] {
    const Pipe pipe;
    EXPECT_EQ(::write(pipe.writer, "x", 1), 1);
    std::string out;
    for (const long usec : {-1L, 1'500'000L, 3'000'000'000L, 5'000'000'000L}) {
      fd_set r;
      FD_ZERO(&r);
      FD_SET(pipe.reader, &r);
      timeval tv{0, usec};
      const int ready = select(pipe.reader + 1, &r, nullptr, nullptr, &tv);
      out += std::to_string(usec) + " us: " + outcome(ready) + " left " + std::to_string(tv.tv_sec) + " s\n";
    }
    return out;
  });
}

// A signal pending at the call, that the call's mask unblocks, ends the
// wait at once with EINTR, its handler run, when nothing is ready.
TEST(HooksMultiplexers, EpollPwaitEndsOnASignalItsMaskUnblocks) {
  expect_same_on_thread_and_fiber([] {
    const int epfd = epoll_create1(EPOLL_CLOEXEC);
    sigset_t none;
    sigemptyset(&none);
    epoll_event events[1];
    std::string out;
    {
      const PendingSignal pending;
      const int result = epoll_pwait(epfd, events, 1, 200, &none);
      out = "epoll_pwait " + outcome(result) + " handled " + std::to_string(handled.load());
    }
    {
      const PendingSignal pending;
      const timespec timeout{0, 200'000'000};
      const int result = epoll_pwait2(epfd, events, 1, &timeout, &none);
      out += ", epoll_pwait2 " + outcome(result) + " handled " + std::to_string(handled.load());
    }
    ::close(epfd);
    return out;
  });
}

// ppoll with no fds and a mask is sigsuspend with a timeout: a signal
// pending at the call ends it at once (well before its 10 s).
TEST(HooksMultiplexers, PpollWithNoFdsEndsOnASignalItsMaskUnblocks) {
  expect_same_on_thread_and_fiber([] {
    sigset_t none;
    sigemptyset(&none);
    const PendingSignal pending;
    const timespec timeout{10, 0};
    const auto start = Clock::now();
    const int result = ppoll(nullptr, 0, &timeout, &none);
    const bool at_once = Clock::now() - start < 5s;
    return outcome(result) + " handled " + std::to_string(handled.load()) + (at_once ? " at once" : " at the timeout");
  });
}

// `call` (ppoll, pselect or epoll_pwait with an empty mask, on a pipe
// never ready, for 5 s) while another thread sends SIGUSR2 to the process
// after 100 ms: its outcome, whether the handler ran, and whether it ended
// well before its timeout.
std::string waits_for_a_signal_to_the_process(const std::string& call) {
  const Pipe pipe;
  std::thread sender([] {
    std::this_thread::sleep_for(100ms);
    ::kill(::getpid(), SIGUSR2);
  });
  sigset_t none;
  sigemptyset(&none);
  const timespec timeout{5, 0};
  handled = 0;
  const auto start = Clock::now();
  int result = 0;
  if (call == "ppoll") {
    pollfd fd{pipe.reader, POLLIN, 0};
    result = ppoll(&fd, 1, &timeout, &none);
  } else if (call == "ppoll of no fds") {
    result = ppoll(nullptr, 0, &timeout, &none);
  } else if (call == "pselect") {
    fd_set r;
    FD_ZERO(&r);
    FD_SET(pipe.reader, &r);
    result = pselect(pipe.reader + 1, &r, nullptr, nullptr, &timeout, &none);
  } else {
    const int epfd = epoll_create1(EPOLL_CLOEXEC);
    epoll_event event{};
    event.events = EPOLLIN;
    EXPECT_EQ(epoll_ctl(epfd, EPOLL_CTL_ADD, pipe.reader, &event), 0);
    result = epoll_pwait(epfd, &event, 1, 5000, &none);
    ::close(epfd);
  }
  const bool early = Clock::now() - start < 2s;
  sender.join();
  return call + " " + outcome(result) + " handled " + std::to_string(handled.load()) + (early ? " early" : " late");
}

// A signal that the call's mask lets in, sent to the process while the
// call waits, ends the wait with EINTR after its handler ran, as on a
// thread: the idiom that keeps a signal blocked everywhere and waits for
// it with pselect. Before, a parked fiber's wait went on to its timeout
// (forever without one). In a process of its own (a death test's), whose
// every thread blocks SIGUSR2 from its start: the kernel has no other
// thread to give the signal to.
TEST(HooksMultiplexersDeathTest, ASignalToTheProcessThatTheMaskLetsInEndsAParkedWait) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        struct sigaction action {};
        action.sa_handler = count_signal;
        sigemptyset(&action.sa_mask);
        sigaction(SIGUSR2, &action, nullptr);
        sigset_t blocked;
        sigemptyset(&blocked);
        sigaddset(&blocked, SIGUSR2);
        pthread_sigmask(SIG_BLOCK, &blocked, nullptr);
        bool all_as_expected = true;
        for (const char* call : {"ppoll", "ppoll of no fds", "pselect", "epoll_pwait"}) {
          const test::ThreadAndFiber got =
              test::on_thread_and_fiber([&] { return waits_for_a_signal_to_the_process(call); });
          const std::string expected = std::string(call) + " -1 EINTR handled 1 early";
          all_as_expected = all_as_expected && got.thread == expected && got.fiber == expected;
          std::fprintf(stderr, "thread: %s\nfiber:  %s\n", got.thread.c_str(), got.fiber.c_str());
        }
        std::exit(all_as_expected ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// poll's corners: a closed fd (POLLNVAL, counted), a negative fd (skipped,
// revents 0), events 0 (only hang-ups and errors), more fds than
// RLIMIT_NOFILE (EINVAL); errno untouched on success.
TEST(HooksMultiplexers, PollCornersGiveWhatAPlainThreadGets) {
  expect_same_on_thread_and_fiber([] {
    std::string out;
    Pipe hung;
    ::close(hung.writer);
    hung.writer = -1;
    const Pipe quiet;
    const int closed = ::dup(quiet.reader);
    ::close(closed);
    pollfd fds[] = {{closed, POLLIN, 0}, {-5, POLLIN, 0}, {hung.reader, 0, 0}, {quiet.reader, POLLIN, 0}};
    errno = EDOM;
    int result = poll(fds, 4, 100);
    out += std::string("poll ") + outcome(result) + " errno " + strerrorname_np(errno) + " revents";
    for (const pollfd& fd : fds) out += std::string(" ") + std::to_string(fd.revents);
    pollfd one{quiet.reader, POLLIN, 0};
    result = poll(&one, 1, 20);
    out += std::string("\ntimeout ") + outcome(result) + " revents " + std::to_string(one.revents);
    rlimit limit{};
    EXPECT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
    std::vector<pollfd> many(limit.rlim_cur + 1, pollfd{-1, POLLIN, 0});
    result = poll(many.data(), many.size(), 20);
    out += std::string("\nmore than RLIMIT_NOFILE ") + outcome(result);
    return out;
  });
}

// A null array of fds, which the kernel refuses before it reads an fd
// (EFAULT), and a null one of none, a sleep. Before, a fiber's poll read
// the array first and died of SIGSEGV.
TEST(HooksMultiplexers, PollOfANullArrayGivesWhatAPlainThreadGets) {
  expect_same_on_thread_and_fiber([] {
    pollfd* volatile none = nullptr;  // hidden from the compiler, which refuses a null array
    errno = 0;
    std::string out = "poll " + outcome(poll(none, 1, 50));
    const timespec timeout{0, 50'000'000};
    out += "\nppoll " + outcome(ppoll(none, 2, &timeout, nullptr));
    errno = EDOM;
    out += "\nnone " + outcome(poll(none, 0, 10)) + " errno " + strerrorname_np(errno);
    return out;
  });
}

// Arrays and fd sets the kernel cannot read (EFAULT): in a page mapped
// with no access, and running from a readable page into one with none.
// Before, a fiber's poll and select read them first and died of SIGSEGV.
TEST(HooksMultiplexers, UnreadableArraysAndSetsGiveWhatAPlainThreadGets) {
  const long page = ::sysconf(_SC_PAGESIZE);
  auto* pages =
      static_cast<char*>(::mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(pages, MAP_FAILED);
  ASSERT_EQ(::mprotect(pages + page, page, PROT_NONE), 0);
  const Pipe quiet;
  // The last whole pollfd of the readable page, then one in the other.
  auto* straddling = reinterpret_cast<pollfd*>(pages + page) - 1;
  *straddling = {quiet.reader, POLLIN, 0};
  auto* unreadable = reinterpret_cast<pollfd*>(pages + page);
  expect_same_on_thread_and_fiber([&] {
    const timespec timeout{0, 20'000'000};
    errno = 0;
    std::string out = "poll " + outcome(poll(unreadable, 1, 20));
    out += "\npoll straddling " + outcome(poll(straddling, 2, 20));
    out += "\nppoll " + outcome(ppoll(unreadable, 1, &timeout, nullptr));
    fd_set r;
    FD_ZERO(&r);
    FD_SET(quiet.reader, &r);
    auto* bad = reinterpret_cast<fd_set*>(unreadable);
    for (int which = 0; which < 3; ++which) {
      fd_set* sets[3] = {&r, nullptr, nullptr};
      sets[which] = bad;
      timeval tv{0, 20'000};
      out += "\nselect, set " + std::to_string(which) + " " +
             outcome(select(quiet.reader + 1, sets[0], sets[1], sets[2], &tv));
    }
    out += "\npselect " + outcome(pselect(quiet.reader + 1, bad, nullptr, nullptr, &timeout, nullptr));
    timeval none{0, 20'000};
    out += "\nselect of no fds " + outcome(select(0, bad, nullptr, nullptr, &none));  // reads nothing: a sleep
    // Readable sets off the stack (the hook asks the kernel about those).
    auto* heap_sets = reinterpret_cast<fd_set*>(pages);
    FD_ZERO(&heap_sets[0]);
    FD_SET(quiet.reader, &heap_sets[0]);
    FD_ZERO(&heap_sets[1]);
    FD_SET(quiet.writer, &heap_sets[1]);
    timeval tv{0, 20'000};
    int result = select(std::max(quiet.reader, quiet.writer) + 1, &heap_sets[0], &heap_sets[1], nullptr, &tv);
    out += "\nselect off the stack " + outcome(result) + " " + std::to_string(FD_ISSET(quiet.reader, &heap_sets[0])) +
           std::to_string(FD_ISSET(quiet.writer, &heap_sets[1]));
    FD_SET(quiet.reader, &heap_sets[0]);
    tv = {0, 20'000};
    result = select(quiet.reader + 1, &heap_sets[0], nullptr, nullptr, &tv);
    out += "\nselect off the stack, nothing ready " + outcome(result) + " " +
           std::to_string(FD_ISSET(quiet.reader, &heap_sets[0]));
    out += "\nerrno after a good poll ";
    errno = EDOM;
    pollfd good{quiet.reader, POLLIN, 0};
    out += outcome(poll(&good, 1, 10)) + " " + strerrorname_np(errno);
    return out;
  });
  ::munmap(pages, 2 * page);
}

// poll's count is an unsigned int to the kernel: bits above it are not
// seen. Before, a fiber's poll that found nothing ready read 2^32 + 1
// entries and died of SIGSEGV. Here the one fd seen becomes readable
// while the call waits.
TEST(HooksMultiplexers, PollCountsAsTheKernelDoes) {
#if defined(WEFT_UNDER_ASAN) || defined(WEFT_UNDER_TSAN)
  GTEST_SKIP() << "the sanitizer's own poll interceptor reads all of the count first";
#endif
  expect_same_on_thread_and_fiber([] {
    const Pipe later;
    std::thread writer([&] {
      std::this_thread::sleep_for(10ms);
      EXPECT_EQ(::write(later.writer, "x", 1), 1);
    });
    pollfd fds{later.reader, POLLIN, 0};
    volatile nfds_t count = (nfds_t(1) << 32) | 1;  // hidden from the compiler, which refuses it
    errno = 0;
    const int result = poll(&fds, count, 10'000);
    writer.join();
    return outcome(result) + " revents " + std::to_string(fds.revents);
  });
}

// select's corners: a closed fd in a set (EBADF, the sets untouched, the
// time left written back), nfds < 0 (EINVAL), a timeout (the sets
// cleared, nothing left), an fd ready both ways (counted twice), a bit
// above every fd the process has had (ignored).
TEST(HooksMultiplexers, SelectCornersGiveWhatAPlainThreadGets) {
  expect_same_on_thread_and_fiber([] {
    std::string out;
    const Pipe quiet;
    const int closed = ::dup(quiet.reader);
    ::close(closed);
    fd_set r;
    FD_ZERO(&r);
    FD_SET(quiet.reader, &r);
    FD_SET(closed, &r);
    timeval tv{5, 500'000};
    errno = 0;
    int result = select(std::max(closed, quiet.reader) + 1, &r, nullptr, nullptr, &tv);
    out += std::string("closed fd ") + outcome(result) + " set " + std::to_string(FD_ISSET(quiet.reader, &r)) +
           std::to_string(FD_ISSET(closed, &r)) + " left " + std::to_string(tv.tv_sec) + " s";
    tv = {0, 20'000};
    result = select(-1, &r, nullptr, nullptr, &tv);
    out += std::string("\nnfds -1 ") + outcome(result);
    FD_ZERO(&r);
    FD_SET(quiet.reader, &r);
    tv = {0, 20'000};
    errno = EDOM;
    result = select(quiet.reader + 1, &r, nullptr, nullptr, &tv);
    out += std::string("\ntimeout ") + outcome(result) + " errno " + strerrorname_np(errno) + " set " +
           std::to_string(FD_ISSET(quiet.reader, &r)) + " left " + std::to_string(tv.tv_sec) + " " +
           std::to_string(tv.tv_usec);
    int pair[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
    EXPECT_EQ(::write(pair[1], "x", 1), 1);
    fd_set w;
    FD_ZERO(&r);
    FD_ZERO(&w);
    FD_SET(pair[0], &r);
    FD_SET(pair[0], &w);
    FD_SET(quiet.reader, &r);
    tv = {1, 0};
    errno = EDOM;
    result = select(std::max(pair[0], quiet.reader) + 1, &r, &w, nullptr, &tv);
    out += std::string("\nboth ways ") + outcome(result) + " errno " + strerrorname_np(errno) + " read " +
           std::to_string(FD_ISSET(pair[0], &r)) + std::to_string(FD_ISSET(quiet.reader, &r)) + " write " +
           std::to_string(FD_ISSET(pair[0], &w));
    ::close(pair[0]);
    ::close(pair[1]);
    FD_ZERO(&r);
    FD_SET(quiet.reader, &r);
    FD_SET(FD_SETSIZE - 1, &r);
    tv = {0, 20'000};
    result = select(FD_SETSIZE, &r, nullptr, nullptr, &tv);
    out += std::string("\nabove every fd ") + outcome(result) + " set " + std::to_string(FD_ISSET(FD_SETSIZE - 1, &r));
    return out;
  });
}

// An fd number past the end of the kernel's fd table, found as a plain
// thread's select finds it: one whose bit a select with no timeout ignores
// (0), where a closed fd inside the table is EBADF. -1 if there is none
// below FD_SETSIZE.
int past_the_fd_table() {
  for (int fd = FD_SETSIZE - 1; fd >= 64; fd -= 64) {
    if (::fcntl(fd, F_GETFD) >= 0) continue;
    fd_set r;
    FD_ZERO(&r);
    FD_SET(fd, &r);
    timeval none{0, 0};
    if (select(fd + 1, &r, nullptr, nullptr, &none) != 0) return fd == FD_SETSIZE - 1 ? -1 : fd + 64;
  }
  return 64;
}

// A select whose set names an fd number past the end of the kernel's fd
// table: the kernel ignores that bit (core_sys_select stops at the table's
// size), so the select times out. Before, a fiber's select took the bit
// for an fd, and its park failed at once with EBADF.
TEST(HooksMultiplexers, SelectIgnoresBitsPastTheFdTable) {
  int past = -1;
  std::thread([&] { past = past_the_fd_table(); }).join();
  if (past < 0) GTEST_SKIP() << "the fd table reaches FD_SETSIZE";
  expect_same_on_thread_and_fiber([past] {
    fd_set r;
    FD_ZERO(&r);
    FD_SET(past, &r);
    timeval tv{0, 20'000};
    errno = 0;
    const int result = select(past + 1, &r, nullptr, nullptr, &tv);
    return std::string("past the table ") + outcome(result) + " set " + std::to_string(FD_ISSET(past, &r));
  });
}

// An fd opened above RLIMIT_NOFILE's soft limit before it was lowered
// stays in the kernel's fd table, and select watches it there. Before, a
// fiber's select read its sets only up to the soft limit: the bit was
// dropped, and the fd never reported (the select timed out).
TEST(HooksMultiplexers, SelectWatchesAnFdAboveALoweredLimit) {
  rlimit before{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &before), 0);
  if (before.rlim_max < 4096) GTEST_SKIP() << "RLIMIT_NOFILE's hard limit is below 4096";
  rlimit raised = before;
  raised.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &raised), 0);
  Pipe pipe;
  constexpr int kHigh = 3000;
  const int high = ::dup2(pipe.reader, kHigh);
  rlimit lowered = before;
  lowered.rlim_cur = 1024;
  const bool set_up = high == kHigh && ::setrlimit(RLIMIT_NOFILE, &lowered) == 0;
  if (set_up) {
    expect_same_on_thread_and_fiber([&] {
      std::thread writer([&] {
        std::this_thread::sleep_for(50ms);
        EXPECT_EQ(::write(pipe.writer, "x", 1), 1);
      });
      std::vector<__fd_mask> bits((kHigh + 1 + NFDBITS - 1) / NFDBITS);
      bits[kHigh / NFDBITS] |= __fd_mask(1) << (kHigh % NFDBITS);
      timeval tv{5, 0};
      const int result = select(kHigh + 1, reinterpret_cast<fd_set*>(bits.data()), nullptr, nullptr, &tv);
      writer.join();
      char byte;
      EXPECT_EQ(::read(kHigh, &byte, 1), 1);
      return outcome(result) + " set " + std::to_string((bits[kHigh / NFDBITS] >> (kHigh % NFDBITS)) & 1);
    });
  }
  if (high >= 0) ::close(high);
  ::setrlimit(RLIMIT_NOFILE, &before);
  ASSERT_TRUE(set_up) << std::strerror(errno);
}

// A chain of 5 epolls over a pipe, the deepest nesting the kernel takes:
// the scheduler's own epoll on top of it would be one level more (ELOOP).
// A wait on the top epoll (poll on it alone or with another fd, or
// epoll_wait on it) is then the call itself, and ends at the write, as on
// a thread. Before, poll and epoll_wait failed at once with ELOOP (which
// poll never reports), and a poll of several fds dropped the epoll
// silently and waited out its timeout.
TEST(HooksMultiplexers, AWaitOnEpollsNestedAsDeepAsTheKernelTakesEndsAtTheWrite) {
  expect_same_on_thread_and_fiber([] {
    Pipe watched;
    Pipe other;
    std::vector<int> chain;
    int inner = watched.reader;
    for (int level = 0; level < 5; ++level) {
      const int epoll = ::epoll_create1(EPOLL_CLOEXEC);
      epoll_event event{};
      event.events = EPOLLIN;
      if (epoll < 0 || ::epoll_ctl(epoll, EPOLL_CTL_ADD, inner, &event) != 0) return std::string("no chain");
      chain.push_back(epoll);
      inner = epoll;
    }
    std::string out;
    for (int way = 0; way < 3; ++way) {
      std::thread writer([&] {
        std::this_thread::sleep_for(50ms);
        EXPECT_EQ(::write(watched.writer, "x", 1), 1);
      });
      const auto start = Clock::now();
      int result;
      if (way == 2) {
        epoll_event events[1];
        result = epoll_wait(inner, events, 1, 5'000);
      } else {
        pollfd fds[2] = {{inner, POLLIN, 0}, {other.reader, POLLIN, 0}};
        result = poll(fds, way == 0 ? 1 : 2, 5'000);
      }
      const bool in_time = Clock::now() - start < 4s;
      writer.join();
      char byte;
      EXPECT_EQ(::read(watched.reader, &byte, 1), 1);
      out += std::string(way == 2   ? "epoll_wait "
                         : way == 0 ? "poll "
                                    : "poll of two ") +
             outcome(result) + (in_time ? " at the write\n" : " late\n");
    }
    for (const int epoll : chain) ::close(epoll);
    return out;
  });
}

// One eventfd in 600 epolls, each waited on once: the scheduler's epoll
// over each adds a wake-up path to the eventfd, and the kernel allows 500
// at that depth (EINVAL past them). The waits past 500 are the call
// itself, and time out as a thread's. Before, they failed at once with
// EINVAL, which the wait itself never gives: a loop that retried spun.
TEST(HooksMultiplexers, AWaitPastTheKernelsWakeUpPathsIsTheCallItself) {
  rlimit files{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &files), 0);
  if (files.rlim_cur < 700) GTEST_SKIP() << "RLIMIT_NOFILE " << files.rlim_cur << " is below 700";
  expect_same_on_thread_and_fiber([] {
    const int shared = ::eventfd(0, EFD_CLOEXEC);
    std::vector<int> epolls;
    std::map<std::string, int> results;
    for (int i = 0; i < 600; ++i) {
      const int epoll = ::epoll_create1(EPOLL_CLOEXEC);
      epoll_event event{};
      event.events = EPOLLIN;
      if (epoll < 0 || ::epoll_ctl(epoll, EPOLL_CTL_ADD, shared, &event) != 0) return std::string("no epoll");
      epolls.push_back(epoll);
      epoll_event got[1];
      ++results[outcome(::epoll_wait(epoll, got, 1, 1))];
    }
    for (const int epoll : epolls) ::close(epoll);
    ::close(shared);
    std::string out;
    for (const auto& [result, count] : results) out += result + " x" + std::to_string(count) + "\n";
    return out;
  });
}

// An epoll closed while a fiber waits on it, its number taken at once by
// another loop's epoll whose fd is ready (dup2): the wait ends with EBADF (a
// thread's goes on in the epoll it took, which weft cannot hold). Before,
// it returned the new epoll's event, whose data was the other loop's.
TEST(HooksMultiplexers, AnEpollClosedWhileWaitedOnEndsItsWaitWithEbadf) {
  Scheduler sched{test::config_with(1)};
  const int watched = ::eventfd(0, EFD_CLOEXEC);
  const int ready = ::eventfd(1, EFD_CLOEXEC);
  const int epoll = ::epoll_create1(EPOLL_CLOEXEC);
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = 1;
  ASSERT_EQ(::epoll_ctl(epoll, EPOLL_CTL_ADD, watched, &event), 0);
  std::atomic<int> worker_thread{0};
  int result = 0;
  int error = 0;
  epoll_event got{};
  Fiber waiter = sched.spawn([&] {
    worker_thread = ::gettid();
    result = ::epoll_wait(epoll, &got, 1, 5'000);
    error = errno;
  });
  while (worker_thread.load() == 0) std::this_thread::sleep_for(1ms);
  test::await_asleep(worker_thread.load());  // the fiber parked, its one worker idle
  const int other = ::epoll_create1(EPOLL_CLOEXEC);
  event.data.u64 = 2;
  ASSERT_EQ(::epoll_ctl(other, EPOLL_CTL_ADD, ready, &event), 0);
  // Closed and taken in one call: the number names the other epoll before
  // the waiter runs again.
  ASSERT_EQ(::dup2(other, epoll), epoll);
  const auto start = Clock::now();
  waiter.join();
  EXPECT_EQ(result, -1) << "the event's data: " << got.data.u64;
  EXPECT_EQ(error, EBADF);
  EXPECT_LT(Clock::now() - start, 4s);
  ::close(epoll);
  ::close(other);
  ::close(ready);
  ::close(watched);
}

// ppoll's, pselect's and epoll's refusals: an invalid timespec (EINVAL),
// maxevents <= 0 (EINVAL), an fd not an epoll (EINVAL), a closed fd
// (EBADF); epoll_pwait2 with a null timeout waits for the fd.
TEST(HooksMultiplexers, RefusalsGiveWhatAPlainThreadGets) {
  expect_same_on_thread_and_fiber([] {
    std::string out;
    const Pipe pipe;
    pollfd one{pipe.reader, POLLIN, 0};
    fd_set r;
    for (const timespec bad : {timespec{0, 1'000'000'000}, timespec{-1, 0}, timespec{0, -1}}) {
      out += std::string("ppoll ") + outcome(ppoll(&one, 1, &bad, nullptr));
      FD_ZERO(&r);
      FD_SET(pipe.reader, &r);
      out += std::string(" pselect ") + outcome(pselect(pipe.reader + 1, &r, nullptr, nullptr, &bad, nullptr)) + "\n";
    }
    const int epfd = epoll_create1(EPOLL_CLOEXEC);
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.fd = pipe.reader;
    EXPECT_EQ(epoll_ctl(epfd, EPOLL_CTL_ADD, pipe.reader, &event), 0);
    epoll_event events[2];
    const int closed = ::dup(pipe.reader);
    ::close(closed);
    out += std::string("maxevents 0 ") + outcome(epoll_wait(epfd, events, 0, 50));
    volatile int negative = -1;  // not a constant the compiler refuses
    out += std::string(" maxevents -1 ") + outcome(epoll_pwait(epfd, events, negative, 50, nullptr));
    out += std::string(" a pipe ") + outcome(epoll_wait(pipe.reader, events, 2, 50));
    out += std::string(" closed ") + outcome(epoll_wait(closed, events, 2, 50));
    const timespec bad{0, 1'000'000'000};
    out += std::string(" bad timespec ") + outcome(epoll_pwait2(epfd, events, 2, &bad, nullptr));
    out += std::string(" nothing ") + outcome(epoll_wait(epfd, events, 2, 20));
    std::thread writer([&] {
      std::this_thread::sleep_for(20ms);
      EXPECT_EQ(::write(pipe.writer, "x", 1), 1);
    });
    errno = EDOM;
    const int ready = epoll_pwait2(epfd, events, 2, nullptr, nullptr);
    writer.join();
    out += std::string(" null timeout ") + outcome(ready) + " errno " + strerrorname_np(errno) + " fd " +
           std::to_string(events[0].data.fd == pipe.reader);
    ::close(epfd);
    return out;
  });
}

// errno stays as the caller left it through a wait that parked and ended
// with an fd ready.
TEST(HooksMultiplexers, AParkedWaitLeavesErrnoAlone) {
  expect_same_on_thread_and_fiber([] {
    std::string out;
    const Pipe a;
    const Pipe b;
    for (int round = 0; round < 3; ++round) {
      char byte;
      while (::read(a.reader, &byte, 1) == 1) {
      }
      std::thread writer([&] {
        std::this_thread::sleep_for(20ms);
        EXPECT_EQ(::write(a.writer, "x", 1), 1);
      });
      errno = EDOM;
      int result;
      if (round == 0) {
        pollfd fds[] = {{a.reader, POLLIN, 0}, {b.reader, POLLIN, 0}};
        result = poll(fds, 2, 10'000);
      } else if (round == 1) {
        fd_set r;
        FD_ZERO(&r);
        FD_SET(a.reader, &r);
        FD_SET(b.reader, &r);
        timeval tv{10, 0};
        result = select(std::max(a.reader, b.reader) + 1, &r, nullptr, nullptr, &tv);
      } else {
        pollfd fd{a.reader, POLLIN, 0};
        result = poll(&fd, 1, 10'000);
      }
      writer.join();
      out += outcome(result) + " errno " + strerrorname_np(errno) + "\n";
    }
    return out;
  });
}

// What `wait(a, b)` returns and leaves in errno, `a` and `b` the readers
// of two quiet pipes, while a writer makes `a` readable after 20 ms and
// leaves errno EAGAIN behind it: on two plain threads, then as two fibers
// of one worker, which share its thread and so its errno.
test::ThreadAndFiber wait_while_another_sets_errno(const std::function<int(int, int)>& wait) {
  const auto run = [&](const std::function<void(const std::function<void()>&, const std::function<void()>&)>& both) {
    const Pipe a;
    const Pipe b;
    std::string out;
    both(
        [&] {
          errno = EDOM;
          const int result = wait(a.reader, b.reader);
          out = outcome(result) + " errno " + strerrorname_np(errno);
        },
        [&] {
          errno = EAGAIN;
          EXPECT_EQ(::write(a.writer, "x", 1), 1);
        });
    return out;
  };
  test::ThreadAndFiber got;
  got.thread = run([](const std::function<void()>& waiter, const std::function<void()>& writer) {
    std::thread waiting(waiter);
    std::thread writing([&] {
      std::this_thread::sleep_for(20ms);
      writer();
    });
    waiting.join();
    writing.join();
  });
  got.fiber = run([](const std::function<void()>& waiter, const std::function<void()>& writer) {
    Scheduler sched = test::one_worker();
    Fiber waiting = sched.spawn(waiter);
    Fiber writing = sched.spawn([&] {
      this_fiber::sleep_for(20ms);
      writer();
    });
    waiting.join();
    writing.join();
  });
  return got;
}

// errno stays the caller's through a wait that parked and ended with an
// fd ready, whatever another fiber of the same thread left in it
// meanwhile. Before, the wait returned with the writer's EAGAIN.
TEST(HooksMultiplexers, AParkedWaitKeepsErrnoFromAnotherFiberOfItsThread) {
  const std::vector<std::pair<const char*, std::function<int(int, int)>>> waits = {
      {"poll of one fd",
       [](int a, int) {
         pollfd fd{a, POLLIN, 0};
         return poll(&fd, 1, 10'000);
       }},
      {"poll of two fds",
       [](int a, int b) {
         pollfd fds[] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
         return poll(fds, 2, 10'000);
       }},
      {"ppoll of two fds",
       [](int a, int b) {
         pollfd fds[] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
         const timespec timeout{10, 0};
         return ppoll(fds, 2, &timeout, nullptr);
       }},
      {"select",
       [](int a, int b) {
         fd_set r;
         FD_ZERO(&r);
         FD_SET(a, &r);
         FD_SET(b, &r);
         timeval tv{10, 0};
         return select(std::max(a, b) + 1, &r, nullptr, nullptr, &tv);
       }},
      {"pselect of one fd",
       [](int a, int) {
         fd_set r;
         FD_ZERO(&r);
         FD_SET(a, &r);
         const timespec timeout{10, 0};
         return pselect(a + 1, &r, nullptr, nullptr, &timeout, nullptr);
       }},
      {"epoll_wait",
       [](int a, int) {
         const int epfd = epoll_create1(EPOLL_CLOEXEC);
         epoll_event event{};
         event.events = EPOLLIN;
         EXPECT_EQ(epoll_ctl(epfd, EPOLL_CTL_ADD, a, &event), 0);
         epoll_event events[1];
         const int result = epoll_wait(epfd, events, 1, 10'000);
         ::close(epfd);  // leaves errno alone: it succeeds
         return result;
       }},
  };
  for (const auto& [name, wait] : waits) {
    SCOPED_TRACE(name);
    const test::ThreadAndFiber got = wait_while_another_sets_errno(wait);
    EXPECT_EQ(got.fiber, got.thread);
  }
}

// A wait on one fd that epoll cannot watch (a regular file, a directory,
// /dev/null) for what it is never ready for (POLLPRI, the bands): poll(2)
// reports such an fd as ever the same, so a thread waits the timeout out
// and finds nothing. Before, a fiber's wait failed at once with EPERM.
TEST(HooksMultiplexers, AWaitOnOneFdEpollRefusesWaitsItsTimeout) {
  struct Case {
    const char* path;
    int flags;
    short events;
  };
  for (const Case c : {Case{"/proc/self/exe", O_RDONLY, POLLPRI}, Case{"/proc/self/exe", O_RDONLY, POLLRDBAND},
                       Case{"/", O_RDONLY | O_DIRECTORY, POLLPRI}, Case{"/dev/null", O_RDWR, POLLPRI},
                       Case{"/dev/null", O_RDWR, POLLWRBAND}}) {
    SCOPED_TRACE(std::string(c.path) + " events " + std::to_string(c.events));
    expect_same_on_thread_and_fiber([c] {
      const int fd = ::open(c.path, c.flags | O_CLOEXEC);
      EXPECT_GE(fd, 0);
      pollfd one{fd, c.events, 0};
      const auto start = Clock::now();
      errno = EDOM;
      const int result = poll(&one, 1, 50);
      const bool waited = Clock::now() - start >= 40ms;
      std::string out = "poll " + outcome(result) + " errno " + strerrorname_np(errno) + " revents " +
                        std::to_string(one.revents) + (waited ? " after the timeout" : " early");
      fd_set e;
      FD_ZERO(&e);
      FD_SET(fd, &e);
      timeval tv{0, 20'000};
      errno = EDOM;
      const int selected = select(fd + 1, nullptr, nullptr, &e, &tv);
      out += "\nselect, exceptfds " + outcome(selected) + " errno " + strerrorname_np(errno) + " set " +
             std::to_string(FD_ISSET(fd, &e));
      ::close(fd);
      return out;
    });
  }
}

// Another thread puts a new fd on the number a poll waits on (dup2 closes
// the old and reuses the number at once): poll(2) never fails with EBADF,
// and a thread's poll waits its timeout out on the file it holds. Before,
// a fiber's poll and select woke with -1 EBADF when the number closed.
TEST(HooksMultiplexers, AWaitWhoseFdNumberIsTakenByAnotherFdWaitsItsTimeout) {
  expect_same_on_thread_and_fiber([] {
    Pipe waited_on;
    Pipe other;
    std::string out;
    for (const bool use_select : {false, true}) {
      const int number = ::dup(waited_on.reader);
      std::thread replacer([&] {
        std::this_thread::sleep_for(50ms);
        ::dup2(other.reader, number);
      });
      const auto start = Clock::now();
      int result;
      if (use_select) {
        fd_set r;
        FD_ZERO(&r);
        FD_SET(number, &r);
        timeval tv{0, 300'000};
        result = select(number + 1, &r, nullptr, nullptr, &tv);
      } else {
        pollfd one{number, POLLIN, 0};
        result = poll(&one, 1, 300);
      }
      const bool waited = Clock::now() - start >= 250ms;
      out += std::string(use_select ? "select " : "poll ") + outcome(result) +
             (waited ? " after the timeout\n" : " early\n");
      replacer.join();
      ::close(number);
    }
    return out;
  });
}

// Linux's select finds no file behind an fd closed while it waits and
// reports it ready in each set that asked for it, beside the others'
// readiness (a fiber's select returns that when the close wakes it, a
// thread's at its next wake: here the timeout).
TEST(HooksMultiplexers, SelectReportsAnFdClosedWhileItWaitsReadyInEachSet) {
#ifdef WEFT_UNDER_TSAN
  GTEST_SKIP() << "ThreadSanitizer reports a close of an fd another thread waits on, which this test makes on purpose";
#endif
  expect_same_on_thread_and_fiber([] {
    Pipe waited_on;
    Pipe quiet;
    const int number = ::dup(waited_on.reader);
    std::thread closer([&] {
      std::this_thread::sleep_for(50ms);
      ::close(number);
    });
    fd_set r, w, e;
    FD_ZERO(&r);
    FD_ZERO(&w);
    FD_ZERO(&e);
    for (fd_set* set : {&r, &w, &e}) FD_SET(number, set);
    FD_SET(quiet.reader, &r);
    FD_SET(quiet.reader, &e);
    timeval tv{0, 300'000};
    const int nfds = std::max(number, quiet.reader) + 1;
    const int result = select(nfds, &r, &w, &e, &tv);
    closer.join();
    std::string out = outcome(result);
    for (const auto& [name, set] : {std::pair{"r", &r}, std::pair{"w", &w}, std::pair{"e", &e}})
      out += std::string(" ") + name + ":" + std::to_string(FD_ISSET(number, set)) +
             std::to_string(FD_ISSET(quiet.reader, set));
    return out;
  });
}

TEST(HooksMultiplexers, APollForAFilesOwnEventGetsIt) {
  int status = -1;
  const std::string out =
      test::run_child("file-event", "", "HooksMultiplexersChild.APollForAFilesOwnEventGetsIt", status);
  if (out.find("[  SKIPPED ]") != std::string::npos) GTEST_SKIP() << out;
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("[  PASSED  ] 1 test"), std::string::npos) << out;
}

// The mount table (/proc/self/mounts) reports POLLPRI|POLLERR once per
// change, to the first poll that asks, as pressure triggers and cgroup
// event files do. Parked on the netpoller, a fiber's poll lost it to the
// scheduler's epoll and waited its timeout out (here 5 s); a thread's
// returns at the mount. Now a poll on a file is the call itself. Run in a
// mount namespace of its own (tests/private_namespaces.h).
TEST(HooksMultiplexersChild, APollForAFilesOwnEventGetsIt) {
  if (!test::child_mode("file-event"))
    GTEST_SKIP() << "runs in the child of HooksMultiplexers.APollForAFilesOwnEventGetsIt";
  if (const std::string why = test::enter_private_namespaces(CLONE_NEWNS); !why.empty()) GTEST_SKIP() << why;
  char dir[] = "/tmp/weft-mount-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const auto wait_for_a_mount = [&] {
    const int fd = ::open("/proc/self/mounts", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return std::string("open: ") + std::strerror(errno);
    pollfd table{fd, POLLPRI, 0};
    ::poll(&table, 1, 0);  // takes a change left from before
    std::thread mounter([&] {
      std::this_thread::sleep_for(100ms);
      ::mount("none", dir, "tmpfs", 0, nullptr);
    });
    const auto start = Clock::now();
    const int result = poll(&table, 1, 5'000);
    const bool in_time = Clock::now() - start < 4s;
    mounter.join();
    ::umount(dir);
    ::close(fd);
    return outcome(result) + " revents " + std::to_string(table.revents) + (in_time ? " at the mount" : " late");
  };
  const test::ThreadAndFiber got = test::on_thread_and_fiber(wait_for_a_mount);
  EXPECT_EQ(got.thread, "1 revents " + std::to_string(POLLPRI | POLLERR) + " at the mount");
  EXPECT_EQ(got.fiber, got.thread);
  ::rmdir(dir);
}

// An epoll_pwait2 timeout the kernel cannot read (in a page mapped with no
// access): its EFAULT, as on a thread. Before, a fiber's call read it
// first and died of SIGSEGV.
TEST(HooksMultiplexers, AnUnreadableEpollPwait2TimeoutIsEFAULT) {
  const long page = ::sysconf(_SC_PAGESIZE);
  void* none = ::mmap(nullptr, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(none, MAP_FAILED);
  const auto* unreadable = static_cast<const timespec*>(none);
  expect_same_on_thread_and_fiber([&] {
    const int epfd = epoll_create1(EPOLL_CLOEXEC);
    epoll_event events[1];
    errno = 0;
    const std::string out = outcome(epoll_pwait2(epfd, events, 1, unreadable, nullptr));
    ::close(epfd);
    return out;
  });
  ::munmap(none, page);
}

// select's time left of a timeout that runs past the largest time (the
// largest tv_sec: a program's "forever"): Linux saturates the call's end
// at that time, so what is left is that end less the monotonic time now.
// Before, a fiber's select left the timeout less the time slept.
TEST(HooksMultiplexers, SelectLeavesTheTimeLeftOfASaturatedTimeoutAsLinuxDoes) {
  expect_same_on_thread_and_fiber([] {
    timeval tv{std::numeric_limits<time_t>::max(), 0};
    const std::string out = select_a_ready_pipe(tv);
    timespec now{};
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    const time_t end_less_now = std::numeric_limits<time_t>::max() - now.tv_sec;
    const bool as_linux = tv.tv_sec <= end_less_now + 1 && tv.tv_sec >= end_less_now - 60;
    return out + (as_linux ? " left: the end of time less now" : " left " + std::to_string(tv.tv_sec));
  });
}

}  // namespace
}  // namespace weft
