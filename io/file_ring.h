// FileRing: regular-file I/O that parks the fiber, on io_uring, one ring
// per scheduler (sched/extension.h), set up on first use. The libc hooks
// send a regular file's reads that the page cache cannot serve at once
// through it (hooks/hooks_files.cpp; docs/io.md says which calls and why
// those).
//
// Completions come back through the netpoller: the ring's fd is readable
// while its completion queue holds entries, and one fiber at a time, the
// *leader*, waits on it with wait_fd in the scheduler's epoll.
//
// Protocol (lock_ guards the submission queue, `waiting_` and `leading_`;
// only the leader reads the completion queue, under lock_):
//   submit:  lock; fill an SQE whose user_data is the caller's Op; submit.
//            If nobody leads, become the leader (leading_ = true), unlock,
//            and lead. Else link the Op's waiter into waiting_ and park
//            with the lock (park releases it once the fiber is off its
//            worker).
//   lead:    loop { lock; reap every completion: each Op gets its result
//            and is marked done, and a linked one is unlinked and
//            unparked; if the leader's own Op is done, hand the lead to
//            the first fiber still waiting (unlink it, mark it `promoted`,
//            unpark it) or, with none, set leading_ = false; unlock; return.
//            Else unlock and wait_fd(ring fd, read). }
//   woken:   a waiter whose Op is done returns its result; one that was
//            promoted leads (its Op may be done already: lead reaps first).
// Invariants: while any Op is submitted and not reaped, leading_ is true
// and exactly one fiber leads (it is the last to leave, handing the lead
// over while others wait). A completion posted at any moment is seen: the
// leader reaps before it waits, and wait_fd's level check and the ring's
// wake-up of its poll queue (an epoll edge per posted completion) cover
// one posted after that.
//
// A request the kernel cancelled before it started (-ECANCELED: the io-wq
// of the thread that submitted it exited, a retiring spare) is submitted
// again; every other result is the call's.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>
#include <weft/config.h>
#include <weft/detail/park.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "../sched/extension.h"
#include "../sched/raw_lock.h"

struct io_uring;
struct io_uring_sqe;

namespace weft::detail {

class SchedulerCore;

class FileRing final : public Extension {
 public:
  FileRing() = default;
  ~FileRing() override;

  // A scheduler's ring (SchedulerParts::extensions); the io_uring itself is
  // set up on first use, so a scheduler that never reads a file has none.
  static std::unique_ptr<Extension> make(const Config& config);
  // The scheduler's ring, set up on first use; null when io_uring is
  // unavailable (io_uring_setup failed: ENOSYS, EPERM under
  // kernel.io_uring_disabled or a seccomp profile, ENOMEM), or the
  // scheduler was built without one. The hooks then make the blocking call.
  static FileRing* of(SchedulerCore& core);

  // From a fiber: each makes its call on the ring, parked until it has
  // completed, and returns its result (>= 0, or -errno). `offset` -1
  // reads at the file position and advances it.
  int readv(int fd, const iovec* iov, unsigned count, off_t offset);

  struct Stats {
    std::uint64_t submitted = 0;
    std::uint64_t resubmitted = 0;  // after -ECANCELED
  };
  Stats stats() const noexcept;

 private:
  struct Op;

  // Fills one request with `prepare(sqe, arg)`, submits it, and parks
  // until it has completed: the protocol above.
  int run(void (*prepare)(io_uring_sqe*, void*), void* arg);
  template <class Prepare>
  int run(Prepare&& prepare) {
    return run([](io_uring_sqe* sqe, void* self) { (*static_cast<Prepare*>(self))(sqe); }, &prepare);
  }

  // Fills and submits an SQE for `op`; with lock_ held. -errno if
  // io_uring_submit failed.
  int submit_locked(Op& op);
  void lead(Op& op);
  // Reaps every completion (the leader, with lock_ held).
  void reap_locked();
  // io_uring_setup; ring_ stays null if it failed. False if it failed for
  // want of an fd or memory (EMFILE, ENFILE, ENOMEM), which may pass: of()
  // tries again a second later, instead of leaving the files' calls
  // blocking for good.
  bool set_up();

  // set_up's once: not std::call_once, since pthread_once is one of the
  // hooks' names (scripts/check-layers). set_up_done_ is stored (release)
  // under set_up_lock_ once set_up has returned true; ring_ is read only
  // after that.
  RawMutex set_up_lock_;
  std::atomic<bool> set_up_done_{false};
  std::atomic<std::int64_t> retry_set_up_at_ns_{0};  // runtime/fast_clock.h's clock
  std::unique_ptr<io_uring> ring_;                   // null until set up, and if that failed
  int ring_fd_ = -1;
  mutable SpinLock lock_;
  WaitList waiting_;
  bool leading_ = false;
  std::uint64_t submitted_ = 0;  // under lock_
  std::uint64_t resubmitted_ = 0;
};

}  // namespace weft::detail
