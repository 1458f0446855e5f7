// TEMPORARY stand-in (see io/temp_stand_in.cpp): the netpoller's interface,
// fixed in advance so that the hooks can be written before the io branch
// lands. Replaced by the io branch's io/netpoller.h at merge.
#pragma once

#include <weft/detail/wait_list.h>  // Clock

namespace weft::detail {

enum class FdWaitResult { ready, timed_out, closed };
enum class FdDirection { read, write };

// Waits until `fd` is ready for `direction`, until `deadline`
// (no_deadline: never), or until the fd is closed through fd_closing().
// On a plain thread: poll(2). Throws std::system_error naming the fd.
FdWaitResult wait_fd(int fd, FdDirection direction, Clock::time_point deadline);

// Call before the real close() of `fd` (or a dup2/dup3 onto it).
void fd_closing(int fd) noexcept;

}  // namespace weft::detail
