// IdleWorkers: how workers with nothing to run go to sleep, and how whoever
// publishes work wakes one, without ever losing a wakeup.
//
// The invariant (Go's proc.go, "Worker thread parking/unparking"): while a
// fiber waits in a queue that an idle worker could take it from, either a
// worker is searching or no worker sleeps. It is kept by three rules:
//
//   1. publisher:  make the fiber visible in a queue; StoreLoad (seq_cst
//                  fence); if nobody searches and somebody sleeps, wake one
//                  (notify_work). If somebody searches, that searcher is
//                  now responsible for the fiber (rules 2 and 3).
//                  Visible means a thief may take it (Worker::
//                  has_stealable_work, which work_visible reads): a
//                  fiber only its own busy worker may take is stranded,
//                  whoever is woken. So a spawn held for its owner
//                  (sched/spawn_deque.h) is published twice: at its push
//                  the spawn below it becomes stealable, and when the
//                  owner picks anything else to run, the release of the
//                  hold is the publication (Worker::publish_held_spawn).
//                  The next slot is not stealable, so not visible: its
//                  owner runs it at its next switch, or sysmon seizes it
//                  from a stuck owner (sched/next_slot.h).
//                  A yield's requeue publishes by placement instead: to a
//                  sleeping peer's inbox, with that peer's wake (Worker::
//                  push_yielded; a wake alone lost the race for the
//                  fiber to the owner's next yield).
//   2. searcher that finds work: it ends its search BEFORE it runs what it
//      found (a seq_cst read-modify-write), and if it was the last searcher
//      and work is still visible in a queue, it wakes another worker
//      (notify_work). A publisher that skipped its wake because this worker
//      searched may have published more than the one fiber taken here (a
//      plain thread spawning two fibers in a row, or the rest of a global
//      batch pushed into this worker's run queue); without this wake that work
//      would wait behind the fiber about to run while its peers sleep.
//      Looking first is sound: such a publisher read searching_ before the
//      end_search, so its fiber is visible to the reads after it; one that
//      reads searching_ after it sees 0 and wakes a sleeper itself. (Go's
//      resetspinning wakes unconditionally; a wake nobody needs made an
//      idle scheduler's thread-to-fiber wake several times slower:
//      docs/benchmarks.md, "Figures behind the comments".)
//   3. searcher that finds nothing: it ends its search, registers as a
//      sleeper (prepare_sleep), StoreLoad, re-checks every queue, and only
//      then waits. If the re-check finds work and it was the last searcher,
//      it wakes another, as in rule 2. So it does if a publisher took its
//      slot meanwhile (cancel_sleep says so): listed, it looked asleep, and
//      the publisher's one wake went to a worker that was awake already and
//      is about to run one fiber, while what the publisher made visible
//      may be more (a plain thread's second spawn), and the workers that
//      really sleep were left asleep (Go's wakep cannot pick such a worker:
//      it takes an idle P and a parked M, and a thread in its re-check has
//      given up its P but is not parked yet).
// A publisher and a searcher form a Dekker pair on (queue, searching_): the
// publisher sees searching_ == 0 or the searcher's re-check sees the fiber.
// A publisher and a sleeper form one on (queue, sleeping_) likewise. So a
// fiber is never left queued while every worker that could run it sleeps.
//
// At most half the workers search (spin) at once, so that more workers than
// cores do not burn the cores that have real work.
//
// One sleeper may sleep in the netpoller's epoll_wait instead of on its
// futex (io/netpoller.h, "How a blocker is woken"): it stays a listed
// sleeper, and marks its slot `polling` under the lock once it has
// re-checked the queues; waking that slot writes the poller's eventfd.
//
// Which sleeper a publisher wakes: the most recent futex sleeper (its
// caches are warmest) that went to sleep on another CPU than the
// publisher's, if one did. Linux places a woken thread on the CPU it last
// ran on or on the waker's, and does not always look for an idle one: a
// worker woken onto the publisher's own CPU preempted the publisher there
// (a plain thread spawning two fibers: the second spawn came at the next
// tick, while the other CPU sat idle; docs/benchmarks.md, "The idle pair:
// a wake onto the waker's CPU"). The CPU is a hint, read with sched_getcpu
// (rseq, a load) at sleep and at the wake.
//
// The lock guards only the list and the slots' flags, a few dozen
// instructions: the system call that wakes a slot (futex or eventfd) is
// made after it is released. Holding it across that call made the blocker,
// waking a peer for what its epoll_wait readied, and the peer, going to
// sleep, contend on it; a std::mutex then slept in futex(2) on both sides
// (half the futex calls of the echo server, docs/benchmarks.md). A late
// wake is harmless: the slot's wake word was set under the lock, its
// futex_wait returns at once, and an eventfd write nobody needs any more
// costs the next blocker one early return.
#pragma once

