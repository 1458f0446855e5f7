// Announced blocking: a call that may sleep in the kernel marks its worker
// "in a blocking call" for its duration, as Go's entersyscall/exitsyscall
// mark the P. Sysmon (sched/sysmon.h) reads the mark at its looks: a worker
// whose call outlasts Sysmon::kBlockingCallGrace is treated as blocked at
// once (its queued fibers go to an idle worker or a spare), without the
// /proc reads and the hand-off delay that a raw, unannounced system call
// needs (docs/sysmon.md, "Announced blocking calls").
//
// Who announces: the libc hooks, around every call they pass through to
// the kernel that may block there (a regular file's read or write, fsync,
// flock, fcntl F_SETLKW, waitpid without a pidfd, open of a FIFO...), and
// anything else in weft that makes such a call on a worker. Not around a
// call that parks the fiber (that one switches: no worker is blocked).
//
//   {
//     const detail::BlockingCall announced;
//     n = real::pread(fd, buffer, size, offset);
//   }
//
// Cost: on a worker, an out-of-line call each way, each a load and a store
// on a line the worker owns, and a load of sysmon's `napping` flag (read
// mostly) at entry; on a plain thread, a thread-local load. Nothing is
// fenced: a sysmon that misses an announcement made just as it started a
// long sleep sees the worker at its next look, within its running tick.
//
// When the call returns on a worker that sysmon judged blocked meanwhile
// (Worker::stuck) and a timer is due, the fiber is asked to yield at its
// next checkpoint, the hook's (hooks/announced.h, announced_hook), so that
// its worker fires the timer, as Go's exitsyscall makes a goroutine whose P
// was retaken queue for one. Every Worker::kTimerLookCalls-th call that
// returns without a verdict asks the same: short calls one after another
// never switch, and a timer waited for sysmon's backstop, a slice.
//
// Only a call whose verdict is awaited (Sysmon::verdict_awaited: fibers
// queued behind it or in the global queue, or a timer armed) wakes sysmon
// or keeps it looking at the grace: beside a hundred fibers writing and
// fsyncing files, each on a thread of its own with nothing behind it,
// those wakes kept sysmon looking every 100 us to no end
// (docs/benchmarks.md, "Sysmon beside a hundred writers").
//
// A call that always sleeps there (fsync: it waits for the disk) says so,
// Sleeps::always: sysmon judges it blocked at its first look instead of
// after the grace, and, if the worker has fibers queued, is woken for that
// look at once (Go's entersyscallblock hands the P off at the call's
// entry). Its time slice restarts once it is handed off (sched/sysmon.h).
//
// Rules: the code inside must not switch fibers (no park, no yield, no
// checkpoint): the mark belongs to the worker, and the exit clears the
// mark of the worker it was made on. Announcements nest: an inner one,
// made while the worker is already marked, does nothing.
#pragma once

namespace weft::detail {

class Worker;

// Whether a blocking call sleeps in the kernel now and then (a regular
// file's read, which the page cache may serve) or every time, or until
// another party acts (a post, a lock's release, a message, a signal, a
// child's exit), which may be a fiber that a hook's park pins to this
// worker: behind such a call alone, sysmon releases those pins once it has
// lasted long (Sysmon::kReleaseHookPinsAfter); a call that ends by itself
// (a disk's flush) keeps them, since a released fiber writes its errno to
// this thread, which is safe only while the thread stays blocked. Judged
// after the grace, as `maybe`.
enum class Sleeps { maybe, always, until_woken };

// Marks the calling thread's worker as in a blocking call. Returns it, for
// exit_blocking_call; null on a plain thread, or when the worker was
// already marked (a nested announcement).
Worker* enter_blocking_call(Sleeps sleeps = Sleeps::maybe) noexcept;
// Ends the announcement that enter_blocking_call returned (null: nothing).
// True if sysmon judged this call blocked (it outlasted the grace:
// Worker::judged_call). A verdict on the worker that stood at the exit
// (Worker::stuck: that call's, or a fiber's that has held the worker past
// the hand-off delay, its short calls coming and going) is cleared either
// way, and the fiber asked to yield if a timer is due (above).
bool exit_blocking_call(Worker* worker) noexcept;

// The announcement as a scope.
class [[nodiscard]] BlockingCall {
 public:
  explicit BlockingCall(Sleeps sleeps = Sleeps::maybe) noexcept : worker_(enter_blocking_call(sleeps)) {}
  ~BlockingCall() { exit_blocking_call(worker_); }
  BlockingCall(const BlockingCall&) = delete;
  BlockingCall& operator=(const BlockingCall&) = delete;

 private:
  Worker* worker_;
};

}  // namespace weft::detail
