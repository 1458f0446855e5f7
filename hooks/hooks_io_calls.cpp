// The I/O calls that park: read, write and their vector, socket and
// message forms, connect and accept, and the _FORTIFY_SOURCE variants.
//
// On a socket the user left blocking, a fiber attempts the call with
// MSG_DONTWAIT (read -> recv, readv -> preadv2 with RWF_NOWAIT, and so
// on: equal for a socket, see recv(2)) and parks on EAGAIN until the fd is ready or its
// SO_RCVTIMEO/SO_SNDTIMEO passes; the fd's O_NONBLOCK is never touched for
// that. Writes loop until everything is written, as a blocking write does;
// MSG_WAITALL receives loop likewise (transfer_all). A pipe or other
// pollable fd is attempted with RWF_NOWAIT, its per-call non-blocking
// flag, likewise; one that refuses it is waited for first and then called.
// connect and accept have no such flag either: they set O_NONBLOCK for the
// duration of the one non-blocking call, under the fd's flip lock, and put
// the user's flags back before parking; only on a description this process
// alone holds (hooks/description_sharing.h). On any other, accept parks
// until the listener is readable and then makes the blocking call, and
// connect makes the blocking call, both announced (sched/blocking_call.h).
//
// A user O_NONBLOCK fd or a MSG_DONTWAIT call is passed straight through:
// it returns EAGAIN as before and never parks.
#undef _FORTIFY_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <concepts>
#include <cstddef>
#include <cstring>
#include <optional>
#include <type_traits>
#include <vector>

#include "announced.h"
#include "description_sharing.h"
#include "fd_table.h"
#include "file_io.h"
#include "hook_support.h"
#include "iovecs.h"
#include "own_control_steps.h"
#include "real_calls.h"
#include "user_memory.h"

extern "C" [[noreturn]] void __chk_fail(void);

namespace weft::detail {
namespace {

bool would_block(int error) { return error == EAGAIN || error == EWOULDBLOCK; }

// wait_for_fd, and EBADF if the fd was closed through weft while the fiber
// was parked (its number may already belong to another fd).
int park_on(int fd, FdRecord& state, FdDirection direction, Clock::time_point deadline,
            const FdWaitMark* mark = nullptr) {
  const std::uint32_t generation = state.generation.load(std::memory_order_relaxed);
  const int failed = wait_for_fd(fd, direction, deadline, mark, nullptr, &state);
  if (state.generation.load(std::memory_order_relaxed) != generation) return EBADF;
  return failed;
}

// `state` (classified_fd_state) if a fiber should park on its fd, or null
// when the call must go straight to libc.
FdRecord* parkable_record(FdRecord* state) noexcept {
  return state != nullptr && !state->user_nonblock() && pollable_kind(state->kind()) ? state : nullptr;
}

// The record of an fd a fiber should park on for this call, or null when
// the call must go straight to libc: also a receive that never waits in
// the kernel, MSG_ERRQUEUE's (an empty error queue is EAGAIN at once; its
// errors are announced by POLLERR, not by readability) and MSG_OOB's (TCP
// answers EAGAIN or EINVAL while no urgent byte is there). Parked on
// EAGAIN, those waited for data that never ended the wait. `in_fiber`:
// parking_enabled() holds (the hooks that return libc's call first when
// it does not ask once).
FdRecord* parkable(int fd, int flags = 0, bool in_fiber = false) noexcept {
  if ((!in_fiber && !parking_enabled()) || (flags & (MSG_DONTWAIT | MSG_ERRQUEUE | MSG_OOB))) return nullptr;
  return parkable_record(classified_fd_state(fd));
}

// A send the hooks do not park: the plain call. One of TCP's urgent data
// (MSG_OOB; parkable() leaves that flag out for a receive's sake, which
// never waits) on a blocking socket waits for room as any send does, and
// the kernel marks the last byte of what one call sent: one call, as on a
// thread, announced (the peer's read makes the room).
template <class Call>
auto unparked_send(int fd, int flags, Call&& call) {
  const bool urgent_may_wait =
      (flags & MSG_OOB) != 0 && (flags & MSG_DONTWAIT) == 0 && parkable_record(classified_fd_state(fd)) != nullptr;
  return urgent_may_wait ? announced(call, Sleeps::until_woken) : call();
}

// A byte count given as a number, or as a function that counts it (an
// iovec array's total): called only after the call the array is for has
// succeeded, so that an array the kernel refuses (EFAULT) is never read
// here first, where reading it would die of SIGSEGV.
inline std::size_t bytes_of(std::size_t n) noexcept { return n; }
template <class Count>
requires std::invocable<Count&> std::size_t bytes_of(Count& count) { return count(); }

// A call's deadline from its socket's timeout (SO_RCVTIMEO, SO_SNDTIMEO),
// taken when the call first parks and kept for all its parks, as the
// kernel counts one timeout per call; a call that never parks never reads
// it (socket_timeout_ns: a lock, and a getsockopt the first time).
class ParkDeadline {
 public:
  ParkDeadline(int fd, FdRecord& state, FdDirection direction) noexcept
      : fd_(fd), state_(state), direction_(direction) {}
  Clock::time_point get() noexcept {
    if (!known_) {
      at_ = deadline_after_ns(socket_timeout_ns(fd_, state_, direction_));
      known_ = true;
    }
    return at_;
  }

