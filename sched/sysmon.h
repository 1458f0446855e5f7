// Sysmon: one monitor thread per scheduler that keeps every fiber moving
// (Go's sysmon, Wisp2's preemption thread). It never runs fibers and never
// switches one; it only looks at the workers and asks. docs/sysmon.md has
// the whole story, its costs and its limits.
//
// What it watches: each worker's switch tick, a counter the worker bumps on
// every switch in (a relaxed store on a line it writes anyway). While the
// tick stands still, one fiber has been running since sysmon first saw that
// tick. So the worker never reads a clock: sysmon does (Go's and Wisp2's
// approach).
//
// What it does, per worker whose fiber has run without a switch for:
//   > Config::time_slice     preemption: stores the tick in the worker's
//                            preempt request; the fiber yields at its next
//                            checkpoint (Worker::preempt_current). Again
//                            every further slice while the tick stands.
//   > kHandOffAfter (1 ms),  hand-off: the worker's next slot and the
//     burning CPU or asleep  unpinned head of its run queue go to the
//     in the kernel          global queue, and a sleeping worker is woken
//                            to run them; the worker is marked stuck, so
//                            that thieves take even its newest spawn. Idle
//                            workers steal run queues and spawns on their
//                            own, but not the next slot, and a busy peer
//                            does not steal at all: it only checks the
//                            global queue.
//   > 2 x time_slice, with   stuck: shown by weft-dump, and reported once to
//     a request ignored for  Config::on_stuck_worker.
//     a further slice (on a
//     CPU or in the kernel)
//
// Hand-offs come after every worker has been looked at, and only to a
// thread that will take from the global queue (an idle worker, a spare
// about to start, a worker switching fibers): with every thread blocked,
// moving fibers only shuffles them between blocked workers.
//
// Running time counts only while sysmon watches: a look that comes later
// than planned by more than max(2 x time_slice, kMinPause) (the process was
// stopped, the machine stalled) restarts the watch of every worker not yet
// reported, so that nobody is blamed for the pause.
//
// Tick: 20 us after it acted, doubling each quiet round up to time_slice/8
// while a fiber runs (enough to preempt within about 1.25 slices) and up to
// 10 ms when nothing runs; at most kBlockingCallGrace for kAlertRounds
// rounds after it saw an announced blocking call or was alerted by one. After kDeepSleepAfter rounds in which every
// worker slept, it sleeps on a futex until a worker leaves idle sleep: an
// idle scheduler costs nothing.
//
// Deep-sleep protocol (a Dekker handshake, as in idle.h):
//   sysmon:  deep_asleep = true; seq_cst fence; if any worker is not
//            sleeping: cancel; else futex-wait on wake_word.
//   worker:  state = running; seq_cst fence (worker_woke); if deep_asleep:
//            clear it and wake sysmon.
// The fence on the worker's side is paid only when it comes back from
// sleeping in the kernel, never on a fiber switch.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>

#include "futex.h"
#include "run_queue.h"
#include "worker.h"

namespace weft::detail {

class SchedulerCore;

class Sysmon {
 public:
  explicit Sysmon(SchedulerCore& core);
  Sysmon(const Sysmon&) = delete;
  Sysmon& operator=(const Sysmon&) = delete;
  ~Sysmon();

  // Starts sysmon's thread; counts `started` down once it has set itself up.
  void start(RawLatch& started);
  void stop() noexcept;

  // A worker back from idle sleep (after storing state running).
  void worker_woke() noexcept {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (deep_asleep_.load(std::memory_order_relaxed)) wake();
  }

