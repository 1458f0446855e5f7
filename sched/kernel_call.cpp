#include "kernel_call.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "../runtime/system_calls.h"

namespace weft::detail {
namespace {

struct KnownCall {
  long number;
  const char* name;
  bool first_argument_is_fd;
};

// The calls a fiber is likely to be caught blocking in. SYS_* numbers come
// from the architecture's own header, so the table is right wherever it
// builds; calls an architecture lacks (open, poll on arm64) drop out.
constexpr KnownCall kKnownCalls[] = {
    {SYS_read, "read", true},
    {SYS_write, "write", true},
    {SYS_pread64, "pread64", true},
    {SYS_pwrite64, "pwrite64", true},
    {SYS_readv, "readv", true},
    {SYS_writev, "writev", true},
    {SYS_preadv, "preadv", true},
    {SYS_pwritev, "pwritev", true},
    {SYS_recvfrom, "recvfrom", true},
    {SYS_sendto, "sendto", true},
    {SYS_recvmsg, "recvmsg", true},
    {SYS_sendmsg, "sendmsg", true},
    {SYS_accept, "accept", true},
    {SYS_accept4, "accept4", true},
    {SYS_connect, "connect", true},
    {SYS_fsync, "fsync", true},
    {SYS_fdatasync, "fdatasync", true},
    {SYS_flock, "flock", true},
    {SYS_fcntl, "fcntl", true},
    {SYS_ioctl, "ioctl", true},
    {SYS_epoll_pwait, "epoll_pwait", true},
    {SYS_sendfile, "sendfile", true},
    {SYS_splice, "splice", true},
    {SYS_close, "close", true},
    {SYS_openat, "openat", false},
    {SYS_ppoll, "ppoll", false},
    {SYS_pselect6, "pselect6", false},
    {SYS_nanosleep, "nanosleep", false},
    {SYS_clock_nanosleep, "clock_nanosleep", false},
    {SYS_futex, "futex", false},
    {SYS_wait4, "wait4", false},
    {SYS_waitid, "waitid", false},
    {SYS_rt_sigtimedwait, "rt_sigtimedwait", false},
    {SYS_msgrcv, "msgrcv", false},
    {SYS_semtimedop, "semtimedop", false},
#ifdef SYS_open
    {SYS_open, "open", false},
#endif
#ifdef SYS_poll
    {SYS_poll, "poll", false},
#endif
#ifdef SYS_select
    {SYS_select, "select", false},
#endif
#ifdef SYS_epoll_wait
    {SYS_epoll_wait, "epoll_wait", true},
#endif
#ifdef SYS_pause
    {SYS_pause, "pause", false},
#endif
};

const KnownCall* find_call(long number) noexcept {
  for (const KnownCall& call : kKnownCalls)
    if (call.number == number) return &call;
  return nullptr;
}

}  // namespace

const char* syscall_name(long number) noexcept {
  const KnownCall* call = find_call(number);
  return call != nullptr ? call->name : nullptr;
}

bool syscall_takes_fd(long number) noexcept {
  const KnownCall* call = find_call(number);
  return call != nullptr && call->first_argument_is_fd;
}

long kernel_call(int os_thread_id, unsigned long* first_argument) {
  if (os_thread_id <= 0) return -1;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", os_thread_id);
  char buffer[256];
  if (sys::read_small_file(path, buffer, sizeof(buffer)) < 0) return -1;
  // "running", "-1 sp pc" (asleep, but not in a system call: a page fault),
  // or "nr arg1 ... arg6 sp pc" with the arguments in hex.
  char* end = nullptr;
  const long number = std::strtol(buffer, &end, 10);
  if (end == buffer || number < 0) return -1;
  if (first_argument != nullptr) *first_argument = std::strtoul(end, nullptr, 16);
  return number;
}

std::string describe_kernel_call(int os_thread_id) {
  unsigned long first = 0;
  const long number = kernel_call(os_thread_id, &first);
  if (number < 0) return {};
  const KnownCall* call = find_call(number);
  if (call == nullptr) return "blocked in syscall " + std::to_string(number);
  std::string text = std::string("blocked in ") + call->name + "(2)";
  if (call->first_argument_is_fd) text += " on fd " + std::to_string(static_cast<int>(first));
  return text;
}

}  // namespace weft::detail
