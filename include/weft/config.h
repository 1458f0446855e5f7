// weft::Config: how a Scheduler is built. A plain struct: set the fields you
// care about and leave the rest at their defaults.
//
//   weft::Config cfg;
//   cfg.workers = 2;
//   cfg.name = "rpc";
//   weft::Scheduler sched{cfg};
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <thread>

#include "detail/require_cxx20.h"

namespace weft {

// What the Scheduler's destructor does when fibers are still alive after
// Config::shutdown_grace. Either way the stuck fibers are first reported on
// stderr by name, state and wait reason.
enum class ShutdownPolicy {
  wait,   // keep waiting, and report again every grace period
  abort,  // std::abort(): a hang is worse than a crash for this service
};

// Called with the fiber's name and id when an exception escapes a detached
// fiber. Without a handler the process terminates, as with std::thread.
using UnhandledExceptionHandler = std::function<void(std::string_view name, std::uint64_t id, std::exception_ptr)>;

// A worker that has run one fiber for longer than twice Config::time_slice
// without switching: the fiber neither reached a checkpoint nor parked (a
// loop without checkpoints, or a blocking system call). See docs/sysmon.md.
struct StuckWorker {
  std::string_view scheduler;  // Config::name
  unsigned worker = 0;         // the worker's index
  int os_thread_id = 0;
  std::uint64_t fiber_id = 0;  // 0 if the fiber could not be identified
  std::string_view fiber_name;
  std::chrono::milliseconds running_for{0};  // since sysmon first saw it run
  // What the thread is doing in the kernel, from /proc/self/task/<tid>/syscall:
  // "blocked in read(2) on fd 7", "blocked in syscall 230"; empty when it is
  // running on a CPU (a loop without checkpoints) or the kernel does not say.
  std::string_view blocked_in;
};
// Called on the sysmon thread, once per stuck episode. Keep it short and do
// not wait on weft primitives in it: sysmon does nothing else meanwhile.
using StuckWorkerHandler = std::function<void(const StuckWorker&)>;

struct Config {
  // Worker threads (the M of M:N): 1 to 1024. By default one per CPU, at
  // most 1024.
  unsigned workers = std::clamp(std::thread::hardware_concurrency(), 1u, 1024u);
  // Shown by weft-dump and in error messages.
  std::string name = "weft";
  // Default usable stack per fiber; address space only, committed as used.
  std::size_t stack_size = 256 * 1024;
  // Finished fibers' stacks kept for reuse (per scheduler), with the pages
  // they touched. Reuse avoids a page fault per touched page on spawn and an
  // munmap per finished fiber, whose TLB shootdown stalls every worker
  // (docs/benchmarks.md has skynet's figures). The cost is memory kept
  // after a peak: at most this many stacks' touched pages. Before Linux
  // 6.13, where each stack's guard is a mapping of its own, at most an
  // eighth of vm.max_map_count's stacks are kept (per scheduler), so that
  // the process keeps mappings for its threads.
  std::size_t stack_pool_size = 65536;
  // How long shutdown waits for fibers before reporting them (and again
  // between reports). Positive; a huge one waits for good.
  std::chrono::milliseconds shutdown_grace{10'000};
  ShutdownPolicy shutdown_policy = ShutdownPolicy::wait;
  UnhandledExceptionHandler on_unhandled_exception;
  // Answer weft-dump on a private Unix socket (introspect/dump_server.h). The
  // environment variable WEFT_DUMP=0 turns it off for the whole process.
  bool dump = true;
  // Cooperative preemption (docs/sysmon.md): a fiber that has run longer
  // than time_slice without a switch yields at its next checkpoint (any
  // weft call, a hooked libc call such as read() or poll() also when it
  // does not block, or weft::this_fiber::checkpoint(); docs/sync.md lists
  // them). time_slice: positive, at most an hour (preemption = false turns
  // it off).
  bool preemption = true;
  std::chrono::microseconds time_slice{10'000};
  // Off by default; see StuckWorker.
  StuckWorkerHandler on_stuck_worker;
  // Helper threads of weft::blocking (include/weft/blocking.h) and of the
  // hooked resolver calls, at most: one is started whenever a call finds
  // none idle, and each retires after blocking_keep_alive idle (tokio's
  // max_blocking_threads and thread_keep_alive). 1 to 65536. The default
  // scheduler reads WEFT_MAX_BLOCKING_THREADS.
  unsigned max_blocking_threads = 512;
  std::chrono::milliseconds blocking_keep_alive{10'000};
  // Deprecated: the fixed cap of earlier releases, kept so that code that
  // sets it still builds and keeps its cap. 0 (the default): unset, and
  // max_blocking_threads applies; else 1 to 1024, and it replaces it. Set
  // max_blocking_threads instead.
  unsigned blocking_threads = 0;
  // The most threads that run this scheduler's fibers: the workers, and the
  // spare threads that take over their fibers while they are blocked in the
  // kernel (docs/sysmon.md), started as blocked workers need them (Go's
  // debug.SetMaxThreads). Reaching it is reported once on stderr; fibers
  // then wait for a blocked thread to return. `workers` turns spares off;
  // less than `workers` is rejected, and so is more than 1,000,000. The
  // default scheduler reads WEFT_MAX_THREADS.
  unsigned max_threads = 10'000;
  // How long a retired spare thread waits to be needed again before it
  // ends (tokio's thread_keep_alive).
  std::chrono::milliseconds spare_keep_alive{10'000};
};

namespace detail {

// The blocking pool's limit: the deprecated Config::blocking_threads if
// set, else Config::max_blocking_threads.
inline unsigned blocking_thread_limit(const Config& config) noexcept {
  return config.blocking_threads != 0 ? config.blocking_threads : config.max_blocking_threads;
}

}  // namespace detail

}  // namespace weft
