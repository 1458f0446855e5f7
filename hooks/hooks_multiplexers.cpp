// poll, ppoll, select, pselect, epoll_wait, epoll_pwait, epoll_pwait2 (and the fortified
// __poll_chk, __ppoll_chk) in a fiber.
//
// Each first asks the kernel with a zero timeout; when nothing is ready
// and the caller would wait, the fiber parks instead:
//   - on one fd waited for in one direction (hiredis, libpq, libcurl's
//     usual case): on that fd, through the netpoller;
//   - on several fds, or on several events of one: on a private epoll fd
//     that holds them all (level-triggered), which is itself readable when
//     any of them is ready: one registration in the netpoller however many
//     fds are watched;
//   - on a user's epoll fd: on that epoll fd itself.
// After the wake the zero-timeout call runs again, so the result (revents,
// the fd sets, the events array) is exactly the kernel's. A wake that finds
// nothing (another fiber took it) parks again until the deadline.
// poll/select with no fds are sleeps. A signal mask (ppoll, pselect,
// epoll_pwait, epoll_pwait2) applies to the kernel calls only, not to the
// parked time.
#undef _FORTIFY_SOURCE
#include <poll.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <vector>

#include "../io/real_calls.h"
#include "fd_table.h"
#include "hook_support.h"

extern "C" [[noreturn]] void __chk_fail(void);
extern "C" int close(int);

