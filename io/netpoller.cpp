#include "netpoller.h"

#include <poll.h>
#include <pthread.h>
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
#include <vector>

#include "../runtime/system_calls.h"
#include "../sched/current.h"
#include "../sched/raw_lock.h"
#include "../sched/scheduler_core.h"
#include "../sched/trace.h"
#include "fd_records.h"

namespace weft::detail {
namespace {

constexpr std::uint64_t kWakeTag = ~std::uint64_t{0};      // the eventfd's epoll data
constexpr std::uint64_t kClosedMark = 1;                   // Waiter::amount of a waiter fd_closing() woke
constexpr std::uint64_t kSetNodeMark = ~std::uint64_t{1};  // Waiter::amount of a wait_fd_set node, until woken
// Waiter::amount of a waiter fd_wake_waiters() woke: after any poll's sequence, so ready.
constexpr std::uint64_t kWokenForACall = ~std::uint64_t{2};
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

// A fiber's wait on several fds (wait_fd_set): one parked Waiter, and per
// fd and direction a node in the fd record's waiter list (amount
// kSetNodeMark, payload this group). A poller or fd_closing that pops a
// node, under that record's lock, calls wake(): under the group's lock it
// marks the group fired and unparks the fiber if it has parked. The fiber
// links every node, then takes the group's lock and parks with it unless
// fired (park releases it once the fiber is off its worker), so a node
// woken between its link and the park is never lost, and the fiber is
// never readied while it still runs. Lock order: a record's, then the
// group's; the fiber never holds the group's while it takes a record's.
struct FdSetWaitGroup {
  SpinLock lock;
  bool fired = false;   // a node was woken
  bool parked = false;  // the fiber parks (or has), with `lock` held until it is off its worker
  Waiter waiter;