 private:
  const int fd_;
  FdRecord& state_;
  const FdDirection direction_;
  bool known_ = false;
  Clock::time_point at_{};
};

// A receive that only a blocking call answers: a datagram socket whose
// reading side is shut down (shutdown(SHUT_RD), also the one that fails
// with ENOTCONN on an unconnected UDP socket yet shuts it) says EAGAIN to
// MSG_DONTWAIT, and its readiness (EPOLLIN | EPOLLRDHUP) comes once, while
// a blocking receive returns at once: 0, the known way to stop a thread
// blocked in recvfrom. Parked on, a fiber waited for good. Asked after a
// datagram socket's read said EAGAIN: one poll(2).
bool datagram_read_side_shut(int fd, const FdRecord& state) noexcept {
  if (state.kind() != FdKind::socket || state.stream()) return false;
  const int saved = errno_value();
  pollfd one{fd, POLLRDHUP, 0};
  const bool shut = real::poll()(&one, 1, 0) == 1 && (one.revents & POLLRDHUP) != 0;
  set_errno(saved);
  return shut;
}

// One socket call: `attempt()` makes it with MSG_DONTWAIT; on EAGAIN the
// fiber parks until `fd` is ready in `direction` or the timeout passes.
// `blocking()`, where given, is the call without MSG_DONTWAIT, made
// instead of a park where only it answers (datagram_read_side_shut).
// errno is the caller's own on success and set afresh on failure. The mark
// taken before each attempt spares the wait its poll(fd, 0): the attempt
// has just said what that poll would.
//
// `wanted`, for a read of a TCP socket, is what the call asked for (else
// 0; a count or a function that counts it, bytes_of): a shorter result
// drained the socket (stream_wanted), and leaves a drain note
// (io/netpoller.h), so that the fiber's next read parks before it
// attempts, as the epoll loop waits for the next edge after a short read
// instead of reading into EAGAIN. A park that times out is followed by the
// skipped attempt, so the timeout never hides bytes already there.
// `deadline`: the call's, which a caller that parks again after it (accept
// on a listener found shared) goes on with.
template <class Wanted, class Attempt, class Blocking = std::nullptr_t>
auto attempt_or_park(int fd, FdRecord& state, FdDirection direction, Wanted wanted, Attempt&& attempt,
                     ParkDeadline& deadline, Blocking&& blocking = nullptr) {
  using Result = decltype(attempt());
  const ErrnoHome home;
  const int saved = errno_value();
  FdWaitMark mark;
  bool park_first = direction == FdDirection::read && take_drain_note(fd, state, mark);
  bool timed_out = false;
  for (;;) {
    if (!park_first) {
      mark = fd_wait_mark(&state, direction);
      const Result result = attempt();
      if (result >= 0) {
        if (result > 0 && std::size_t(result) < bytes_of(wanted)) fd_note_drained(fd, state, mark, true);
        set_errno(saved);
        return result;
      }
      if (!would_block(errno_value()) || timed_out) return result;
      if constexpr (!std::is_null_pointer_v<std::remove_cvref_t<Blocking>>) {
        if (direction == FdDirection::read && datagram_read_side_shut(fd, state)) {
          set_errno(saved);
          return Result(announced(blocking, Sleeps::until_woken));
        }
      }
    }
    const int failed = park_on(fd, state, direction, deadline.get(), &mark);
    if (failed == EAGAIN && park_first) {
      timed_out = true;
    } else if (failed != 0) {
      set_errno(failed);
      return Result(-1);
    }
    park_first = false;
  }
}

template <class Wanted, class Attempt, class Blocking = std::nullptr_t>
auto attempt_or_park(int fd, FdRecord& state, FdDirection direction, Wanted wanted, Attempt&& attempt,
                     Blocking&& blocking = nullptr) {
  ParkDeadline deadline(fd, state, direction);
  return attempt_or_park(fd, state, direction, wanted, std::forward<Attempt>(attempt), deadline,
                         std::forward<Blocking>(blocking));
}

// A read the hooks pass straight through (a socket the user made
// non-blocking, MSG_DONTWAIT): made as it is, and if it drained a socket a
// fiber has waited on, it leaves a drain note (io/netpoller.h), so that
// the caller's weft::io::wait_readable parks without polling first.
// `wanted` as for attempt_or_park.
template <class Call>
auto read_through(int fd, std::size_t wanted, Call&& call) {
  const FdRecord* state = fd_state(fd);
  if (state == nullptr || state->kind() != FdKind::socket) return call();
  const FdWaitMark mark = fd_wait_mark(state, FdDirection::read);
  if (!mark.valid) return call();
  const auto result = call();
  if (result < 0 ? would_block(errno_value())
                 : result > 0 && state->short_read_drains() && std::size_t(result) < wanted)
    fd_note_drained(fd, *state, mark, result > 0);
  return result;
}

// A call the hooks pass straight through: one that may sleep (a regular
// file's write, a blocking non-socket's accept) is announced, as a wait
// for another party (Sleeps::until_woken) where the fd is a socket or
// pipe; one on a socket or pipe the user made non-blocking cannot, and is
// not: announcing it kept sysmon looking every 100 us for as long as fibers
// wrote to their own non-blocking sockets, and made a worker that the
// machine preempted inside the call look blocked in it, starting spares
// for nothing (docs/benchmarks.md, "Echo: a write that cannot block").
// O_NONBLOCK does not keep a regular file's write from waiting for the
// disk: announced.
// `state` is the fd's record (null: none), as the caller looked it up.
template <class Call>
auto passed_through(const FdRecord* state, Call&& call) {
  if (state == nullptr || !pollable_kind(state->kind())) return announced(call);
  if (state->user_nonblock()) return call();
  return announced(call, Sleeps::until_woken);
}

// recvmmsg as a blocking one receives (the kernel's do_recvmmsg): it waits
// for each message until `count` (at most UIO_MAXIOV) have come, except
// that MSG_WAITFORONE stops waiting after the first and out-of-band data
// ends it; `timeout` is looked at only after each message (a message that
// never comes is waited for without end, recvmmsg(2)'s BUGS, bounded only
// by SO_RCVTIMEO), and once messages came the time left is written back
// to it. The messages come in batches taken with MSG_DONTWAIT, each given
// the time left as its own timeout, so that the kernel ends a batch where
// it would have ended the whole call. An error after the first message
// returns the count so far, errno untouched, as the kernel does; the
// kernel also keeps that error for the next call (SO_ERROR), which a batch
// that received nothing cannot.
int recvmmsg_all(int fd, FdRecord& state, mmsghdr* msgs, unsigned count, int flags, timespec* timeout) {
  count = std::min(count, unsigned(UIO_MAXIOV));  // the kernel receives no more in one call
  const ErrnoHome home;
  const int saved = errno_value();
  const Clock::time_point deadline = deadline_after_timespec(timeout);
  timespec left{};        // the time left given to the batch being taken
  timespec after_last{};  // what the kernel wrote back after the last message
  unsigned got = 0;
  for (;;) {
    const int received = attempt_or_park(fd, state, FdDirection::read, 0, [&] {
      if (timeout != nullptr) left = time_left(deadline);
      return real::recvmmsg()(fd, msgs + got, count - got, flags | MSG_DONTWAIT, timeout == nullptr ? nullptr : &left);
    });
    if (received <= 0) {
      if (got == 0) return received;
      set_errno(saved);
      break;
    }
    got += unsigned(received);
    after_last = left;
    if (got == count || (flags & MSG_WAITFORONE) || (msgs[got - 1].msg_hdr.msg_flags & MSG_OOB)) break;
    if (timeout != nullptr && left.tv_sec == 0 && left.tv_nsec == 0) break;  // the time is up
  }
  if (timeout != nullptr) *timeout = after_last;
  return int(got);
}

// A pollable non-socket fd (pipe, FIFO, terminal): wait, then the real,
// blocking call. Another reader may take what made it ready, or a write
// may not fit, and then the call blocks this worker as it would block a
// thread (docs/io.md), until its other party acts: so it is announced as
// such a wait (Sleeps::until_woken), as that party may be a fiber pinned
// to this worker, which sysmon then releases (announced as `maybe`, a
// 64 KiB write to a terminal whose reader was such a fiber hung for good).
template <class Call>
auto wait_then_call(int fd, FdRecord& state, FdDirection direction, Call&& call) {
  const ErrnoHome home;
  const int failed = park_on(fd, state, direction, no_deadline);
  if (failed == EPERM) {
    state.set_kind(FdKind::unpollable);  // epoll refuses it (e.g. /dev/null): pass it through from now on
  } else if (failed != 0) {
    set_errno(failed);
    return decltype(call())(-1);
  }
  return announced(call, Sleeps::until_woken);
}

// The table said socket, the kernel says otherwise: the number was reused
// by an fd made where no hook saw it. Forget the record (it is classified
// again on the next call) and let the caller make the plain call.
bool not_a_socket_after_all(int fd) {
  if (errno_value() != ENOTSOCK) return false;
  fd_forgotten(fd);
  return true;
}

// attempt_or_park's `wanted` for a receive of `n` bytes with `flags`: only
// where a short read drained the socket (FdRecord::short_read_drains_bit);
// a peek consumes nothing, so its short result proves nothing.
std::size_t stream_wanted(const FdRecord& state, std::size_t n, int flags) {
  return state.short_read_drains() && !(flags & MSG_PEEK) ? n : 0;
}

// The flags of a send that goes on after part of the call's bytes went: a
// blocking call that had sent some returns their count where the socket
// fails, and raises no SIGPIPE (the kernel's tcp_sendmsg and
// unix_stream_sendmsg signal only a call that sent nothing).
constexpr int kAfterPart = MSG_NOSIGNAL;

// The steps of a send on a unix stream socket that are made again after a
// park, with nothing sent yet. The kernel's blocking send, woken in its
// wait for room, reports a pending error first (the reader closed with
// bytes unread: ECONNRESET) and the socket's shutdown next (EPIPE),
// neither with a SIGPIPE; where a send made afresh finds the socket shut
// down first, EPIPE and a SIGPIPE that killed the process. So such a step
// goes with MSG_NOSIGNAL (on_step's flags), and its EPIPE (after())
// becomes the pending error if there is one. TCP's send reports the
// pending error first itself.
class SendAgainAfterPark {
 public:
  explicit SendAgainAfterPark(const FdRecord& state) noexcept
      : unix_stream_(state.stream() && !state.short_read_drains()) {}
  // Before every step, the one that sends on after `done` bytes: the
  // flags to add.
  int on_step(std::size_t done) noexcept {
    again_ = unix_stream_ && done == 0 && steps_++ > 0;
    return again_ ? MSG_NOSIGNAL : 0;
  }
  ssize_t after(int fd, ssize_t sent) noexcept {
    if (sent >= 0 || !again_ || errno_value() != EPIPE) return sent;
    int pending = 0;
    socklen_t length = sizeof(pending);
    if (real::getsockopt()(fd, SOL_SOCKET, SO_ERROR, &pending, &length) == 0 && pending != 0)
      set_errno(pending);
    else
      set_errno(EPIPE);
    return sent;
  }

