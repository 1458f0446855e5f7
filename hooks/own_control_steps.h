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
//         if (steps.passed_fds()) return ssize_t(0);  // as at EOF: the call ends
//         return steps.receive(fd, &iov, 1, flags, nullptr);
//       });
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <cstddef>

namespace weft::detail {

class OwnControlSteps {
 public:
  // recvmsg of `count` iovecs with `flags`, and `name` (may be null) for
  // the sender's address as the caller's call would fill it; the fds that
  // came are closed (MSG_CMSG_CLOEXEC meanwhile).
  ssize_t receive(int fd, iovec* iov, std::size_t count, int flags, msghdr* name) noexcept;
  // A step received fds: the kernel's receive would stop after them.
  bool passed_fds() const noexcept { return passed_fds_; }
  // A step received control data the caller had no room for: the kernel's
  // call would say MSG_CTRUNC.
  bool truncated() const noexcept { return truncated_; }

 private:
  // Room for a message's most fds (SCM_MAX_FD, 253), its credentials and a
  // short security label: enough to tell what came.
  alignas(cmsghdr) char control_[1024 + 256];
  bool passed_fds_ = false;
  bool truncated_ = false;
};

}  // namespace weft::detail
