// The socket options that change how a blocking call waits, as the hooks
// must keep them (hooks/fd_table.h): a negative SO_RCVTIMEO or SO_SNDTIMEO,
// which the kernel keeps as "at once" while getsockopt reports it as none,
// and SO_RCVLOWAT, which a blocking receive on a stream socket waits for.
// Each test runs its calls on a plain thread and in a fiber and compares
// what they returned (test::on_thread_and_fiber).
//
// A call that waits where a thread's would not is bounded by a rescue: a
// thread that, after 20 s, makes the fd ready (and the result then differs
// from the thread's); a receive that waits for its SO_RCVLOWAT by an
// SO_RCVTIMEO of 5 s.
#include <linux/time_types.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "hooks_test_support.h"
#include "socket_pair.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using test::outcome;

struct UnixStreamPair {
  int fds[2] = {-1, -1};
  UnixStreamPair() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0) << std::strerror(errno); }
  UnixStreamPair(const UnixStreamPair&) = delete;
  UnixStreamPair& operator=(const UnixStreamPair&) = delete;
  ~UnixStreamPair() {
    for (int fd : fds)
      if (fd >= 0) close(fd);
  }
  int a() const { return fds[0]; }
  int b() const { return fds[1]; }
};

// A Watchdog that fires after 20 s: it ends the wait a call should not
// have made (long enough that a loaded machine's stall never looks like
// one; it costs time only when a test fails).
class Rescue : public test::Watchdog {
 public:
  explicit Rescue(Fire fire) : Watchdog(std::move(fire), std::chrono::seconds(20)) {}
};

// `result` of a call that a Rescue bounded, marked if the rescue ended it.
std::string rescued_outcome(ssize_t result, const Rescue& rescue) {
  return outcome(result) + (rescue.fired() ? " (rescued)" : "");
}

// A negative timeout, as the old (timeval) or the new
// (__kernel_sock_timeval) form of the option takes it.
int set_negative_timeout(int fd, int option) {
#if defined(SO_RCVTIMEO_NEW)
  if (option == SO_RCVTIMEO_NEW || option == SO_SNDTIMEO_NEW) {
    const __kernel_sock_timeval tv{-1, 0};
    return setsockopt(fd, SOL_SOCKET, option, &tv, sizeof(tv));
  }
#endif
  const timeval tv{-1, 0};
  return setsockopt(fd, SOL_SOCKET, option, &tv, sizeof(tv));
}

void set_timeout(int fd, int option, std::chrono::milliseconds timeout) {
  const timeval tv{time_t(timeout.count() / 1000), suseconds_t(timeout.count() % 1000 * 1000)};
  ASSERT_EQ(setsockopt(fd, SOL_SOCKET, option, &tv, sizeof(tv)), 0) << std::strerror(errno);
}

void set_rcvlowat(int fd, int lowat) {
  ASSERT_EQ(setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof(lowat)), 0) << std::strerror(errno);
}

void write_one_byte(int fd) { ASSERT_EQ(write(fd, "!", 1), 1) << std::strerror(errno); }

// Waits (up to 5 s) until `fd` has `bytes` queued to read.
void await_queued(int fd, int bytes) {
  const auto until = Clock::now() + 5s;
  int queued = 0;
  while (ioctl(fd, FIONREAD, &queued) == 0 && queued < bytes && Clock::now() < until) std::this_thread::sleep_for(1ms);
}

#if defined(SO_RCVTIMEO_NEW)
constexpr int kReceiveTimeouts[] = {SO_RCVTIMEO, SO_RCVTIMEO_NEW};
constexpr int kSendTimeouts[] = {SO_SNDTIMEO, SO_SNDTIMEO_NEW};
#else
constexpr int kReceiveTimeouts[] = {SO_RCVTIMEO};
constexpr int kSendTimeouts[] = {SO_SNDTIMEO};
#endif

// --- a negative SO_RCVTIMEO / SO_SNDTIMEO ------------------------------------