 private:
  const bool unix_stream_;
  unsigned steps_ = 0;
  bool again_ = false;
};

// Before each step of a transfer that has moved bytes: whether the socket
// failed meanwhile (reset, or its connection timed out: POLLERR with
// POLLHUP). A blocking call returns its count then and leaves the error
// to the next call (tcp_sendmsg, tcp_recvmsg); the next MSG_DONTWAIT call
// would take it (sock_error), and the error was lost: a later send got
// EPIPE and SIGPIPE instead of ECONNRESET, a later receive 0. A receive
// goes on while bytes are queued, which the kernel's copies before it
// looks at the error. One poll per step after the first bytes moved, in
// transfers larger than the socket takes or holds at once; asked only
// after a park, an error that came between two steps was lost (seen under
// ASan, on a loaded machine). A pipe's write goes on (its blocking write
// raises SIGPIPE after a partial write too).
bool failed_meanwhile(int fd, const FdRecord& state, FdDirection direction) {
  if (state.kind() != FdKind::socket) return false;
  pollfd p{fd, 0, 0};
  if (real::poll()(&p, 1, 0) != 1 || (p.revents & (POLLERR | POLLHUP)) != (POLLERR | POLLHUP)) return false;
  int queued = 0;
  return direction == FdDirection::write || (real::ioctl()(fd, FIONREAD, &queued) == 0 && queued == 0);
}

// The loop of a call that moves all it was asked to, as a blocking one
// does: a send, or a receive with MSG_WAITALL. `step(done)` makes one
// MSG_DONTWAIT call for what remains after the first `done` bytes of
// `total` (bytes_of: counted after the first call that succeeded); on
// EAGAIN the fiber parks until `fd` is ready in `direction` or
// the socket's timeout passes. A receive ends at EOF (a step that returns
// 0), and at its timeout takes what came meanwhile (one more step), as the
// kernel's does: TCP's readiness waits for SO_RCVLOWAT, so bytes below it
// raise no edge. An error or the timeout after some bytes returns their
// count, with the caller's errno; before any, -1 with the error.
template <class Total, class Step>
ssize_t transfer_all(int fd, FdRecord& state, FdDirection direction, Total total, Step&& step) {
  const ErrnoHome home;
  const int saved = errno_value();
  ParkDeadline deadline(fd, state, direction);
  std::size_t done = 0;
  std::optional<std::size_t> counted;
  for (;;) {
    if (done > 0 && failed_meanwhile(fd, state, direction)) break;
    // Before the step, as attempt_or_park's: the park after its EAGAIN
    // skips the poll, and a wake for a call since (a shutdown) ends it.
    const FdWaitMark mark = fd_wait_mark(&state, direction);
    const ssize_t r = step(done);
    if (r >= 0) {
      done += std::size_t(r);
      if (!counted) counted = bytes_of(total);
      // A send of 0 bytes is one call (a datagram may be empty).
      if (done >= *counted || (r == 0 && direction == FdDirection::read)) break;
      continue;
    }
    if (!would_block(errno_value())) {
      if (done > 0) break;
      return -1;
    }
    if (const int failed = park_on(fd, state, direction, deadline.get(), &mark)) {
      // A receive's last step at its timeout (above); a failure that came
      // after some bytes is left to the next call, as after a wake.
      if (failed == EAGAIN && direction == FdDirection::read && !(done > 0 && failed_meanwhile(fd, state, direction))) {
        const ssize_t last = step(done);
        if (last > 0) done += std::size_t(last);
        if (last >= 0 || done > 0) break;
        if (!would_block(errno_value())) return -1;
      }
      if (done > 0) break;
      set_errno(failed);
      return -1;
    }
  }
  set_errno(saved);
  return ssize_t(done);
}

// Whether a receive with `flags` waits for all it asked for: MSG_WAITALL
// on a stream socket. On a datagram or seqpacket socket it does nothing
// (a message is one receive); looping there merged messages, then waited
// for more.
bool waits_for_all(const FdRecord& state, int flags) noexcept { return (flags & MSG_WAITALL) && state.stream(); }

// SO_RCVLOWAT: a blocking receive of `length` bytes (a count, or a
// function that counts it, bytes_of) on a stream socket, TCP's or a unix
// socket's, takes what is there and waits on until it has
// min(SO_RCVLOWAT, length) (or EOF, an error, a signal, its timeout),
// where one with MSG_DONTWAIT returns what is there: so it is received as
// MSG_WAITALL's is, until that many (transfer_all), and TCP's readiness,
// which waits for SO_RCVLOWAT new bytes as the kernel's wake-up does, ends
// the same waits. That target, or 0 where the kernel does not wait for it:
// SO_RCVLOWAT 1 (no system call while none was set, socket_rcvlowat), a
// datagram socket, MSG_WAITALL (which waits for all), a unix socket's peek
// (it returns what is there). A TCP peek waits for it (peek_all).
template <class Length>
std::size_t rcvlowat_target(int fd, FdRecord& state, Length& length, int flags) {
  if (!state.stream() || (flags & MSG_WAITALL) || ((flags & MSG_PEEK) && !state.short_read_drains())) return 0;
  const int lowat = socket_rcvlowat(fd, state);
  return lowat > 1 ? std::min(std::size_t(lowat), bytes_of(length)) : 0;
}

// What a message's iovecs hold, or 0 if the kernel could not read them
// (the call itself then fails with their EFAULT or EMSGSIZE): what a hook
// must count before the call that would say so.
std::size_t iov_total_if_readable(const msghdr* msg) {
  if (!readable_by_kernel(msg) || msg->msg_iovlen > UIO_MAXIOV ||
      !readable_by_kernel(msg->msg_iov, msg->msg_iovlen * sizeof(iovec)))
    return 0;
  return iov_total(msg->msg_iov, int(msg->msg_iovlen));
}

// What `fd` reports now of `events` (and POLLHUP, POLLERR), asked without
// waiting; errno kept, for a hook that asks between its call and its
// result. 0 if poll fails.
short revents_now(int fd, short events) {
  const int saved = errno_value();
  pollfd now{fd, events, 0};
  const int ready = real::poll()(&now, 1, 0);
  set_errno(saved);
  return ready == 1 ? now.revents : 0;
}

// Whether a stream socket's peer has ended it or it has failed: a TCP
// peek that waits for more returns what it has then.
bool stream_ended(int fd) { return (revents_now(fd, POLLRDHUP) & (POLLRDHUP | POLLHUP | POLLERR)) != 0; }

// A peek that waits for `wanted` bytes (MSG_WAITALL, or SO_RCVLOWAT's
// target): a peek cannot go on where an earlier one stopped (each reads
// from the front of the queue), and each protocol decides what it waits
// for. `call(at_once)` makes the receive as asked, or with MSG_DONTWAIT
// and without MSG_WAITALL. TCP's waits for all of it, EOF, an error or
// its timeout: peeked at once, and parked for each new edge (each
// arrival raises one) until that many bytes are queued; at EOF, an error
// or the timeout, what is there. Before, the blocking peek held the
// worker's thread, and a sender pinned to that worker (back from its
// usleep) never ran: a hang. A unix stream socket's returns what there is
// once there is some: parked until readable, then the call as asked,
// announced.
template <class Call>
ssize_t peek_all(int fd, FdRecord& state, std::size_t wanted, Call&& call) {
  const ErrnoHome home;
  const int saved = errno_value();
  ParkDeadline deadline(fd, state, FdDirection::read);
  if (!state.short_read_drains()) {
    // Until there is something to peek (a wake for a call, as a shutdown
    // of this socket makes, proves nothing): the call then returns what
    // there is without waiting.
    for (;;) {
      if (const int failed = park_on(fd, state, FdDirection::read, deadline.get())) {
        set_errno(failed);
        return -1;
      }
      if (revents_now(fd, POLLIN) != 0) break;  // data, EOF or an error
    }
    return announced([&] { return call(false); }, Sleeps::until_woken);
  }
  for (;;) {
    FdWaitMark mark = fd_wait_mark(&state, FdDirection::read);
    const ssize_t peeked = call(true);
    if (peeked < 0 && !would_block(errno_value())) return -1;
    if (peeked == 0 || (peeked > 0 && (std::size_t(peeked) >= wanted || stream_ended(fd)))) {
      set_errno(saved);
      return peeked;
    }
    if (const int failed = park_on(fd, state, FdDirection::read, deadline.get(), &mark)) {
      if (failed != EAGAIN) {
        set_errno(failed);
        return -1;
      }
      const ssize_t last = call(true);  // the timeout: what came, as the kernel's
      if (last >= 0) {
        set_errno(saved);
        return last;
      }
      if (would_block(errno_value())) set_errno(EAGAIN);
      return -1;
    }
  }
}

// Where a receive with MSG_WAITALL that has bytes stops, as the kernel's
// does, with what follows left for the next call (its step returns 0, as
// at EOF): a TCP socket's at the urgent mark (tcp_recvmsg stops there once
// it has copied bytes; a step that has copied none steps over the urgent
// byte and reads on), asked with one ioctl per step after the first; a
// unix stream socket's after a segment that carried fds (carried_fds).
// short_read_drains: TCP's.
bool stops_at_urgent_mark(int fd, const FdRecord& state) {
  int at_mark = 0;
  return state.short_read_drains() && real::ioctl()(fd, SIOCATMARK, &at_mark) == 0 && at_mark == 1;
}

// Whether a stream socket may pass fds (a unix one's; not TCP's), so that
// a loop of receives must stop after a segment that carried some.
bool may_pass_fds(const FdRecord& state) noexcept { return state.stream() && !state.short_read_drains(); }

// Whether a message received fds (SCM_RIGHTS), or would have but for room
// (MSG_CTRUNC: the kernel closed them): the kernel's unix stream receive
// stops after such a segment, MSG_WAITALL or not.
bool carried_fds(const msghdr& msg) {
  if (msg.msg_flags & MSG_CTRUNC) return true;
  if (msg.msg_control == nullptr) return false;
  for (const cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr;
       c = CMSG_NXTHDR(const_cast<msghdr*>(&msg), const_cast<cmsghdr*>(c)))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) return true;
  return false;
}

ssize_t receive(int fd, FdRecord& state, void* buf, size_t n, int flags, sockaddr* addr, socklen_t* addr_len) {
  const std::size_t target = n != 0 ? rcvlowat_target(fd, state, n, flags) : 0;
  if ((waits_for_all(state, flags) || target > 1) && (flags & MSG_PEEK) && n != 0)
    return peek_all(fd, state, waits_for_all(state, flags) ? n : target, [&](bool at_once) {
      return real::recvfrom()(fd, buf, n, at_once ? (flags & ~MSG_WAITALL) | MSG_DONTWAIT : flags, addr, addr_len);
    });
  if ((!waits_for_all(state, flags) && target <= 1) || n == 0) {
    return attempt_or_park(
        fd, state, FdDirection::read, stream_wanted(state, n, flags),
        [&] { return real::recvfrom()(fd, buf, n, flags | MSG_DONTWAIT, addr, addr_len); },
        [&] { return real::recvfrom()(fd, buf, n, flags, addr, addr_len); });
  }
  // MSG_WAITALL: until all n bytes, EOF, an error or the timeout; with
  // SO_RCVLOWAT, until the target.
  const int once = (flags & ~MSG_WAITALL) | MSG_DONTWAIT;
  const std::size_t total = target > 1 ? target : n;
  if (may_pass_fds(state) && (addr == nullptr || addr_len != nullptr)) {
    // Stops after fds, as the kernel's (own_control_steps.h); the sender's
    // address as recvfrom gives it (null `addr`: none asked).
    OwnControlSteps steps;
    msghdr name{};
    name.msg_name = addr;
    name.msg_namelen = addr != nullptr ? *addr_len : 0;
    const ssize_t result = transfer_all(fd, state, FdDirection::read, total, [&](std::size_t done) {
      if (steps.stops_here(fd)) return ssize_t(0);
      iovec rest{static_cast<char*>(buf) + done, n - done};
      return steps.receive(fd, &rest, 1, once, done == 0 ? &name : nullptr);
    });
    if (result >= 0 && addr != nullptr) *addr_len = name.msg_namelen;
    return result;
  }
  return transfer_all(fd, state, FdDirection::read, total, [&](std::size_t done) {
    if (done > 0 && stops_at_urgent_mark(fd, state)) return ssize_t(0);
    return real::recvfrom()(fd, static_cast<char*>(buf) + done, n - done, once, addr, addr_len);
  });
}

// After a datagram send to an address of its own (sendto, sendmsg with a
// name) failed: whether the receiver's full queue refused it while this
// socket polls writable, as an unconnected unix socket does (its
// readiness is its own buffer's, never its receivers'). No edge would end
// a park, which would only spin: the caller makes the blocking call
// instead, announced, which waits on the receiver as a thread's does
// (and keeps SO_SNDTIMEO). errno kept.
bool refused_by_a_full_receiver(int fd, const FdRecord& state, const void* name) {
  if (name == nullptr || state.stream() || !would_block(errno_value())) return false;
  return (revents_now(fd, POLLOUT) & POLLOUT) != 0;
}

ssize_t send_all(int fd, FdRecord& state, const void* buf, size_t n, int flags, const sockaddr* addr,
                 socklen_t addr_len) {
  SendAgainAfterPark again(state);
  return transfer_all(fd, state, FdDirection::write, n, [&](std::size_t done) {
    const int more = (done > 0 ? kAfterPart : 0) | again.on_step(done);
    const char* rest = static_cast<const char*>(buf) + done;
    const ssize_t sent = real::sendto()(fd, rest, n - done, flags | MSG_DONTWAIT | more, addr, addr_len);
    if (sent < 0 && refused_by_a_full_receiver(fd, state, addr))
      return announced([&] { return real::sendto()(fd, rest, n - done, flags | more, addr, addr_len); },
                       Sleeps::until_woken);
    return again.after(fd, sent);
  });
}

// sendmsg that sends everything: after a partial write the remaining
// iovecs are copied and advanced (the caller's array is const); the
// ancillary data went with the first bytes, and the rest is plain.
ssize_t sendmsg_all(int fd, FdRecord& state, const msghdr* msg, int flags) {
  std::vector<iovec> rest;
  SendAgainAfterPark again(state);
  return transfer_all(
      fd, state, FdDirection::write, [&] { return iov_total(msg->msg_iov, int(msg->msg_iovlen)); },
      [&](std::size_t done) {
        const int after_park = again.on_step(done);
        if (done == 0) {
          const ssize_t sent = real::sendmsg()(fd, msg, flags | MSG_DONTWAIT | after_park);
          // EAGAIN: the kernel read the message, which may be read here.
          if (sent < 0 && would_block(errno_value()) && refused_by_a_full_receiver(fd, state, msg->msg_name))
            return announced([&] { return real::sendmsg()(fd, msg, flags); }, Sleeps::until_woken);
          return again.after(fd, sent);
        }
        iovecs_after(msg->msg_iov, msg->msg_iovlen, done, rest);
        msghdr current = *msg;
        current.msg_iov = rest.data();
        current.msg_iovlen = rest.size();
        current.msg_control = nullptr;
        current.msg_controllen = 0;
        return real::sendmsg()(fd, &current, flags | MSG_DONTWAIT | kAfterPart);
      });
}

// sendmmsg that sends every message, as a blocking one does (it returns
// fewer only when an error or SO_SNDTIMEO comes after the first, and then
// their count): what the kernel did not take is sent again after a park,
// and on a stream socket the rest of a message it took in part (msg_len
// short of its iovecs) goes as sendmsg_all sends it, before the next.
int sendmmsg_all(int fd, FdRecord& state, mmsghdr* msgs, unsigned count, int flags) {
  count = std::min(count, unsigned(UIO_MAXIOV));  // the kernel sends no more in one call
  const ErrnoHome home;
  const int saved = errno_value();
  ParkDeadline deadline(fd, state, FdDirection::write);
  unsigned done = 0;
  while (done < count) {
    const FdWaitMark mark = fd_wait_mark(&state, FdDirection::write);
    const int sent = real::sendmmsg()(fd, msgs + done, count - done, flags | MSG_DONTWAIT);
    if (sent > 0) {
      done += unsigned(sent);
      mmsghdr& last = msgs[done - 1];
      const std::size_t total = iov_total(last.msg_hdr.msg_iov, int(last.msg_hdr.msg_iovlen));
      if (!state.stream() || last.msg_len >= total) continue;
      std::vector<iovec> rest;
      iovecs_after(last.msg_hdr.msg_iov, last.msg_hdr.msg_iovlen, last.msg_len, rest);
      msghdr remainder{};
      remainder.msg_iov = rest.data();
      remainder.msg_iovlen = rest.size();
      const ssize_t more = sendmsg_all(fd, state, &remainder, flags);
      if (more > 0) last.msg_len += unsigned(more);
      if (last.msg_len < total) break;  // an error or the timeout within it: the count so far
      continue;
    }
    if (sent == 0 || !would_block(errno_value())) {
      if (done > 0) break;
      return sent;
    }
    if (const int failed = park_on(fd, state, FdDirection::write, deadline.get(), &mark)) {
      if (done > 0) break;
      set_errno(failed);
      return -1;
    }
  }
  set_errno(saved);
  return int(done);
}

// A pipe, FIFO or other pollable fd that is not a socket has no
// MSG_DONTWAIT, but takes RWF_NOWAIT (preadv2/pwritev2; pipes since Linux
// 5.x): attempted with it and parked on EAGAIN, as a socket is. So a read
// that another reader beat to the data parks instead of blocking the
// worker, and a write larger than the pipe's room parks after the part
// that fit, where a blocking write held the worker until the reader
// (perhaps a fiber of the same worker) had taken it all. An fd that
// refuses the flag (a terminal, an older kernel: EOPNOTSUPP) is waited
// for, then called, from then on (wait_then_call; FdRecord::no_nowait_read_bit
// and no_nowait_write_bit, one for each direction).

// After an attempt with RWF_NOWAIT: whether the fd refused it, and if so,
// marks it and puts back the caller's errno for the fallback. The kernel
// refuses the flag with EOPNOTSUPP (kiocb_set_rw_flags), a kernel without
// preadv2 with ENOSYS; `refusal_too`, another errno taken for a refusal
// (a pipe's EPERM: a seccomp filter's, from a container profile that
// predates preadv2; a socket's EPERM is its own, a firewall's); an EINVAL is the call's own (a timerfd's
// or eventfd's buffer under 8 bytes), which the fallback's wait for
// readiness turned into a park that nothing ended.
bool refused_nowait(FdRecord& state, FdDirection direction, int saved, int refusal_too = 0) {
  const int error = errno_value();
  if (error != EOPNOTSUPP && error != ENOSYS && (refusal_too == 0 || error != refusal_too)) return false;
  state.set_bit(direction == FdDirection::read ? FdRecord::no_nowait_read_bit : FdRecord::no_nowait_write_bit, true);
  set_errno(saved);
  return true;
}

// A terminal in non-canonical mode with VMIN 0 (termios(3)): its read
// returns what there is, 0 for nothing, at once or after VTIME tenths of a
// second; waited for readiness first, it waited for the next byte
// instead. Asked of an fd that refuses RWF_NOWAIT, as terminals do, at
// each read (a tcsetattr may change it any time): one ioctl.
bool reads_without_waiting(int fd) {
  const int saved = errno_value();
  termios modes{};
  const bool at_once = tcgetattr(fd, &modes) == 0 && !(modes.c_lflag & ICANON) && modes.c_cc[VMIN] == 0;
  set_errno(saved);
  return at_once;
}

// After a pollable fd's attempt and park failed with EPERM, the poller's
// refusal: the record said pollable, the kernel says the fd is not (its
// number was reused where no hook saw it: a pipe the hooks saw made and
// a raw close(2) ended, a sanitizer's, then a regular file from mkstemp,
// whose uncached read waited for the disk). The record is forgotten, and
// the caller makes the call again, classified afresh, with errno back as
// it was. Before, the read failed with EPERM. A pipe, FIFO or device had
// the EPERM from the call itself (a seccomp filter's refusal of preadv2,
// which the caller takes for a refusal of RWF_NOWAIT): its record stays,
// and so do the fibers parked on it, which a forgotten record would wake.
bool not_pollable_after_all(int fd, int saved) {
  if (errno_value() != EPERM) return false;
  struct stat st {};
  if (fstat(fd, &st) != 0 || !epoll_refuses(st.st_mode)) {
    set_errno(EPERM);
    return false;
  }
  fd_forgotten(fd);
  set_errno(saved);
  return true;
}

// Whether a transfer of `iov` is one an eventfd or timerfd refuses at
// once with EINVAL: fewer bytes than its 8-byte counter (FdRecord::
// counter_bit). The caller's iovec array is read only if the kernel could
// read it (else the call is its EFAULT); `own_array`: the hook's own.
bool under_a_counter(const FdRecord& state, const iovec* iov, int count, bool own_array) {
  if (!state.counter() || count > UIO_MAXIOV) return false;
  if (!own_array && !readable_by_kernel(iov, std::size_t(count) * sizeof(iovec))) return false;
  return iov_total(iov, count) < sizeof(std::uint64_t);
}

ssize_t pollable_read(int fd, FdRecord& state, const iovec* iov, int count) {
  // A signalfd's readiness is the reading thread's (FdRecord::signalfd_bit):
  // the plain call on this one, announced.
  if (state.signalfd()) return announced([&] { return real::readv()(fd, iov, count); }, Sleeps::until_woken);
  const int saved = errno_value();
  if (!state.refuses_nowait_reads()) {
    const ssize_t result = attempt_or_park(fd, state, FdDirection::read, 0,
                                           [&] { return real::preadv2()(fd, iov, count, -1, RWF_NOWAIT); });
    if (result >= 0) return result;
    if (not_pollable_after_all(fd, saved)) return ::readv(fd, iov, count);
    if (!refused_nowait(state, FdDirection::read, saved, EPERM)) return result;
  }
  // VTIME may be 25.5 s, waiting for the terminal's other end: a fiber its
  // hook pins to this worker is released after 1 s (Sleeps::until_woken).
  if (reads_without_waiting(fd)) return announced([&] { return real::readv()(fd, iov, count); }, Sleeps::until_woken);
  return wait_then_call(fd, state, FdDirection::read, [&] { return real::readv()(fd, iov, count); });
}

ssize_t pollable_write(int fd, FdRecord& state, const iovec* iov, int count) {
  const int saved = errno_value();
  if (!state.refuses_nowait_writes()) {
    std::vector<iovec> rest;
    auto total = [&] { return iov_total(iov, count); };
    const ssize_t result = transfer_all(fd, state, FdDirection::write, total, [&](std::size_t done) {
      if (done == 0) return real::pwritev2()(fd, iov, count, -1, RWF_NOWAIT);
      iovecs_after(iov, std::size_t(count), done, rest);
      return real::pwritev2()(fd, rest.data(), int(rest.size()), -1, RWF_NOWAIT);
    });
    if (result >= 0) return result;
    if (not_pollable_after_all(fd, saved)) return ::writev(fd, iov, count);
    if (!refused_nowait(state, FdDirection::write, saved, EPERM)) return result;
  }
  return wait_then_call(fd, state, FdDirection::write, [&] { return real::writev()(fd, iov, count); });
}

// recvmsg until its iovecs hold or, with a `target`, that many bytes
// (below).
ssize_t recvmsg_all(int fd, FdRecord& state, msghdr* msg, int flags, std::size_t target = 0);

// readv and writev on a socket: attempted as preadv2 and pwritev2 at the
// current position with RWF_NOWAIT, which on a socket are readv and
// writev with MSG_DONTWAIT (the kernel's sock_read_iter, sock_write_iter),
// checks of the iovec count and a transfer of nothing (0 at once) among
// them: made as recvmsg and sendmsg instead, a readv of nothing took a
// queued datagram, and a writev of nothing failed where the socket was
// shut down (EPIPE) or unconnected (EDESTADDRREQ). What a partial write
// left goes as sendmsg_all sends it. A kernel whose sockets refuse the
// flag (EOPNOTSUPP) gets recvmsg and sendmsg, and those two differences.
ssize_t socket_readv(int fd, FdRecord& state, const iovec* iov, int count) {
  const int saved = errno_value();
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = count > 0 ? size_t(count) : 0;
  // SO_RCVLOWAT's wait (rcvlowat_target): received as recvmsg_all does.
  auto length = [&] { return iov_total_if_readable(&msg); };
  if (const std::size_t target = rcvlowat_target(fd, state, length, 0); target > 1)
    return recvmsg_all(fd, state, &msg, 0, target);
  if (!state.refuses_nowait_reads()) {
    const ssize_t result = attempt_or_park(
        fd, state, FdDirection::read, [&] { return stream_wanted(state, iov_total(iov, count), 0); },
        [&] { return real::preadv2()(fd, iov, count, -1, RWF_NOWAIT); }, [&] { return real::readv()(fd, iov, count); });
    if (result >= 0 || !refused_nowait(state, FdDirection::read, saved)) return result;
  }
  // EINVAL for a count below 0 or above UIO_MAXIOV (a receive's would be
  // EMSGSIZE), 0 for no iovecs, as libc says it.
  if (count <= 0 || count > UIO_MAXIOV) return real::readv()(fd, iov, count);
  return attempt_or_park(
      fd, state, FdDirection::read, [&] { return stream_wanted(state, iov_total(iov, count), 0); },
      [&] {
        const ssize_t received = real::recvmsg()(fd, &msg, MSG_DONTWAIT);
        // A readv of nothing returns 0 at once, as read's does; once the
        // receive has said EAGAIN, the kernel took the array.
        if (received < 0 && would_block(errno_value()) && iov_total(iov, count) == 0)
          return real::readv()(fd, iov, count);
        return received;
      });
}

ssize_t socket_writev(int fd, FdRecord& state, const iovec* iov, int count) {
  const int saved = errno_value();
  if (!state.refuses_nowait_writes()) {
    std::vector<iovec> rest;
    SendAgainAfterPark again(state);
    const ssize_t result = transfer_all(
        fd, state, FdDirection::write, [&] { return iov_total(iov, count); },
        [&](std::size_t done) -> ssize_t {
          // Made again after a park: as sendmsg, which takes MSG_NOSIGNAL.
          if (again.on_step(done) == 0 && done == 0) return real::pwritev2()(fd, iov, count, -1, RWF_NOWAIT);
          if (done == 0) {
            msghdr whole{};
            whole.msg_iov = const_cast<iovec*>(iov);
            whole.msg_iovlen = std::size_t(count);
            return again.after(fd, real::sendmsg()(fd, &whole, MSG_DONTWAIT | MSG_NOSIGNAL));
          }
          iovecs_after(iov, std::size_t(count), done, rest);
          msghdr more{};
          more.msg_iov = rest.data();
          more.msg_iovlen = rest.size();
          return real::sendmsg()(fd, &more, MSG_DONTWAIT | kAfterPart);
        });
    if (result >= 0 || !refused_nowait(state, FdDirection::write, saved)) return result;
  }
  // EINVAL for a count below 0 or above UIO_MAXIOV (a send's would be
  // EMSGSIZE), as libc says it.
  if (count < 0 || count > UIO_MAXIOV) return real::writev()(fd, iov, count);
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = size_t(count);
  return sendmsg_all(fd, state, &msg, 0);
}

// While a fork, posix_spawn or vfork is under way no description is
// private (hooks/description_sharing.h). A fiber's accept or connect that
// meets one waits for its end, parked, 50 us at a time, rather than take a
// description that is private before and after it for shared and make
// the blocking call; false after 20 waits (a process that spawns without
// pause): the caller then takes it for shared.
constexpr int kChildWaits = 20;
bool waited_for_child_under_way(int& waits) noexcept {
  if (waits++ == kChildWaits) return false;
  const int saved = errno_value();
  sleep_parked(Clock::now() + std::chrono::microseconds(50));
  set_errno(saved);
  return true;
}

// Runs `call` with O_NONBLOCK set on the open file description, and the
// user's flags back afterwards, if this process alone holds the description
// (hooks/description_sharing.h). Else (empty, nothing called) another
// process would see the flag (its blocking accept would fail with EAGAIN):
// the caller makes its blocking call instead. Only for calls that never
// block with the flag set.
template <class Call>
auto with_nonblock(int fd, FdRecord& state, Call&& call) -> std::optional<decltype(call())> {
  for (int waits = 0;;) {
    Privacy privacy;
    {
      const FlipWindow window(state);
      privacy = window.privacy();
      if (privacy == Privacy::private_) {
        state.flip_lock.lock();
        const int flags = real::fcntl()(fd, F_GETFL);
        if (flags < 0) {
          state.flip_lock.unlock();
          return decltype(call())(-1);
        }
        state.flips.fetch_add(1, std::memory_order_relaxed);
        state.set_bit(FdRecord::flipped_bit, true);
        real::fcntl()(fd, F_SETFL, flags | O_NONBLOCK);
        auto result = call();
        const int error = errno_value();
        real::fcntl()(fd, F_SETFL, flags);
        state.set_bit(FdRecord::flipped_bit, false);
        state.flip_lock.unlock();
        set_errno(error);
        return result;
      }
    }
    // Outside the window, which the fork or spawn waits for.
    if (privacy == Privacy::shared || !waited_for_child_under_way(waits)) return std::nullopt;
  }
}

// A plain thread whose blocking accept met a moment when a fiber had the
// listener flipped to O_NONBLOCK: wait as the kernel would have, then
// retry. `flips_before` is FdRecord::flips read before the call; no flip
// since means the EAGAIN was the kernel's own (SO_RCVTIMEO).
bool plain_thread_should_retry(int fd, std::uint32_t flips_before) {
  if (!would_block(errno_value())) return false;
  const FdRecord* state = fd_state(fd);
  if (state == nullptr || state->kind() != FdKind::socket || state->user_nonblock()) return false;
  if (!state->flipped() && state->flips.load(std::memory_order_relaxed) == flips_before) return false;
  const int saved = errno_value();
  pollfd p{fd, POLLIN, 0};
  real::poll()(&p, 1, 10);  // bounded: the flip lasts one non-blocking call
  set_errno(saved);
  return true;
}

// accept on a blocking listener that another process may hold too, whose
// O_NONBLOCK weft must not touch: park until it is readable, then make the
// blocking call, announced. If another process took the connection
// between the two, the worker's thread waits in accept as a thread would
// (sysmon hands its other fibers on), until the next connection or the
// listener's SO_RCVTIMEO (counted afresh there, as a thread's would be). Of
// this process's fibers, one at a time makes that call (the record's
// `accepting`): one connection then holds at most one worker, however many
// fibers it woke. Its parks keep the accept's deadline (`deadline`): one
// that parked on the listener while it was private, and found it shared
// once woken, has spent part of its SO_RCVTIMEO (the kernel's accept keeps
// one timeout across a wake that finds the queue empty).
int accept_shared(int fd, FdRecord& listener, sockaddr* addr, socklen_t* addr_len, int flags, ParkDeadline& deadline) {
  const ErrnoHome home;
  const int saved = errno_value();
  for (;;) {
    if (const int failed = park_on(fd, listener, FdDirection::read, deadline.get())) {
      set_errno(failed);
      return -1;
    }
    if (listener.accepting.exchange(true, std::memory_order_acquire)) {
      // Another fiber is taking this one: wait for its accept to end.
      sleep_parked(Clock::now() + std::chrono::microseconds(100));
      continue;
    }
    int result = -1;
    pollfd ready{fd, POLLIN, 0};
    if (real::poll()(&ready, 1, 0) == 1) {
      // Another process may take it first: a wait for the next client.
      result = announced([&] { return real::accept4()(fd, addr, addr_len, flags); }, Sleeps::until_woken);
    } else {
      set_errno(EAGAIN);  // taken meanwhile: wait again
    }
    listener.accepting.store(false, std::memory_order_release);
    if (result >= 0) {
      set_errno(saved);
      return result;
    }
    if (!would_block(errno_value()) || ready.revents != 0) return -1;
  }
}

// Whether `fd`, a listener whose non-blocking accept said EAGAIN, was
// shut down for reading (shutdown(2)): a unix listener's blocking accept
// then returns at once (EINVAL, or a connection still queued), where the
// non-blocking one says EAGAIN and no edge comes. A TCP listener's
// shutdown closes it, and its accept fails with EINVAL either way.
bool unix_listener_shut_down(int fd, const FdRecord& listener) {
  if (listener.short_read_drains()) return false;  // TCP
  return (revents_now(fd, POLLRDHUP) & POLLRDHUP) != 0;
}

int accept_hooked(int fd, sockaddr* addr, socklen_t* addr_len, int flags) {
  const DescriptionBirth birth = description_birth(flags & SOCK_CLOEXEC);
  FdRecord* listener = parkable(fd);
  int result = -1;
  if (listener == nullptr || listener->kind() != FdKind::socket) {
    const FdRecord* known = fd_state(fd);
    for (;;) {
      const std::uint32_t flips = known != nullptr ? known->flips.load(std::memory_order_relaxed) : 0;
      // A blocking non-socket (an fd that is not what its record said)
      // sleeps here: announced in a fiber.
      result = passed_through(known, [&] { return real::accept4()(fd, addr, addr_len, flags); });
      if (result >= 0 || parking_enabled() || !plain_thread_should_retry(fd, flips)) break;
    }
  } else {
    const ErrnoHome home;  // before the first park (with_nonblock's waits too)
    const int saved = errno_value();
    // A listener the flip finds shared: accept_shared, which waits until it
    // is readable, to the same deadline.
    ParkDeadline deadline(fd, *listener, FdDirection::read);
    bool shared = false;
    result = attempt_or_park(
        fd, *listener, FdDirection::read, 0,
        [&] {
          const auto accepted =
              with_nonblock(fd, *listener, [&] { return real::accept4()(fd, addr, addr_len, flags); });
          if (accepted && *accepted < 0 && would_block(errno_value()) && unix_listener_shut_down(fd, *listener))
            return announced([&] { return real::accept4()(fd, addr, addr_len, flags); });
          if (accepted) return *accepted;
          shared = true;
          set_errno(EPERM);  // not a would-block: attempt_or_park returns at once
          return -1;
        },
        deadline);
    if (shared) {
      set_errno(saved);
      result = accept_shared(fd, *listener, addr, addr_len, flags, deadline);
    }
  }
  if (result >= 0) {
    // The accepted socket inherits the listener's timeouts and
    // SO_RCVLOWAT (the kernel clones the socket; socket_timeout_ns reads
    // them, and a negative timeout's mark comes from the listener's record
    // here), not its file status flags.
    const FdRecord* from = fd_state(fd);
    constexpr std::uint32_t kInherited = FdRecord::stream_bit | FdRecord::short_read_drains_bit |
                                         FdRecord::recv_timeout_at_once_bit | FdRecord::send_timeout_at_once_bit;
    fd_created(result, FdKind::socket, flags & SOCK_NONBLOCK, birth,
               from != nullptr ? from->flags.load(std::memory_order_relaxed) & kInherited : 0);
  }
  return result;
}

int connect_hooked(int fd, const sockaddr* addr, socklen_t addr_len) {
  FdRecord* state = parkable(fd);
  if (state == nullptr || state->kind() != FdKind::socket) return real::connect()(fd, addr, addr_len);
  const ErrnoHome home;  // before the first park (with_nonblock's waits too)
  const int saved = errno_value();
  const Clock::time_point deadline = deadline_after_ns(socket_timeout_ns(fd, *state, FdDirection::write));
  // Read while the kernel's attempt has just read it: `addr` is the
  // caller's, which may change while this fiber parks.
  sa_family_t family = AF_UNSPEC;
  auto backoff = std::chrono::milliseconds(1);
  int error = 0;
  for (;;) {
    const auto attempt = with_nonblock(fd, *state, [&] { return real::connect()(fd, addr, addr_len); });
    if (!attempt) {
      // Another holder would see a flip: the thread's blocking connect,
      // errno and timeout (SO_SNDTIMEO: EINPROGRESS) as the kernel's.
      set_errno(saved);
      return announced([&] { return real::connect()(fd, addr, addr_len); }, Sleeps::until_woken);
    }
    const int r = *attempt;
    if (r == 0) {
      set_errno(saved);
      return 0;
    }
    error = errno_value();
    // EALREADY: an earlier connect is still in progress (one that
    // SO_SNDTIMEO ended with EINPROGRESS), which a blocking connect waits
    // for too.
    if (error == EINPROGRESS || error == EALREADY) {
      family = addr->sa_family;  // the kernel has just read it
      break;
    }
    if (!would_block(error)) return -1;
    // AF_UNIX with a full backlog: no edge will come; retry, backing off.
    if (Clock::now() >= deadline) {
      set_errno(EAGAIN);
      return -1;
    }
    sleep_parked(std::min(deadline, Clock::now() + backoff));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(16));
  }
  if (const int failed = park_on(fd, *state, FdDirection::write, deadline)) {
    // A connect timed out by SO_SNDTIMEO reports EINPROGRESS (socket(7)),
    // or EALREADY if it waited for an earlier one, as the kernel's does.
    set_errno(failed == EAGAIN ? error : failed);
    return -1;
  }
  int so_error = 0;
  socklen_t len = sizeof(so_error);
  if (real::getsockopt()(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) != 0) return -1;
  if (so_error != 0) {
    // SO_ERROR also reports a soft error (an ICMP message that came while
    // the handshake went on) on a socket that then connected: the kernel's
    // blocking connect succeeds there, as it looks at the state alone.
    sockaddr_storage peer{};
    socklen_t peer_len = sizeof(peer);
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) == 0) {
      set_errno(saved);
      return 0;
    }
    // A blocking connect that fails leaves its socket unconnected (the
    // kernel's inet_stream_connect: disconnect, SS_UNCONNECTED), so that a
    // connect again tries again; one that failed while "in progress"
    // stays connecting (a connect again: ECONNABORTED, a receive: EOF).
    // A connect to AF_UNSPEC is that same disconnect.
    if (family == AF_INET || family == AF_INET6) {
      sockaddr unspecified{};
      unspecified.sa_family = AF_UNSPEC;
      real::connect()(fd, &unspecified, sizeof(unspecified));
    }
    set_errno(so_error);
    return -1;
  }
  // The kernel's blocking connect ends by marking the socket connected,
  // after which a connect is EISCONN; a connect that finds the connection
  // established does that at once, without waiting.
  if (real::connect()(fd, addr, addr_len) != 0 && errno_value() != EISCONN) return -1;
  set_errno(saved);
  return 0;
}

