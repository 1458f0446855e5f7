// The steps of a receive that loops until it has enough (MSG_WAITALL,
// SO_RCVLOWAT: hooks_io_calls.cpp, transfer_all) on a stream socket other
// than TCP's, for a caller who gave no control buffer: recv, recvfrom,
// read, readv, or recvmsg without one.
//
// A unix stream socket's blocking receive stops after a segment that
// carried fds (unix_stream_read_generic), with the rest left queued, and
// closes the fds it had no room for, saying MSG_CTRUNC. Step by step, the
// loop must stop there too; but without a control buffer a step cannot
// tell fds from credentials (SO_PASSCRED also says MSG_CTRUNC where they
// do not fit), so the loop read on past the fds, or stopped after every
// segment. So each step receives into a control buffer of its own, closes
// the fds as the kernel would have, and remembers them.
//
//   OwnControlSteps steps;
//   ... transfer_all(..., [&](std::size_t done) {
//         if (steps.stops_here(fd)) return ssize_t(0);  // as at EOF: the call ends
//         return steps.receive(fd, &iov, 1, flags, nullptr);
//       });
#pragma once

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>

namespace weft::detail {

class OwnControlSteps {
 public:
  // recvmsg of `count` iovecs with `flags`, and `name` (may be null) for
  // the sender's address as the caller's call would fill it; the fds that
  // came are closed (MSG_CMSG_CLOEXEC meanwhile).
  ssize_t receive(int fd, iovec* iov, std::size_t count, int flags, msghdr* name) noexcept;
  // Whether the kernel's receive would have stopped before the next step:
  // after a step that received fds, or where the next segment queued is
  // another sender's (its credentials differ from the first step's, with
  // SO_PASSCRED: the kernel never glues two senders' segments; one peek).
  bool stops_here(int fd) noexcept;
  // A step received control data the caller had no room for: the kernel's
  // call would say MSG_CTRUNC.
  bool truncated() const noexcept { return truncated_; }

 private:
  // Room for a message's most fds (SCM_MAX_FD, 253), its credentials and a
  // short security label: enough to tell what came.
  alignas(cmsghdr) char control_[1024 + 256];
  // Who sent a segment, as its control data says: SO_PASSCRED's
  // credentials, SO_PASSPIDFD's pidfd (its inode, one per process where
  // pidfds live in pidfs, Linux 6.9).
  struct Sender {
    bool have_creds = false;
    ucred creds{};
    ino_t pidfd_inode = 0;  // 0: none
    bool differs_from(const Sender& other) const noexcept;
  };
  // What one received message carried: its fds (closed) and its sender.
  Sender take_control(msghdr& msg) noexcept;

  bool passed_fds_ = false;
  bool truncated_ = false;
  Sender sender_;  // the first step's
};

}  // namespace weft::detail
