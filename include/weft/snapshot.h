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
  // Time it has spent runnable, waiting for a worker, over its life; an
  // estimate from every 8th time it was made runnable (docs/dump.md).
  double runnable_ms = 0;
  // When parked: what on, and since when.
  std::string wait_kind;  // "weft::BlockingQueue"
  const void* wait_object = nullptr;
  std::string wait_operation;  // "take"
  double waiting_ms = 0;
  // Parked on an fd (wait_kind "fd", wait_operation "readable" or
  // "writable"): the fd, and what it is, read when the snapshot was taken:
  // "127.0.0.1:41234 -> 127.0.0.1:6379", "pipe", "eventfd", "file", ...
  int wait_fd = -1;
  std::string wait_fd_info;
  // Where it parked, innermost first: the return address into park()'s
  // caller (its call site), then one per caller found by walking the frame
  // pointers (introspect/fiber_stack_walk.h). Empty unless it is parked; also
  // empty when it moved while its stack was being read.
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
  std::uint32_t queue_length = 0;
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
};

struct SchedulerSnapshot {
  std::string name;
  PollerSnapshot poller;
  std::vector<WorkerSnapshot> workers;
  std::vector<FiberSnapshot> fibers;  // live fibers only
  std::uint64_t fiber_count = 0;      // live fibers, also when `fibers` was not taken
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

// What weft-dump receives: the process and every scheduler it runs.
struct ProcessSnapshot {
  int pid = 0;
  std::string name;               // /proc/self/comm
  std::int64_t unix_time_ms = 0;  // when the snapshot was taken
  std::vector<SchedulerSnapshot> schedulers;
  std::vector<PoolSnapshot> pools;  // every live weft::Pool
  // Every address of every fiber's stack, symbolized once however many
  // fibers share it (introspect/symbolizer.h). Scheduler::snapshot() leaves
  // stacks as bare addresses; weft-dump's server fills this.
  std::unordered_map<std::uintptr_t, FrameSymbol> symbols;
};

}  // namespace weft
