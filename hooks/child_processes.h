// What the process hooks share (hooks_processes.cpp, hooks_popen.cpp):
// waiting for one child by parking on a pidfd.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

namespace weft::detail {

// wait4(pid, status, options, usage), parking the calling fiber on a pidfd
// until the child has exited when it can (hooks_processes.cpp says when);
// else, and on a plain thread, libc's blocking call.
pid_t wait_for_child(pid_t pid, int* status, int options, rusage* usage);

// pidfd_open(pid, 0): a new pidfd, or -1 with errno (ENOSYS before Linux
// 5.3, ESRCH for no such process).
int open_pidfd(pid_t pid) noexcept;
// Closes a pidfd from open_pidfd that the netpoller may have registered.
void close_pidfd(int fd) noexcept;

}  // namespace weft::detail
