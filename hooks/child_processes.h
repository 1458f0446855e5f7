// What the process hooks share (hooks_processes.cpp, hooks_popen.cpp):
// waiting for one child by parking on a pidfd.
#pragma once

#include <signal.h>
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

// The signal mask a child made now should start with, in `mask`, when
// SIGCHLD is blocked on the calling thread only because other fibers of
// that thread are in system() (which blocks it on the thread while any of
// its calls runs): the thread's mask without SIGCHLD. On a thread, whose
// own system() makes no other child meanwhile, such a child never starts
// with it blocked. False, and `mask` untouched, otherwise.
bool child_mask_without_systems_block(sigset_t& mask) noexcept;

}  // namespace weft::detail
