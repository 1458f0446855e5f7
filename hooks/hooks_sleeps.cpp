// sleep, usleep, nanosleep, clock_nanosleep, thrd_sleep in a fiber: a fiber
// timer, not a thread asleep in the kernel (libstdc++'s
// std::this_thread::sleep_for is nanosleep). A parked fiber is not in a system call, so a signal does
// not cut its sleep short: these return 0 with nothing remaining
// (docs/io.md).
#include <threads.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "hook_support.h"
#include "real_calls.h"
#include "user_memory.h"

namespace weft::detail {
namespace {

// A relative sleep of `ts` in a fiber; zero returns at once, as the kernel does.
void sleep_for(const timespec& ts) {
  if (ts.tv_sec == 0 && ts.tv_nsec == 0) return;
  sleep_parked(deadline_after_timespec(&ts));
}

// clock_nanosleep's fiber side, for it and for thrd_sleep.
int clock_nanosleep_in_fiber(clockid_t clock, int flags, const timespec* request, timespec* remaining) {
  const bool parkable_clock =
      clock == CLOCK_REALTIME || clock == CLOCK_MONOTONIC || clock == CLOCK_BOOTTIME || clock == CLOCK_TAI;
  // A request the kernel cannot read is its EFAULT, as libc says it.
  if (!parkable_clock || !readable_by_kernel(request)) return real::clock_nanosleep()(clock, flags, request, remaining);
  if (!valid_timespec(request)) return EINVAL;  // returned, not put in errno
  const int saved = errno_value();
  if (flags & TIMER_ABSTIME) {
    // The time left on that clock, measured once: a later step of a
    // settable clock (CLOCK_REALTIME) is not followed.
    timespec now{};
    clock_gettime(clock, &now);
    const std::int64_t left_s = std::int64_t(request->tv_sec) - now.tv_sec;
    if (left_s > 1'000'000'000) {
      sleep_parked(no_deadline);
    } else {
      const std::int64_t left_ns = left_s * 1'000'000'000 + (request->tv_nsec - now.tv_nsec);
      if (left_ns > 0) sleep_parked(deadline_after(std::chrono::nanoseconds(left_ns)));
    }
  } else {
    sleep_for(*request);
  }
  set_errno(saved);
  return 0;
}

}  // namespace
}  // namespace weft::detail

using namespace weft::detail;

extern "C" {
// libc's names, interposed: exported, unlike the rest of libweft
// (include/weft/detail/visibility.h).
#pragma GCC visibility push(default)

int nanosleep(const timespec* request, timespec* remaining) {
  if (!parking_enabled()) return real::nanosleep()(request, remaining);
  const CheckpointOnReturn at_return;
  if (!readable_by_kernel(request)) return real::nanosleep()(request, remaining);  // EFAULT as libc says
  if (!valid_timespec(request)) {
    set_errno(EINVAL);
    return -1;
  }
  const int saved = errno_value();
  weft::detail::sleep_for(*request);
  set_errno(saved);
  return 0;
}

int clock_nanosleep(clockid_t clock, int flags, const timespec* request, timespec* remaining) {
  if (!parking_enabled()) return real::clock_nanosleep()(clock, flags, request, remaining);
  const CheckpointOnReturn at_return;
  return clock_nanosleep_in_fiber(clock, flags, request, remaining);
}

// C11's sleep: glibc's is clock_nanosleep(CLOCK_REALTIME) made inside libc,
// where no hook sees it, so on a fiber it held the worker. Its results are
// glibc's: 0, -1 for EINTR (never, parked: above), -2 for any other error.
int thrd_sleep(const timespec* duration, timespec* remaining) {
  if (!parking_enabled()) return real::thrd_sleep()(duration, remaining);
  const CheckpointOnReturn at_return;
  const int error = clock_nanosleep_in_fiber(CLOCK_REALTIME, 0, duration, remaining);
  return error == 0 ? 0 : error == EINTR ? -1 : -2;
}

// Both keep errno, as nanosleep does and as libc's do when they succeed:
// the park runs other fibers on this thread, whose calls set its errno.
unsigned int sleep(unsigned int seconds) {
  if (!parking_enabled()) return real::sleep()(seconds);
  const CheckpointOnReturn at_return;
  const int saved = errno_value();
  if (seconds > 0) sleep_parked(deadline_after(std::chrono::seconds(seconds)));
  set_errno(saved);
  return 0;
}

int usleep(useconds_t microseconds) {
  if (!parking_enabled()) return real::usleep()(microseconds);
  const CheckpointOnReturn at_return;
  const int saved = errno_value();
  if (microseconds > 0) sleep_parked(deadline_after(std::chrono::microseconds(microseconds)));
  set_errno(saved);
  return 0;
}

#pragma GCC visibility pop
}  // extern "C"
