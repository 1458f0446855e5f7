// OsThread: what the OS says of one worker's thread, for sysmon and the
// dump: its id, its state in /proc, the CPU time it has used. The thread
// records itself at its start and marks its end; everything else is read
// from any thread, without the worker's help.
#pragma once

#include <time.h>

#include <atomic>
#include <cstdint>

namespace weft::detail {

class OsThread {
 public:
  // On the thread itself, as it starts and as it ends.
  void record_calling_thread() noexcept;
  void ended() noexcept { cpu_clock_valid_.store(false, std::memory_order_relaxed); }

  // Its kernel thread id; 0 before it starts.
  int id() const noexcept { return tid_.load(std::memory_order_relaxed); }
  // CPU time it has used; 0 before it starts or after it ends.
  std::int64_t cpu_time_ns() const noexcept;
  // Its state as the kernel reports it (/proc: 'R' running or runnable,
  // 'S' or 'D' asleep, ...); '?' when unknown.
  char state() const noexcept;

 private:
  friend struct GdbLayoutAccess;  // introspect/gdb_layout.cpp: where gdb finds the thread id
  std::atomic<int> tid_{0};
  std::atomic<bool> cpu_clock_valid_{false};
  clockid_t cpu_clock_{};  // written before cpu_clock_valid_
};

}  // namespace weft::detail
