// poll, ppoll, select, pselect, epoll_wait, epoll_pwait, epoll_pwait2 (and the fortified
// __poll_chk, __ppoll_chk) in a fiber.
//
// Each first asks the kernel with a zero timeout; when nothing is ready
// and the caller would wait, the fiber parks instead:
//   - on one fd waited for in one direction (hiredis, libpq, libcurl's
//     usual case): on that fd, through the netpoller;
//   - on several fds, or on several events of one: on all of their records
//     at once (wait_fd_set, io/netpoller.h), each fd added to the
//     scheduler's poller once and kept, as a single wait's is: no fd is
//     made per wait (a process out of fds still polls), and no epoll_ctl
//     runs once the fds are known;
//   - on a user's epoll fd: on that epoll fd itself.
// After the wake the zero-timeout call runs again, so the result (revents,
// the fd sets, the events array) is exactly the kernel's. A wake that finds
// nothing (another fiber took it) parks again until the deadline.
// poll/select with no fds are sleeps. A signal mask (ppoll, pselect,
// epoll_pwait, epoll_pwait2) applies to the kernel calls only, not to the
// parked time; a signal it lets in that comes for the process while the
// fiber is parked ends the park (SignalsLetIn), and the probe after it
// takes the signal and returns EINTR, as the call on a thread.
#undef _FORTIFY_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <system_error>
#include <utility>
#include <vector>

#include "announced.h"
#include "fd_table.h"
#include "hook_support.h"
#include "real_calls.h"
#include "user_memory.h"

extern "C" [[noreturn]] void __chk_fail(void);

