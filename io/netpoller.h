// The netpoller: how fibers wait for file descriptors (Go's netpoll.go and
// the netpoll half of proc.go are the model).
//
// Glossary
//   record    one per fd number, process-wide (io/fd_records.h): a lock,
//             the fd's generation, and per direction (read, write) a list of
//             waiters and an event counter, beside the fd's description
//             that the libc hooks keep. Records are never freed, so an
//             event for a closed fd can always be looked up and dropped.
//   poller    one per scheduler: an epoll instance plus an eventfd. An fd
//             is added to it (EPOLLIN|EPOLLOUT|EPOLLRDHUP|EPOLLET) the first
//             time a fiber of that scheduler parks on it, and stays until
//             fd_closing(). The event's data is (fd, generation).
//   blocker   the one idle worker that sleeps in epoll_wait instead of on
//             its futex.
//
// Waiting (wait_fd, in a fiber):
//   1. read the direction's event counter;
//   2. poll(fd, 0): ready -> return (level semantics: the caller may have
//      read only part of what is there, and no new edge would come);
//   3. register the fd with this scheduler's poller if it is not yet;
//   4. lock the record; if the counter moved since 1, go back to 1;
//      else link a Waiter and detail::park(waiter, &lock, site, deadline);
//   5. woken by an event: ready, without a second poll(fd, 0), if the
//      epoll_wait that reported it began after step 1 (its sequence number,
//      handed over in the Waiter, is above the one read at step 1): the
//      kernel then saw the fd ready after the caller's last read, so what
//      made it ready is not what the caller consumed. Else (an event
//      harvested by an epoll_wait that began earlier may describe data the
//      caller has read since) go back to 1.
//   An edge that arrives after 2 either comes before the registration in 3
//   (epoll_ctl ADD reports the fd's current readiness as an event) or after
//   it; either way the poller bumps the counter under the record's lock
//   after step 1, so step 4 sees it, or it finds the waiter linked and
//   unparks it. Nothing is lost, and no epoll_ctl runs on the hot path.
//   Timeouts are park()'s: exactly one of the poller's unpark() and the
//   deadline wins (include/weft/detail/park.h). No second wake protocol.
//
// Drain notes: a read in a fiber, attempted by the hooks or passed
// through them (a user O_NONBLOCK socket), that finds the fd drained
// (EAGAIN, or a short read of a TCP socket: epoll(7), "you can be sure
// of having exhausted the read I/O space") leaves a note in the fiber: the
// fd's read counter from before the read and the poll sequence from after
// it. The fiber's next read wait on that fd parks with the note as its
// mark, skipping step 2, as the epoll loop skips the read after a short
// one: weft::io::wait_readable after the caller's own short read, and the
// hooks' next blocking read, which parks before it attempts. Data that
// came after the read either moved the counter (the wait then goes back
// to step 1) or has an epoll event still to be harvested, which wakes the
// waiter; and an event harvested by an epoll_wait begun after the read is
// news (step 5). A short read proves nothing once the fd has hung up
// (FdRecord::short_read_inconclusive): the peer's FIN or an error stays
// readable and raises no new edge; nor once urgent data came (EPOLLPRI: a
// read stops short at its mark); nor ever on a unix stream socket (a read
// stops short after a segment that carried fds, FdRecord::
// short_read_drains_bit). A note is the fiber's own, for one fd at a time,
// kept in its control block's upper_slot (runtime/fiber_control.h).
//
// Events: the poller locks the record, drops the event if its generation
// is not the record's (a closed-and-reused fd number), bumps the counters
// of the directions it reports (an error or hang-up counts for both) and
// unparks every waiter of those directions: each re-checks by retrying its
// call, so waking all is always correct, and a fiber that loses the race
// for the data simply waits again.
//
// Closing: fd_closing(fd), called before the real close() or dup2() over
// the fd, bumps the generation, unparks every waiter with `closed`, and
// deletes the fd from every poller it was added to. Plain threads waiting
// in poll(2) are not woken (the kernel keeps the file open for them).
//
// Who polls (the idle loop, sched/worker.cpp, through sched/idle_poller.h):
//   - a worker with nothing local to run polls without blocking before it
//     steals, if fibers wait on I/O and nobody is blocked in epoll_wait;
//     one thread polls at a time (a try-lock), the others go on stealing;
//   - a worker about to sleep becomes the blocker if fibers wait on I/O
//     or a timer is armed, and there is none yet: it stays listed as a
//     sleeper (idle.h) but sleeps in epoll_wait, with the earliest timer's
//     deadline as its timeout (epoll_pwait2, in ns; sched/timers.h). At
//     most one blocker per scheduler (a CAS on the poller's blocker flag);
//   - sysmon polls without blocking when nobody has polled for 10 ms, so
//     that workers busy with CPU-bound fibers do not starve I/O.
//
// How a blocker is woken (the guarantee): it registers as a sleeper and
// re-checks every queue exactly as a futex sleeper does (idle.h), then,
// under the idle lock, marks its slot `polling`. A publisher that picks
// that slot (wake_one prefers futex sleepers; wake_all takes all) writes
// the eventfd instead of the futex. The eventfd write is guarded by a CAS
// on `wake_pending` (at most one wake-up in flight); the blocker reads the
// eventfd and clears the flag when it returns from epoll_wait. A mark set
// after the slot was already woken is refused (the slot is no longer
// listed), so the blocker never sleeps through a wake.
//
// Readiness wakes fibers with the scheduler's ready(): on one of its
// workers into the next slot and the run queue, from sysmon or another
// scheduler into the global queue with a notify. A worker's idle loop
// defers the run queue's wakes while it polls and, once its poll is over and
// (a blocker) it has left the sleepers list, wakes one idle peer for all
// it cannot run (Worker::run_after_poll): a wake per fiber took the idle
// lock per fiber, and the blocker, still a listed sleeper, picked itself
// and wrote the eventfd to its own next epoll_wait.
#pragma once

