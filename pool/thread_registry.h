// The plain threads weft makes, listed for weft-dump: the runners of
// weft::Pools in thread mode and the weft::Threads that run as std::threads
// (introspect/ reads this list; the include arrow points down). So one dump
// shows the whole process, whichever mode WEFT_FIBERS gives each of them.
// Process-wide for the reason the pools' list is (pool_registry.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "../sched/thread_wait.h"

namespace weft::detail {

struct ListedThread {
  std::string name;
  std::string pool;  // a pool runner's pool; "" for a weft::Thread
  const char* kind;  // "pool" or "thread"
  int tid = 0;
  std::uintptr_t stack_low = 0, stack_high = 0;  // its stack, for the walk of a thread in a system call
  const ThreadWait* wait = nullptr;              // what it sleeps on in a weft primitive
  // A pool runner's current task: when it started (CLOCK_MONOTONIC); 0
  // between tasks.
  std::atomic<std::int64_t> task_since_ns{0};
};

// Lists the calling thread for as long as it lives (on its own stack).
class ThreadListing {
 public:
  ThreadListing(std::string name, std::string pool, const char* kind);
  ~ThreadListing();
  ThreadListing(const ThreadListing&) = delete;
  ThreadListing& operator=(const ThreadListing&) = delete;

  // The calling thread's listing, or null.
  static ThreadListing* current() noexcept;
  void task_started() noexcept;
  void task_finished() noexcept;

 private:
  ListedThread thread_;
};

// Calls `fn` for each listed thread, under the list's lock (a thread that
// ends meanwhile waits for it).
void for_each_listed_thread(const std::function<void(const ListedThread&)>& fn);

}  // namespace weft::detail