  // Whether sysmon sleeps longer than kBlockingCallGrace now: an
  // announced blocking call whose verdict is awaited then wakes it (alert),
  // so that the call's hand-off does not wait for the end of the sleep
  // (sched/blocking_call.h).
  bool napping() const noexcept { return napping_.load(std::memory_order_relaxed); }
  void alert() noexcept;
  // Whether a verdict on `worker`'s announced call would change anything
  // soon: movable fibers wait (below), which a hand-off moves or a spare
  // started for the blocked call runs (with every worker in a call, nobody
  // else takes the global queue's), or a timer is armed, which the fiber
  // lets its worker fire at the call's return once the call was judged
  // blocked. Otherwise the verdict can wait for the running tick: it only
  // counts the thread as blocked. Any thread.
  bool verdict_awaited(Worker& worker) const noexcept;
  // Wakes sysmon for a look now, whether it naps or ticks: a call that
  // always sleeps has fibers queued behind it (sched/blocking_call.h).
  void look_now() noexcept;

  // What sysmon last saw of a worker, for snapshots (any thread).
  struct WorkerView {
    double running_ms = 0;       // the current fiber, without a switch; 0: none
    bool stuck = false;          // see above
    std::uint64_t fiber_id = 0;  // the stuck fiber, when known
  };
  WorkerView view(unsigned worker) const noexcept;