#include <weft/detail/wait_list.h>  // Clock

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "../sched/idle_poller.h"

namespace weft::detail {

enum class FdWaitResult { ready, timed_out, closed };
enum class FdDirection { read, write };

// What a fiber saw of an fd's record before a call that may fail with
// EAGAIN (Go's pollReset before its read): steps 1's two numbers, taken
// before the call instead of after it. A wait given the mark skips step 2,
// the poll(fd, 0): whatever made the fd ready after the mark moved the
// counter or wakes the waiter, and readiness from before it was what the
// failed call found gone. Not valid on a plain thread or for an fd no fiber
// has waited on yet (the wait then polls first, as without a mark).
struct FdWaitMark {
  std::uint64_t sequence = 0;
  std::uint32_t events = 0;
  std::uint32_t calls_woken = 0;  // FdRecord::calls_woken, kept whether valid or not
  bool valid = false;
};
FdWaitMark fd_wait_mark(int fd, FdDirection direction) noexcept;

struct FdRecord;

// fd_wait_mark with the fd's record in hand (null: none yet), for a caller
// that looked it up already (a hooked call visits the table once).
FdWaitMark fd_wait_mark(const FdRecord* record, FdDirection direction) noexcept;

// After a read of `fd` that found it drained ("Drain notes" above):
// `before` is fd_wait_mark(fd, read) from before it; `short_read`, that it
// returned less than asked of a stream socket (else it failed with EAGAIN).
// Keeps errno.
void fd_note_drained(int fd, const FdWaitMark& before, bool short_read) noexcept;
void fd_note_drained(int fd, const FdRecord& record, const FdWaitMark& before, bool short_read) noexcept;

// The calling fiber's drain note for `fd`, taken (true), as a mark for
// wait_fd; false if there is none for `fd`. `record`: fd's (its wake count).
bool take_drain_note(int fd, const FdRecord& record, FdWaitMark& mark) noexcept;

// Waits until `fd` is ready for `direction`, until `deadline`
// (no_deadline: never), or until the fd is closed through fd_closing().
// On a plain thread: poll(2) (`closed` is then never returned). Throws
// std::system_error naming the fd: EBADF if it is not open, EPERM (or
// what epoll_ctl said) if it cannot be polled. `mark`, if given, is this
// fiber's fd_wait_mark() from before the call that failed with EAGAIN;
// without one, a read wait uses the fiber's drain note for `fd`, if any.
// `harvested`, if given, gets the epoll events that made the wait ready
// when an event woke it (step 5), else 0 (a poll(2) said ready).
FdWaitResult wait_fd(int fd, FdDirection direction, Clock::time_point deadline, const FdWaitMark* mark = nullptr,
                     std::uint32_t* harvested = nullptr);
// wait_fd with `fd`'s record in hand (FdRecords::get(fd)).
FdWaitResult wait_fd(int fd, FdRecord& record, FdDirection direction, Clock::time_point deadline,
                     const FdWaitMark* mark = nullptr, std::uint32_t* harvested = nullptr);

// One fd of a wait on several (a hooked poll or select): the caller fills
// in `fd` and the directions; fd_set_mark and wait_fd_set the rest.
struct FdSetWait {
  int fd = -1;
  bool read = false;
  bool write = false;
  FdRecord* record = nullptr;
  std::uint32_t seen[2] = {0, 0};
};

// Step 1 of "Waiting" for each entry: before the caller's own level check
// of them all (a zero-timeout poll).
void fd_set_mark(FdSetWait* entries, std::size_t count) noexcept;

// Steps 3 and 4 for all the entries at once, in a fiber: each fd is added
// to this scheduler's poller (once; it stays, as for wait_fd) and the fiber
// parks until an edge on any of them, a close of one, or `deadline`. ready:
// an edge came after the marks (or during the registration), and the
// caller checks the level again; timed_out: the deadline passed. No fd is
// made, however many are waited on. An fd epoll refuses (a regular file)
// or that is not open is left out: the level check reports it.
FdWaitResult wait_fd_set(FdSetWait* entries, std::size_t count, Clock::time_point deadline);

// Call before the real close() of `fd` (or a dup2/dup3 onto it): wakes
// every fiber waiting on it, in every scheduler, with `closed`, removes it
// from every poller, and bumps its generation so that a later fd with the
// same number never receives this one's events. A cheap no-op for an fd
// weft never waited on.
void fd_closing(int fd) noexcept;

// Wakes every fiber waiting on `fd`, in every scheduler, as ready in both
// directions: each makes its call again and gets the kernel's answer. For
// a change no epoll edge reports: a shutdown(SHUT_WR) of this process's
// unix socket, whose parked send the kernel's blocking send would end
// (EPIPE, or the part sent), raises no readiness. Not in a signal handler
// (the record's lock).
void fd_wake_waiters(int fd) noexcept;

// A new fd took the number `fd`, or its old one is gone where weft could
// not see it close: as fd_closing (waiters woken with `closed`, a new
// generation), but without deleting it from the pollers, which would
// name the new file. The kernel dropped the old registration with the old
// file, or keeps it under the old file with a stale generation; the new fd
// is added afresh on its first wait.
void fd_renewed(int fd) noexcept;

// If a signal handler changed the record's fd (FdRecord::changed_in_handler:
// closed it, or made a new fd with its number), does now what the handler
// could not: as fd_renewed, and the fd's description forgotten (its kind is
// classified again on its next use). wait_fd and fd_set_mark call it; one
// load otherwise.
void fd_renew_if_changed(FdRecord& record) noexcept;

// The poller of a new scheduler: SchedulerParts::make_poller.
std::unique_ptr<IdlePoller> make_idle_poller(SchedulerCore& core);

// One scheduler's poller (the SchedulerCore owns it as its IdlePoller).
class Poller final : public IdlePoller {
 public:
  explicit Poller(SchedulerCore& core);
  Poller(const Poller&) = delete;
  Poller& operator=(const Poller&) = delete;
  ~Poller() override;