namespace weft::detail {
namespace {

constexpr short in_events = POLLIN | POLLPRI | POLLRDNORM | POLLRDBAND | POLLRDHUP;
constexpr short out_events = POLLOUT | POLLWRNORM | POLLWRBAND;

Clock::time_point deadline_after_ms(int timeout_ms) {
  return timeout_ms < 0 ? no_deadline : deadline_after(std::chrono::milliseconds(timeout_ms));
}

// A timespec timeout that makes the call libc's own: zero (a poll, which
// never waits) or one the kernel refuses (its EINVAL).
bool zero_or_invalid(const timespec* timeout) noexcept {
  return (timeout != nullptr && timeout->tv_sec == 0 && timeout->tv_nsec == 0) || !valid_timespec(timeout);
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

// Whether `fd` is open, errno untouched.
bool open_now(int fd) noexcept {
  const int saved = errno_value();
  const bool open = real::fcntl()(fd, F_GETFD, nullptr) >= 0;
  set_errno(saved);
  return open;
}

// What a wait on `fds` marks before each probe and waits with: for one fd
// in one direction its fd_wait_mark (the wait may then skip its own level
// check) and its harvested events; for several, an FdSetWait per watched
// fd, marked before each probe (a wait on them has no level check of its
// own: the probe is it).
class PollWait {
 public:
  PollWait(const pollfd* fds, nfds_t count) : watched_(watched_in(fds, count)) {
    if (watched_.entries == 0 || watched_.one_direction()) return;
    for (nfds_t i = 0; i < count; ++i) {
      if (fds[i].fd < 0) continue;
      FdSetWait entry;
      entry.fd = fds[i].fd;
      // Errors and hang-ups are reported whatever was asked: they move the
      // read counter, which a wait for nothing in particular watches.
      entry.write = (fds[i].events & out_events) != 0;
      entry.read = (fds[i].events & in_events) != 0 || !entry.write;
      set_.push_back(entry);
    }
  }

  // Before each probe.
  void mark() noexcept {
    if (watched_.one_direction())
      mark_ = fd_wait_mark(watched_.only->fd, watched_.direction());
    else if (!set_.empty())
      fd_set_mark(set_.data(), set_.size());
  }
  // A probe made before this wait's first mark (select's) leaves the first
  // wait on one fd without a mark: it checks the level itself. A wait on
  // several needs its marks from before a probe: the caller probes again.
  bool needs_probe_after_mark() const noexcept { return !set_.empty(); }
  void forget_mark() noexcept { mark_ = {}; }

  // Parks until one of the fds may be ready, or the deadline: 0 when woken,
  // else an errno (EAGAIN: the deadline passed). `harvested`: for one fd
  // in one direction, the epoll events that woke it (wait_fd), else 0.
  int wait(Clock::time_point deadline, std::uint32_t& harvested) {
    harvested = 0;
    const ParkScope park;
    if (watched_.entries == 0) {
      sleep_parked(deadline);
      return EAGAIN;
    }
    if (watched_.one_direction()) {
      const int fd = watched_.only->fd;
      const int failed = wait_for_fd(fd, watched_.direction(), deadline, &mark_, &harvested);
      // Closed while parked, and the number taken by a new fd since: a
      // wake, after which the probe asks what the number is now, and the
      // wait goes on with it if that is not ready. poll(2) never fails with
      // EBADF (a closed fd is POLLNVAL, which the probe reports while the
      // number stays free), and a thread's poll or select goes on waiting.
      if (failed == EBADF && open_now(fd)) return 0;
      if (failed != EPERM) return failed;
      // An fd epoll refuses (/dev/null; regular files and directories do
      // not come here: watches_what_only_its_thread_sees) is ever as poll(2) reports it: the
      // probe found it not ready for what was asked, and it never will
      // be. A thread waits the timeout out.
      sleep_parked(deadline);
      return EAGAIN;
    }
    try {
      return wait_fd_set(set_.data(), set_.size(), deadline) == FdWaitResult::ready ? 0 : EAGAIN;
    } catch (const std::system_error& error) {
      return error.code().value() != 0 ? error.code().value() : EIO;  // the netpoller refused an fd
    } catch (...) {
      return ENOMEM;  // a record or the nodes could not be allocated
    }
  }

 private:
  Watched watched_;
  FdWaitMark mark_;
  std::vector<FdSetWait> set_;
};

// The signals a wait's `mask` lets in: blocked on the calling thread now,
// and not in the mask. A thread's ppoll, pselect or epoll_pwait ends with
// EINTR when one comes (the idiom that keeps a signal blocked everywhere
// and waits for it with pselect); a parked fiber is not in the kernel, and
// the mask applies to its probes only, so such a signal waited for the
// timeout, or forever. The park watches a signalfd for them as one more
// fd: a signal pending for the process makes it readable, and the probe
// after the wake, with the mask, takes the signal (its handler runs) and
// returns EINTR. The signalfd is never read (that would take the signal).
// A signal sent to the worker's thread alone (pthread_kill) is not seen:
// a signalfd reports the polling thread's signals and the process's. Made
// and closed inside a ParkScope of its own, as every fd a hook makes for a
// park (hook_support.h).
class SignalsLetIn {
 public:
  explicit SignalsLetIn(const sigset_t& opened) : fd_(::signalfd(-1, &opened, SFD_NONBLOCK | SFD_CLOEXEC)) {}
  SignalsLetIn(const SignalsLetIn&) = delete;
  SignalsLetIn& operator=(const SignalsLetIn&) = delete;
  ~SignalsLetIn() {
    if (fd_ < 0) return;
    fd_closing(fd_);  // the park registered it
    fd_forgotten(fd_);
    real::close()(fd_);
  }
  int fd() const noexcept { return fd_; }

  // Whether `mask` lets in a signal the calling thread blocks, and which
  // (`opened`). A mask the kernel cannot read lets in nothing: the probe
  // reports its EFAULT.
  static bool any(const sigset_t* mask, sigset_t& opened) noexcept {
    sigemptyset(&opened);
    if (mask == nullptr || !readable_by_kernel(mask, kKernelSigsetBytes)) return false;
    sigset_t blocked;
    if (pthread_sigmask(SIG_SETMASK, nullptr, &blocked) != 0) return false;
    bool some = false;
    for (int signal = 1; signal < NSIG; ++signal) {
      if (sigismember(&blocked, signal) == 1 && sigismember(mask, signal) == 0) {
        sigaddset(&opened, signal);
        some = true;
      }
    }
    return some;
  }

 private:
  static constexpr std::size_t kKernelSigsetBytes = NSIG / 8;  // what the kernel reads of a sigset_t
  int fd_;
};

// The common loop: `probe()` is the zero-timeout kernel call, made first
// unless the caller's own probe found nothing already (`probed`), and
// after every wake but one that `fill(harvested)` can answer: given the
// epoll events that woke a wait on one fd, it writes the result as the
// kernel would have at the moment the poller harvested them (after the
// wait began) and returns the count, or returns 0 if it cannot say. The
// marks taken before a probe (PollWait) let the wait after it park without
// a level check of its own: the probe was it. A multi-fd wait parks on
// every fd's record at once through the scheduler's poller: no fd is made
// per wait, and the fds stay registered for the next.
//
// `mask`: the call's signal mask, or null: signals it lets in end the park
// (SignalsLetIn).
template <class Probe, class Fill>
int poll_parked(const pollfd* fds, nfds_t count, Clock::time_point deadline, bool probed, const sigset_t* mask,
                Probe&& probe, Fill&& fill) {
  const ErrnoHome home;
  const int saved = errno_value();
  std::optional<ParkScope> around_signals;
  std::optional<SignalsLetIn> signals;
  std::vector<pollfd> with_signals;
  if (sigset_t opened; SignalsLetIn::any(mask, opened)) {
    around_signals.emplace();
    signals.emplace(opened);
    if (signals->fd() >= 0) {
      with_signals.assign(fds, fds + count);
      with_signals.push_back({signals->fd(), POLLIN, 0});
      fds = with_signals.data();
      count = with_signals.size();
    }
  }
  PollWait waiting(fds, count);
  waiting.mark();
  if (!probed || waiting.needs_probe_after_mark()) {
    const int ready = probe();
    if (ready != 0) return ready;
  } else {
    waiting.forget_mark();
  }
  for (;;) {
    std::uint32_t harvested;
    const int failed = waiting.wait(deadline, harvested);
    if (failed == 0 && harvested != 0) {
      if (const int ready = fill(harvested)) {
        set_errno(saved);
        return ready;
      }
    }
    waiting.mark();
    const int ready = probe();
    if (ready > 0) set_errno(saved);  // the park let other fibers of this thread set it
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

// Whether `fds` (readable) watch an fd whose readiness only the caller's
// own call sees (hooks/fd_table.h, readiness_is_the_callers), which a wait
// is then made as (below). Parked on the netpoller, such a wait missed
// events: a procfs file's event went to the scheduler's epoll, and the
// probe after the wake found none (a mount's POLLPRI waited out the
// timeout); a signal sent to the caller's thread alone (pthread_kill) was
// never seen by the netpoller's thread, and the wait lasted its timeout.
bool watches_what_only_its_thread_sees(const pollfd* fds, nfds_t count) noexcept {
  for (nfds_t i = 0; i < count; ++i) {
    if (fds[i].fd < 0) continue;
    const FdRecord* const record = classified_fd_state(fds[i].fd);
    if (record != nullptr && readiness_is_the_callers(*record)) return true;
  }
  return false;
}

// The call itself, with the time left to `deadline` (`call(timeout)`,
// null: none), on this thread, announced as a wait for another party: the
// party is the kernel's event, which may take as long as it likes.
template <class Call>
int waited_as_on_a_thread(Clock::time_point deadline, Call&& call) {
  return announced(
      [&] {
        timespec left = time_left(deadline);
        return call(deadline == no_deadline ? nullptr : &left);
      },
      Sleeps::until_woken);
}

// Whether a failed wait's errno is the netpoller's refusal of an fd rather
// than the call's: an fd in epolls nested too deep with the scheduler's on
// top (ELOOP), or with too many wake-up paths through them (EINVAL: the
// kernel allows 500 at the depth the scheduler's epoll adds, as when one
// eventfd sits in 600 users' epolls), a user out of epoll watches (ENOSPC,
// max_user_watches), no memory for the registration (ENOMEM). A thread's
// call has none of these: it is made, as on a thread. (The call's own
// EINVAL, ENOMEM come from a probe: select's and poll's before the park,
// which returns them; an epoll wait's first probe inside the park, after
// which the call made here gives them again.)
bool refused_by_the_netpoller(int error) noexcept {
  return error == ELOOP || error == EINVAL || error == ENOSPC || error == ENOMEM;
}

// poll_parked, or where the netpoller refused an fd, the call itself
// (`as_on_a_thread`, waited_as_on_a_thread), errno as it was on entry.
template <class Park, class Call>
int parked_or_as_on_a_thread(Clock::time_point deadline, Park&& park, Call&& as_on_a_thread) {
  const int saved = errno_value();
  const int result = park();
  if (result != -1 || !refused_by_the_netpoller(errno_value())) return result;
  set_errno(saved);
  return waited_as_on_a_thread(deadline, as_on_a_thread);
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
    const FdRecord* state = fd_state(fds[i].fd);
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
  // The kernel takes the count as an unsigned int: it never sees the
  // higher bits, and neither does the wait.
  count = static_cast<unsigned int>(count);
  auto probe = [&] {
    static const timespec zero{0, 0};
    return with_mask ? real::ppoll()(fds, count, &zero, mask) : real::poll()(fds, count, 0);
  };
  auto fill = [&](std::uint32_t harvested) { return fill_from_harvest(fds, count, harvested); };
  // An array off the calling stack is probed before this hook reads it:
  // the kernel copies all of it first and refuses one it cannot read
  // whole (EFAULT: null, freed, or running past a mapping), where a read
  // here would die of SIGSEGV. A wait then costs a level check more (its
  // marks come after that probe). One on the stack is read at once, its
  // marks taken before the first probe.
  const auto as_on_a_thread = [&](const timespec* timeout) {
    return real::ppoll()(fds, count, timeout, with_mask ? mask : nullptr);
  };
  if (count != 0 && !on_live_stack(fds, count * sizeof(pollfd))) {
    const int ready = probe();
    if (ready != 0) return ready;
    if (watches_what_only_its_thread_sees(fds, count)) return waited_as_on_a_thread(deadline, as_on_a_thread);
    return parked_or_as_on_a_thread(
        deadline, [&] { return poll_parked(fds, count, deadline, /*probed=*/true, mask, probe, fill); },
        as_on_a_thread);
  }
  if (watches_what_only_its_thread_sees(fds, count)) return waited_as_on_a_thread(deadline, as_on_a_thread);
  // No fds: a sleep, nothing to probe, but for ppoll with a mask (a
  // pending signal it unblocks ends it at once: sigsuspend with a timeout).
  return parked_or_as_on_a_thread(
      deadline,
      [&] { return poll_parked(fds, count, deadline, /*probed=*/count == 0 && mask == nullptr, mask, probe, fill); },
      as_on_a_thread);
}

// The size of the kernel's fd table (its max_fds: /proc/self/status's
// FDSize), or -1 if it cannot be read. The table grows as fds are opened
// and never shrinks: an fd opened under a higher RLIMIT_NOFILE stays in it
// after the limit is lowered.
int fd_table_size() noexcept {
  const int saved = errno_value();
  const int fd = real::open()("/proc/self/status", O_RDONLY | O_CLOEXEC);
  char text[4096];
  ssize_t n = -1;
  if (fd >= 0) {
    n = real::read()(fd, text, sizeof text - 1);
    real::close()(fd);
  }
  set_errno(saved);
  if (n <= 0) return -1;
  text[n] = '\0';
  const char* field = std::strstr(text, "\nFDSize:");
  return field != nullptr ? std::atoi(field + std::strlen("\nFDSize:")) : -1;
}

// select's fd sets hold nfds bits in as many longs as that takes: a
// program may allocate them larger than fd_set (FD_SETSIZE, 1,024 bits),
// and Linux reads all nfds bits (select(2), "BUGS"). Never beyond the
// kernel's fd table, which is all it reads: the soft RLIMIT_NOFILE bounds
// it unless it was lowered after fds were opened above it, when the
// table's size is asked (a bit for such an fd was dropped, and the fd
// never reported).
int select_bits(int nfds) noexcept {
  if (nfds <= FD_SETSIZE) return nfds;
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= rlim_t(nfds)) return nfds;
  const int table = fd_table_size();
  return table > 0 ? std::min(nfds, std::max(table, int(limit.rlim_cur))) : int(limit.rlim_cur);
}

bool in_set(const fd_set* set, int fd) noexcept {
  const auto* words = reinterpret_cast<const __fd_mask*>(set);
  return (words[fd / NFDBITS] & (__fd_mask(1) << (fd % NFDBITS))) != 0;
}

// FD_SET and FD_CLR without their FD_SETSIZE check: the sets may be larger.
void put_in_set(fd_set* set, int fd, bool in) noexcept {
  auto* words = reinterpret_cast<__fd_mask*>(set);
  const __fd_mask bit = __fd_mask(1) << (fd % NFDBITS);
  words[fd / NFDBITS] = in ? words[fd / NFDBITS] | bit : words[fd / NFDBITS] & ~bit;
}

// The bytes of one of select's fd sets of `bits` bits.
std::size_t fd_set_bytes(int bits) noexcept { return std::size_t((bits + NFDBITS - 1) / NFDBITS) * sizeof(__fd_mask); }

// A copy of one of select's fd sets, of the caller's size: on the stack
// up to FD_SETSIZE bits, else on the heap.
class FdSetCopy {
 public:
  FdSetCopy(const fd_set* set, int bits) : bytes_(set != nullptr ? fd_set_bytes(bits) : 0) {
    if (bytes_ > sizeof(small_)) large_.resize(bytes_ / sizeof(__fd_mask));
    if (bytes_ != 0) std::memcpy(data(), set, bytes_);
  }
  // Puts the copy back into `set` (select overwrites its sets).
  void restore(fd_set* set) const noexcept {
    if (bytes_ != 0) std::memcpy(set, data(), bytes_);
  }
  const fd_set* get() const noexcept { return bytes_ != 0 ? static_cast<const fd_set*>(data()) : nullptr; }

 private:
  const void* data() const noexcept { return large_.empty() ? static_cast<const void*>(&small_) : large_.data(); }
  void* data() noexcept { return large_.empty() ? static_cast<void*>(&small_) : large_.data(); }

  std::size_t bytes_;
  fd_set small_;
  std::vector<__fd_mask> large_;
};

// select's fd sets as pollfds, for poll_parked.
std::vector<pollfd> as_pollfds(int bits, const fd_set* r, const fd_set* w, const fd_set* e) {
  std::vector<pollfd> fds;
  for (int fd = 0; fd < bits; ++fd) {
    short events = 0;
    if (r && in_set(r, fd)) events |= POLLIN;
    if (w && in_set(w, fd)) events |= POLLOUT;
    if (e && in_set(e, fd)) events |= POLLPRI;
    if (events != 0) fds.push_back({fd, events, 0});
  }
  return fds;
}

int select_hooked(int nfds, fd_set* r, fd_set* w, fd_set* e, Clock::time_point deadline, const sigset_t* mask,
                  bool with_mask) {
  const int bits = select_bits(nfds);
  const std::size_t set_bytes = fd_set_bytes(bits);
  for (const fd_set* set : {r, w, e}) {
    // Known readable before the copy: a select that finds nothing clears
    // the sets it was given, so the first probe cannot be the check.
    if (set != nullptr && !readable_by_kernel(set, set_bytes)) {
      set_errno(EFAULT);
      return -1;
    }
  }
  const FdSetCopy r0(r, bits), w0(w, bits), e0(e, bits);
  int last_probe = 0;
  auto restore_and_probe = [&](auto&& before) {
    r0.restore(r);
    w0.restore(w);
    e0.restore(e);
    before();
    timespec zero{0, 0};
    timeval zero_tv{0, 0};
    last_probe = with_mask ? real::pselect()(nfds, r, w, e, &zero, mask) : real::select()(nfds, r, w, e, &zero_tv);
    return last_probe;
  };
  auto probe = [&] { return restore_and_probe([] {}); };
  // Probed before the fd sets become pollfds: a ready select allocates
  // nothing.
  if (probe() != 0) return last_probe;
  std::vector<pollfd> fds = as_pollfds(bits, r0.get(), w0.get(), e0.get());
  const auto as_on_a_thread = [&](const timespec* timeout) {
    r0.restore(r);
    w0.restore(w);
    e0.restore(e);
    return real::pselect()(nfds, r, w, e, timeout, with_mask ? mask : nullptr);
  };
  if (watches_what_only_its_thread_sees(fds.data(), fds.size())) return waited_as_on_a_thread(deadline, as_on_a_thread);
  // Fds closed while the fiber waited (their numbers not taken since),
  // which fail the probe with EBADF: a thread's select finds no file behind
  // such an fd when it next wakes and reports it ready in each set that
  // asked for it (the kernel's EPOLLNVAL counts in all three); the rest as
  // they are. Returned at once: the close woke the fiber (fd_closing).
  auto select_with_closed = [&](auto closed, auto end) {
    int ready = restore_and_probe([&] {
      for (auto p = closed; p != end; ++p)
        for (fd_set* set : {r, w, e})
          if (set != nullptr) put_in_set(set, p->fd, false);
    });
    if (ready < 0) return ready;
    for (auto p = closed; p != end; ++p) {
      for (const auto& [set, asked] : {std::pair{r, r0.get()}, std::pair{w, w0.get()}, std::pair{e, e0.get()}}) {
        if (set == nullptr || !in_set(asked, p->fd)) continue;
        put_in_set(set, p->fd, true);
        ++ready;
      }
    }
    return ready;
  };
  const int saved = errno_value();
  for (;;) {
    const int result = parked_or_as_on_a_thread(
        deadline,
        [&] {
          return poll_parked(fds.data(), fds.size(), deadline, /*probed=*/true, with_mask ? mask : nullptr, probe,
                             cannot_fill);
        },
        as_on_a_thread);
    // EBADF from the park where select's own probe, made after it, found
    // every fd good: an fd past the end of the kernel's fd table, whose bit
    // select ignores (core_sys_select stops at the table's size). Waited
    // for without it. EBADF from the probe: fds closed meanwhile.
    if (result != -1 || errno_value() != EBADF) return result;
    const auto closed_from = std::partition(fds.begin(), fds.end(), [](const pollfd& p) { return open_now(p.fd); });
    if (closed_from == fds.end()) return result;
    set_errno(saved);
    if (last_probe != 0) return select_with_closed(closed_from, fds.end());
    fds.erase(closed_from, fds.end());
  }
}

// epoll_wait, epoll_pwait and epoll_pwait2: `probe()` is the zero-timeout
// call of the same function. With a zero timeout the kernel reports no
// signal (ep_poll returns 0 before it looks), where a waiting call with a
// `mask` ends with EINTR on a pending signal the mask unblocks, after its
// handler ran: a probe that finds no events asks ppoll, with the mask, for
// that.
//
// An epoll fd closed while the fiber waits: a thread's call waits on in the
// epoll it took at its start, which weft cannot hold; the wait ends with
// EBADF instead, and never asks a new fd that took the number (another
// loop's epoll, whose events' data would be that loop's pointers). Told by
// the fd record's generation, which every close and new fd moves.
template <class Probe, class Call>
int epoll_hooked(int epfd, Clock::time_point deadline, const sigset_t* mask, Probe&& probe, Call&& as_on_a_thread) {
  // The first probe returns events, or an error (EBADF, EINVAL) as the
  // kernel gives it.
  const pollfd self{epfd, POLLIN, 0};
  if (watches_what_only_its_thread_sees(&self, 1)) return waited_as_on_a_thread(deadline, as_on_a_thread);
  const FdRecord* const record = fd_state(epfd);
  const std::uint32_t generation = record != nullptr ? record->generation.load(std::memory_order_acquire) : 0;
  auto probe_and_signals = [&] {
    if (record != nullptr && record->generation.load(std::memory_order_acquire) != generation) {
      set_errno(EBADF);
      return -1;
    }
    const int ready = probe();
    if (ready != 0 || mask == nullptr) return ready;
    static const timespec zero{0, 0};
    return real::ppoll()(nullptr, 0, &zero, mask);  // -1 EINTR on such a signal, else 0
  };
  return parked_or_as_on_a_thread(
      deadline, [&] { return poll_parked(&self, 1, deadline, /*probed=*/false, mask, probe_and_signals, cannot_fill); },
      as_on_a_thread);
}

// A timeout as epoll_wait's milliseconds (null: -1, none), rounded up, as
// the kernel rounds a sleep.
int ms_of(const timespec* timeout) noexcept {
  if (timeout == nullptr) return -1;
  const std::int64_t ms = std::int64_t(timeout->tv_sec) * 1'000 + (timeout->tv_nsec + 999'999) / 1'000'000;
  return int(std::min<std::int64_t>(ms, std::numeric_limits<int>::max()));
}

// select's timeval as glibc reads it (sysdeps/unix/sysv/linux/select.c):
// tv_usec as an int32_t, its whole seconds carried into tv_sec, saturating.
// False for a negative part, which glibc refuses (EINVAL).
bool select_timeout(const timeval& timeout, timespec& asked) noexcept {
  const std::int64_t sec = timeout.tv_sec;
  const auto usec = static_cast<std::int32_t>(timeout.tv_usec);
  if (sec < 0 || usec < 0) return false;
  if (usec / 1'000'000 > INT64_MAX - sec)
    asked = {INT64_MAX, 999'999'999};
  else
    asked = {sec + usec / 1'000'000, (usec % 1'000'000) * 1'000L};
  return true;
}

// Linux's select leaves the time not slept in *timeout: the call's end
// (the monotonic time at its start plus what was asked, saturated at the
// largest time, {INT64_MAX, 0}, as timespec64_add_safe does for a
// program's "forever") less the time at its return, never below zero.
void remaining_into(timeval& timeout, const timespec& asked, Clock::time_point start, Clock::time_point end_of_call) {
  constexpr std::int64_t kSecond = 1'000'000'000;
  const auto ns = [](Clock::time_point at) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(at.time_since_epoch()).count();
  };
  const std::int64_t from = ns(start);
  std::int64_t end_sec = 0;
  std::int64_t end_nsec = from % kSecond + asked.tv_nsec;
  if (__builtin_add_overflow(from / kSecond, asked.tv_sec, &end_sec) ||
      __builtin_add_overflow(end_sec, end_nsec / kSecond, &end_sec)) {
    end_sec = INT64_MAX;
    end_nsec = 0;
  }
  end_nsec %= kSecond;
  const std::int64_t now = ns(end_of_call);
  std::int64_t sec = end_sec - now / kSecond;
  std::int64_t nsec = end_nsec - now % kSecond;
  if (nsec < 0) {
    nsec += 1'000'000'000;
    --sec;
  }
  if (sec < 0) sec = nsec = 0;
  timeout.tv_sec = sec;
  timeout.tv_usec = nsec / 1'000;
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
  if (zero_or_invalid(timeout)) return real::ppoll()(fds, count, timeout, mask);
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
  timespec asked{};
  if (nfds < 0 ||
      (timeout != nullptr && (!select_timeout(*timeout, asked) || (asked.tv_sec == 0 && asked.tv_nsec == 0))))
    return real::select()(nfds, r, w, e, timeout);
  const Clock::time_point start = Clock::now();
  const int result =
      select_hooked(nfds, r, w, e, deadline_after_timespec(timeout != nullptr ? &asked : nullptr), nullptr, false);
  if (timeout != nullptr) remaining_into(*timeout, asked, start, Clock::now());
  return result;
}

int pselect(int nfds, fd_set* r, fd_set* w, fd_set* e, const timespec* timeout, const sigset_t* mask) {
  if (!parking_enabled()) return real::pselect()(nfds, r, w, e, timeout, mask);
  const CheckpointOnReturn at_return;
  if (zero_or_invalid(timeout) || nfds < 0) return real::pselect()(nfds, r, w, e, timeout, mask);
  return select_hooked(nfds, r, w, e, deadline_after_timespec(timeout), mask, true);
}

int epoll_wait(int epfd, epoll_event* events, int max, int timeout_ms) {
  if (!parking_enabled()) return real::epoll_wait()(epfd, events, max, timeout_ms);
  const CheckpointOnReturn at_return;
  if (timeout_ms == 0) return real::epoll_wait()(epfd, events, max, timeout_ms);
  return epoll_hooked(
      epfd, deadline_after_ms(timeout_ms), nullptr, [&] { return real::epoll_wait()(epfd, events, max, 0); },
      [&](const timespec* left) { return real::epoll_wait()(epfd, events, max, ms_of(left)); });
}

int epoll_pwait(int epfd, epoll_event* events, int max, int timeout_ms, const sigset_t* mask) {
  if (!parking_enabled()) return real::epoll_pwait()(epfd, events, max, timeout_ms, mask);
  const CheckpointOnReturn at_return;
  if (timeout_ms == 0) return real::epoll_pwait()(epfd, events, max, timeout_ms, mask);
  return epoll_hooked(
      epfd, deadline_after_ms(timeout_ms), mask, [&] { return real::epoll_pwait()(epfd, events, max, 0, mask); },
      [&](const timespec* left) { return real::epoll_pwait()(epfd, events, max, ms_of(left), mask); });
}

// glibc 2.35's; a null timeout waits forever, as epoll_wait's -1. An
// invalid timespec goes to the kernel, which reports EINVAL.
int epoll_pwait2(int epfd, epoll_event* events, int max, const timespec* timeout, const sigset_t* mask) {
  if (!parking_enabled()) return real::epoll_pwait2()(epfd, events, max, timeout, mask);
  const CheckpointOnReturn at_return;
  // Unlike ppoll's and pselect's, glibc's wrapper passes the timeout to the
  // kernel unread: one it cannot read is the kernel's EFAULT.
  if ((timeout != nullptr && !readable_by_kernel(timeout)) || zero_or_invalid(timeout))
    return real::epoll_pwait2()(epfd, events, max, timeout, mask);
  return epoll_hooked(
      epfd, deadline_after_timespec(timeout), mask,
      [&] {
        static const timespec zero{0, 0};
        return real::epoll_pwait2()(epfd, events, max, &zero, mask);
      },
      [&](const timespec* left) { return real::epoll_pwait2()(epfd, events, max, left, mask); });
}

#pragma GCC visibility pop
}  // extern "C"