#include <weft/detail/spin_lock.h>

#include <atomic>
#include <cstdint>
#include <vector>

namespace weft::detail {

// A worker's part of the protocol.
struct IdleSlot {
  std::atomic<std::uint32_t> wake_word{0};  // futex: 1 once woken
  bool listed = false;                      // in the sleepers list (guarded by IdleWorkers)
  bool polling = false;                     // sleeps in epoll_wait, not on the futex (guarded likewise)
  int cpu = -1;                             // the CPU it went to sleep on, -1 if unknown (guarded likewise)
};

class IdlePoller;

class IdleWorkers {
 public:
  // `sleepers`: how many may sleep at once (the workers; reserve_sleepers
  // adds the spares), so that going to sleep never allocates.
  IdleWorkers(unsigned workers, unsigned sleepers) : workers_(workers) { sleepers_.reserve(sleepers); }
  // Room for `sleepers` in all, before a new spare may sleep; may throw
  // std::bad_alloc.
  void reserve_sleepers(unsigned sleepers);

  // After publishing work any worker may run.
  void notify_work() noexcept {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (searching_.load(std::memory_order_relaxed) == 0 && sleeping_.load(std::memory_order_relaxed) > 0) wake_one();
  }
  // Whether a worker sleeps, as far as this thread sees: a relaxed load, no
  // fence, for a path that must stay cheap and can look again later
  // (Worker::push_yielded).
  bool seen_sleeping() const noexcept { return sleeping_.load(std::memory_order_relaxed) > 0; }
  // After publishing work only `slot`'s worker may run (a pinned fiber).
  void notify_worker(IdleSlot& slot) noexcept;

  // A worker that found nothing local may search others' queues if fewer
  // than half the workers already do.
  bool begin_search() noexcept;
  // Returns true when this was the last searcher.
  bool end_search() noexcept { return searching_.fetch_sub(1, std::memory_order_seq_cst) == 1; }

  // Sleeping: prepare, re-check the queues, then either cancel or wait.
  void prepare_sleep(IdleSlot& slot) noexcept;
  // True if a waker had taken the slot already: the wake it meant for a
  // sleeper came to this worker, awake (rule 3).
  bool cancel_sleep(IdleSlot& slot) noexcept;
  void wait(IdleSlot& slot) noexcept;

  void wake_all() noexcept;

  // The scheduler's netpoller, whose wake() breaks a polling sleeper. Set
  // once, before any worker starts.
  void set_poller(IdlePoller* poller) noexcept { poller_ = poller; }
  // Between prepare_sleep and the sleep: marks the slot as sleeping in
  // epoll_wait. False if it was woken already (then do not block; call
  // cancel_sleep as usual). The mark ends with cancel_sleep.
  bool begin_poll(IdleSlot& slot) noexcept;

 private:
  void wake_one() noexcept;
  // Under the lock: unlists `slot` and sets its wake word. Returns whether
  // it sleeps in epoll_wait; wake_unlocked() then makes the call.
  bool take_locked(IdleSlot& slot) noexcept;
  void wake_unlocked(IdleSlot& slot, bool polling) noexcept;

  const unsigned workers_;
  IdlePoller* poller_ = nullptr;
  std::atomic<unsigned> searching_{0};
  std::atomic<unsigned> sleeping_{0};
  SpinLock lock_;
  std::vector<IdleSlot*> sleepers_;  // LIFO: the most recent sleeper is warmest
};

}  // namespace weft::detail