// recvmsg with MSG_WAITALL on a stream socket, until all its iovecs hold,
// EOF, an error or the timeout, as a blocking one: the first receive fills
// the caller's message (name, control data, flags); the rest go on into
// the iovecs after what came. With a `target` (rcvlowat_target), until
// that many bytes.
ssize_t recvmsg_all(int fd, FdRecord& state, msghdr* msg, int flags, std::size_t target) {
  const int once = (flags & ~MSG_WAITALL) | MSG_DONTWAIT;
  void* const control = msg->msg_control;
  const auto control_room = msg->msg_controllen;
  bool control_filled = false;  // the caller's control buffer holds what a step received
  bool passed_fds = false;      // a step received fds: the kernel's receive stops after them
  std::vector<iovec> rest;
  if (msg->msg_controllen == 0 && may_pass_fds(state)) {
    // No control buffer: steps with their own (own_control_steps.h).
    OwnControlSteps steps;
    const ssize_t result = transfer_all(
        fd, state, FdDirection::read,
        [&] { return target > 0 ? target : iov_total(msg->msg_iov, int(msg->msg_iovlen)); },
        [&](std::size_t done) {
          if (done == 0) return steps.receive(fd, msg->msg_iov, msg->msg_iovlen, once, msg);
          if (steps.stops_here(fd)) return ssize_t(0);
          iovecs_after(msg->msg_iov, msg->msg_iovlen, done, rest);
          return steps.receive(fd, rest.data(), rest.size(), once, nullptr);
        });
    if (result >= 0 && steps.truncated()) msg->msg_flags |= MSG_CTRUNC;
    return result;
  }
  return transfer_all(
      fd, state, FdDirection::read, [&] { return target > 0 ? target : iov_total(msg->msg_iov, int(msg->msg_iovlen)); },
      [&](std::size_t done) {
        if (done == 0) {
          const ssize_t r = real::recvmsg()(fd, msg, once);
          if (r > 0) {
            control_filled = msg->msg_controllen > 0;
            passed_fds = carried_fds(*msg);
          }
          return r;
        }
        if (passed_fds || stops_at_urgent_mark(fd, state)) return ssize_t(0);
        iovecs_after(msg->msg_iov, msg->msg_iovlen, done, rest);
        msghdr more{};
        more.msg_iov = rest.data();
        more.msg_iovlen = rest.size();
        if (!control_filled) {  // what comes may carry fds: the kernel's call would give them to the caller
          more.msg_control = control;
          more.msg_controllen = control_room;
        }
        const ssize_t r = real::recvmsg()(fd, &more, once);
        if (r > 0 && !control_filled && more.msg_controllen > 0) {
          msg->msg_controllen = more.msg_controllen;
          msg->msg_flags |= more.msg_flags & MSG_CTRUNC;
          control_filled = true;
        }
        if (r > 0) passed_fds = carried_fds(more);
        return r;
      });
}

