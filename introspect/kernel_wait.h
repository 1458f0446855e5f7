// What a thread of this process sleeps in, in the kernel, for weft-dump: the
// system call from /proc/self/task/<tid>/syscall (its number, arguments,
// and the user stack pointer and program counter it entered with),
// decoded for a reader ("read(fd 7 -> 127.0.0.1:5432)", "wait4(pid 123)",
// "futex(0x7f...) on weft::Mutex@0x... (lock)"), and for how long.
#pragma once

#include <cstdint>
#include <string>

namespace weft::detail {

struct ThreadWait;

struct KernelWait {
  long number = -1;  // -1: not in a system call (running, or unknown)
  unsigned long args[6] = {};
  std::uintptr_t sp = 0;  // the user stack pointer at the call
  std::uintptr_t pc = 0;  // the user instruction after it
};

// What thread `tid` of this process sleeps in now; number -1 if it runs.
KernelWait read_kernel_wait(int tid);

// The call decoded: its name, and its first argument as a reader wants it
// (an fd and what it is; a pid; a futex's address, and the weft primitive
// behind it when `wait` records one on that word).
std::string describe_kernel_wait(const KernelWait& call, const ThreadWait* wait = nullptr);

// How long thread `tid` has been off its CPU, in ms, from the scheduler's
// own clock (/proc/self/task/<tid>/sched's se.exec_start against the
// caller's, which runs now); -1 where the kernel does not say (no
// CONFIG_SCHED_DEBUG). For a thread asleep in a system call since it
// made it: the time it has been in there.
double off_cpu_ms(int tid);

// The kernel's state of thread `tid`: "running", "sleeping", "disk sleep",
// "stopped", "zombie", ...; "" if unknown.
std::string thread_state_name(int tid);

}  // namespace weft::detail
