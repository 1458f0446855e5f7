// TEMPORARY stand-in for wait_fd / fd_closing / run_blocking until the io
// and offload branches land; delete this file (and io/netpoller.h,
// include/weft/blocking.h) at merge. A fiber polls the fd every 200 us
// instead of parking on an epoll; run_blocking runs the call in place. It
// uses raw syscalls so that it never re-enters the libc hooks.
#include <poll.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <weft/blocking.h>
#include <weft/detail/park.h>
#include <weft/this_fiber.h>

#include <cerrno>
#include <string>
#include <system_error>

#include "netpoller.h"

namespace weft::detail {
namespace {

int raw_poll(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  timespec ts{timeout_ms / 1000, (timeout_ms % 1000) * 1'000'000L};
  long r = syscall(SYS_ppoll, &p, 1, timeout_ms < 0 ? nullptr : &ts, nullptr, 0);
  if (r < 0) return -1;
  if (r == 0) return 0;
  return p.revents;
}

}  // namespace

FdWaitResult wait_fd(int fd, FdDirection direction, Clock::time_point deadline) {
  const short events = direction == FdDirection::read ? POLLIN : POLLOUT;
  for (;;) {
    const bool fiber = this_fiber::is_fiber();
    int timeout_ms = 0;
    if (!fiber) {
      if (deadline == no_deadline) {
        timeout_ms = -1;
      } else {
        auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
        timeout_ms = left < 0 ? 0 : static_cast<int>(std::min<long long>(left, 1'000'000));
      }
    }
    int r = raw_poll(fd, events, timeout_ms);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw std::system_error(errno, std::generic_category(), "weft::detail::wait_fd(fd " + std::to_string(fd) + ")");
    }
    if (r & POLLNVAL) return FdWaitResult::closed;
    if (r != 0) return FdWaitResult::ready;
    if (Clock::now() >= deadline) return FdWaitResult::timed_out;
    if (fiber) this_fiber::sleep_for(std::chrono::microseconds(200));
  }
}

void fd_closing(int) noexcept {}

void run_blocking(void (*call)(void*) noexcept, void* arg) { call(arg); }

}  // namespace weft::detail
