// Drain notes (io/netpoller.h): after a read that drained a socket, the
// fiber's next read wait parks without polling the fd first. These are the
// cases where a read returns less than asked although the fd is still
// readable, so that a note would park the fiber with no edge to come: the
// peer's FIN or an error seen before the read, a datagram socket (a short
// read is one datagram), a peek, a unix stream socket's read that stops
// after passed fds, and a TCP read that stops at the urgent mark. Each
// wait must still see the fd ready.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>
#include <weft/io.h>
#include <weft/weft.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <system_error>
#include <thread>

#include "fd_pair.h"
#include "fd_passing.h"
#include "io/fd_records.h"
#include "io/netpoller.h"
#include "socket_pair.h"
#include "sync_support.h"

namespace weft {
namespace {

using namespace std::chrono_literals;

using test::FdPair;
using test::make_socketpair;

// The reader's read-edge counter, moved by a poller that harvested an event.
std::uint32_t read_edges(int fd) { return detail::fd_records().get(fd)->events[0].load(); }

// In a fiber of `sched`, whose only fd `fd` is: registers it with the
// poller (waits that park and time out; one whose deadline passed before
// it parked registers nothing), then has `write_and_more` make it readable
// and sleeps until a poller harvested that (the idle worker blocks in
// epoll_wait while the fiber sleeps), so that the read that follows comes
// after the edge. False if either did not happen within 10 s.
template <class Make>
bool readable_and_harvested(Scheduler& sched, int fd, Make&& write_and_more) {
  const auto until = std::chrono::steady_clock::now() + 10s;
  do {
    EXPECT_FALSE(io::wait_readable(fd, 1ms));
    if (std::chrono::steady_clock::now() > until) return false;
  } while (sched.snapshot().poller.fds_registered == 0);
  const std::uint32_t before = read_edges(fd);
  write_and_more();
  while (read_edges(fd) == before) {
    if (std::chrono::steady_clock::now() > until) return false;
    this_fiber::sleep_for(1ms);
  }
  return true;
}

TEST(DrainNote, AShortReadAfterTheHangUpWasSeenLeavesTheEofReadable) {
  FdPair sockets = make_socketpair(SOCK_STREAM | SOCK_NONBLOCK);
  Scheduler sched{test::config_with(1)};
  sched
      .spawn([&] {
        ASSERT_TRUE(readable_and_harvested(sched, sockets.reader, [&] {
          ASSERT_EQ(::write(sockets.writer, "abc", 3), 3);
          ASSERT_EQ(::shutdown(sockets.writer, SHUT_WR), 0);
        }));
        // Data and FIN in one harvest, or the FIN's harvest still to come:
        // either way the EOF is readable now or wakes the wait.
        char buffer[64];
        ASSERT_EQ(::read(sockets.reader, buffer, sizeof buffer), 3);
        EXPECT_TRUE(io::wait_readable(sockets.reader, 5s)) << "the EOF after a short read was not seen";
        EXPECT_EQ(::read(sockets.reader, buffer, sizeof buffer), 0);
      })
      .join();
}

TEST(DrainNote, AShortDatagramLeavesTheNextOneReadable) {
  FdPair sockets = make_socketpair(SOCK_DGRAM | SOCK_NONBLOCK);
  Scheduler sched{test::config_with(1)};
  sched
      .spawn([&] {
        ASSERT_TRUE(readable_and_harvested(sched, sockets.reader, [&] {
          ASSERT_EQ(::write(sockets.writer, "a", 1), 1);
          ASSERT_EQ(::write(sockets.writer, "b", 1), 1);
        }));
        char buffer[64];
        ASSERT_EQ(::read(sockets.reader, buffer, sizeof buffer), 1);
        EXPECT_TRUE(io::wait_readable(sockets.reader, 5s)) << "the second datagram was not seen";
        ASSERT_EQ(::read(sockets.reader, buffer, sizeof buffer), 1);
        EXPECT_EQ(buffer[0], 'b');
      })
      .join();
}

TEST(DrainNote, AShortPeekLeavesTheBytesReadable) {
  FdPair sockets = make_socketpair(SOCK_STREAM | SOCK_NONBLOCK);
  Scheduler sched{test::config_with(1)};
  sched
      .spawn([&] {
        ASSERT_TRUE(
            readable_and_harvested(sched, sockets.reader, [&] { ASSERT_EQ(::write(sockets.writer, "abc", 3), 3); }));
        char buffer[64];
        ASSERT_EQ(::recv(sockets.reader, buffer, sizeof buffer, MSG_PEEK), 3);
        EXPECT_TRUE(io::wait_readable(sockets.reader, 5s)) << "peeked bytes were not seen";
        EXPECT_EQ(::read(sockets.reader, buffer, sizeof buffer), 3);
      })
      .join();
}

TEST(DrainNote, ABlockingReadAfterAShortOneStillSeesTheEof) {
  // The hooks' side: a blocking read after a short one parks before it
  // attempts; with the FIN seen before the short read, it must not wait
  // for an edge that never comes.
  FdPair sockets = make_socketpair(SOCK_STREAM);
  Scheduler sched{test::config_with(1)};
  std::atomic<bool> done{false};
  Fiber reader = sched.spawn([&] {
    ASSERT_TRUE(readable_and_harvested(sched, sockets.reader, [&] {
      ASSERT_EQ(::write(sockets.writer, "abc", 3), 3);
      ASSERT_EQ(::shutdown(sockets.writer, SHUT_WR), 0);
    }));
    char buffer[64];
    ASSERT_EQ(::read(sockets.reader, buffer, sizeof buffer), 3);
    EXPECT_EQ(::read(sockets.reader, buffer, sizeof buffer), 0);
    done.store(true);
  });
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!done.load() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(done.load()) << "the blocking read after a short one hung at the EOF";
  if (!done.load()) detail::fd_closing(sockets.reader);  // wakes it (EBADF), so that the test ends
  reader.join();
}

// A fiber's blocking read of `fd`, after `write_and_more` made it
// readable: the first read returns `first` bytes, short, with `second`
// more still queued, which the next read must return without waiting for
// an edge that never comes. False if it hung for 10 s (the fd is then
// closed under it, so that the test ends).
template <class Make>
void expect_second_read_returns_what_is_queued(int fd, ssize_t first, ssize_t second, Make&& write_and_more) {
  Scheduler sched{test::config_with(1)};
  std::atomic<bool> done{false};
  Fiber reader = sched.spawn([&] {
    ASSERT_TRUE(readable_and_harvested(sched, fd, write_and_more));
    char buffer[64];
    ASSERT_EQ(::read(fd, buffer, sizeof buffer), first);
    EXPECT_EQ(::read(fd, buffer, sizeof buffer), second);
    done.store(true);
  });
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!done.load() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(done.load()) << "the blocking read after a short one waited although bytes were queued";
  if (!done.load()) detail::fd_closing(fd);  // wakes it (EBADF), so that the test ends
  reader.join();
}

// A unix stream socket's read stops after a segment that carried fds
// (SCM_RIGHTS), with what follows queued: a short read there drained
// nothing.
TEST(DrainNote, ABlockingReadAfterOneThatStoppedAfterPassedFdsReturnsTheRest) {
  FdPair sockets = make_socketpair(SOCK_STREAM);
  expect_second_read_returns_what_is_queued(sockets.reader, 3, 3, [&] {
    ASSERT_EQ(test::send_with_fd(sockets.writer, "abc", 3, sockets.writer), 3);
    ASSERT_EQ(::write(sockets.writer, "def", 3), 3);
  });
}

// A TCP read stops at the urgent mark, with what follows it queued.
TEST(DrainNote, ABlockingReadAfterOneThatStoppedAtTheUrgentMarkReturnsTheRest) {
  test::LoopbackTcpPair tcp;
  expect_second_read_returns_what_is_queued(tcp.server, 3, 3, [&] {
    ASSERT_EQ(::send(tcp.client, "abc", 3, 0), 3);
    ASSERT_EQ(::send(tcp.client, "X", 1, MSG_OOB), 1);
    ASSERT_EQ(::send(tcp.client, "def", 3, 0), 3);
  });
}

}  // namespace
}  // namespace weft
