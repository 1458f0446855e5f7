// weft::io (include/weft/io.h): the public calls, on wait_fd.
#include <weft/io.h>

#include <cerrno>
#include <string>
#include <system_error>

#include "netpoller.h"

namespace weft::detail {

bool wait_fd_until(int fd, bool writable, Clock::time_point deadline) {
  // A checkpoint on entry: a wait that finds the fd ready parks nowhere.
  checkpoint();
  switch (wait_fd(fd, writable ? FdDirection::write : FdDirection::read, deadline)) {
    case FdWaitResult::ready:
      return true;
    case FdWaitResult::timed_out:
      return false;
    case FdWaitResult::closed:
      break;
  }
  throw std::system_error(EBADF, std::generic_category(),
                          "weft::io: fd " + std::to_string(fd) + " was closed while waited on");
}

}  // namespace weft::detail

namespace weft::io {

bool wait_readable(int fd) { return detail::wait_fd_until(fd, false, detail::no_deadline); }
bool wait_writable(int fd) { return detail::wait_fd_until(fd, true, detail::no_deadline); }

}  // namespace weft::io
