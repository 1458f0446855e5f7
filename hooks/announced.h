// Announced blocking (sched/blocking_call.h) for the calls a hook passes
// through to the kernel where they may sleep: made in a fiber, the call
// marks its worker "in a blocking call", so that sysmon hands the worker's
// other fibers to another thread once the call outlasts a short grace, as
// Go's entersyscall lets sysmon retake the P.
//
//   return announced([&] { return real::flock()(fd, operation); });
//
// Off a fiber (and with WEFT_HOOKS=0) it is the plain call. The call must
// not park or yield (the mark belongs to the worker it was made on): only
// libc's functions go in here, never a hook.
#pragma once

#include "../sched/blocking_call.h"
#include "fd_table.h"
#include "hook_support.h"

namespace weft::detail {

template <class Call>
auto announced(Call&& call, Sleeps sleeps = Sleeps::maybe) {
  if (!parking_enabled()) return call();
  const BlockingCall in_the_kernel(sleeps);
  return call();
}

// A hook whose whole body is one announced call: announced(), then the
// hook's checkpoint (hook_support.h, CheckpointOnReturn) once the call is
// over, as every hooked call has, so that a loop of them (a file written
// block by block) shares its worker.
//
//   ssize_t pwrite(...) { return announced_hook([&] { return real::pwrite()(...); }); }
//   int fsync(int fd) { return announced_hook([&] { ... }, Sleeps::always); }
template <class Call>
auto announced_hook(Call&& call, Sleeps sleeps = Sleeps::maybe) {
  if (!parking_enabled()) return call();
  const CheckpointOnReturn at_return;
  const BlockingCall in_the_kernel(sleeps);
  return call();
}

// How a call on the fds `a` and `b` (-1: none) sleeps: Sleeps::until_woken
// where one is a socket, pipe, FIFO or terminal (pollable_kind), whose
// other party may be a fiber pinned to this worker, whose pin sysmon then
// releases; else Sleeps::maybe: a file's call ends by itself. Classifies
// an fd not yet known, in a fiber only.
inline Sleeps sleeps_on_fds(int a, int b = -1) noexcept {
  if (!parking_enabled()) return Sleeps::maybe;
  for (const int fd : {a, b}) {
    const FdRecord* const record = fd >= 0 ? classified_fd_state(fd) : nullptr;
    if (record != nullptr && pollable_kind(record->kind())) return Sleeps::until_woken;
  }
  return Sleeps::maybe;
}

}  // namespace weft::detail