  static constexpr std::chrono::microseconds kMinTick{20};
  static constexpr std::chrono::microseconds kMaxTick{10'000};
  static constexpr std::chrono::microseconds kHandOffAfter{1'000};
  // A worker that has not switched, found asleep in the kernel by looks
  // this far apart, is blocked there (a raw system call, which nothing
  // announced): its fibers go to an idle worker or a spare. One look alone
  // could catch a moment's wait (a page fault, a sanitizer's lock).
  static constexpr std::chrono::microseconds kKernelSleepGrace{500};
  // A thread found blocked in the kernel so is taken to stay blocked for
  // this long without a read of its CPU clock or its state (each a system
  // call; at every look at a thousand threads blocked in raw system calls
  // they were most of sysmon's CPU, docs/benchmarks.md). A switch ends the
  // verdict at once; only a fiber that runs on, without a switch, after
  // its call returns is counted blocked up to this much longer.
  static constexpr std::chrono::milliseconds kAsleepRecheck{10};
  // An announced blocking call (sched/blocking_call.h) that lasts this long
  // has its worker handed off: long enough that a cached read or an
  // uncontended lock never pays for a hand-off, short enough that the
  // fibers behind a slow one do not notice (docs/sysmon.md).
  static constexpr std::chrono::microseconds kBlockingCallGrace{100};
  // After it saw an announced call, or was alerted by one, sysmon ticks at
  // the grace for this many rounds: one alert per burst of calls, not one
  // per call.
  static constexpr unsigned kAlertRounds = 50;
  // A worker asleep in futex(2) this long may be waiting for a std::mutex
  // that a fiber pinned to it holds, and one in an announced call that
  // waits to be woken (Sleeps::until_woken: a join, a message queue) for
  // what such a fiber would do next: hook pins are
  // released then (Worker::release_hook_pinned). Long, because the
  // release is safe only while the thread stays asleep: a wait that ends
  // on its own (a libc or sanitizer lock on a loaded machine) is not to be
  // taken for one. At 100 ms, such a release under TSan had the released
  // call's errno written to a thread already running another fiber.
  static constexpr std::chrono::milliseconds kReleaseHookPinsAfter{1000};
  // A timer due this long while a worker sleeps: nobody is running the
  // timers (the blocker left to run a fiber that then blocked, and the
  // other sleepers were never told of them, sched/timers.h), so sysmon
  // wakes a sleeper for them. Within the hand-off millisecond.
  static constexpr std::chrono::microseconds kTimerOverdue{1'000};
  static constexpr unsigned kDeepSleepAfter = 50;
  static constexpr std::chrono::milliseconds kPollStaleAfter{10};
  // A worker that switched this many times since the last look, at least
  // once per this gap on average, runs fibers one after another: sysmon
  // takes it for one that is not blocked without reading its state. A
  // worker whose fibers each block for a while in a raw system call
  // switches once per call at most, far less often.
  static constexpr unsigned kBusySwitches = 2;
  static constexpr std::chrono::microseconds kBusySwitchGap{100};
  // Sysmon counts itself paused when a look comes later than planned by
  // more than twice the slice (a stuck verdict needs two slices: one
  // unwatched stretch must not make it alone), and never less than this:
  // a loaded machine delays sysmon's looks by tens of milliseconds again
  // and again, and restarting at each of them would leave a thread blocked
  // in the kernel neither handed off nor reported (docs/sysmon.md).
  static constexpr std::chrono::milliseconds kMinPause{1000};

 private:
  // Per worker. The plain fields are sysmon's own; the atomics are read by
  // snapshots.
  struct Watch {
    bool watching = false;  // running at the last look
    std::uint64_t tick = 0;
    Clock::time_point since{};
    // The last preemption request (without preemption: the look that
    // would have made it), every slice from the first; epoch: none yet.
    Clock::time_point asked{};
    std::int64_t asked_cpu_ns = 0;  // the worker thread's CPU time then (0: unknown)
    bool reported = false;
    // The worker thread's CPU time at the last look at this fiber (-1: none
    // yet), and when that was: whether it burns its CPU since.
    std::int64_t look_cpu_ns = -1;
    Clock::time_point look_time{};
    // Since when every look has found the thread asleep in the kernel
    // (epoch: the last look did not).
    Clock::time_point kernel_since{};
    // This scan's verdicts, for the hand-offs that follow the looks:
    // holding its fibers up past the hand-off delay, and blocked in the
    // kernel while doing so; or running, switched within that delay.
    bool holding_up = false;
    bool in_kernel = false;
    bool short_run = false;
    // When `tick` was seen. Whether the worker switched at least
    // kBusySwitches times since that look, once per kBusySwitchGap or more
    // often: it runs fibers one after another (count_free_runners).
    Clock::time_point tick_time{};
    bool switching_busily = false;
    // This look's verdict on a fiber that did not switch (judge_hold_up),
    // when it read the thread's state or found it still asleep: whether the
    // thread is asleep in the kernel.
    bool state_known = false;
    bool asleep = false;
    // The announced blocking call seen at the last looks (odd; 0: none),
    // and since when.
    std::uint32_t call = 0;
    Clock::time_point call_since{};
    std::atomic<std::int64_t> running_since_ns{0};
    std::atomic<bool> stuck{false};
    std::atomic<std::uint64_t> stuck_fiber{0};
  };

  // What one scan found over all the workers.
  struct Tally {
    bool acted = false;        // sysmon did something
    bool any_running = false;  // a worker runs a fiber
    bool all_sleeping = true;  // every worker sleeps (deep sleep may follow)
    bool in_call = false;      // a worker is in an announced blocking call
    bool confirming = false;   // a thread found asleep in the kernel, not yet for the grace
    unsigned blocked = 0;      // threads blocked in the kernel in one fiber
    unsigned idle = 0;         // workers searching or asleep
  };

  void run(RawLatch& started);
  // How long to sleep after a scan that found `tally`.
  std::chrono::microseconds next_delay(std::chrono::microseconds delay, const Tally& tally) noexcept;
  // One look at every worker, then the hand-offs and spares it calls for.
  Tally scan(Clock::time_point now);
  // The look at one running worker.
  void look_at(Worker& worker, Watch& watch, Clock::time_point now, Tally& tally);
  // A fiber switched in since the last look: watch it afresh. True if so.
  bool switched_in(Worker& worker, Watch& watch, Clock::time_point now) noexcept;
  // Preemption requests every slice, and the stuck report.
  void ask_to_yield(Worker& worker, Watch& watch, Clock::time_point now, Tally& tally);
  // Whether the worker's announced blocking call has outlasted the grace.
  bool blocking_call_outlasted_grace(Worker& worker, Watch& watch, Clock::time_point now) noexcept;
  // The unannounced case: whether the worker holds its queued fibers up,
  // on a CPU or asleep in the kernel (sets watch.holding_up, in_kernel).
  // Not when its thread merely waits for a CPU on a loaded machine: other
  // workers are then no freer to run its fibers, and moving a fork-join's
  // spawned fibers to the FIFO global queue undoes its depth-first order.
  void judge_hold_up(Worker& worker, Watch& watch, Clock::time_point now, Tally& tally) noexcept;
  // Whether the worker's thread ran on a CPU for at least half the time
  // since the last look at this fiber (false at the first).
  bool burned_cpu_since_last_look(Worker& worker, Watch& watch, Clock::time_point now) noexcept;
  // Whether the thread, blocked in the kernel at the last look that read it
  // (less than kAsleepRecheck ago), is taken to be so still, unread.
  bool still_blocked_without_a_read(Worker& worker, const Watch& watch, Clock::time_point now) noexcept;
  // Sysmon's watch of worker `i` (< steal_span): a spare's is made at its
  // first look (null if memory ran out); find_watch only reads.
  Watch* watch(std::size_t i) noexcept;
  const Watch* find_watch(std::size_t i) const noexcept;
  // Fibers that another thread may run wait for `worker`'s: queued on it
  // and not pinned there, or in the global queue. Shared by the two
  // predicates around it.
  bool movable_fibers_wait(Worker& worker) const noexcept;
  // Whether a fiber asked to yield on `worker` would switch: movable fibers
  // wait, or fibers pinned to the worker, or a due timer's
  // (Worker::preempt_current). Beside verdict_awaited, which asks the same
  // of a call's verdict.
  bool others_wait(Worker& worker) const noexcept;
  // Whether a hand-off has a thread to go to: another worker, or a spare.
  bool someone_to_take() const noexcept;
  // Hook-pinned fibers of a worker asleep since `since` for long, in
  // futex(2) (`call` 0) or in the announced call counted `call` that waits
  // to be woken (below).
  void release_hook_pins_if_waiting(Worker& worker, Clock::time_point since, std::uint32_t call, Clock::time_point now,
                                    Tally& tally) noexcept;
  // Starts afresh: a new fiber, or none. Clears the worker's stuck mark.
  void forget(Worker& worker, Watch& watch) noexcept;
  // After a pause of sysmon's own: every worker not already found stuck is
  // watched afresh from `now`, as if its fiber had just switched in.
  void restart_observations(Clock::time_point now) noexcept;
  void report_stuck(Worker& worker, Watch& watch, Clock::time_point now);
  // Whether the worker's fiber, a slice after sysmon's last request (or
  // look, without preemption), ignored it rather than waited for a CPU.
  bool ignored_request(Worker& worker, const Watch& watch, Clock::time_point now) noexcept;
  // Moves the queued fibers of the workers this scan found holding them up
  // to the global queue, when a thread can take them from there; true if
  // a blocked thread holds up fibers (for the spares). Sets `acted` if
  // something moved.
  bool hand_off(unsigned blocked, unsigned idle, bool& acted) noexcept;
  // Threads running fibers one after another: switched within the
  // hand-off delay and not asleep in the kernel.
  int count_free_runners() noexcept;
  // Sets how many spares may run, starts those wanted and retires the
  // surplus (sched/spares.h); true if it started one.
  bool manage_spares(unsigned blocked, unsigned idle, bool held_up_work) noexcept;
  void deep_sleep();
  void wake() noexcept;
  // Sets the wake word and wakes sysmon's sleep on it: what wake, alert
  // and look_now share.
  void ring() noexcept;

  SchedulerCore& core_;
  const std::chrono::microseconds slice_;
  const std::chrono::microseconds running_cap_;
  const std::chrono::microseconds pause_after_;           // see kMinPause
  std::unique_ptr<Watch[]> watches_;                      // the workers'
  std::unique_ptr<std::atomic<Watch*>[]> spare_watches_;  // the spares', made as they come
  RunQueue<RunQueueEntry> scratch_;                       // hand-off passes through it
  std::atomic<std::uint32_t> wake_word_{0};
  std::atomic<bool> deep_asleep_{false};
  std::atomic<bool> napping_{false};
  unsigned alert_rounds_ = 0;  // rounds left at the grace's tick
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace weft::detail
