// weft::io: waiting for a file descriptor to become readable or writable.
//
//   int fd = ...;  // a socket, pipe, eventfd, ...; weft never changes O_NONBLOCK
//   if (weft::io::wait_readable(fd, std::chrono::milliseconds(100))) {
//     ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);  // may still be EAGAIN: another reader won
//   }
//
// In a weft fiber the call parks the fiber (its worker runs other fibers)
// until the fd is ready or the timeout passes; the scheduler's netpoller
// (io/netpoller.h) wakes it. On a plain thread it is poll(2), with the
// same results. Readiness is level: a call on an fd that is already
// readable returns true at once, whatever happened before.
//
//   true                 the fd is ready (or has an error or hang-up pending,
//                        which the next read or write will report)
//   false                the timeout passed first (only the timed overloads)
//   std::system_error    EBADF: the fd is not open, or was closed through
//                        weft while the caller waited (detail::fd_closing);
//                        EPERM: the fd cannot be polled. The message names
//                        the fd. docs/io.md has the details.
#pragma once

#include <chrono>

#include "detail/park.h"
#include "detail/require_cxx20.h"
#include "detail/visibility.h"

namespace weft::detail {
// The entry of every overload below: true when ready, false at the deadline.
WEFT_API bool wait_fd_until(int fd, bool writable, Clock::time_point deadline);
}  // namespace weft::detail

namespace weft::io {

WEFT_API bool wait_readable(int fd);
WEFT_API bool wait_writable(int fd);

// A timeout of zero or less polls once; duration::max() never times out.
template <class Rep, class Period>
bool wait_readable(int fd, const std::chrono::duration<Rep, Period>& timeout) {
  return detail::wait_fd_until(fd, false, detail::deadline_after(timeout));
}

template <class Rep, class Period>
bool wait_writable(int fd, const std::chrono::duration<Rep, Period>& timeout) {
  return detail::wait_fd_until(fd, true, detail::deadline_after(timeout));
}

}  // namespace weft::io
