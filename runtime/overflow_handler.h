// Stack overflow reporting. Each fiber stack has a guard region below it
// (runtime/stack.h); a fiber that runs into it, or whose stack pointer has
// gone below its stack (a frame bigger than the guard, landing in unmapped
// memory), faults, and a SIGSEGV handler running on an alternate signal
// stack (the fiber's own stack is exhausted) recognizes it and aborts with
// the fiber's name:
//   weft: stack overflow in fiber "rpc-3" #42 (stack of 64 KiB, a frame
//   reached 9 KiB below it; raise Config::stack_size or ...)
// Every other fault is left to the handler installed before ours, or to the
// default action. A frame bigger than the guard that lands in memory that
// is mapped (another fiber's stack) faults nowhere; only stack-clash
// probing (-fstack-clash-protection) catches that one.
#pragma once

#include <cstddef>

namespace weft::detail {

// Installs the process-wide SIGSEGV/SIGBUS handler once.
void install_overflow_handler();

// The usable size of a worker's alternate signal stack (at least four
// times the system's SIGSTKSZ), with a guard page below it.
inline constexpr std::size_t kAltStackBytes = 256 * 1024;

// An alternate signal stack for the calling thread, for its lifetime.
class AltSignalStack {
 public:
  AltSignalStack();
  ~AltSignalStack();
  AltSignalStack(const AltSignalStack&) = delete;
  AltSignalStack& operator=(const AltSignalStack&) = delete;

 private:
  void* memory_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace weft::detail
