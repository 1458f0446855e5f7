// Where a thread that sleeps in a system call made it: its stack, walked
// from another thread while it sleeps (weft-dump's blocked workers, pool
// threads and WEFT_TRACE_BLOCKING).
//
// The kernel gives the user stack pointer and program counter the call
// was entered with (/proc/self/task/<tid>/syscall), not the frame pointer.
// The program counter is in libc's wrapper, which keeps no frame; so the
// walk looks up the stack from the stack pointer for the first frame
// record that chains (a saved frame pointer further up the stack beside a
// return address into code, twice in a row) and follows the frame-pointer
// chain from there, as the parked walk does (fiber_stack_walk.h); the
// return addresses between the stack pointer and that record (the
// wrapper's return into its caller) come first. Every read goes through
// process_vm_readv: a stack that changes meanwhile gives wrong frames,
// never a fault. A caller that can tell that the thread moved on (a
// worker's switch count) drops what it read.
#pragma once

#include <cstdint>
#include <vector>

namespace weft::detail {

// The return addresses of the thread whose system call entered with `sp`
// and `pc`, innermost first (`pc` itself first), within its stack
// [low, high): `pc`, the first code address above `sp` (the wrapper's
// return into its caller), then the frame-pointer chain. At most
// kMaxStackFrames.
std::vector<std::uintptr_t> walk_blocked_stack(std::uintptr_t sp, std::uintptr_t pc, std::uintptr_t low,
                                               std::uintptr_t high);

// Whether `address` looks like a return address: inside a loaded object's
// code (dladdr finds it).
bool is_code_address(std::uintptr_t address);

}  // namespace weft::detail