// The kernel keeps a negative timeout as 0 jiffies: a blocking call that
// finds nothing fails with EAGAIN at once. getsockopt reports it as {0, 0},
// as it reports no timeout: a fiber that read it so parked for good.
TEST(HooksSockopt, ANegativeRcvtimeoFailsAReceiveAtOnce) {
  const test::ThreadAndFiber got = test::on_thread_and_fiber([] {
    std::string out;
    for (int option : kReceiveTimeouts) {
      UnixStreamPair pair;
      out += "set " + outcome(set_negative_timeout(pair.a(), option));
      timeval reported{7, 7};
      socklen_t len = sizeof(reported);
      getsockopt(pair.a(), SOL_SOCKET, SO_RCVTIMEO, &reported, &len);
      out += ", reported {" + std::to_string(reported.tv_sec) + ", " + std::to_string(reported.tv_usec) + "}";
      char buf[8];
      {
        const Rescue rescue([&](const std::atomic<bool>&) { write_one_byte(pair.b()); });
        errno = 0;
        out += ", recv " + rescued_outcome(recv(pair.a(), buf, sizeof(buf), 0), rescue);
      }
      {
        const Rescue rescue([&](const std::atomic<bool>&) { write_one_byte(pair.b()); });
        errno = 0;
        out += ", read " + rescued_outcome(read(pair.a(), buf, sizeof(buf)), rescue) + "; ";
      }
    }
    return out;
  });
  std::string expected;
  for (std::size_t i = 0; i < std::size(kReceiveTimeouts); ++i)
    expected += "set 0, reported {0, 0}, recv -1 EAGAIN, read -1 EAGAIN; ";
  EXPECT_EQ(got.thread, expected);
  EXPECT_EQ(got.fiber, got.thread);
}

// A listener's negative SO_RCVTIMEO fails an accept with nothing queued at
// once, and the socket an accept makes inherits it (the kernel clones the
// listener's socket), as a dup'd fd shares it.
TEST(HooksSockopt, ANegativeRcvtimeoReachesAcceptedAndDupdSockets) {
  const test::ThreadAndFiber got = test::on_thread_and_fiber([] {
    std::string out;
    test::LoopbackListener listener;
    set_negative_timeout(listener.fd, SO_RCVTIMEO);
    const int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int accepted;
    {
      const Rescue rescue([&](const std::atomic<bool>&) { connect(client, listener.address(), sizeof(sockaddr_in)); });
      errno = 0;
      accepted = accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC);
      out += "accept of none " + rescued_outcome(accepted, rescue);
    }
    if (accepted < 0) {
      connect(client, listener.address(), sizeof(sockaddr_in));
      accepted = accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC);
      out += ", accept " + std::string(accepted >= 0 ? "ok" : outcome(accepted));
    }
    char buf[8];
    {
      const Rescue rescue([&](const std::atomic<bool>&) { write_one_byte(client); });
      errno = 0;
      out += ", its recv " + rescued_outcome(recv(accepted, buf, sizeof(buf), 0), rescue);
    }
    const int copy = dup(accepted);
    {
      const Rescue rescue([&](const std::atomic<bool>&) { write_one_byte(client); });
      errno = 0;
      out += ", a dup's recv " + rescued_outcome(recv(copy, buf, sizeof(buf), 0), rescue);
    }
    close(copy);
    close(accepted);
    close(client);
    return out;
  });
  EXPECT_EQ(got.thread, "accept of none -1 EAGAIN, accept ok, its recv -1 EAGAIN, a dup's recv -1 EAGAIN");
  EXPECT_EQ(got.fiber, got.thread);
}

// A send on a socket whose buffer fills sends what fits and returns its
// count; the next, finding no room, fails with EAGAIN.
TEST(HooksSockopt, ANegativeSndtimeoEndsASendWhenTheBufferIsFull) {
  const test::ThreadAndFiber got = test::on_thread_and_fiber([] {
    std::string out;
    const std::vector<char> data(4 << 20, 'x');  // more than the socket buffers hold
    for (int option : kSendTimeouts) {
      UnixStreamPair pair;
      set_negative_timeout(pair.a(), option);
      const Rescue rescue([&](const std::atomic<bool>& stopped) {
        std::vector<char> sink(1 << 20);
        while (!stopped) {
          if (recv(pair.b(), sink.data(), sink.size(), MSG_DONTWAIT) <= 0) std::this_thread::sleep_for(1ms);
        }
      });
      errno = 0;
      const ssize_t first = send(pair.a(), data.data(), data.size(), 0);
      out += "first ";
      out += first > 0 && first < ssize_t(data.size()) ? "a part" : outcome(first);
      errno = 0;
      const ssize_t second = send(pair.a(), data.data(), data.size(), 0);
      out += ", second " + rescued_outcome(second, rescue) + "; ";
    }
    return out;
  });
  std::string expected;
  for (std::size_t i = 0; i < std::size(kSendTimeouts); ++i) expected += "first a part, second -1 EAGAIN; ";
  EXPECT_EQ(got.thread, expected);
  EXPECT_EQ(got.fiber, got.thread);
}