// recvmsg, hooked as recv is; recvmsg() below adds what it must do on
// every thread.
ssize_t recvmsg_hooked(int fd, msghdr* msg, int flags) {
  if (!parking_enabled()) return real::recvmsg()(fd, msg, flags);
  const CheckpointOnReturn at_return;
  FdRecord* state = parkable(fd, flags, true);
  if (state == nullptr || state->kind() != FdKind::socket) return real::recvmsg()(fd, msg, flags);
  auto length = [&] { return iov_total_if_readable(msg); };
  // A peek that waits for `wanted` bytes, which counting found the message
  // readable for (0: unreadable, or nothing asked, the kernel's at once).
  // Its steps each fill the message afresh, with the room the caller gave.
  const auto peek_for = [&](std::size_t wanted) -> ssize_t {
    if (wanted == 0) return real::recvmsg()(fd, msg, flags);
    const socklen_t name_room = msg->msg_namelen;
    const std::size_t control_room = msg->msg_controllen;
    return peek_all(fd, *state, wanted, [&](bool at_once) {
      msg->msg_namelen = name_room;
      msg->msg_controllen = control_room;
      return real::recvmsg()(fd, msg, at_once ? (flags & ~MSG_WAITALL) | MSG_DONTWAIT : flags);
    });
  };
  if (waits_for_all(*state, flags)) {
    if (flags & MSG_PEEK) return peek_for(length());
    return recvmsg_all(fd, *state, msg, flags);
  }
  if (const std::size_t target = rcvlowat_target(fd, *state, length, flags); target > 1) {
    if (flags & MSG_PEEK) return peek_for(target);
    return recvmsg_all(fd, *state, msg, flags, target);
  }
  return attempt_or_park(
      fd, *state, FdDirection::read, 0, [&] { return real::recvmsg()(fd, msg, flags | MSG_DONTWAIT); },
      [&] { return real::recvmsg()(fd, msg, flags); });
}