namespace weft::detail {
namespace {

constexpr short in_events = POLLIN | POLLPRI | POLLRDNORM | POLLRDBAND | POLLRDHUP;
constexpr short out_events = POLLOUT | POLLWRNORM | POLLWRBAND;

Clock::time_point deadline_after_ms(int timeout_ms) {
  return timeout_ms < 0 ? no_deadline : deadline_after(std::chrono::milliseconds(timeout_ms));
}

Clock::time_point deadline_after_timespec(const timespec* timeout) {
  if (timeout == nullptr) return no_deadline;
  if (timeout->tv_sec > 1'000'000'000) return no_deadline;  // 31 years: never, and no overflow
  return deadline_after(std::chrono::seconds(timeout->tv_sec) + std::chrono::nanoseconds(timeout->tv_nsec));
}

// What `fds` watch: how many distinct (fd, events) entries, and the last
// of them. One entry in one direction is waited for on its fd itself.
struct Watched {
  nfds_t entries = 0;
  const pollfd* only = nullptr;
  bool one_direction() const noexcept {
    return entries == 1 && bool(only->events & in_events) != bool(only->events & out_events);
  }
  FdDirection direction() const noexcept { return only->events & in_events ? FdDirection::read : FdDirection::write; }
};

Watched watched_in(const pollfd* fds, nfds_t count) noexcept {
  Watched watched;
  for (nfds_t i = 0; i < count; ++i) {
    if (fds[i].fd < 0) continue;
    if (watched.only == nullptr || watched.only->fd != fds[i].fd || watched.only->events != fds[i].events)
      ++watched.entries;
    watched.only = &fds[i];
  }
  return watched;
}

// Parks until one of `fds` may be ready, or the deadline. 0 when woken,
// else an errno (EAGAIN: the deadline passed). `mark`: for one fd in one
// direction, its fd_wait_mark() from before the probe that found nothing.
// `harvested`: for one fd in one direction, the epoll events that woke it
// (wait_fd), else 0.
int wait_for_any(const pollfd* fds, nfds_t count, Clock::time_point deadline, const FdWaitMark& mark,
                 std::uint32_t& harvested) {
  harvested = 0;
  // All of it in one ParkScope, the private epoll fd's close() included:
  // that close tells the netpoller (fd_closing takes the fd's record lock),
  // and under ThreadSanitizer this code runs inside its poll/select/
  // epoll_wait interceptor, which hides the caller's synchronisation. Left
  // outside, the record's lock was invisible to TSan: it reported a race
  // with the next close() of that fd number on another thread (sysmon's
  // /proc reads), and then hung symbolizing the report, whose own close()
  // came back through this hook into fd_closing (hooks/hook_support.h).
  const ParkScope park;
  const Watched watched = watched_in(fds, count);
  if (watched.entries == 0) {
    sleep_parked(deadline);
    return EAGAIN;
  }
  if (watched.one_direction()) return wait_for_fd(watched.only->fd, watched.direction(), deadline, &mark, &harvested);
  const int saved = errno_value();
  const int epfd = epoll_create1(EPOLL_CLOEXEC);
  if (epfd < 0) return errno_value();
  for (nfds_t i = 0; i < count; ++i) {
    if (fds[i].fd < 0) continue;
    epoll_event event{};
    // poll's and epoll's event bits are the same numbers.
    event.events = std::uint32_t(fds[i].events) &
                   (EPOLLIN | EPOLLPRI | EPOLLOUT | EPOLLRDNORM | EPOLLRDBAND | EPOLLWRNORM | EPOLLWRBAND | EPOLLRDHUP);
    event.data.fd = fds[i].fd;
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, fds[i].fd, &event) != 0 && errno_value() == EEXIST) {
      // The same fd twice: watch the union of its events.
      epoll_event both{};
      for (nfds_t j = 0; j < count; ++j)
        if (fds[j].fd == fds[i].fd) both.events |= std::uint32_t(fds[j].events) & event.events;
      both.events |= event.events;
      both.data.fd = fds[i].fd;
      epoll_ctl(epfd, EPOLL_CTL_MOD, fds[i].fd, &both);
    }
    // Other failures (an fd epoll cannot watch is always ready for poll,
    // and the zero-timeout call already said nothing was) leave it out.
  }
  const int result = wait_for_fd(epfd, FdDirection::read, deadline);
  close(epfd);  // the hook: the netpoller forgets it first
  set_errno(saved);
  return result;
}

// The common loop: `probe()` is the zero-timeout kernel call, made first
// unless the caller's own probe found nothing already (`probed`), and
// after every wake but one that `fill(harvested)` can answer: given the
// epoll events that woke a wait on one fd, it writes the result as the
// kernel would have at the moment the poller harvested them (after the
// wait began) and returns the count, or returns 0 if it cannot say. For one fd in one direction the mark taken before a
// probe spares the wait after it its own poll(fd, 0), as attempt_or_park's
// does (hooks/hooks_io_calls.cpp): a wait that parks costs one zero-timeout
// call before it and one after, not three. A mark is only good if taken
// before the probe (an edge between the two would be lost), so the wait
// after a caller's probe has none.
template <class Probe, class Fill>
int poll_parked(const pollfd* fds, nfds_t count, Clock::time_point deadline, bool probed, Probe&& probe, Fill&& fill) {
  const ErrnoHome home;
  const int saved = errno_value();
  const Watched watched = watched_in(fds, count);
  const auto mark_now = [&] {
    return watched.one_direction() ? fd_wait_mark(watched.only->fd, watched.direction()) : FdWaitMark{};
  };
  FdWaitMark mark{};
  if (!probed) {
    mark = mark_now();
    const int ready = probe();
    if (ready != 0) return ready;
  }
  for (;;) {
    std::uint32_t harvested;
    const int failed = wait_for_any(fds, count, deadline, mark, harvested);
    if (failed == 0 && harvested != 0) {
      if (const int ready = fill(harvested)) {
        set_errno(saved);
        return ready;
      }
    }
    mark = mark_now();
    const int ready = probe();
    if (ready != 0) return ready;
    if (failed == EAGAIN && Clock::now() >= deadline) {
      set_errno(saved);
      return 0;
    }
    if (failed != 0 && failed != EAGAIN) {
      set_errno(failed);
      return -1;
    }
  }
}

// poll_parked's answer for no wait it cannot answer from epoll's events.
int cannot_fill(std::uint32_t) { return 0; }

// poll(2)'s revents for a socket from the epoll events a harvest reported
// for it, if the caller asked for nothing the netpoller's registration
// does not watch (POLLPRI, the bands): for a socket, POLLIN comes with
// POLLRDNORM and POLLOUT with POLLWRNORM, as the kernel's socket poll
// functions set them. Spares the zero-timeout poll after a wake (cpp-
// httplib's waits for a request and for a backend's answer).
int fill_from_harvest(pollfd* fds, nfds_t count, std::uint32_t harvested) {
  constexpr short watched = POLLIN | POLLRDNORM | POLLOUT | POLLWRNORM | POLLRDHUP;
  short revents = 0;
  if (harvested & EPOLLIN) revents |= POLLIN | POLLRDNORM;
  if (harvested & EPOLLOUT) revents |= POLLOUT | POLLWRNORM;
  if (harvested & EPOLLRDHUP) revents |= POLLRDHUP;
  if (harvested & EPOLLERR) revents |= POLLERR;
  if (harvested & EPOLLHUP) revents |= POLLHUP;
  for (nfds_t i = 0; i < count; ++i) {
    if (fds[i].fd < 0) continue;
    if ((fds[i].events & ~watched) != 0) return 0;
    const FdState* state = fd_state(fds[i].fd);
    if (state == nullptr || state->kind() != FdKind::socket) return 0;
  }
  int ready = 0;
  for (nfds_t i = 0; i < count; ++i) {
    fds[i].revents = fds[i].fd < 0 ? 0 : short(revents & (fds[i].events | POLLERR | POLLHUP));
    if (fds[i].revents != 0) ++ready;
  }
  return ready;
}

int poll_hooked(pollfd* fds, nfds_t count, Clock::time_point deadline, const sigset_t* mask, bool with_mask) {
  auto probe = [&] {
    static const timespec zero{0, 0};
    return with_mask ? real::ppoll()(fds, count, &zero, mask) : real::poll()(fds, count, 0);
  };
  auto fill = [&](std::uint32_t harvested) { return fill_from_harvest(fds, count, harvested); };
  return poll_parked(fds, count, deadline, /*probed=*/count == 0, probe, fill);  // no fds: a sleep, nothing to probe
}

// select's fd sets as pollfds, for wait_for_any.
std::vector<pollfd> as_pollfds(int nfds, const fd_set* r, const fd_set* w, const fd_set* e) {
  std::vector<pollfd> fds;
  for (int fd = 0; fd < nfds && fd < FD_SETSIZE; ++fd) {
    short events = 0;
    if (r && FD_ISSET(fd, r)) events |= POLLIN;
    if (w && FD_ISSET(fd, w)) events |= POLLOUT;
    if (e && FD_ISSET(fd, e)) events |= POLLPRI;
    if (events != 0) fds.push_back({fd, events, 0});
  }
  return fds;
}

int select_hooked(int nfds, fd_set* r, fd_set* w, fd_set* e, Clock::time_point deadline, const sigset_t* mask,
                  bool with_mask) {
  fd_set r0, w0, e0;
  if (r) r0 = *r;
  if (w) w0 = *w;
  if (e) e0 = *e;
  auto probe = [&] {
    if (r) *r = r0;
    if (w) *w = w0;
    if (e) *e = e0;
    timespec zero{0, 0};
    timeval zero_tv{0, 0};
    return with_mask ? real::pselect()(nfds, r, w, e, &zero, mask) : real::select()(nfds, r, w, e, &zero_tv);
  };
  // Probed before the fd sets become pollfds: a ready select allocates
  // nothing.
  const int ready = probe();
  if (ready != 0) return ready;
  const std::vector<pollfd> fds = as_pollfds(nfds, r ? &r0 : nullptr, w ? &w0 : nullptr, e ? &e0 : nullptr);
  return poll_parked(fds.data(), fds.size(), deadline, /*probed=*/true, probe, cannot_fill);
}

// epoll_wait, epoll_pwait and epoll_pwait2: `probe()` is the zero-timeout
// call of the same function.
template <class Probe>
int epoll_hooked(int epfd, Clock::time_point deadline, Probe&& probe) {
  // The first probe returns events, or an error (EBADF, EINVAL) as the
  // kernel gives it.
  const pollfd self{epfd, POLLIN, 0};
  return poll_parked(&self, 1, deadline, /*probed=*/false, probe, cannot_fill);
}

void remaining_into(timeval* timeout, Clock::time_point deadline) {
  // Linux's select leaves the time not slept in *timeout.
  if (timeout == nullptr) return;
  const auto left = std::max(Clock::duration::zero(), deadline - Clock::now());
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(left).count();
  timeout->tv_sec = us / 1'000'000;
  timeout->tv_usec = us % 1'000'000;
}

bool valid(const timespec* ts) {
  return ts == nullptr || (ts->tv_sec >= 0 && ts->tv_nsec >= 0 && ts->tv_nsec < 1'000'000'000);
}

}  // namespace
}  // namespace weft::detail

