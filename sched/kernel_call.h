// What a thread of this process is doing in the kernel, for sysmon's stuck
// report and weft-dump: read from /proc/self/task/<tid>/syscall, which the
// kernel fills only while the thread is asleep there (readable by the
// thread's own process).
#pragma once

#include <string>

namespace weft::detail {

// "blocked in read(2) on fd 7", "blocked in nanosleep(2)", "blocked in
// syscall 230"; empty when the thread is running on a CPU or in user space,
// or when the kernel does not say (no such thread, no permission).
std::string describe_kernel_call(int os_thread_id);

// The number of the system call the thread is asleep in (its first
// argument in `first_argument` if not null), or -1 as above.
long kernel_call(int os_thread_id, unsigned long* first_argument = nullptr);

// The name of system call `number` on this architecture ("read"), or null
// when weft's table does not know it.
const char* syscall_name(long number) noexcept;
// Whether system call `number`'s first argument is an fd (read, send, ...).
bool syscall_takes_fd(long number) noexcept;

}  // namespace weft::detail
