// Snapshots of a scheduler's workers and fibers, for tests, tools and
// weft-dump. Taken without stopping anything: each value is read on its
// own, so a snapshot taken while fibers migrate is consistent per fiber
// (one fiber appears once) but not a single instant across fibers.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "detail/require_cxx20.h"

namespace weft {

struct FiberCounts {
  std::uint64_t active = 0;      // times switched in
  std::uint64_t steal = 0;       // times resumed on another worker than before
  std::uint64_t steal_fail = 0;  // times a thief found it pinned
  std::uint64_t preempt = 0;     // times preempted at a checkpoint
  std::uint64_t park = 0;        // times parked
};

struct FiberSnapshot {
  std::uint64_t id = 0;
  const void* address = nullptr;  // the control block
  std::string name;
  std::string state;  // runnable, running, parked, done
  // -1: parked (waiting), 0: not parked, 1: woken but not yet running again
  // (the second number of weft-dump's park=A/B; docs/dump.md).
  int park_state = 0;
  int worker = -1;  // worker index it runs or last ran on; -1: never ran
  bool pinned = false;
  FiberCounts counts;
  // While it is runnable: how long since it became so (woken, spawned,
  // yielded, preempted), waiting for a worker; 0 otherwise.
  double runnable_ms = 0;
  // Time it has spent runnable over its life: an estimate from every 32nd
  // time it was made runnable (sched/run_latency.h, docs/dump.md).
  double runnable_total_ms = 0;
  // When parked: what on, and since when.
  std::string wait_kind;  // "weft::BlockingQueue"
  const void* wait_object = nullptr;
  std::string wait_operation;  // "take"
  double waiting_ms = 0;
  // Who holds what it waits on, when the primitive has an owner and weft
  // knows it (a weft::Mutex's holder, the fiber a join waits for): a
  // fiber's id, or a plain thread's tid; 0 for none or unknown. Read
  // when the snapshot was taken; the edges of weft-dump's deadlock report.
  std::uint64_t held_by_fiber = 0;
  int held_by_thread = 0;
  // A shared lock (std::shared_mutex, pthread_rwlock_t) held by readers
  // only: how many. Readers are not recorded, so they are not named, and
  // the deadlock report has no edge to them.
  std::uint32_t held_by_readers = 0;
  // Parked on an fd (wait_kind "fd", wait_operation "readable" or
  // "writable"): the fd, and what it is, read when the snapshot was taken:
  // "127.0.0.1:41234 -> 127.0.0.1:6379", "pipe", "eventfd", "file", ...
  int wait_fd = -1;
  std::string wait_fd_info;
  // Where it parked, innermost first: the return address into park()'s
  // caller (its call site), then one per caller found by walking the frame
  // pointers (introspect/fiber_stack_walk.h). For a fiber that runs on a
  // worker whose thread sleeps in a system call, where it made the call
  // (introspect/thread_stack.h). Empty otherwise, and when it moved while
  // its stack was being read.
  std::vector<std::uintptr_t> stack;
};

// What an address of a stack is, found in the symbol tables and the debug
// information of the loaded objects. Fields it could not find stay empty.
struct FrameSymbol {
  std::string function;       // demangled: "weft::Mutex::lock()"
  std::string file;           // source file, with -g
  unsigned line = 0;          // 0: unknown
  std::string module;         // the executable or shared object that holds it
  std::uintptr_t offset = 0;  // the address less the module's load address
};

struct WorkerSnapshot {
  unsigned index = 0;
  int os_thread_id = 0;
  std::string state;  // running, searching, sleeping, stopped
  // Fibers ready to run that wait in its own queues: ring, next slot,
  // spawns and inbox (the inbox holds pinned fibers, which only it may run).
  std::uint32_t queue_length = 0;
  std::uint32_t inbox_length = 0;   // of queue_length, the pinned ones in its inbox
  std::uint32_t pinned_fibers = 0;  // fibers pinned to it, in any state: only it may run them
  std::uint64_t fibers_run = 0;
  std::uint64_t steals = 0;
  std::uint64_t failed_steals = 0;
  std::uint64_t parks = 0;
  std::uint64_t preempts = 0;
  std::uint64_t handoffs = 0;  // fibers sysmon moved off it while it was stuck
  // Sysmon's view (docs/sysmon.md): how long the current fiber has run
  // without a switch (0: none), and whether the worker is stuck, i.e. that
  // fiber ignored a preemption request for a further time slice.
  double running_ms = 0;
  bool stuck = false;
  std::uint64_t stuck_fiber = 0;  // the stuck fiber's id, 0 if unknown
  // When stuck: what its thread is doing in the kernel ("blocked in read(2)
  // on fd 7"); empty when it runs on a CPU or the kernel does not say.
  std::string blocked_in;
  // While it runs a fiber and its thread sleeps in a system call: the call
  // decoded ("read(fd 7 -> 127.0.0.1:5432)", "futex(0x7f..)",
  // "wait4(pid 123)") and for how long, at least; "" and 0 otherwise.
  std::string syscall;
  double syscall_ms = 0;
  // A spare worker (docs/sysmon.md): its index is Config::workers or more,
  // and it runs fibers only while a worker is blocked in the kernel (state
  // "spare" when it does not). Listed once its thread has started.
  bool spare = false;
};

// The spare threads (docs/sysmon.md) that run fibers while workers are
// blocked in the kernel, and their limit.
struct SparesSnapshot {
  unsigned running = 0;      // running fibers now, in place of a blocked thread
  unsigned threads = 0;      // spare threads alive (running, or retired and kept)
  unsigned max_threads = 0;  // Config::max_threads: workers and spares together
  // The last call for a spare found max_threads reached (until one is had
  // again): fibers wait for a blocked thread to return.
  bool limit_reached = false;
};

// The helper threads of weft::blocking (include/weft/blocking.h); all zero
// until a fiber first calls it.
struct BlockingPoolSnapshot {
  unsigned threads = 0;      // alive now (they retire when idle)
  unsigned max_threads = 0;  // Config::max_blocking_threads
  unsigned busy = 0;         // running a call now
  std::uint64_t queued = 0;  // calls waiting for a free helper
  std::uint64_t calls = 0;   // calls completed
};

// A scheduler's netpoller (docs/io.md).
struct PollerSnapshot {
  int blocker = -1;                  // the worker blocked in epoll_wait; -1: none
  std::uint64_t fds_registered = 0;  // fds in its epoll set
  std::uint64_t io_waiters = 0;      // fibers parked on an fd
  std::uint64_t polls = 0;           // epoll_wait calls
  std::uint64_t events = 0;          // fd events handled
  std::uint64_t sysmon_polls = 0;    // polls sysmon made because nobody had for 10 ms
  std::uint64_t wakeups = 0;         // eventfd writes that broke (or will break) the blocker's epoll_wait
  double since_poll_ms = 0;          // since the last epoll_wait returned (0 while one blocks)
};

// A latency distribution summarised for the dump: how many samples, and
// their p50, p99 and max in microseconds (percentiles within 12.5 %, the
// histogram's bucket width; the max is exact unless said otherwise).
struct LatencySummary {
  std::uint64_t count = 0;
  double p50_us = 0;
  double p99_us = 0;
  double max_us = 0;
  double sum_us = 0;  // of all samples; 0 where not kept (a scheduler's latency)
};

// How many of a scheduler's live fibers are in each state.
struct FiberStateCounts {
  std::uint64_t runnable = 0;
  std::uint64_t running = 0;
  std::uint64_t parked = 0;
};

struct SchedulerSnapshot {
  std::string name;
  PollerSnapshot poller;
  std::vector<WorkerSnapshot> workers;
  std::vector<FiberSnapshot> fibers;  // live fibers only
  std::uint64_t fiber_count = 0;      // live fibers, also when `fibers` was not taken
  FiberStateCounts fiber_states;      // the same, by state (also without `fibers`)
  BlockingPoolSnapshot blocking;
  SparesSnapshot spares;
  // Fibers in the global queue (woken by timers and plain threads, spawned
  // from plain threads, spilled or handed off), which no worker's
  // queue_length counts.
  std::uint64_t global_queue = 0;
  // Scheduling latency, runnable to running, since the previous snapshot of
  // this scheduler (the first: since it started), sampled (docs/dump.md);
  // the max is the top of its bucket.
  LatencySummary sched_latency;
};

// A weft::Pool (include/weft/pool.h): its shape, its counters, and how long
// tasks waited between submit and start, and how long they ran.
struct PoolSnapshot {
  std::string name;
  std::string mode;       // "fibers" or "threads"
  std::string scheduler;  // fibers: the scheduler's Config::name; threads: ""
  unsigned size = 0;      // PoolOptions::threads: the concurrency bound
  std::uint64_t queued = 0;
  std::uint64_t running = 0;
  std::uint64_t completed = 0;
  std::uint64_t failed = 0;  // post()ed tasks that threw
  bool shut_down = false;
  LatencySummary wait;  // submit to start
  LatencySummary run;   // start to finish
};

// A cycle of fibers that wait for each other (weft-dump's "Found one weft
// deadlock"), in wait order: fibers[0] waits on what fibers[1] holds, ...,
// and the last on what fibers[0] holds (FiberSnapshot::held_by_fiber).
struct DeadlockSnapshot {
  std::vector<std::uint64_t> fibers;
};

// A plain thread that weft made: a runner of a weft::Pool in thread mode,
// or a weft::Thread that runs as a std::thread (weft-dump lists them, so
// that one dump shows the whole process whichever mode each one runs in).
struct ThreadSnapshot {
  std::string name;
  int os_thread_id = 0;
  std::string kind;   // "pool" (a pool's runner) or "thread" (a weft::Thread)
  std::string pool;   // a runner's pool; "" for a weft::Thread
  std::string state;  // the kernel's: running, sleeping, disk sleep, stopped, zombie, ...
  // A pool runner's current task: how long it has run; -1 between tasks.
  double task_ms = -1;
  // When it sleeps in a system call: the call decoded, as a worker's
  // `syscall`, for how long (-1: unknown), and where it made it, innermost
  // first.
  std::string syscall;
  double syscall_ms = 0;
  std::vector<std::uintptr_t> stack;
};

// What weft-dump receives: the process and every scheduler it runs.
struct ProcessSnapshot {
  int pid = 0;
  std::string name;               // /proc/self/comm
  std::int64_t unix_time_ms = 0;  // when the snapshot was taken
  std::vector<SchedulerSnapshot> schedulers;
  std::vector<PoolSnapshot> pools;      // every live weft::Pool
  std::vector<ThreadSnapshot> threads;  // the plain threads weft made (ThreadSnapshot)
  // Every cycle of the fibers' held_by_fiber edges, across schedulers
  // (introspect/deadlocks.h); weft-dump's server fills this.
  std::vector<DeadlockSnapshot> deadlocks;
  // Every address of every fiber's stack, symbolized once however many
  // fibers share it (introspect/symbolizer.h). Scheduler::snapshot() leaves
  // stacks as bare addresses; weft-dump's server fills this.
  std::unordered_map<std::uintptr_t, FrameSymbol> symbols;
};

}  // namespace weft