// Any later timeout set through the fd replaces "at once": {0, 0} waits
// without end again (here for data a thread writes after 100 ms), a
// positive one until it passes.
TEST(HooksSockopt, ALaterTimeoutReplacesANegativeOne) {
  const test::ThreadAndFiber got = test::on_thread_and_fiber([] {
    std::string out;
    UnixStreamPair pair;
    char buf[8];
    set_negative_timeout(pair.a(), SO_RCVTIMEO);
    {
      const Rescue rescue([&](const std::atomic<bool>&) { write_one_byte(pair.b()); });
      errno = 0;
      out += "negative " + rescued_outcome(recv(pair.a(), buf, sizeof(buf), 0), rescue);
    }
    set_timeout(pair.a(), SO_RCVTIMEO, 0ms);
    std::thread writer([&] {
      std::this_thread::sleep_for(100ms);
      write_one_byte(pair.b());
    });
    errno = 0;
    out += ", none " + outcome(recv(pair.a(), buf, sizeof(buf), 0));
    writer.join();
    set_negative_timeout(pair.a(), SO_RCVTIMEO);
    set_timeout(pair.a(), SO_RCVTIMEO, 50ms);
    const auto start = Clock::now();
    errno = 0;
    out += ", 50 ms " + outcome(recv(pair.a(), buf, sizeof(buf), 0));
    out += Clock::now() - start >= 45ms ? " after it" : " before it";
    return out;
  });
  EXPECT_EQ(got.thread, "negative -1 EAGAIN, none 1, 50 ms -1 EAGAIN after it");
  EXPECT_EQ(got.fiber, got.thread);
}

// --- SO_RCVLOWAT -------------------------------------------------------------

