// Stack overflow reporting. Each fiber stack has a guard page below it; a
// fiber that runs into it faults, and a SIGSEGV handler running on an
// alternate signal stack (the fiber's own stack is exhausted) recognizes the
// guard page and aborts with the fiber's name:
//   weft: stack overflow in fiber "rpc-3" #42
// Every other fault is left to the handler installed before ours, or to the
// default action.
#pragma once

#include <cstddef>

namespace weft::detail {

// Installs the process-wide SIGSEGV/SIGBUS handler once.
void install_overflow_handler();

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