using namespace weft::detail;

extern "C" {
// libc's names, interposed: exported, unlike the rest of libweft
// (include/weft/detail/visibility.h).
#pragma GCC visibility push(default)

int poll(pollfd* fds, nfds_t count, int timeout_ms) {
  if (!parking_enabled()) return real::poll()(fds, count, timeout_ms);
  const CheckpointOnReturn at_return;
  if (timeout_ms == 0) return real::poll()(fds, count, timeout_ms);
  return poll_hooked(fds, count, deadline_after_ms(timeout_ms), nullptr, false);
}

int ppoll(pollfd* fds, nfds_t count, const timespec* timeout, const sigset_t* mask) {
  if (!parking_enabled()) return real::ppoll()(fds, count, timeout, mask);
  const CheckpointOnReturn at_return;
  if ((timeout != nullptr && timeout->tv_sec == 0 && timeout->tv_nsec == 0) || !valid(timeout))
    return real::ppoll()(fds, count, timeout, mask);
  return poll_hooked(fds, count, deadline_after_timespec(timeout), mask, true);
}

int __poll_chk(pollfd* fds, nfds_t count, int timeout_ms, size_t fds_len) {
  if (fds_len / sizeof(*fds) < count) __chk_fail();
  return poll(fds, count, timeout_ms);
}

int __ppoll_chk(pollfd* fds, nfds_t count, const timespec* timeout, const sigset_t* mask, size_t fds_len) {
  if (fds_len / sizeof(*fds) < count) __chk_fail();
  return ppoll(fds, count, timeout, mask);
}

int select(int nfds, fd_set* r, fd_set* w, fd_set* e, timeval* timeout) {
  if (!parking_enabled()) return real::select()(nfds, r, w, e, timeout);
  const CheckpointOnReturn at_return;
  if ((timeout != nullptr && timeout->tv_sec == 0 && timeout->tv_usec == 0) || nfds < 0 ||
      (timeout != nullptr && (timeout->tv_sec < 0 || timeout->tv_usec < 0)))
    return real::select()(nfds, r, w, e, timeout);
  const Clock::time_point deadline =
      timeout == nullptr
          ? no_deadline
          : (timeout->tv_sec > 1'000'000'000
                 ? no_deadline
                 : deadline_after(std::chrono::seconds(timeout->tv_sec) + std::chrono::microseconds(timeout->tv_usec)));
  const int result = select_hooked(nfds, r, w, e, deadline, nullptr, false);
  remaining_into(timeout, deadline);
  return result;
}

int pselect(int nfds, fd_set* r, fd_set* w, fd_set* e, const timespec* timeout, const sigset_t* mask) {
  if (!parking_enabled()) return real::pselect()(nfds, r, w, e, timeout, mask);
  const CheckpointOnReturn at_return;
  if ((timeout != nullptr && timeout->tv_sec == 0 && timeout->tv_nsec == 0) || nfds < 0 || !valid(timeout))
    return real::pselect()(nfds, r, w, e, timeout, mask);
  return select_hooked(nfds, r, w, e, deadline_after_timespec(timeout), mask, true);
}

int epoll_wait(int epfd, epoll_event* events, int max, int timeout_ms) {
  if (!parking_enabled()) return real::epoll_wait()(epfd, events, max, timeout_ms);
  const CheckpointOnReturn at_return;
  if (timeout_ms == 0) return real::epoll_wait()(epfd, events, max, timeout_ms);
  return epoll_hooked(epfd, deadline_after_ms(timeout_ms), [&] { return real::epoll_wait()(epfd, events, max, 0); });
}

int epoll_pwait(int epfd, epoll_event* events, int max, int timeout_ms, const sigset_t* mask) {
  if (!parking_enabled()) return real::epoll_pwait()(epfd, events, max, timeout_ms, mask);
  const CheckpointOnReturn at_return;
  if (timeout_ms == 0) return real::epoll_pwait()(epfd, events, max, timeout_ms, mask);
  return epoll_hooked(epfd, deadline_after_ms(timeout_ms),
                      [&] { return real::epoll_pwait()(epfd, events, max, 0, mask); });
}

// glibc 2.35's; a null timeout waits forever, as epoll_wait's -1. An
// invalid timespec goes to the kernel, which reports EINVAL.
int epoll_pwait2(int epfd, epoll_event* events, int max, const timespec* timeout, const sigset_t* mask) {
  if (!parking_enabled()) return real::epoll_pwait2()(epfd, events, max, timeout, mask);
  const CheckpointOnReturn at_return;
  if ((timeout != nullptr && timeout->tv_sec == 0 && timeout->tv_nsec == 0) || !valid(timeout))
    return real::epoll_pwait2()(epfd, events, max, timeout, mask);
  return epoll_hooked(epfd, deadline_after_timespec(timeout), [&] {
    static const timespec zero{0, 0};
    return real::epoll_pwait2()(epfd, events, max, &zero, mask);
  });
}

#pragma GCC visibility pop
}  // extern "C"