int recvmmsg_hooked(int fd, mmsghdr* msgs, unsigned int count, int flags, timespec* timeout) {
  if (!parking_enabled()) return real::recvmmsg()(fd, msgs, count, flags, timeout);
  const CheckpointOnReturn at_return;
  FdRecord* state = parkable(fd, flags, true);
  // A timeout the kernel cannot read or refuses: its EFAULT or EINVAL, at
  // once, before any message.
  if (state == nullptr || state->kind() != FdKind::socket ||
      (timeout != nullptr && !(readable_by_kernel(timeout) && valid_timespec(timeout))))
    return real::recvmmsg()(fd, msgs, count, flags, timeout);
  return recvmmsg_all(fd, *state, msgs, count, flags, timeout);
}

// Calls `visit(fd)` for each fd the message carries with SCM_RIGHTS,
// reading only what `readable(pointer, bytes)` allows. A control header
// the kernel would refuse (EINVAL: shorter than itself, or running past
// the buffer), or memory it cannot read (EFAULT), ends the walk: such a
// call sends nothing.
template <class Visit, class Readable>
void for_each_fd_carried(const msghdr* msg, Visit&& visit, Readable&& readable) noexcept {
  if (msg == nullptr || !readable(msg, sizeof(msghdr)) || msg->msg_control == nullptr || msg->msg_controllen == 0)
    return;
  const auto* end = static_cast<const char*>(msg->msg_control) + msg->msg_controllen;
  for (const cmsghdr* c = CMSG_FIRSTHDR(msg); c != nullptr;
       c = CMSG_NXTHDR(const_cast<msghdr*>(msg), const_cast<cmsghdr*>(c))) {
    if (!readable(c, sizeof(cmsghdr))) return;
    if (c->cmsg_len < CMSG_LEN(0) || c->cmsg_len > std::size_t(end - reinterpret_cast<const char*>(c))) return;
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    if (!readable(CMSG_DATA(c), count * sizeof(int))) return;
    for (std::size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      visit(fd);
    }
  }
}

