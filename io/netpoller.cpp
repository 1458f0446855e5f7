#include "netpoller.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <weft/detail/park.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <mutex>
#include <string>
#include <system_error>
#include <type_traits>

#include "../runtime/system_calls.h"
#include "../sched/current.h"
#include "../sched/scheduler_core.h"
#include "fd_records.h"

namespace weft::detail {
namespace {

constexpr std::uint64_t kWakeTag = ~std::uint64_t{0};  // the eventfd's epoll data
constexpr std::uint64_t kClosedMark = 1;               // Waiter::amount of a waiter fd_closing() woke
constexpr int kEventBatch = 128;

constexpr std::uint32_t kReadEvents = EPOLLIN | EPOLLPRI | EPOLLRDHUP | EPOLLHUP | EPOLLERR;
constexpr std::uint32_t kWriteEvents = EPOLLOUT | EPOLLHUP | EPOLLERR;

int index_of(FdDirection direction) noexcept { return direction == FdDirection::read ? 0 : 1; }
const char* operation_of(FdDirection direction) noexcept {
  return direction == FdDirection::read ? "readable" : "writable";
}

std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// A fiber's drain note ("Drain notes" in netpoller.h), in its
// FiberControl::upper_slot. All zero, as a fiber starts: none (poll
// sequences start at 1).
struct DrainNote {
  std::uint64_t sequence = 0;
  std::uint32_t events = 0;
  int fd = 0;
};
static_assert(sizeof(DrainNote) <= sizeof(FiberControl::upper_slot));
static_assert(std::is_trivially_copyable_v<DrainNote>);

DrainNote drain_note_of(const FiberControl& fiber) noexcept {
  DrainNote note;
  std::memcpy(&note, fiber.upper_slot, sizeof(note));
  return note;
}
void set_drain_note(FiberControl& fiber, const DrainNote& note) noexcept {
  std::memcpy(fiber.upper_slot, &note, sizeof(note));
}

[[noreturn]] void throw_fd_error(int error, int fd, const char* what) {
  throw std::system_error(error, std::generic_category(), "weft: fd " + std::to_string(fd) + " " + what);
}

// poll(2) once on `fd` for `direction`: whether it is ready (an error or
// hang-up counts). Throws EBADF if the fd is not open.
bool poll_ready(int fd, FdDirection direction, int timeout_ms) {
  pollfd entry{fd, static_cast<short>(direction == FdDirection::read ? POLLIN : POLLOUT), 0};
  const short ready = static_cast<short>(
      direction == FdDirection::read ? POLLIN | POLLPRI | POLLRDHUP | POLLERR | POLLHUP : POLLOUT | POLLERR | POLLHUP);
  for (;;) {
    // Not the hook: a hooked call is a checkpoint (hooks/hook_support.h),
    // and this one is weft's own, inside a wait.
    const int n = sys::poll(&entry, 1, timeout_ms);
    if (n < 0) {
      if (errno == EINTR && timeout_ms == 0) continue;
      if (errno == EINTR) return false;  // the caller recomputes its timeout
      throw_fd_error(errno, fd, "could not be polled");
    }
    if (n == 0) return false;
    if ((entry.revents & POLLNVAL) != 0) throw_fd_error(EBADF, fd, "is not open");
    return (entry.revents & ready) != 0;
  }
}

// Before a parked fiber is readied (its context is still saved, and stays
// so until unpark): the top of its stack, which its resumption reads first
// (the saved registers, then the frames of its park), is most likely cold
// with many connections, and this worker usually runs it next.
void prefetch_resume(const FiberControl& fiber) noexcept {
  const char* top = static_cast<const char*>(static_cast<const void*>(fiber.context.saved));
  for (int line = 0; line < 8; ++line) __builtin_prefetch(top + 64 * line);
}

// poll(2) timeout until `deadline`, rounded up; -1 for none.
int timeout_ms_until(Clock::time_point deadline) noexcept {
  if (deadline == no_deadline) return -1;
  const auto now = Clock::now();
  if (deadline <= now) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
  return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

FdWaitResult wait_fd_on_thread(int fd, FdDirection direction, Clock::time_point deadline) {
  for (;;) {
    const int timeout = timeout_ms_until(deadline);
    if (poll_ready(fd, direction, timeout)) return FdWaitResult::ready;
    if (timeout == 0 || (deadline != no_deadline && Clock::now() >= deadline)) return FdWaitResult::timed_out;
    // EINTR, or poll's clock ran ahead of steady_clock: wait the rest.
  }
}

// Every live poller, for fd_closing() to delete an fd from. Constant-
// initialized and trivially destructible, for the same reasons as the fd
// records; a poller leaves the list before it closes its epoll fd.
constinit std::mutex pollers_lock;
constinit Poller* pollers_head = nullptr;
constinit std::atomic<std::uint64_t> next_poller_id{1};

}  // namespace

// --- Poller ----------------------------------------------------------------

Poller::Poller(SchedulerCore& core) : core_(core), id_(next_poller_id.fetch_add(1, std::memory_order_relaxed)) {
  epoll_fd_ = sys::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) throw std::system_error(errno, std::generic_category(), "weft: epoll_create1");
  event_fd_ = sys::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (event_fd_ < 0) {
    const int error = errno;
    sys::close(epoll_fd_);
    throw std::system_error(error, std::generic_category(), "weft: eventfd");
  }
  // Level-triggered, unlike the fds: a wake that no blocking poll has
  // drained yet stays visible (see drain_wake()).
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = kWakeTag;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, event_fd_, &event) != 0) {
    const int error = errno;
    sys::close(event_fd_);
    sys::close(epoll_fd_);
    throw std::system_error(error, std::generic_category(), "weft: epoll_ctl(eventfd)");
  }
  last_poll_ns_.store(now_ns(), std::memory_order_relaxed);
  std::lock_guard guard(pollers_lock);
  next_ = pollers_head;
  pollers_head = this;
}