  static bool wake(Waiter& node) noexcept {
    auto& group = *static_cast<FdSetWaitGroup*>(node.payload);
    group.lock.lock();
    const bool first = !group.fired;
    group.fired = true;
    const bool woke = first && group.parked && unpark(group.waiter);
    group.lock.unlock();
    return woke;
  }
};

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
constinit RawMutex pollers_lock;
constinit Poller* pollers_head = nullptr;
constinit std::atomic<std::uint64_t> next_poller_id{1};

// The child of a fork shares its parent's epoll instances (the fds are
// inherited) but not its threads: the child's closes must not delete the
// parent's registrations (a pre-fork server's children would unregister
// its listener), and nothing the parent's threads held locked may stay
// so. So the child starts with no pollers and every fd record reset
// (FdRecord::reset_in_forked_child); its own schedulers make pollers of
// their own. Registered at load, before any thread can fork.
void forget_the_parents_pollers() noexcept {
  new (&pollers_lock) RawMutex;
  pollers_head = nullptr;
  fd_records().for_each([](int, FdRecord& record) { record.reset_in_forked_child(); });
}

[[gnu::constructor]] void register_fork_handler() { pthread_atfork(nullptr, nullptr, &forget_the_parents_pollers); }

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
  if (sys::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, event_fd_, &event) != 0) {
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
  // EPOLLPRI: urgent data, after which a short read proves nothing.
  event.events = EPOLLIN | EPOLLPRI | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  event.data.u64 =
      (std::uint64_t{record.generation.load(std::memory_order_relaxed)} << 32) | static_cast<std::uint32_t>(fd);
  if (sys::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) {
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
    if (sys::epoll_ctl(poller->epoll_fd_, EPOLL_CTL_DEL, fd, nullptr) == 0)
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
  if (n > 0 && tracing()) [[unlikely]]
    trace_poll(n);
  // With many connections the records are cold, and so are the waiters,
  // on their parked fibers' stacks: ask for all of them before the first
  // record is locked, so that their misses overlap (the records' first,
  // then their hints' waiters).
  FdRecord* records[kEventBatch];
  for (int i = 0; i < n; ++i) {
    const std::uint64_t data = events[i].data.u64;
    records[i] = data == kWakeTag ? nullptr : fd_records().find(static_cast<int>(data & 0xffffffffu));
    if (records[i] != nullptr) {
      __builtin_prefetch(records[i], 1);
      __builtin_prefetch(&records[i]->read_waiter_hint, 0);
    }
  }
  for (int i = 0; i < n; ++i) {
    if (records[i] == nullptr || (events[i].events & kReadEvents) == 0) continue;
    if (const void* waiter = records[i]->read_waiter_hint.load(std::memory_order_relaxed))
      __builtin_prefetch(waiter, 1);
    // The control block's first lines: its context, state, pins and worker,
    // and the wake's stamps.
    if (const auto* fiber = static_cast<const char*>(records[i]->read_fiber_hint.load(std::memory_order_relaxed)))
      for (int line = 0; line < 3; ++line) __builtin_prefetch(fiber + 64 * line, 1);
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
    if (record->generation.load(std::memory_order_relaxed) == static_cast<std::uint32_t>(data >> 32)) {
      const std::uint32_t mask = events[i].events;
      // Before the counters' release below, which a drain note's mark reads.
      if ((mask & (EPOLLRDHUP | EPOLLHUP | EPOLLERR | EPOLLPRI)) != 0)
        record->short_read_inconclusive.store(true, std::memory_order_relaxed);
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
          if (waiter->amount == kSetNodeMark) {
            woke |= FdSetWaitGroup::wake(*waiter);
            continue;
          }
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

FdWaitMark fd_wait_mark(const FdRecord* record, FdDirection direction) noexcept {
  if (record == nullptr) return {};
  const std::uint32_t calls_woken = record->calls_woken.load(std::memory_order_acquire);
  FiberControl* self = current_fiber();
  if (self == nullptr) return {.calls_woken = calls_woken};
  auto& poller = static_cast<Poller&>(self->scheduler->poller());
  // In wait_fd's order: the sequence first (step 5 compares with it).
  const std::uint64_t sequence = poller.poll_sequence();
  return {.sequence = sequence,
          .events = record->events[index_of(direction)].load(std::memory_order_acquire),
          .calls_woken = calls_woken,
          .valid = true};
}

FdWaitMark fd_wait_mark(int fd, FdDirection direction) noexcept {
  return fd_wait_mark(fd_records().find(fd), direction);
}

void fd_note_drained(int fd, const FdRecord& record, const FdWaitMark& before, bool short_read) noexcept {
  if (!before.valid) return;
  FiberControl* self = current_fiber();  // a valid mark was taken in this fiber
  // Acquire: a hang-up harvested before `before` was taken is seen here.
  if (short_read && record.short_read_inconclusive.load(std::memory_order_acquire)) return;
  auto& poller = static_cast<Poller&>(self->scheduler->poller());
  set_drain_note(*self, {poller.poll_sequence(), before.events, fd});
}

void fd_note_drained(int fd, const FdWaitMark& before, bool short_read) noexcept {
  if (before.valid) fd_note_drained(fd, *fd_records().find(fd), before, short_read);
}

bool take_drain_note(int fd, const FdRecord& record, FdWaitMark& mark) noexcept {
  FiberControl* self = current_fiber();
  if (self == nullptr) return false;
  const DrainNote note = drain_note_of(*self);
  if (note.sequence == 0 || note.fd != fd) return false;
  // The record's wake count now: a note's reader was woken for no call.
  mark = {.sequence = note.sequence,
          .events = note.events,
          .calls_woken = record.calls_woken.load(std::memory_order_acquire),
          .valid = true};
  set_drain_note(*self, {});
  return true;
}

FdWaitResult wait_fd(int fd, FdDirection direction, Clock::time_point deadline, const FdWaitMark* mark,
                     std::uint32_t* harvested) {
  if (fd < 0) throw_fd_error(EBADF, fd, "is not a file descriptor");
  if (current_fiber() == nullptr) {
    if (harvested != nullptr) *harvested = 0;
    return wait_fd_on_thread(fd, direction, deadline);
  }
  FdRecord* record = fd_records().get(fd);
  if (record == nullptr) {
    if (fd >= FdRecords::kLimit) throw_fd_error(EBADF, fd, "is beyond weft's fd table (2^25 fds)");
    throw_fd_error(ENOMEM, fd, "has no record (out of memory)");
  }
  return wait_fd(fd, *record, direction, deadline, mark, harvested);
}

FdWaitResult wait_fd(int fd, FdRecord& record, FdDirection direction, Clock::time_point deadline,
                     const FdWaitMark* mark, std::uint32_t* harvested) {
  if (harvested != nullptr) *harvested = 0;
  FiberControl* self = current_fiber();
  if (self == nullptr) return wait_fd_on_thread(fd, direction, deadline);

  fd_renew_if_changed(record);
  const int d = index_of(direction);
  auto& poller = static_cast<Poller&>(self->scheduler->poller());
  const WaitSite site{kFdWaitKind, reinterpret_cast<const void*>(static_cast<std::uintptr_t>(fd)),
                      operation_of(direction)};
  // The protocol of io/netpoller.h, "Waiting": counter, level check,
  // registration, then compare and park. An edge is only a hint (it may be
  // one the caller consumed already), so every wake is checked with poll
  // again, and a stale one parks again: true means the fd was ready.
  // A wake for a call (fd_wake_waiters) since the caller's mark, or since
  // now, ends the wait: what woke the others raised no readiness to poll.
  // (For a drain note, since the note is taken: the wakes are for sends,
  // accepts and peeks, which leave no note.)
  const std::uint32_t calls_woken =
      mark != nullptr ? mark->calls_woken : record.calls_woken.load(std::memory_order_acquire);
  FdWaitMark noted;
  if (mark == nullptr && direction == FdDirection::read && take_drain_note(fd, record, noted)) mark = &noted;
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
    if (record.calls_woken.load(std::memory_order_relaxed) != calls_woken) {
      record.lock.unlock();
      return FdWaitResult::ready;
    }
    poller.add_locked(record, fd);  // unlocks before it throws
    if (record.events[d].load(std::memory_order_relaxed) != seen) {
      record.lock.unlock();
      continue;
    }
    Waiter waiter;
    waiter.payload = &poller;
    if (d == 0) {
      record.read_waiter_hint.store(&waiter, std::memory_order_relaxed);
      record.read_fiber_hint.store(self, std::memory_order_relaxed);
    }
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

namespace {

// What fd_closing and fd_renewed share: under the record's lock, a new
// generation, every waiter woken with `closed`, and the registration
// forgotten. Returns the pollers the fd was added to.
struct Registration {
  std::uint64_t owner = 0;
  bool others = false;
};

// Wakes every waiter of `record` in both directions (under its lock), each
// with `amount` for its wait to read: kClosedMark, or kWokenForACall. A
// poll's or select's node is woken to look again.
void wake_every_waiter(FdRecord& record, std::uint64_t amount) noexcept {
  for (int d = 0; d < 2; ++d) {
    while (Waiter* waiter = record.waiters[d].pop_front()) {
      if (waiter->amount == kSetNodeMark) {
        FdSetWaitGroup::wake(*waiter);
        continue;
      }
      waiter->amount = amount;
      waiter->events = 0;
      unpark(*waiter);
    }
  }
}

Registration retire(FdRecord& record) noexcept {
  record.lock.lock();
  // A new fd with this number must not get this one's events.
  record.generation.fetch_add(1, std::memory_order_relaxed);
  record.short_read_inconclusive.store(false, std::memory_order_relaxed);
  const Registration registration{record.poller_id, record.in_other_pollers};
  record.poller_id = 0;
  record.in_other_pollers = false;
  // A waiter between its counter read and its park sees the change and
  // returns ready; its retry then meets the closed fd.
  for (int d = 0; d < 2; ++d)
    record.events[d].store(record.events[d].load(std::memory_order_relaxed) + 1, std::memory_order_release);
  wake_every_waiter(record, kClosedMark);
  record.lock.unlock();
  return registration;
}

}  // namespace

void fd_closing(int fd) noexcept {
  FdRecord* record = fd_records().find(fd);
  if (record == nullptr) return;
  const Registration registration = retire(*record);
  // Before the real close, so the kernel's registration (keyed by the file
  // and the number) cannot outlive the number's reuse through a dup.
  if (registration.owner != 0 || registration.others) Poller::remove(fd, registration.owner, registration.others);
}

void fd_wake_waiters(int fd) noexcept {
  FdRecord* record = fd_records().find(fd);
  if (record == nullptr) return;
  record->lock.lock();
  // A waiter between its mark and its park sees it, and returns ready.
  record->calls_woken.store(record->calls_woken.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  wake_every_waiter(*record, kWokenForACall);
  record->lock.unlock();
}

void fd_renewed(int fd) noexcept {
  FdRecord* record = fd_records().find(fd);
  if (record != nullptr) retire(*record);
}

void fd_renew_if_changed(FdRecord& record) noexcept {
  if (!record.changed_in_handler()) [[likely]]
    return;
  // The mark is taken before the renewal: a handler that changes the fd
  // again meanwhile marks it afresh, for the next call.
  if (!(record.flags.exchange(0, std::memory_order_relaxed) & FdRecord::changed_in_handler_bit)) return;
  record.forget_socket_options();
  retire(record);
}

void fd_set_mark(FdSetWait* entries, std::size_t count) noexcept {
  for (std::size_t i = 0; i < count; ++i) {
    FdSetWait& entry = entries[i];
    entry.record = entry.fd >= 0 ? fd_records().get(entry.fd) : nullptr;
    if (entry.record == nullptr) continue;
    fd_renew_if_changed(*entry.record);
    for (int d = 0; d < 2; ++d) entry.seen[d] = entry.record->events[d].load(std::memory_order_acquire);
  }
}

FdWaitResult wait_fd_set(FdSetWait* entries, std::size_t count, Clock::time_point deadline) {
  FiberControl* self = current_fiber();  // a fiber only
  auto& poller = static_cast<Poller&>(self->scheduler->poller());
  FdSetWaitGroup group;
  std::size_t directions = 0;
  for (std::size_t i = 0; i < count; ++i) directions += std::size_t(entries[i].read) + std::size_t(entries[i].write);
  std::vector<Waiter> nodes(directions);
  std::size_t linked = 0;
  // Unlinks what was linked; taking each record's lock also waits out a
  // poller that popped a node and is in FdSetWaitGroup::wake.
  const auto unlink_all = [&] {
    std::size_t n = 0;
    for (std::size_t i = 0; i < count && n < linked; ++i) {
      FdSetWait& entry = entries[i];
      for (int d = 0; d < 2 && n < linked; ++d) {
        if (!(d == 0 ? entry.read : entry.write)) continue;
        Waiter& node = nodes[n++];
        if (entry.record == nullptr) continue;
        entry.record->lock.lock();
        entry.record->waiters[d].remove(node);
        entry.record->lock.unlock();
      }
    }
  };
  bool moved = false;
  for (std::size_t i = 0; i < count && !moved; ++i) {
    FdSetWait& entry = entries[i];
    for (int d = 0; d < 2 && !moved; ++d) {
      if (!(d == 0 ? entry.read : entry.write)) continue;
      Waiter& node = nodes[linked++];
      if (entry.record == nullptr) continue;  // beyond the table: poll reports it
      FdRecord& record = *entry.record;
      record.lock.lock();
      try {
        poller.add_locked(record, entry.fd);  // unlocks before it throws
      } catch (const std::system_error& error) {
        // An fd epoll refuses (EPERM: a regular file, always ready for
        // poll) or that is not open (POLLNVAL): the probe reports it.
        // Any other refusal (ELOOP: epolls nested too deep with ours on
        // top; ENOSPC: max_user_watches) leaves an fd that may become
        // ready unwatched: the caller hears of it, not a silent wait.
        entry.record = nullptr;
        const int code = error.code().value();
        if (code == EPERM || code == EBADF) continue;
        unlink_all();
        throw;
      }
      if (record.events[d].load(std::memory_order_relaxed) != entry.seen[d]) {
        moved = true;  // an edge since the mark: the caller probes again
      } else {
        node.amount = kSetNodeMark;
        node.payload = &group;
        record.waiters[d].push_back(node);
      }
      record.lock.unlock();
    }
  }
  bool woken = moved;
  if (!moved) {
    group.lock.lock();
    if (group.fired) {
      group.lock.unlock();
      woken = true;
    } else {
      group.parked = true;
      const WaitSite site{kFdWaitKind, reinterpret_cast<const void*>(static_cast<std::uintptr_t>(entries[0].fd)),
                          "poll"};
      poller.waiter_parking();
      woken = park(group.waiter, &group.lock, site, deadline) == WakeReason::notified;
      poller.waiter_back();
    }
  }
  unlink_all();
  return woken ? FdWaitResult::ready : FdWaitResult::timed_out;
}

}  // namespace weft::detail