// Fds passed with SCM_RIGHTS are new fds the kernel made: their numbers
// may have closed where no hook saw it, as for fd_created. After a call
// that succeeded: the kernel wrote the message.
void fds_received(const msghdr* msg) noexcept {
  for_each_fd_carried(
      msg, [](int fd) { fd_forgotten(fd); }, [](const void*, std::size_t) { return true; });
}

// Fds sent with SCM_RIGHTS: their descriptions are the receiver's too.
// Marked before the call, as the kernel has not yet read the message:
// what it could not read, it would refuse (EFAULT), sending nothing.
void fds_sent(const msghdr* msg, PiecesReadable& readable) noexcept {
  for_each_fd_carried(
      msg, [](int fd) { description_passed(fd_records().find(fd)); }, readable);
}

}  // namespace
}  // namespace weft::detail

using namespace weft::detail;

extern "C" {
// libc's names, interposed: exported, unlike the rest of libweft
// (include/weft/detail/visibility.h).
#pragma GCC visibility push(default)

ssize_t read(int fd, void* buf, size_t n) {
  if (!parking_enabled()) return real::read()(fd, buf, n);
  const CheckpointOnReturn at_return;
  FdRecord* const record = classified_fd_state(fd);
  FdRecord* state = parkable_record(record);
  if (state == nullptr) {
    if (FdRecord* file = unpollable_file(record)) return read_file(*file, fd, buf, n, -1);
    return read_through(fd, n, [&] { return real::read()(fd, buf, n); });
  }
  if (state->kind() == FdKind::socket) {
    // A read of nothing returns 0 at once from a socket (the kernel's
    // sock_read_iter), where a receive of nothing waits for data.
    if (n == 0) return real::read()(fd, buf, n);
    const ssize_t result = receive(fd, *state, buf, n, 0, nullptr, nullptr);
    if (result >= 0 || !not_a_socket_after_all(fd)) return result;
    return real::read()(fd, buf, n);
  }
  // A read of nothing is the driver's to answer, not the vector path's
  // (which returns 0 before the driver sees it): EINVAL from an eventfd,
  // timerfd or signalfd; an inotify fd's waits for an event first.
  if (n == 0) return announced([&] { return real::read()(fd, buf, n); });
  iovec one{buf, n};
  if (under_a_counter(*state, &one, 1, true)) return real::read()(fd, buf, n);  // EINVAL at once
  return pollable_read(fd, *state, &one, 1);
}

ssize_t readv(int fd, const iovec* iov, int count) {
  if (!parking_enabled()) return real::readv()(fd, iov, count);
  const CheckpointOnReturn at_return;
  FdRecord* const record = classified_fd_state(fd);
  FdRecord* state = parkable_record(record);
  if (state == nullptr) {
    if (FdRecord* file = count > 0 ? unpollable_file(record) : nullptr) return read_file(*file, fd, iov, count, -1);
    return real::readv()(fd, iov, count);
  }
  if (state->kind() == FdKind::socket) {
    const ssize_t result = socket_readv(fd, *state, iov, count);
    if (result >= 0 || !not_a_socket_after_all(fd)) return result;
    return real::readv()(fd, iov, count);
  }
  // EINVAL, as libc says it; and an eventfd's or timerfd's, at once.
  if (count < 0 || under_a_counter(*state, iov, count, false)) return real::readv()(fd, iov, count);
  return pollable_read(fd, *state, iov, count);
}

ssize_t write(int fd, const void* buf, size_t n) {
  if (!parking_enabled()) return real::write()(fd, buf, n);
  const CheckpointOnReturn at_return;
  FdRecord* const record = classified_fd_state(fd);
  FdRecord* state = parkable_record(record);
  if (state == nullptr) return passed_through(record, [&] { return real::write()(fd, buf, n); });
  if (state->kind() == FdKind::socket) {
    const ssize_t result = send_all(fd, *state, buf, n, 0, nullptr, 0);
    if (result >= 0 || !not_a_socket_after_all(fd)) return result;
    return real::write()(fd, buf, n);
  }
  if (n == 0) return announced([&] { return real::write()(fd, buf, n); });  // as read's, above
  iovec one{const_cast<void*>(buf), n};
  if (under_a_counter(*state, &one, 1, true)) return real::write()(fd, buf, n);  // EINVAL at once
  return pollable_write(fd, *state, &one, 1);
}

ssize_t writev(int fd, const iovec* iov, int count) {
  if (!parking_enabled()) return real::writev()(fd, iov, count);
  const CheckpointOnReturn at_return;
  FdRecord* const record = classified_fd_state(fd);
  FdRecord* state = parkable_record(record);
  if (state == nullptr) return passed_through(record, [&] { return real::writev()(fd, iov, count); });
  if (state->kind() == FdKind::socket) {
    const ssize_t result = socket_writev(fd, *state, iov, count);
    if (result >= 0 || !not_a_socket_after_all(fd)) return result;
    return real::writev()(fd, iov, count);
  }
  if (count < 0 || under_a_counter(*state, iov, count, false)) return real::writev()(fd, iov, count);
  return pollable_write(fd, *state, iov, count);
}

ssize_t recv(int fd, void* buf, size_t n, int flags) {
  if (!parking_enabled()) return real::recv()(fd, buf, n, flags);
  const CheckpointOnReturn at_return;
  FdRecord* state = parkable(fd, flags, true);
  if (state == nullptr || state->kind() != FdKind::socket)
    return read_through(fd, flags & MSG_PEEK ? 0 : n, [&] { return real::recv()(fd, buf, n, flags); });
  return receive(fd, *state, buf, n, flags, nullptr, nullptr);
}

ssize_t recvfrom(int fd, void* buf, size_t n, int flags, sockaddr* addr, socklen_t* addr_len) {
  if (!parking_enabled()) return real::recvfrom()(fd, buf, n, flags, addr, addr_len);
  const CheckpointOnReturn at_return;
  FdRecord* state = parkable(fd, flags, true);
  if (state == nullptr || state->kind() != FdKind::socket)
    return read_through(fd, flags & MSG_PEEK ? 0 : n,
                        [&] { return real::recvfrom()(fd, buf, n, flags, addr, addr_len); });
  return receive(fd, *state, buf, n, flags, addr, addr_len);
}

ssize_t recvmsg(int fd, msghdr* msg, int flags) {
  const ssize_t result = recvmsg_hooked(fd, msg, flags);
  if (result >= 0) fds_received(msg);
  return result;
}

int recvmmsg(int fd, mmsghdr* msgs, unsigned int count, int flags, timespec* timeout) {
  const int result = recvmmsg_hooked(fd, msgs, count, flags, timeout);
  for (int i = 0; i < result; ++i) fds_received(&msgs[i].msg_hdr);
  return result;
}

ssize_t send(int fd, const void* buf, size_t n, int flags) {
  if (!parking_enabled()) return real::send()(fd, buf, n, flags);
  const CheckpointOnReturn at_return;
  FdRecord* state = parkable(fd, flags, true);
  if (state == nullptr || state->kind() != FdKind::socket)
    return unparked_send(fd, flags, [&] { return real::send()(fd, buf, n, flags); });
  return send_all(fd, *state, buf, n, flags, nullptr, 0);
}

ssize_t sendto(int fd, const void* buf, size_t n, int flags, const sockaddr* addr, socklen_t addr_len) {
  if (!parking_enabled()) return real::sendto()(fd, buf, n, flags, addr, addr_len);
  const CheckpointOnReturn at_return;
  FdRecord* state = parkable(fd, flags, true);
  if (state == nullptr || state->kind() != FdKind::socket)
    return unparked_send(fd, flags, [&] { return real::sendto()(fd, buf, n, flags, addr, addr_len); });
  return send_all(fd, *state, buf, n, flags, addr, addr_len);
}

ssize_t sendmsg(int fd, const msghdr* msg, int flags) {
  {
    PiecesReadable readable;
    fds_sent(msg, readable);
  }
  if (!parking_enabled()) return real::sendmsg()(fd, msg, flags);
  const CheckpointOnReturn at_return;
  FdRecord* state = parkable(fd, flags, true);
  if (state == nullptr || state->kind() != FdKind::socket || msg == nullptr)
    return unparked_send(fd, flags, [&] { return real::sendmsg()(fd, msg, flags); });
  return sendmsg_all(fd, *state, msg, flags);
}

int sendmmsg(int fd, mmsghdr* msgs, unsigned int count, int flags) {
  {
    // The kernel reads at most UIO_MAXIOV messages, and stops at the first
    // it cannot read.
    PiecesReadable readable;
    for (unsigned int i = 0; msgs != nullptr && i < std::min(count, unsigned(UIO_MAXIOV)); ++i) {
      if (!readable(&msgs[i])) break;
      fds_sent(&msgs[i].msg_hdr, readable);
    }
  }
  if (!parking_enabled()) return real::sendmmsg()(fd, msgs, count, flags);
  const CheckpointOnReturn at_return;
  FdRecord* state = parkable(fd, flags, true);
  if (state == nullptr || state->kind() != FdKind::socket)
    return unparked_send(fd, flags, [&] { return real::sendmmsg()(fd, msgs, count, flags); });
  return sendmmsg_all(fd, *state, msgs, count, flags);
}

int connect(int fd, const sockaddr* addr, socklen_t addr_len) {
  const CheckpointOnReturn at_return;
  return connect_hooked(fd, addr, addr_len);
}

int accept(int fd, sockaddr* addr, socklen_t* addr_len) {
  const CheckpointOnReturn at_return;
  return accept_hooked(fd, addr, addr_len, 0);
}

int accept4(int fd, sockaddr* addr, socklen_t* addr_len, int flags) {
  const CheckpointOnReturn at_return;
  return accept_hooked(fd, addr, addr_len, flags);
}

// The _FORTIFY_SOURCE entries a fortified caller links to instead: the
// same check glibc makes, then the hook.
ssize_t __read_chk(int fd, void* buf, size_t n, size_t buf_len) {
  if (n > buf_len) __chk_fail();
  return read(fd, buf, n);
}

ssize_t __recv_chk(int fd, void* buf, size_t n, size_t buf_len, int flags) {
  if (n > buf_len) __chk_fail();
  return recv(fd, buf, n, flags);
}

ssize_t __recvfrom_chk(int fd, void* buf, size_t n, size_t buf_len, int flags, sockaddr* addr, socklen_t* addr_len) {
  if (n > buf_len) __chk_fail();
  return recvfrom(fd, buf, n, flags, addr, addr_len);
}

#pragma GCC visibility pop
}  // extern "C"