Poller::~Poller() {
  {
    std::lock_guard guard(pollers_lock);
    for (Poller** link = &pollers_head; *link != nullptr; link = &(*link)->next_) {
      if (*link == this) {
        *link = next_;
        break;
      }
    }
  }
  sys::close(event_fd_);
  sys::close(epoll_fd_);
}

void Poller::add_locked(FdRecord& record, int fd) {
  if (record.poller_id == id_) return;
  epoll_event event{};
  event.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  event.data.u64 = (std::uint64_t{record.generation} << 32) | static_cast<std::uint32_t>(fd);
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) {
    // Another scheduler's poller owns the record, and this one added the
    // fd before: it is still there (the record cannot say so).
    if (errno == EEXIST && record.poller_id != 0) return;
    const int error = errno;
    record.lock.unlock();
    throw_fd_error(error, fd, error == EPERM ? "cannot be polled (epoll_ctl)" : "could not be added to epoll");
  }
  if (record.poller_id == 0) {
    record.poller_id = id_;
  } else {
    record.in_other_pollers = true;
  }
  registered_.fetch_add(1, std::memory_order_relaxed);
}

void Poller::remove(int fd, std::uint64_t owner, bool others) noexcept {
  std::lock_guard guard(pollers_lock);
  for (Poller* poller = pollers_head; poller != nullptr; poller = poller->next_) {
    if (poller->id_ != owner && !others) continue;
    // ENOENT when only another poller had it, or when the kernel dropped it
    // already (the last reference closed behind weft's back): both fine.
    if (::epoll_ctl(poller->epoll_fd_, EPOLL_CTL_DEL, fd, nullptr) == 0)
      poller->registered_.fetch_sub(1, std::memory_order_relaxed);
  }
}