// `reader` with SO_RCVLOWAT 10, and each way of receiving 100 bytes with 1
// byte queued, while a thread writes 9 more to `writer` once the receive
// waits (its thread asleep) and 10 more once it waits again or has
// returned: a blocking receive takes the 1 and waits on (MSG_DONTWAIT took
// the 1 and returned). Before, the writes came 50 ms apart, and a receive
// held off its CPU that long found them queued. A unix socket's receive returns
// once it has 10 bytes (each write wakes it); TCP's wakes when 10 bytes
// it has not taken yet are there (tcp_data_ready), with 1 + 9 + 10. A
// unix socket's peek returns what is there; TCP's waits for 10 bytes.
std::string receive_below_rcvlowat(int reader, int writer) {
  set_timeout(reader, SO_RCVTIMEO, 5s);  // bounds a receive that waits for more than comes
  set_rcvlowat(reader, 10);
  std::string out;
  char buf[100];
  const std::vector<std::pair<std::string, std::function<ssize_t()>>> receives = {
      {"recv", [&] { return recv(reader, buf, sizeof(buf), 0); }},
      {"recvfrom", [&] { return recvfrom(reader, buf, sizeof(buf), 0, nullptr, nullptr); }},
      {"read", [&] { return read(reader, buf, sizeof(buf)); }},
      {"readv",
       [&] {
         iovec iov[2] = {{buf, 50}, {buf + 50, 50}};
         return readv(reader, iov, 2);
       }},
      {"recvmsg",
       [&] {
         iovec iov{buf, sizeof(buf)};
         msghdr msg{};
         msg.msg_iov = &iov;
         msg.msg_iovlen = 1;
         return recvmsg(reader, &msg, 0);
       }},
      {"peek", [&] { return recv(reader, buf, sizeof(buf), MSG_PEEK); }},
  };
  const int receiver = gettid();  // a fiber's: its one worker's
  for (const auto& [name, receive] : receives) {
    write_one_byte(writer);
    await_queued(reader, 1);
    std::thread sender([&] {
      test::await_asleep(receiver);
      EXPECT_EQ(write(writer, "123456789", 9), 9);
      test::await_asleep(receiver);
      EXPECT_EQ(write(writer, "0123456789", 10), 10);
    });
    errno = 0;
    out += name + " " + outcome(receive()) + ", ";
    sender.join();
    while (recv(reader, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
    }
  }
  return out;
}

// `body(reader, writer)` on a loopback TCP pair whose writer sends each
// write at once (TCP_NODELAY), on a plain thread and in a fiber.
test::ThreadAndFiber on_thread_and_fiber_over_tcp(std::string (*body)(int reader, int writer)) {
  return test::on_thread_and_fiber([body] {
    test::LoopbackTcpPair tcp;
    const int on = 1;
    setsockopt(tcp.client, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
    return body(tcp.server, tcp.client);
  });
}

TEST(HooksSockopt, ATcpReceiveWaitsForItsRcvlowat) {
  const test::ThreadAndFiber got = on_thread_and_fiber_over_tcp(receive_below_rcvlowat);
  EXPECT_EQ(got.thread, "recv 20, recvfrom 20, read 20, readv 20, recvmsg 20, peek 10, ");
  EXPECT_EQ(got.fiber, got.thread);
}

TEST(HooksSockopt, AUnixStreamReceiveWaitsForItsRcvlowat) {
  const test::ThreadAndFiber got = test::on_thread_and_fiber([] {
    UnixStreamPair pair;
    return receive_below_rcvlowat(pair.a(), pair.b());
  });
  EXPECT_EQ(got.thread, "recv 10, recvfrom 10, read 10, readv 10, recvmsg 10, peek 1, ");
  EXPECT_EQ(got.fiber, got.thread);
}

// What ends the wait for SO_RCVLOWAT before it is met: SO_RCVTIMEO (1
// byte queued, 2 more once the receive waits, a 1 s timeout: the 3,
// not EAGAIN; TCP raised no wake-up for the 2, and takes them at the
// timeout), and EOF (1 byte, then 2 more and the writer's shutdown 50 ms
// later: the 3).
// MSG_WAITALL waits for all it asked, whatever SO_RCVLOWAT says (TCP's
// wait, woken by none of the 4 bytes, below SO_RCVLOWAT, ends at the
// same 1 s timeout).
std::string rcvlowat_cut_short(int reader, int writer) {
  set_rcvlowat(reader, 10);
  set_timeout(reader, SO_RCVTIMEO, 1s);  // long enough for the sender, however late
  std::string out;
  char buf[100];
  write_one_byte(writer);
  await_queued(reader, 1);
  const int receiver = gettid();  // a fiber's: its one worker's
  std::thread sender([&] {
    test::await_asleep(receiver);
    EXPECT_EQ(write(writer, "12", 2), 2);
  });
  errno = 0;
  out += "timed out " + outcome(recv(reader, buf, sizeof(buf), 0));
  sender.join();
  sender = std::thread([&] {
    write_one_byte(writer);
    std::this_thread::sleep_for(20ms);
    EXPECT_EQ(write(writer, "123", 3), 3);
  });
  errno = 0;
  out += ", wait all " + outcome(recv(reader, buf, 4, MSG_WAITALL));
  sender.join();
  set_timeout(reader, SO_RCVTIMEO, 5s);
  sender = std::thread([&] {
    write_one_byte(writer);
    std::this_thread::sleep_for(50ms);
    EXPECT_EQ(write(writer, "12", 2), 2);
    shutdown(writer, SHUT_WR);
  });
  errno = 0;
  out += ", at EOF " + outcome(recv(reader, buf, sizeof(buf), 0));
  sender.join();
  out += ", then " + outcome(recv(reader, buf, sizeof(buf), 0));
  return out;
}

TEST(HooksSockopt, EofOrATimeoutEndsTheWaitForRcvlowat) {
  const test::ThreadAndFiber tcp = on_thread_and_fiber_over_tcp(rcvlowat_cut_short);
  EXPECT_EQ(tcp.thread, "timed out 3, wait all 4, at EOF 3, then 0");
  EXPECT_EQ(tcp.fiber, tcp.thread);
  const test::ThreadAndFiber unix_stream = test::on_thread_and_fiber([] {
    UnixStreamPair pair;
    return rcvlowat_cut_short(pair.a(), pair.b());
  });
  EXPECT_EQ(unix_stream.thread, "timed out 3, wait all 4, at EOF 3, then 0");
  EXPECT_EQ(unix_stream.fiber, unix_stream.thread);
}

}  // namespace
}  // namespace weft