  // With `record.lock` held: adds `fd` to this epoll unless it is there.
  // Throws (with the lock released) if epoll_ctl refuses it.
  void add_locked(FdRecord& record, int fd);
  // Deletes `fd` from the poller `owner` (or from every poller, if
  // `others`), as fd_closing() does.
  static void remove(int fd, std::uint64_t owner, bool others) noexcept;
  // Around a fiber's park on an fd: has_waiters() counts it.
  void waiter_parking() noexcept { waiters_.fetch_add(1, std::memory_order_relaxed); }
  void waiter_back() noexcept { waiters_.fetch_sub(1, std::memory_order_relaxed); }
  // The sequence number of the last epoll_wait begun (step 1 of "Waiting").
  std::uint64_t poll_sequence() const noexcept { return poll_sequence_.load(std::memory_order_seq_cst); }

  // IdlePoller (sched/idle_poller.h)
  bool has_waiters() const noexcept override { return waiters_.load(std::memory_order_relaxed) > 0; }
  bool poll_now() noexcept override;
  void poll_if_stale(std::chrono::nanoseconds stale_after) noexcept override;
  bool try_begin_block(unsigned worker) noexcept override;
  void block(Clock::time_point until) noexcept override;
  void end_block() noexcept override;
  void wake() noexcept override;
  PollerSnapshot view() const noexcept override;

 private:
  // One epoll_wait and its events; true if it woke a fiber. Without
  // `blocking` it returns at once; with it, it sleeps until `until`
  // (time_point::max(): no timeout) and consumes a wake().
  bool poll(bool blocking, Clock::time_point until = Clock::time_point::max()) noexcept;
  void drain_wake() noexcept;

  SchedulerCore& core_;
  const std::uint64_t id_;  // never reused, unlike an epoll fd's number
  int epoll_fd_ = -1;
  int event_fd_ = -1;
  std::atomic<std::int64_t> waiters_{0};     // fibers parked on an fd
  std::atomic<std::int64_t> registered_{0};  // fds added and not yet deleted
  std::atomic<bool> polling_{false};         // a non-blocking poll runs
  std::atomic<int> blocker_{-1};             // the worker in epoll_wait; -1: none
  // Bumped before every epoll_wait. Starts above the closed mark (1), so a
  // waiter's `amount` is the closed mark, 0 (no sequence: another poller
  // woke it) or a sequence number, never two of these at once.
  std::atomic<std::uint64_t> poll_sequence_{1};
  std::atomic<bool> wake_pending_{false};  // an eventfd write not yet drained
  std::atomic<std::int64_t> last_poll_ns_{0};
  std::atomic<std::uint64_t> polls_{0};
  std::atomic<std::uint64_t> events_{0};
  std::atomic<std::uint64_t> stale_polls_{0};  // sysmon's
  std::atomic<std::uint64_t> wakeups_{0};      // eventfd writes
  Poller* next_ = nullptr;                     // in the list of live pollers
};

}  // namespace weft::detail