bool Poller::poll(bool blocking, Clock::time_point until) noexcept {
  epoll_event events[kEventBatch];
  // Before the call: every readiness it reports was seen by the kernel
  // after this increment (wait_fd's step 5 depends on it).
  const std::uint64_t sequence = poll_sequence_.fetch_add(1, std::memory_order_seq_cst) + 1;
  int n;
  if (!blocking) {
    n = sys::epoll_wait(epoll_fd_, events, kEventBatch, 0);
  } else if (until == Clock::time_point::max()) {
    n = sys::epoll_wait(epoll_fd_, events, kEventBatch, -1);
  } else {
    // To the nanosecond: epoll_wait's milliseconds would make a timer up
    // to 1 ms late. steady_clock is CLOCK_MONOTONIC, the clock of
    // epoll_pwait2's relative timeout.
    const auto left = std::max(until - Clock::now(), Clock::duration::zero());
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    const timespec timeout{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
    n = sys::epoll_pwait2(epoll_fd_, events, kEventBatch, &timeout);
    if (n < 0 && errno == ENOSYS) {  // before Linux 5.11: whole milliseconds, rounded up
      const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
      n = sys::epoll_wait(epoll_fd_, events, kEventBatch, ms > INT_MAX ? INT_MAX : static_cast<int>(ms));
    }
  }
  last_poll_ns_.store(now_ns(), std::memory_order_relaxed);
  polls_.fetch_add(1, std::memory_order_relaxed);
  // With many connections the records are cold: ask for all of them
  // before the first is locked, so that their misses overlap.
  FdRecord* records[kEventBatch];
  for (int i = 0; i < n; ++i) {
    const std::uint64_t data = events[i].data.u64;
    records[i] = data == kWakeTag ? nullptr : fd_records().find(static_cast<int>(data & 0xffffffffu));
    if (records[i] != nullptr) __builtin_prefetch(records[i], 1);
  }
  bool readied = false;
  for (int i = 0; i < n; ++i) {
    const std::uint64_t data = events[i].data.u64;
    if (data == kWakeTag) {
      // Only a blocking poll consumes a wake: a non-blocking one that took
      // it would leave the blocker asleep.
      if (blocking) drain_wake();
      continue;
    }
    FdRecord* record = records[i];
    if (record == nullptr) continue;
    bool woke = false;
    record->lock.lock();
    if (record->generation == static_cast<std::uint32_t>(data >> 32)) {
      const std::uint32_t mask = events[i].events;
      // Before the counters' release below, which a drain note's mark reads.
      if ((mask & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) record->hung_up.store(true, std::memory_order_relaxed);
      for (int d = 0; d < 2; ++d) {
        if ((mask & (d == 0 ? kReadEvents : kWriteEvents)) == 0) continue;
        // Under the lock: a waiter compares the counter under it before it
        // parks, so it either sees this edge or is in the list below.
        record->events[d].store(record->events[d].load(std::memory_order_relaxed) + 1, std::memory_order_release);
        // Unparked under the lock, as wake_all does: a waiter that timed
        // out takes the lock to unlink itself, so its frame outlives this.
        // A waiter's payload is its own poller: only that one's sequence
        // numbers mean anything to it.
        while (Waiter* waiter = record->waiters[d].pop_front()) {
          waiter->amount = waiter->payload == this ? sequence : 0;
          waiter->events = mask;
          if (waiter->fiber != nullptr) prefetch_resume(*waiter->fiber);
          woke |= unpark(*waiter);
        }
      }
    }
    record->lock.unlock();
    events_.fetch_add(1, std::memory_order_relaxed);
    readied |= woke;
  }
  return readied;
}

void Poller::drain_wake() noexcept {
  // Read, then clear. Clearing first lost wake-ups: a wake() between the
  // clear and the read set the flag again and its write was consumed by
  // the read, so the flag stayed set with the eventfd empty and every
  // later wake() was skipped while the blocker slept (a fiber readied by a
  // plain thread waited for the blocker's timeout). Now a wake() before
  // the read is drained by it; one between the read and the clear is
  // skipped, which is harmless, since the blocker is awake and re-checks
  // every queue and the timers before it blocks again; one after the
  // clear writes again and the next epoll_wait returns at once. At most
  // one write is in flight.
  std::uint64_t count;
  while (sys::read(event_fd_, &count, sizeof(count)) < 0 && errno == EINTR) {
  }
  wake_pending_.store(false, std::memory_order_seq_cst);
}

bool Poller::poll_now() noexcept {
  // Nobody else polls meanwhile: the blocker sees every event, and two
  // pollers would only contend in the kernel (Go's sched.pollingNet).
  if (blocker_.load(std::memory_order_relaxed) >= 0) return false;
  if (polling_.exchange(true, std::memory_order_acquire)) return false;
  const bool readied = poll(false);
  polling_.store(false, std::memory_order_release);
  return readied;
}

void Poller::poll_if_stale(std::chrono::nanoseconds stale_after) noexcept {
  if (!has_waiters() || blocker_.load(std::memory_order_relaxed) >= 0) return;
  if (now_ns() - last_poll_ns_.load(std::memory_order_relaxed) < stale_after.count()) return;
  if (poll_now()) stale_polls_.fetch_add(1, std::memory_order_relaxed);
}

bool Poller::try_begin_block(unsigned worker) noexcept {
  int none = -1;
  return blocker_.compare_exchange_strong(none, static_cast<int>(worker), std::memory_order_acq_rel);
}

void Poller::block(Clock::time_point until) noexcept { poll(true, until); }

void Poller::end_block() noexcept { blocker_.store(-1, std::memory_order_release); }

void Poller::wake() noexcept {
  if (wake_pending_.exchange(true, std::memory_order_seq_cst)) return;  // one in flight already
  wakeups_.fetch_add(1, std::memory_order_relaxed);
  const std::uint64_t one = 1;
  // The real write, not the hook, which is a checkpoint: wake() runs
  // wherever a fiber is readied, a waker's SpinLock held (detail/park.h).
  while (sys::write(event_fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}

PollerSnapshot Poller::view() const noexcept {
  PollerSnapshot view;
  view.blocker = blocker_.load(std::memory_order_relaxed);
  view.fds_registered =
      static_cast<std::uint64_t>(std::max<std::int64_t>(0, registered_.load(std::memory_order_relaxed)));
  view.io_waiters = static_cast<std::uint64_t>(std::max<std::int64_t>(0, waiters_.load(std::memory_order_relaxed)));
  view.polls = polls_.load(std::memory_order_relaxed);
  view.events = events_.load(std::memory_order_relaxed);
  view.sysmon_polls = stale_polls_.load(std::memory_order_relaxed);
  view.wakeups = wakeups_.load(std::memory_order_relaxed);
  view.since_poll_ms = static_cast<double>(now_ns() - last_poll_ns_.load(std::memory_order_relaxed)) / 1e6;
  if (view.blocker >= 0) view.since_poll_ms = 0;  // it is polling right now
  return view;
}

std::unique_ptr<IdlePoller> make_idle_poller(SchedulerCore& core) { return std::make_unique<Poller>(core); }

// --- waiting and closing -----------------------------------------------------

FdWaitMark fd_wait_mark(int fd, FdDirection direction) noexcept {
  if (fd < 0 || fd >= FdRecords::kLimit) return {};
  FiberControl* self = current_fiber();
  if (self == nullptr) return {};
  const FdRecord* record = fd_records().find(fd);
  if (record == nullptr) return {};
  auto& poller = static_cast<Poller&>(self->scheduler->poller());
  // In wait_fd's order: the sequence first (step 5 compares with it).
  const std::uint64_t sequence = poller.poll_sequence();
  return {sequence, record->events[index_of(direction)].load(std::memory_order_acquire), true};
}

void fd_note_drained(int fd, const FdWaitMark& before, bool short_read) noexcept {
  if (!before.valid) return;
  FiberControl* self = current_fiber();  // a valid mark was taken in this fiber
  const FdRecord* record = fd_records().find(fd);
  // Acquire: a hang-up harvested before `before` was taken is seen here.
  if (short_read && record->hung_up.load(std::memory_order_acquire)) return;
  auto& poller = static_cast<Poller&>(self->scheduler->poller());
  set_drain_note(*self, {poller.poll_sequence(), before.events, fd});
}

bool take_drain_note(int fd, FdWaitMark& mark) noexcept {
  FiberControl* self = current_fiber();
  if (self == nullptr) return false;
  const DrainNote note = drain_note_of(*self);
  if (note.sequence == 0 || note.fd != fd) return false;
  mark = {note.sequence, note.events, true};
  set_drain_note(*self, {});
  return true;
}

FdWaitResult wait_fd(int fd, FdDirection direction, Clock::time_point deadline, const FdWaitMark* mark,
                     std::uint32_t* harvested) {
  if (harvested != nullptr) *harvested = 0;
  if (fd < 0) throw_fd_error(EBADF, fd, "is not a file descriptor");
  FiberControl* self = current_fiber();
  if (self == nullptr) return wait_fd_on_thread(fd, direction, deadline);
  if (fd >= FdRecords::kLimit) throw_fd_error(EBADF, fd, "is beyond weft's fd table (2^24 fds)");

  FdRecord& record = fd_records().get(fd);
  const int d = index_of(direction);
  auto& poller = static_cast<Poller&>(self->scheduler->poller());
  const WaitSite site{kFdWaitKind, reinterpret_cast<const void*>(static_cast<std::uintptr_t>(fd)),
                      operation_of(direction)};
  // The protocol of io/netpoller.h, "Waiting": counter, level check,
  // registration, then compare and park. An edge is only a hint (it may be
  // one the caller consumed already), so every wake is checked with poll
  // again, and a stale one parks again: true means the fd was ready.
  FdWaitMark noted;
  if (mark == nullptr && direction == FdDirection::read && take_drain_note(fd, noted)) mark = &noted;
  bool from_mark = mark != nullptr && mark->valid;
  for (;;) {
    std::uint64_t began;
    std::uint32_t seen;
    if (from_mark) {  // steps 1 and 2 were the caller's, before its call
      began = mark->sequence;
      seen = mark->events;
      from_mark = false;
    } else {
      began = poller.poll_sequence();
      seen = record.events[d].load(std::memory_order_acquire);
      if (poll_ready(fd, direction, 0)) return FdWaitResult::ready;
    }
    if (deadline != no_deadline && Clock::now() >= deadline) return FdWaitResult::timed_out;
    record.lock.lock();
    poller.add_locked(record, fd);  // unlocks before it throws
    if (record.events[d].load(std::memory_order_relaxed) != seen) {
      record.lock.unlock();
      continue;
    }
    Waiter waiter;
    waiter.payload = &poller;
    poller.waiter_parking();
    const bool woken = wait_in(record.waiters[d], record.lock, waiter, site, deadline);
    poller.waiter_back();
    if (!woken) return FdWaitResult::timed_out;
    if (waiter.amount == kClosedMark) return FdWaitResult::closed;
    if (waiter.amount > began) {  // step 5: seen ready after step 1
      if (harvested != nullptr) *harvested = waiter.events;
      return FdWaitResult::ready;
    }
  }
}

void fd_closing(int fd) noexcept {
  FdRecord* record = fd_records().find(fd);
  if (record == nullptr) return;
  record->lock.lock();
  // A new fd with this number must not get this one's events.
  ++record->generation;
  record->hung_up.store(false, std::memory_order_relaxed);
  const std::uint64_t owner = record->poller_id;
  const bool others = record->in_other_pollers;
  record->poller_id = 0;
  record->in_other_pollers = false;
  for (int d = 0; d < 2; ++d) {
    // A waiter between its counter read and its park sees the change and
    // returns ready; its retry then meets the closed fd.
    record->events[d].store(record->events[d].load(std::memory_order_relaxed) + 1, std::memory_order_release);
    while (Waiter* waiter = record->waiters[d].pop_front()) {
      waiter->amount = kClosedMark;
      unpark(*waiter);
    }
  }
  record->lock.unlock();
  // Before the real close, so the kernel's registration (keyed by the file
  // and the number) cannot outlive the number's reuse through a dup.
  if (owner != 0 || others) Poller::remove(fd, owner, others);
}

}  // namespace weft::detail
